"""Ctrl-C while tuning keeps what was measured.

JSONDatabase appends each record as its batch is measured, so a kill loses only the batch being measured (a record
line cut short is dropped when the database is opened again); Ctrl-C lets that batch finish first (a second Ctrl-C
stops at once).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupts:
    """Ctrl-C while tuning: the first stops after the batch being measured (its records reach the database), the
    second stops at once. The stop is raised from the measure callback, a point MetaSchedule's C++ loop is built
    to unwind from (a KeyboardInterrupt raised at an arbitrary point of the C++ search once ended the process
    in std::terminate); a RuntimeError the FFI makes of it becomes a KeyboardInterrupt again, so the CLI reports
    an interruption (exit 130), not an internal error."""

    def __init__(self) -> None:
        self.requested = False

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def _on_sigint(self, _signum, _frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write("\nCtrl-C: stopping after the batch being measured (its records are kept); "
                         "Ctrl-C again stops now\n")

    @contextmanager
    def handled(self) -> Iterator[None]:
        """Ctrl-C handled as above while inside; only the main thread can catch signals, elsewhere nothing changes."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield
        except Exception as exc:
            if self.requested:
                raise KeyboardInterrupt from exc
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
        self.check()  # requested during the last batch of a task: stop before the next task starts
