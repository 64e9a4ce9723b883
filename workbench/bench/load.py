"""`--load N`: N processes spinning beside a benchmark, as on a user's machine that does other work.

What a busy core costs each runtime is a figure users meet before any benchmark (docs/tuning.md): the same pages,
timed with `--load`, show it side by side; their file names end in `_load<N>` so the quiet pages stay
(record/results_page.py: `load_suffix`, `load_line`).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager


def _spin() -> None:
    while True:
        pass


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` processes, each keeping a core busy, for as long as the block runs."""
    context = multiprocessing.get_context("spawn")  # a fork of a process with TVM's threads could hold their locks
    spinners = [context.Process(target=_spin, daemon=True, name=f"load-{i}") for i in range(count)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.terminate()
        for spinner in spinners:
            spinner.join()


