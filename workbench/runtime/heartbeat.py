"""A status line on a timer, for long work whose output goes to a log rather than a terminal (CI, nohup, a
notebook): rich's live displays draw nothing there until they stop, so a user would see nothing for minutes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

EVERY_S = 30.0  # a line at least this often


@contextmanager
def heartbeat(console: Console, line: Callable[[], str], every_s: float = EVERY_S) -> Iterator[None]:
    """Print `line()` every `every_s` seconds while the block runs, and once when it ends. `line` runs on the
    heartbeat's thread: it must read what the work updates under a lock, or only read whole values."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            console.print(line(), highlight=False, markup=False)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        try:  # a status that cannot be worded must not hide how the work ended
            console.print(line(), highlight=False, markup=False)
        except Exception:  # noqa: BLE001
            pass
