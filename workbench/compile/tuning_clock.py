"""A tuning run's wall-clock budget (`tuning.minutes`): "tune this model for 10 minutes" instead of a trial count.

Trials cost very different times (a light kernel's candidate builds and runs in a fraction of a conv's), so a
trial budget says little about how long tuning takes. The clock is read after each measured search round (the
measure callback, the one point MetaSchedule's loop is built to be stopped from, as Ctrl-C is) and before each
task and hot round; the round in flight finishes and its records are kept, so the database stays valid and the
next `workbench tune` resumes from it. Tasks run heaviest first, so a short budget goes to the kernels that matter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

StopReason = Literal["done", "minutes"]


class OutOfTime(Exception):
    """Raised from the measure callback once the minutes are spent: the round just measured is in the database."""


@dataclass
class TuningClock:
    """Minutes used of `minutes` (None: no time limit) since `started`, and why tuning stopped once it has."""

    minutes: float | None = None
    started: float = field(default_factory=time.monotonic)
    stopped: StopReason | None = None
    ended: float | None = None  # when tuning ended (`finish`)
    reserve_s: float = 0.0  # kept back from the search for work after it (the check of the tuned build)
    searched: float | None = None  # minutes the search took (set by `finish`; work after it is not in them)

    def used(self) -> float:
        return ((self.ended or time.monotonic()) - self.started) / 60

    def spent(self) -> bool:
        """Is the budget, less `reserve_s`, used up? Marks the run stopped by it when it is."""
        if self.stopped is None and self.minutes is not None and self.used() >= self.minutes - self.reserve_s / 60:
            self.stopped = "minutes"
        return self.stopped == "minutes"

    def check(self) -> None:
        """Stop tuning (OutOfTime) once the budget is used up; called after each measured round."""
        if self.spent():
            raise OutOfTime(self.reason())

    def finish(self) -> None:
        """Tuning ended: by itself (every budget reached, or nothing left to search) unless the clock stopped it;
        the minutes used stay what tuning took."""
        self.stopped = self.stopped or "done"
        self.ended = self.ended or time.monotonic()
        self.searched = self.searched if self.searched is not None else self.used()

    def end_now(self) -> None:
        """Work after the search (the check of the tuned build) counts as tuning's: its end moves to now."""
        self.ended = time.monotonic()

    def usage(self) -> str:
        """'0.07 of 0.05 min' (with a budget) or '0.07 min'."""
        return f"{self.used():.2f} of {self.minutes:.3g} min" if self.minutes is not None else f"{self.used():.2f} min"

    def reason(self) -> str:
        if self.stopped == "minutes":
            return f"stopped: the {self.minutes:.3g}-minute budget is spent (a rerun resumes)"
        return "every task at its budget" if self.stopped == "done" else "tuning"

    def as_dict(self) -> dict:
        return {"minutes_used": round(self.used(), 4), "minutes_budget": self.minutes, "stopped": self.stopped,
                "reason": self.reason(), "minutes_searched": None if self.searched is None else round(self.searched, 4),
                "reserve_s": round(self.reserve_s, 2)}
