"""`--load N`: N processes spinning beside a benchmark, as on a user's machine that does other work.

What a busy core costs each runtime is a figure users meet before any benchmark (docs/tuning.md): the same pages,
timed with `--load`, show it side by side; their file names end in `_load<N>` so the quiet pages stay
(record/results_page.py: `load_suffix`, `load_line`).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.record.result import RESULT_FILE, RunResult


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


def fresh_run(config: Path, out: Path, cwd: Path, load: int = 0, env: dict[str, str] | None = None) -> RunResult:
    """`workbench run CONFIG` in a fresh process (its build, thread pool and timing, as a user's first run) from `cwd`
    (where the config's relative paths, its schedule database among them, resolve) beside `load` spinning
    processes, with `env` added to the environment; its result.json, read back."""
    with busy_processes(load):
        subprocess.run([sys.executable, "-m", "workbench.cli", "run", str(config), "--set", f"output={out}"],
                       check=True, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return RunResult.read(out / RESULT_FILE)
