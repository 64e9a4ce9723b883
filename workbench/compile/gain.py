"""Which task a minutes budget's next search round goes to: the one that may win the model the most time.

"Tune for 10 minutes" is a promise to spend the minutes where the model gains. Filling fixed per-task budgets first
broke it (tuning a 416² detector for 10 minutes stopped after 6.6 with 51 of its 58 kernels never searched, every
round after the first pass going to one kernel that no round improved). So with a minutes budget each round goes
to the task with the largest expected gain: its time in the model now (`Gains.model_us_now`) times the share of it one
more round is expected to win. A task not searched yet is expected to win PRIOR of its time (a default schedule
against a tuned one, typically); a searched one what its last WINDOW rounds won per round, never less than FLOOR.
So the hottest kernels of the profile go first, a kernel that keeps improving keeps its turn, one that stalls
yields to the next kernels by profiled time and comes back once they have had their first rounds. Without a
profile (a GPU or RPC target) a task not yet measured comes first, in the order given.
"""

from __future__ import annotations

import math

from workbench.compile.tasks import TaskResult

PRIOR = 0.25  # share of its time a task's first search round is expected to win
FLOOR = 0.002  # the least a searched task is expected to win per round: stalled kernels come back, last
WINDOW = 3  # rounds the expected gain of a searched task is read from


def searchable(result: TaskResult) -> bool:
    """Can the task take another round: not used up, not failed, under its budget (None: no cap)?"""
    return not result.exhausted and not result.failed and (result.budget is None or result.trials < result.budget)


class Gains:
    """The best µs of each task after each of its search rounds in this run, and the choice they make."""

    def __init__(self, results: list[TaskResult]) -> None:
        self.results = results
        self.bests: dict[int, list[float]] = {}  # index -> best µs when its search began, then after each round

    def began(self, index: int) -> None:
        """Task `index` is about to take its first round: its best now (its seeds', or the database's) is the
        start."""
        if index not in self.bests and self.results[index].best_us is not None:
            self.bests[index] = [self.results[index].best_us]

    def measured(self, index: int) -> None:
        """Task `index` finished a round: note its best."""
        best = self.results[index].best_us
        if best is not None and index in self.bests:
            self.bests[index].append(best)

    def expected_share(self, index: int) -> float:
        """The share of the task's time one more round is expected to win (see the module doc)."""
        bests = self.bests.get(index, [])
        if len(bests) < 2:
            return PRIOR
        then, now, rounds = bests[max(0, len(bests) - 1 - WINDOW)], bests[-1], min(WINDOW, len(bests) - 1)
        return max(FLOOR, (then - now) / then / rounds)

    def model_us_now(self, index: int) -> float:
        """The task's time per inference as the model would be built now: its profiled time in the build before
        tuning, scaled by how far this run's rounds have brought its best kernel from where its search began (best
        µs x uses without a profile; inf for a task neither profiled nor measured, so it is searched first, in the
        order given)."""
        result = self.results[index]
        if result.profiled_us is not None:
            bests = self.bests.get(index)
            return result.profiled_us * bests[-1] / bests[0] if bests else result.profiled_us
        return result.best_us * result.weight if result.best_us is not None else math.inf

    def expected_us(self, index: int) -> float:
        return self.model_us_now(index) * self.expected_share(index)

    def next(self) -> int | None:
        """The index of the task the next round goes to (ties to the first); None when none can take one."""
        open_tasks = [i for i, result in enumerate(self.results) if searchable(result)]
        return max(open_tasks, key=lambda i: (self.expected_us(i), -i)) if open_tasks else None
