"""Tuning one experiment: its model after the configured pipeline, tuned with a live progress bar.

Shared by `workbench tune CONFIG` and by `workbench run` when `tuning.tune: true`.
"""

from __future__ import annotations

from pathlib import Path

import tvm
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workbench.compile.databases import tuning_folder
from workbench.compile.targets import make_target
from workbench.compile.tasks import TaskResult, extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.config import Experiment, TuningConfig
from workbench.stages import optimized_module


def tuning_config(experiment: Experiment) -> TuningConfig:
    """The experiment's `tuning:` section, or the defaults when it has none (`workbench tune` still works)."""
    return experiment.tuning or TuningConfig()


def _best(result: TaskResult) -> str:
    return f"best {result.best_us:9.1f} µs" if result.best_us is not None else "best         —"


def tune_optimized(optimized: tvm.IRModule, target: tvm.target.Target, experiment: Experiment, base_dir: Path,
                   console: Console) -> tuple[list[TaskResult], Path]:
    """Extract the tasks of the pipeline's output and tune them into the database folder of `target`, one progress
    row per task; return the per-task results and that folder."""
    config = tuning_config(experiment)
    tasks = extract_tasks(tuning_module(optimized, target, config.layout_rewrite), target)
    database = tuning_folder(experiment.database_root(base_dir), target)
    log_dir = experiment.output_dir(base_dir) / "tuning_logs"
    rows: dict[str, int] = {}
    columns = (TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TextColumn("{task.fields[note]}"), TimeElapsedColumn())
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
