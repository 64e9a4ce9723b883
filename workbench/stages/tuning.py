"""Tuning one experiment: its model after the configured pipeline, tuned with a live progress bar.

Shared by `workbench tune CONFIG` and by `workbench run` when `tuning.tune: true`. Each tuning leaves
`<output>/tuning.json` (per task: trials, best; minutes used of the budget and why tuning stopped).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
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
from workbench.stages.hot_kernels import (
    build_executable,
    can_profile,
    hottest_first,
    profile_executable,
    task_times,
)
from workbench.stages.model_check import CHECK_ROUNDS, ModelCheck, changed, keep_if_faster


def tuning_config(experiment: Experiment) -> TuningConfig:
    """The experiment's `tuning:` section, or the defaults when it has none (`workbench tune` still works)."""
    return experiment.tuning or TuningConfig()


def _best(result: TaskResult) -> str:
    return f"best {result.best_us:9.1f} µs" if result.best_us is not None else "best         —"


TUNING_RECORD = "tuning.json"  # in the experiment's output folder
CHECK_MARGIN = 1.2  # the check's build reads a database: a bit longer than the build before tuning


@dataclass
class Tuned:
    """One tuning run: per-task results, the database it wrote, and its clock (minutes used, why it stopped)."""

    tasks: list[TaskResult]
    database: Path
    clock: TuningClock
    check: ModelCheck | None = None  # the tuned build profiled against the one before (minutes budget, CPU)

    @property
    def order(self) -> Literal["profile", "flops"]:
        """Which tasks went first: the hottest in the current build's profile, or the heaviest by FLOPs x uses."""
        return "profile" if any(task.profiled_us is not None for task in self.tasks) else "flops"

    def as_dict(self) -> dict:
        return {"database": str(self.database), **self.clock.as_dict(), "order": self.order,
                "model_check": self.check.as_dict() if self.check else None,
                "tasks": [t.as_dict() for t in self.tasks]}

    def summary(self) -> str:
        """'Measured 9 new trials in 0.06 of 0.05 min (stopped: the 0.05-minute budget is spent ...)'."""
        return (f"Measured {sum(t.trials_run for t in self.tasks)} new trials in {self.clock.usage()} "
                f"({self.clock.reason()})" + (f"; {self.check.summary()}" if self.check else ""))


def trials_of(results: Iterable[TaskResult]) -> str:
    """'12/16' (trials within the budgets, of the budgets) or, where a task has no budget (a minutes budget), '12'."""
    results = list(results)
    if any(r.budget is None for r in results):
        return str(sum(r.trials for r in results))
    return f"{sum(min(r.trials, r.budget) for r in results)}/{sum(r.budget for r in results)}"


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
            trials = trials_of(latest.values())
            now = latest[current[-1]] if current else None
            tasks = len(latest)
        best = f"best {now.best_us:.1f} µs" if now and now.best_us is not None else "best —"
        task = (f"; {now.name}: {trials_of([now])}, {best}"
                + (f" ({'; '.join(now.flags)})" if now.flags else "")) if now else ""
        timing = "" if clock is None else f"; {clock.usage()}" + (f", {clock.reason()}" if clock.stopped else "")
        return f"tuning {time.monotonic() - started:5.0f} s: {trials} trials, {tasks} tasks{task}{timing}"

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


@dataclass(frozen=True)
class HotOrder:
    """The tasks hottest first in the profile of the build as it stands, each one's µs there, the profile's total
    and how long building and profiling took (what the check after tuning will cost again)."""

    tasks: list[ms.ExtractedTask]
    profiled_us: list[float]
    executable: tvm.runtime.Module  # the build as it stood: the check after tuning profiles it again
    build_s: float
    profile_s: float

    def check_seconds(self) -> float:
        """About what the check after tuning takes: a build, and CHECK_ROUNDS profiles of two builds."""
        return CHECK_MARGIN * (self.build_s + 2 * CHECK_ROUNDS * self.profile_s)


def hot_order(optimized: tvm.IRModule, plain: tvm.IRModule, target: tvm.target.Target,
              tasks: list[ms.ExtractedTask], inputs: dict[str, np.ndarray], sources: ScheduleSources | None,
              layout_rewrite: bool, console: Console) -> HotOrder | None:
    """The tasks (extracted from `plain`, the tuning module) hottest first by the profile of the build as it
    stands (stages/hot_kernels.py); None (tune the tasks as they were, FLOPs x uses) where the build cannot run
    here or the profile fails."""
    if not can_profile(target):
        return None
    started = time.monotonic()
    try:
        with console.status("Profiling the current build to tune its hottest kernels first…"):
            executable = build_executable(optimized, target, sources.database if sources else None, layout_rewrite)
            built = time.monotonic()
            profile = profile_executable(executable, target, inputs)
        times = task_times(plain, profile, tasks)
    except Exception as exc:  # noqa: BLE001 - ordering is a help: tuning goes on in FLOPs order
        console.print(f"[yellow]![/] profiling the current build failed ({one_line(exc)}); tuning the "
                      f"heaviest kernels (FLOPs x uses) first")
        return None
    tasks, times = hottest_first(tasks, times)
    top = ", ".join(f"{t.name} {t.us:.0f} µs ({t.share:.0%})" for t in times[:3])
    console.print(f"[green]✓[/] hottest kernels first, by the current build's profile: {top}")
    return HotOrder(tasks, [t.us for t in times], executable, built - started, time.monotonic() - built)


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
    with_config = experiment.model_copy(update={"tuning": config})
    sources = schedule_sources(with_config, base_dir, target, "")
    shared = shared_databases(sources, database)
    hot = hot_order(optimized, plain, target, tasks, inputs, sources, config.layout_rewrite, console
                    ) if config.minutes and inputs is not None else None
    profiled = None
    if hot is not None:
        tasks, profiled = hot.tasks, hot.profiled_us
        clock.reserve_s = hot.check_seconds() if config.model_check else 0.0
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
                bar.update(rows[result.name], completed=min(result.trials, result.budget or result.trials),
                           best=_best(result),
                           note=f"{note}{'; ' if note else ''}{clock.usage()}" if config.minutes else note)

            results = tune_tasks(tasks, target, config, database, log_dir, progress=show, clock=clock,
                                 shared=shared, profiled_us=profiled)
    tuned = Tuned(results, database, clock)
    if hot is not None and config.model_check and any(changed(result) for result in results):
        try:
            with console.status("Profiling the tuned build: keeping what made the model faster…"):
                tuned.check = keep_if_faster(optimized, plain, target, tasks, results, inputs, database,
                                             schedule_sources(with_config, base_dir, target, "").database,
                                             hot.executable, config.layout_rewrite)
        except Exception as exc:  # noqa: BLE001 - the search's records are in the database: keep them, say so
            console.print(f"[yellow]![/] checking the tuned build in the model failed ({one_line(exc)}); every "
                          f"tuned record is kept")
        clock.end_now()
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
