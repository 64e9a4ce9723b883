"""Where the benchmarks write and how they log: pages into docs/results/ (of the working folder) unless told, and
one flushed line per step, so the log of a long run reads well while it runs, without a terminal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

RESULTS = Path("docs") / "results"


def flushed(line: str) -> None:
    """Print a line at once."""
    print(line, flush=True)


def prefixed(log: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    """`log` with every line starting with `prefix` (which model of how many, which step)."""
    return lambda line: log(prefix + line)
