"""Tuning one experiment: its model after the configured pipeline, tuned with a live progress bar.

Shared by `workbench tune CONFIG` and by `workbench run` when `tuning.tune: true`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import tvm
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workbench.compile.databases import tuning_folder
from workbench.compile.targets import make_target
from workbench.compile.tasks import TaskResult, extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.config import Experiment, TuningConfig
from workbench.runtime.heartbeat import EVERY_S, heartbeat
from workbench.stages import optimized_module


def tuning_config(experiment: Experiment) -> TuningConfig:
    """The experiment's `tuning:` section, or the defaults when it has none (`workbench tune` still works)."""
    return experiment.tuning or TuningConfig()


def _best(result: TaskResult) -> str:
    return f"best {result.best_us:9.1f} µs" if result.best_us is not None else "best         —"


@contextmanager
def plain_progress(console: Console, every_s: float = EVERY_S) -> Iterator[Callable[[TaskResult], None]]:
    """Tuning's progress for a log with no terminal: a line (elapsed, trials done of the budget, the task being
    tuned and its best so far) at least every `every_s` seconds and at the end (runtime/heartbeat.py). Yields the
    callback `tune_tasks` reports each task's state to."""
    latest: dict[str, TaskResult] = {}
    current: list[str] = []  # the task reported last
    started, lock = time.monotonic(), threading.Lock()

    def line() -> str:
        with lock:  # the heartbeat reads while the tuning loop reports
            done, budget = sum(min(r.trials, r.budget) for r in latest.values()), sum(r.budget for r in latest.values())
            now = latest[current[-1]] if current else None
            tasks = len(latest)
        best = f"best {now.best_us:.1f} µs" if now and now.best_us is not None else "best —"
        task = (f"; {now.name}: {min(now.trials, now.budget)}/{now.budget}, {best}"
                + (f" ({'; '.join(now.flags)})" if now.flags else "")) if now else ""
        return f"tuning {time.monotonic() - started:5.0f} s: {done}/{budget} trials, {tasks} tasks{task}"

    def report(result: TaskResult) -> None:
        with lock:
            latest[result.name] = result
            current[:] = [result.name]

    with heartbeat(console, line, every_s):
        yield report


def tune_optimized(optimized: tvm.IRModule, target: tvm.target.Target, experiment: Experiment, base_dir: Path,
                   console: Console) -> tuple[list[TaskResult], Path]:
    """Extract the tasks of the pipeline's output and tune them into the database folder of `target`, one progress
    row per task (on a terminal; elsewhere plain lines, `plain_progress`); return the per-task results and that
    folder."""
    config = tuning_config(experiment)
    tasks = extract_tasks(tuning_module(optimized, target, config.layout_rewrite), target)
    database = tuning_folder(experiment.database_root(base_dir), target)
    log_dir = experiment.output_dir(base_dir) / "tuning_logs"
    rows: dict[str, int] = {}
    columns = (TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TextColumn("{task.fields[note]}"), TimeElapsedColumn())
    if not console.is_terminal:
        with plain_progress(console) as report:
            return tune_tasks(tasks, target, config, database, log_dir, progress=report), database
    with Progress(*columns, console=console) as bar:
        def show(result: TaskResult) -> None:
            note = "; ".join(result.flags)
            if result.name not in rows:
                rows[result.name] = bar.add_task(result.name, total=result.budget, best=_best(result), note=note)
            bar.update(rows[result.name], completed=min(result.trials, result.budget), best=_best(result), note=note)

        return tune_tasks(tasks, target, config, database, log_dir, progress=show), database


def tune_experiment(experiment: Experiment, base_dir: Path, console: Console) -> tuple[list[TaskResult], Path]:
    """`workbench tune`: load the model, run the pipeline, tune into the experiment's database for its target."""
    target = make_target(experiment.target)
    with console.status(f"Loading {experiment.model.source} and running the pipeline…"):
        optimized = optimized_module(experiment, base_dir, target)
    return tune_optimized(optimized, target, experiment, base_dir, console)
