"""MetaSchedule driver: tune the TIR functions of a pipeline's output into a JSON schedule database.

What is tuned is the module the workbench builds, after the configured pipeline (so `fuse` decides
which fused kernels exist) and after LegalizeOps: one task per distinct TIR function.

Choices that are not MetaSchedule's defaults, and why:
- Tasks are tuned one after another (not by MetaSchedule's gradient scheduler over all tasks) so the
  trials already in the database can be counted per task: a task at its budget is skipped, a second
  `workbench tune` with the same budget measures nothing, and a progress line per task is possible.
  One cost model is shared by all tasks, so later tasks start from what earlier ones measured.
- XGBoost's `num_warmup_samples` is 8, not 100: with budgets of tens of trials per task the default
  would never train, and the search would stay random.
- The builder's `f_build` is `workbench_build`: MetaSchedule's default imports `tvm.s_tir.tensor_intrin`
  in every fresh worker (~47 s here), so every build hits its timeout.
- JSONDatabase appends each record as it is committed, so Ctrl-C loses only the batch being measured.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms
from tvm.ir.utils import derived_object

from workbench.config import TuningConfig
from workbench.errors import UserError

MS_LOGGER = "tvm.s_tir.meta_schedule"
FAILED_RUN_SECS = 1e9  # MetaSchedule records a failed build or run as (about) 1e10 seconds


@dataclass
class TaskResult:
    """One task's outcome: trials found in the database, trials measured now, best latency after."""

    name: str
    weight: int
    budget: int
    trials_before: int
    trials_run: int = 0
    best_us: float | None = None

    @property
    def skipped(self) -> bool:
        return self.trials_run == 0 and self.trials_before >= self.budget

    def as_dict(self) -> dict:
        return {"name": self.name, "weight": self.weight, "budget": self.budget, "trials_before": self.trials_before,
                "trials_run": self.trials_run, "best_us": self.best_us}


def workbench_build(mod: tvm.IRModule, target: tvm.target.Target, _params: dict | None) -> tvm.runtime.Module:
    """MetaSchedule's `default_build` minus its `import tvm.s_tir.tensor_intrin` (too slow per worker).

    Module level so the builder's worker processes can unpickle it by reference.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    """MetaSchedule needs the core count in the target (`num-cores`); default to this machine's physical cores."""
    if target.kind.name != "llvm" or "num-cores" in target.attrs:
        return target
    return tvm.target.Target({**dict(target.export()), "num-cores": ms.utils.cpu_count(logical=False)})


def tuning_module(optimized: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """The pipeline's output with every op legalized to TIR: what the workbench build lowers, and what is tuned.

    LegalizeOps and AnnotateTIROpPattern are no-ops on what `fuse` already lowered; on a module the
    pipeline left high-level there would otherwise be no TIR functions (MetaSchedule: "No tasks to tune").
    """
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential([relax.transform.LegalizeOps(),
                                         relax.transform.AnnotateTIROpPattern()])(optimized)


def open_database(path: Path, create: bool) -> ms.database.JSONDatabase:
    """Open (or create) the JSON database folder; a missing one is a user mistake unless we are tuning."""
    if not path.is_dir():
        if not create:
            raise UserError(f"tuning database {str(path)!r} does not exist: run `workbench tune` with this config "
                            "first, set tuning.tune: true, or point tuning.database at a tuned folder")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"tuning.database {str(path)!r}: cannot create it ({exc.strerror or exc})") from exc
    return ms.database.JSONDatabase(work_dir=str(path))


def extract_tasks(mod: tvm.IRModule, target: tvm.target.Target) -> list[ms.ExtractedTask]:
    """One task per structurally distinct TIR function (the same kernel used twice is one task of weight 2)."""
    return list(ms.relax_integration.extract_tasks(mod, tuning_target(target)))


def _records(database: ms.database.Database, task_mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
    """Every record (measured, failed or not) the database holds for this task's workload."""
    if not database.has_workload(task_mod):
        return []
    workload = database.commit_workload(task_mod)  # returns the stored workload, adds nothing
    return [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]


def _seconds(record: ms.database.TuningRecord) -> float | None:
    if record.run_secs is None or len(record.run_secs) == 0:
        return None
    secs = sorted(float(s) for s in record.run_secs)
    median = secs[len(secs) // 2]
    return median if median < FAILED_RUN_SECS else None


def trials_done(database: ms.database.Database, task_mod: tvm.IRModule) -> int:
    return len(_records(database, task_mod))


def best_latency_us(database: ms.database.Database, task_mod: tvm.IRModule) -> float | None:
    """The fastest measured schedule of this task, in microseconds (None when nothing ran successfully)."""
    times = [s for s in map(_seconds, _records(database, task_mod)) if s is not None]
    return min(times) * 1e6 if times else None


def make_cost_model(config: TuningConfig, num_cores: int) -> ms.cost_model.CostModel:
    """XGBoost that trains after the first batch (8 samples, see the module doc), or random scores."""
    if config.cost_model == "random":
        return ms.cost_model.RandomModel(seed=config.seed)
    return ms.cost_model.XGBModel(num_warmup_samples=8, num_tuning_cores=num_cores, tree_method="auto")


@derived_object
class _ProgressCallback(ms.measure_callback.PyMeasureCallback):
    """Reports each measured batch (how many candidates, their best run time) to a Python function."""

    def __init__(self, report: Callable[[int, float | None], None]) -> None:
        super().__init__()
        self.report = report

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        times = []
        for result in runner_results:
            if result.error_msg is None and result.run_secs:
                times.append(min(float(s) for s in result.run_secs))
        self.report(len(runner_results), min(times) if times else None)


def quiet_metaschedule() -> None:
    """MetaSchedule logs every round to its own logger (and console); keep only warnings and errors."""
    logging.getLogger(MS_LOGGER).setLevel(logging.WARNING)
    for handler in logging.getLogger(MS_LOGGER).handlers:
        handler.setLevel(logging.WARNING)


def plan(tasks: list[ms.ExtractedTask], database: ms.database.Database,
         config: TuningConfig) -> list[TaskResult]:
    """Per task: its budget (trials_per_task, or trials spread evenly) and what the database already holds."""
    per_task = config.trials_per_task or max(1, math.ceil(config.trials / max(1, len(tasks))))
    return [TaskResult(t.task_name, int(t.weight), per_task, trials_done(database, t.dispatched[0])) for t in tasks]


Progress = Callable[[TaskResult, int], None]  # (task, trials measured so far in this run) -> None


def tune_tasks(tasks: list[ms.ExtractedTask], target: tvm.target.Target, config: TuningConfig,
               database: ms.database.JSONDatabase, log_dir: Path,
               progress: Progress | None = None, cost_model: ms.cost_model.CostModel | None = None,
               on_task_start: Callable[[TaskResult], None] | None = None) -> list[TaskResult]:
    """Tune each task up to its budget (skipping those already there), never past `config.trials` in all."""
    quiet_metaschedule()
    target = tuning_target(target)
    tasks = [task for task in tasks if not task.mod.attrs.get("tirx.is_scheduled", False)]
    num_cores = int(target.attrs["num-cores"])
    results = plan(tasks, database, config)
    left = config.trials
    builder = runner = None
    cost_model = cost_model or make_cost_model(config, num_cores)
    contexts, _ = ms.relax_integration.extracted_tasks_to_tune_contexts(
        tasks, str(log_dir), num_threads=num_cores, seed=config.seed)
    quiet_metaschedule()
    for task, context, result in zip(tasks, contexts, results):
        want = min(result.budget - result.trials_before, left)
        if on_task_start is not None:
            on_task_start(result)
        if want > 0:
            builder = builder or ms.builder.LocalBuilder(f_build=workbench_build, timeout_sec=60,
                                                         max_workers=num_cores)
            runner = runner or ms.runner.LocalRunner(timeout_sec=30)

            def report(measured: int, _best: float | None, result: TaskResult = result) -> None:
                result.trials_run += measured
                if progress is not None:
                    progress(result, result.trials_run)

            ms.tune.tune_tasks(
                tasks=[context], task_weights=[float(task.weight)], work_dir=str(log_dir),
                max_trials_global=want, max_trials_per_task=want,
                num_trials_per_iter=min(config.trials_per_iter, want),
                builder=builder, runner=runner, database=database, cost_model=cost_model,
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), _ProgressCallback(report)],
                task_scheduler="round-robin",
            )
            left -= result.trials_run
        result.best_us = best_latency_us(database, task.dispatched[0])
        if progress is not None:
            progress(result, result.trials_run)
    return results
