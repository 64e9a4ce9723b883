"""Tuning one experiment: its model after the configured pipeline, tuned with a live progress bar.

Shared by `workbench tune CONFIG` and by `workbench run` when `tuning.tune: true`. Each tuning leaves
`<output>/tuning.json` (per task: trials, best; minutes used of the budget and why tuning stopped).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import tvm
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tvm.s_tir import meta_schedule as ms

from workbench.atomic import atomic_write_json
from workbench.compile.databases import tuning_folder
from workbench.compile.design_spaces import SharedDatabase
from workbench.compile.schedule_sources import ScheduleSources, schedule_sources
from workbench.compile.targets import make_target
from workbench.compile.tasks import TaskResult, extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.compile.tuning_clock import TuningClock
from workbench.config import Experiment, TuningConfig
from workbench.errors import one_line
from workbench.runtime.heartbeat import EVERY_S, heartbeat
from workbench.stages import optimize, prepare
from workbench.stages.hot_kernels import can_profile, hottest_first, profile_build, task_times


def tuning_config(experiment: Experiment) -> TuningConfig:
    """The experiment's `tuning:` section, or the defaults when it has none (`workbench tune` still works)."""
    return experiment.tuning or TuningConfig()


def _best(result: TaskResult) -> str:
    return f"best {result.best_us:9.1f} µs" if result.best_us is not None else "best         —"


TUNING_RECORD = "tuning.json"  # in the experiment's output folder


@dataclass
class Tuned:
    """One tuning run: per-task results, the database it wrote, and its clock (minutes used, why it stopped)."""

    tasks: list[TaskResult]
    database: Path
    clock: TuningClock

    @property
    def order(self) -> Literal["profile", "flops"]:
        """Which tasks went first: the hottest in the current build's profile, or the heaviest by FLOPs x uses."""
        return "profile" if any(task.profiled_us is not None for task in self.tasks) else "flops"

    def as_dict(self) -> dict:
        return {"database": str(self.database), **self.clock.as_dict(), "order": self.order,
                "tasks": [t.as_dict() for t in self.tasks]}

    def summary(self) -> str:
        """'Measured 9 new trials in 0.06 of 0.05 min (stopped: the 0.05-minute budget is spent ...)'."""
        return (f"Measured {sum(t.trials_run for t in self.tasks)} new trials in {self.clock.usage()} "
                f"({self.clock.reason()})")


@contextmanager
def plain_progress(console: Console, every_s: float = EVERY_S,
                   clock: TuningClock | None = None) -> Iterator[Callable[[TaskResult], None]]:
    """Tuning's progress for a log with no terminal: a line (elapsed, trials done of the budget, the task being
    tuned and its best so far; with `clock`, minutes used of the budget and, at the end, why tuning stopped) at
    least every `every_s` seconds and at the end (runtime/heartbeat.py). Yields the callback `tune_tasks` reports
    each task's state to."""
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
        timing = "" if clock is None else f"; {clock.usage()}" + (f", {clock.reason()}" if clock.stopped else "")
        return f"tuning {time.monotonic() - started:5.0f} s: {done}/{budget} trials, {tasks} tasks{task}{timing}"

    def report(result: TaskResult) -> None:
        with lock:
            latest[result.name] = result
            current[:] = [result.name]

    with heartbeat(console, line, every_s):
        yield report


def shared_databases(sources: ScheduleSources | None, folder: Path) -> list[SharedDatabase]:
    """The databases of `sources` (what a build would read, compile/schedule_sources.py) other than `folder` (the
    one tuning writes), by name, in lookup order: a new task is first measured with the schedule the first of
    them holds for it."""
    return [(source.label, database) for source, database in zip(sources.sources, sources.databases)
            if source.path.resolve() != folder.resolve()] if sources is not None else []


def hot_order(optimized: tvm.IRModule, plain: tvm.IRModule, target: tvm.target.Target,
              tasks: list[ms.ExtractedTask], inputs: dict[str, np.ndarray], sources: ScheduleSources | None,
              layout_rewrite: bool, console: Console) -> tuple[list[ms.ExtractedTask], list[float] | None]:
    """The tasks (extracted from `plain`, the tuning module) hottest first by the profile of the build as it
    stands (stages/hot_kernels.py), and each one's profiled µs; the tasks as they were (FLOPs x uses) where the
    build cannot run here or the profile fails."""
    if not can_profile(target):
        return tasks, None
    try:
        with console.status("Profiling the current build to tune its hottest kernels first…"):
            profile = profile_build(optimized, target, inputs, sources.database if sources else None,
                                    layout_rewrite)
        times = task_times(plain, profile, tasks)
    except Exception as exc:  # noqa: BLE001 - ordering is a help: tuning goes on in FLOPs order
        console.print(f"[yellow]![/] profiling the current build failed ({one_line(exc)}); tuning the "
                      f"heaviest kernels (FLOPs x uses) first")
        return tasks, None
    tasks, times = hottest_first(tasks, times)
    top = ", ".join(f"{t.name} {t.us:.0f} µs ({t.share:.0%})" for t in times[:3])
    console.print(f"[green]✓[/] hottest kernels first, by the current build's profile: {top}")
    return tasks, [t.us for t in times]


def tune_optimized(optimized: tvm.IRModule, target: tvm.target.Target, experiment: Experiment, base_dir: Path,
                   console: Console, inputs: dict[str, np.ndarray] | None = None) -> Tuned:
    """Extract the tasks of the pipeline's output and tune them into the database folder of `target` (a new task
    starting from another database's schedule for it, where one has it), one progress row per task (on a
    terminal; elsewhere plain lines, `plain_progress`), within `tuning.minutes` if set; write
    `<output>/tuning.json` and return the run. With a minutes budget and the model's `inputs`, the build as it
    stands is profiled first (inside the budget) and its hottest kernels are tuned first."""
    config = tuning_config(experiment)
    clock = TuningClock(config.minutes)
    plain = tuning_module(optimized, target, config.layout_rewrite)
    tasks = extract_tasks(plain, target)
    database = tuning_folder(experiment.database_root(base_dir), target)
    sources = schedule_sources(experiment.model_copy(update={"tuning": config}), base_dir, target, "")
    shared = shared_databases(sources, database)
    profiled = None
    if config.minutes and inputs is not None:
        tasks, profiled = hot_order(optimized, plain, target, tasks, inputs, sources, config.layout_rewrite,
                                    console)
    out_dir = experiment.output_dir(base_dir)
    log_dir = out_dir / "tuning_logs"
    rows: dict[str, int] = {}
    columns = (TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TextColumn("{task.fields[note]}"), TimeElapsedColumn())
    if not console.is_terminal:
        with plain_progress(console, clock=clock) as report:
            results = tune_tasks(tasks, target, config, database, log_dir, progress=report, clock=clock,
                                 shared=shared, profiled_us=profiled)
    else:
        with Progress(*columns, console=console) as bar:
            def show(result: TaskResult) -> None:
                note = "; ".join(result.flags)
                if result.name not in rows:
                    rows[result.name] = bar.add_task(result.name, total=result.budget, best=_best(result), note=note)
                bar.update(rows[result.name], completed=min(result.trials, result.budget), best=_best(result),
                           note=f"{note}{'; ' if note else ''}{clock.usage()}" if config.minutes else note)

            results = tune_tasks(tasks, target, config, database, log_dir, progress=show, clock=clock,
                                 shared=shared, profiled_us=profiled)
    tuned = Tuned(results, database, clock)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / TUNING_RECORD, tuned.as_dict())
    return tuned


def tune_experiment(experiment: Experiment, base_dir: Path, console: Console) -> Tuned:
    """`workbench tune`: load the model, run the pipeline, tune into the experiment's database for its target."""
    target = make_target(experiment.target)
    with console.status(f"Loading {experiment.model.source} and running the pipeline…"):
        prepared = prepare(experiment, base_dir, target)
        optimized = optimize(prepared, experiment.pipeline, stats=False)
    return tune_optimized(optimized.module, target, experiment, base_dir, console, prepared.inputs)
