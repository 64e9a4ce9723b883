"""Test only: stop a workbench child process at a known point, so a test signals it there and not at a moment
picked by polling and sleeping (a slow or loaded machine moves that moment: a kill meant for mid-tuning landed
after the last trial, a Ctrl-C meant for mid-run after the run had ended).

A child started by `held` with one of the `hold_*` pause points installed (by `workbench_command`, or, in a
sweep's workers, by the plugin tests/sweep_plugin_pause.py) touches `<folder>/ready` at that point and blocks
there in Python (short sleeps: a signal's Python handler runs at once) until `<folder>/go` appears or its parent
process is gone (a test that failed leaves no process blocked). Only the wrapped function is changed: TVM,
ONNX Runtime and SQLite run as they do for a user.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PAUSE_ENV = "WORKBENCH_TEST_PAUSE"  # the folder of the `ready` and `go` files; set by `held`
REPO = Path(__file__).resolve().parent.parent
HOLD_S = 300.0  # generous: a loaded 2-core machine took 130 s to tune its first batch


# ------------------------------------------------------------------------------ in the child


def _hold() -> None:
    """Touch `ready`, then block until `go` appears or this process's parent is gone."""
    folder = Path(os.environ[PAUSE_ENV])
    parent = os.getppid()
    (folder / "ready").touch()
    while not (folder / "go").exists() and os.getppid() == parent:
        time.sleep(0.05)


def hold_tune_in_first_measured_batch() -> None:
    """`workbench tune` holds in the measure callback of its first searched batch, inside the search (where
    Ctrl-C means "stop after this batch"), with that batch's records in the database: at tune.py's first
    `best_latency_us` call from `measured` (verify's calls, after a search, pass through)."""
    from workbench.compile import tune

    best_latency_us = tune.best_latency_us
    held = False

    def holding(*args: Any) -> float | None:
        nonlocal held
        if not held and sys._getframe(1).f_code.co_name == "measured":
            held = True
            _hold()
        return best_latency_us(*args)

    tune.best_latency_us = holding


def hold_run_after_first_result_write() -> None:
    """`workbench run` holds right after the first result.json write with a timed label (the workbench's), before
    the next label is measured."""
    from workbench.record.result import RunResult

    write = RunResult.write
    held = False

    def holding(self: RunResult, out_dir: Path) -> Path:
        nonlocal held
        path = write(self, out_dir)
        if not held and any(m.median_ms is not None for m in self.measurements.values()):
            held = True
            _hold()
        return path

    RunResult.write = holding


def hold_sweep_worker_at_second_run() -> None:
    """A sweep worker holds when its second "run" task arrives, before running it: the sweep process has
    recorded the first run's variants (it records each result before it sends the worker its next task)."""
    from workbench.sweep.workers import VariantRunner

    call = VariantRunner.__call__
    runs = 0

    def holding(self: VariantRunner, kind: str, config: dict, reference: dict | None = None) -> tuple[str, Any]:
        nonlocal runs
        if kind == "run":
            runs += 1
            if runs == 2:
                _hold()
        return call(self, kind, config, reference)

    VariantRunner.__call__ = holding


# ------------------------------------------------------------------------------ in the test


def workbench_command(hold: Callable[[], None], argv: list[str]) -> list[str]:
    """`workbench ARGV` in a fresh interpreter, with the pause point `hold` (one of this module's) installed first."""
    code = (f"import tests.pause_points as points; points.{hold.__name__}(); "
            f"from workbench.cli import main; raise SystemExit(main({argv!r}))")
    return [sys.executable, "-c", code]


@dataclass
class Held:
    """A child process that reached its pause point (`held`), and its folder."""

    proc: subprocess.Popen
    folder: Path

    def stderr(self) -> str:
        return (self.folder / "stderr").read_text()

    def wait_for(self, done: Callable[[], bool], failure: str, timeout_s: float = HOLD_S) -> None:
        """Return once `done()`; fail the test with `failure` and the child's stderr when the child exits first or
        `timeout_s` pass."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = "deadline" if self.proc.returncode is None else f"it exited with {self.proc.returncode}"
                pytest.fail(f"{failure} ({why}); its stderr:\n{self.stderr()[-4000:]}")
            time.sleep(0.1)

    def go(self) -> None:
        """Let the child go on from its pause point."""
        (self.folder / "go").touch()


@contextmanager
def held(command: list[str], folder: Path, **popen: Any) -> Iterator[Held]:
    """`command` started in the repository (PAUSE_ENV naming `folder`, the repository on PYTHONPATH for the
    helper processes it starts; stderr to `folder/stderr`), given once it holds at its pause point; killed on
    the way out if still running, so a failing test leaves no process behind."""
    folder.mkdir()
    env = {**os.environ, PAUSE_ENV: str(folder), "PYTHONPATH": str(REPO)}
    with open(folder / "stderr", "w") as stderr:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr, **popen)
    child = Held(proc, folder)
    try:
        child.wait_for((folder / "ready").exists, "the child did not reach its pause point")
        yield child
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
