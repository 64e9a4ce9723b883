"""What MetaSchedule tunes, and how much: the tasks of a pipeline's output, their budgets, and what the schedule
database already holds for each.

What is tuned is the module the workbench builds, after the configured pipeline (so `fuse` decides which fused
kernels exist) and after LegalizeOps: one task per distinct TIR function, heaviest (FLOPs x uses) first.

The trials already in the database are counted per task, so a task at its budget is skipped and a second
`workbench tune` with the same budget measures nothing. A light kernel gets one search round, not a full budget
(see `plan`). A task whose search space is used up (MetaSchedule finds no new candidate, e.g. a reshape with one
schedule) is noted in `exhausted.json` next to the records, so a resumed run does not search it again.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.analysis import estimate_tir_flops

from workbench.atomic import atomic_write_json
from workbench.compile.build import legalized
from workbench.config import TuningConfig

FAILED_RUN_SECS = 1e9  # MetaSchedule records a failed build or run as (about) 1e10 seconds
EXHAUSTED_FILE = "exhausted.json"
LIGHT_SHARE = 0.01  # of the model's FLOPs x uses: below it a kernel gets one search round (see `plan`)
# What MetaSchedule's CUDA rules read from the target; a plain {kind: cuda, arch: ...} lacks the last three.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
               "registers_per_block": 65536}


@dataclass
class TaskResult:
    """One task's outcome: trials found in the database, trials measured now, best latency after."""

    name: str
    weight: int
    budget: int | None  # trials it may take in all; None: no cap of its own (a minutes budget, compile/gain.py)
    trials_before: int
    exhausted: bool = False
    trials_run: int = 0
    best_us: float | None = None
    rejected: int = 0  # best records dropped for computing wrong outputs (compile/verify.py)
    seeded_from: str | None = None  # the database whose schedule for it (or a similar kernel's) was measured first
    profiled_us: float | None = None  # its kernels' time in the build profiled before tuning (stages/hot_kernels.py)
    failed: str | None = None  # why MetaSchedule's search of it stopped with an error (the other tasks go on)
    best_before_us: float | None = None  # the database's best for it when the run began (None: it had none)
    seconds: float = 0.0  # wall-clock seconds spent on it (seeds, search rounds, checks)
    model_us: float | None = None  # its kernels' time in the tuned build (stages/model_check.py, medians)
    model_before_us: float | None = None  # and in the build before tuning, profiled in turn with it
    slower_in_model: int = 0  # records dropped because the model ran its kernels slower with them

    @property
    def trials(self) -> int:
        return self.trials_before + self.trials_run

    @property
    def flags(self) -> list[str]:
        """What a progress row or the tune table notes of the task: its search space used up, wrong schedules
        dropped."""
        return (["search space used up"] if self.exhausted else []) + (
            [f"{self.rejected} wrong schedule(s) dropped"] if self.rejected else []) + (
            [f"started from {self.seeded_from}'s schedule"] if self.seeded_from else []) + (
            [f"search failed: {self.failed}"] if self.failed else []) + (
            [f"{self.slower_in_model} record(s) dropped: slower in the model"] if self.slower_in_model else [])

    def as_dict(self) -> dict:
        return {"name": self.name, "weight": self.weight, "budget": self.budget, "trials_before": self.trials_before,
                "trials_run": self.trials_run, "exhausted": self.exhausted, "best_us": self.best_us,
                "rejected": self.rejected, "seeded_from": self.seeded_from,
                "profiled_us": self.profiled_us, "failed": self.failed, "best_before_us": self.best_before_us,
                "seconds": round(self.seconds, 2), "model_us": self.model_us, "model_before_us": self.model_before_us,
                "slower_in_model": self.slower_in_model}


def tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    """The target with what MetaSchedule needs: llvm its core count, cuda the GPU's per-block limits."""
    options = dict(target.export())
    if target.kind.name == "llvm" and "num-cores" not in options:
        options["num-cores"] = ms.utils.cpu_count(logical=False)
    elif target.kind.name == "cuda":
        options = {**CUDA_LIMITS, **{k: v for k, v in options.items() if v not in ("", None)}}
    return tvm.target.Target(options)


def tuning_module(optimized: tvm.IRModule, target: tvm.target.Target, layout_rewrite: bool = False) -> tvm.IRModule:
    """The pipeline's output as `build_lowered` has it before it applies the database (the build's own
    `legalized`): the tasks' workloads must match those kernels structurally, attributes included
    (running AnnotateTIROpPattern here would tag fused kernels the build does not tag, and nothing would match;
    with `layout_rewrite` the layout-free weight marks are part of the workload too).
    """
    return legalized(optimized, target, layout_rewrite=layout_rewrite)


def task_cost(task: ms.ExtractedTask) -> float:
    try:
        return estimate_tir_flops(task.dispatched[0]) * int(task.weight)
    except Exception:  # noqa: BLE001 - a kernel FLOPs cannot be estimated for is simply tuned last
        return 0.0


def extract_tasks(mod: tvm.IRModule, target: tvm.target.Target) -> list[ms.ExtractedTask]:
    """One task per structurally distinct, unscheduled TIR function, heaviest first.

    The same kernel used twice is one task of weight 2; `mod` is the output of `tuning_module`.
    """
    tasks = ms.relax_integration.extract_tasks(mod, tuning_target(target))
    tasks = [task for task in tasks if not task.mod.attrs.get("tirx.is_scheduled", False)]
    return sorted(tasks, key=task_cost, reverse=True)


def _workload_key(task_mod: tvm.IRModule) -> str:
    return ms.utils.shash2hex(task_mod)


def task_records(database: ms.database.Database, task_mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
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
    return len(task_records(database, task_mod))


def records_faster_than(database: ms.database.Database, task_mod: tvm.IRModule,
                        us: float | None) -> list[ms.database.TuningRecord]:
    """The task's records measured faster than `us` (every record where `us` is None)."""
    records = task_records(database, task_mod)
    if us is None:
        return records
    return [r for r in records if (secs := _seconds(r)) is not None and secs * 1e6 < us]


def best_latency_us(database: ms.database.Database, task_mod: tvm.IRModule) -> float | None:
    """The fastest measured schedule of this task, in microseconds (None when nothing ran successfully)."""
    times = [s for s in map(_seconds, task_records(database, task_mod)) if s is not None]
    return min(times) * 1e6 if times else None


def _exhausted(database_dir: Path) -> dict[str, str]:
    path = database_dir / EXHAUSTED_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def mark_exhausted(database_dir: Path, task: ms.ExtractedTask) -> None:
    """Note in `exhausted.json` that the task's search space is used up, so no later run searches it again."""
    atomic_write_json(database_dir / EXHAUSTED_FILE,
                      {**_exhausted(database_dir), _workload_key(task.dispatched[0]): task.task_name})


def plan(tasks: list[ms.ExtractedTask], database: ms.database.Database, database_dir: Path,
         config: TuningConfig) -> list[TaskResult]:
    """Per task: its budget and what the database already holds. The budget is trials_per_task (or trials spread
    evenly), but a light kernel (under LIGHT_SHARE of the model's FLOPs x uses: a pool, a transpose) gets one
    search round: the profile puts such kernels under 1% of the time, and a full budget on each would cost as
    much tuning time as a conv. With a minutes budget (`hot_until_time`) a task has no budget of its own unless
    `trials_per_task` is set: the minutes go where the model gains (compile/gain.py)."""
    per_task = config.trials_per_task or max(1, math.ceil(config.trials / max(1, len(tasks))))
    costs = [task_cost(t) for t in tasks]
    light = LIGHT_SHARE * sum(costs)
    exhausted = _exhausted(database_dir)

    def budget(cost: float) -> int | None:
        if config.hot_until_time:
            return config.trials_per_task if "trials_per_task" in config.model_fields_set else None
        return per_task if cost >= light else min(per_task, config.trials_per_iter)

    return [TaskResult(t.task_name, int(t.weight), budget(cost), trials_done(database, t.dispatched[0]),
                       exhausted=_workload_key(t.dispatched[0]) in exhausted,
                       best_us=(best := best_latency_us(database, t.dispatched[0])), best_before_us=best)
            for t, cost in zip(tasks, costs)]
