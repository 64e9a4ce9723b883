"""Tuned schedules kept only where the model ran faster with them.

MetaSchedule times each candidate alone, its inputs warm in cache and the thread pool to itself; in the model the
kernel runs between others, on inputs another kernel just wrote, with a pool that may have gone to sleep. A
schedule that wins alone can lose there, and no per-kernel measurement shows it. So after a minutes budget the
tuned build is profiled kernel by kernel (stages/hot_kernels.py) in rounds, each a profile of the build before
tuning and one of the tuned build back to back, and each kernel is judged by the median of its per-round ratios:
profiled one after the other, a drift of the machine's speed reads as the tuned schedules' doing (in one run every
kernel of a detector, touched by tuning or not, came out slower in the second profile, memory-bound ones 2-4x).
A task whose kernels were not faster in the tuned build gets back what it had: the records this run found faster
than its best before are dropped (all its records where it had none), so the build gives it the schedule it had
before (an older record, a shared database's, or the default). The kernels tuning did not touch are the control:
their median ratio, reported, says how far noise alone moved the check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from workbench.compile.databases import drop_records, open_database
from workbench.compile.tasks import TaskResult, best_latency_us, records_faster_than
from workbench.stages.hot_kernels import build_executable, interleaved_task_us

log = logging.getLogger("workbench.tuning")
CHECK_ROUNDS = 3  # interleaved pairs of profiles (before, tuned): the median of 3 per kernel


@dataclass(frozen=True)
class ModelCheck:
    """The model's summed kernel time (medians over the check's rounds) before tuning and with every tuned record,
    the tasks whose records were dropped because their kernels ran slower in the model, and the control: the
    median ratio (tuned / before) of the kernels this run did not touch, which only noise moves from 1."""

    before_us: float
    tuned_us: float
    reverted: tuple[str, ...]
    control: float | None  # None: every kernel was touched

    def as_dict(self) -> dict:
        return {"before_us": round(self.before_us, 1), "tuned_us": round(self.tuned_us, 1),
                "reverted": list(self.reverted), "control": None if self.control is None else round(self.control, 3)}

    def summary(self) -> str:
        kept = (f"; {len(self.reverted)} kernel(s) ran slower in the model and keep their earlier schedule"
                if self.reverted else "; every tuned kernel ran faster in the model")
        control = f" (untouched kernels {self.control:.2f}x: the check's noise)" if self.control is not None else ""
        return (f"in the model, kernels {self.before_us / 1e3:.2f} ms before tuning, {self.tuned_us / 1e3:.2f} ms "
                f"with every tuned record{control}{kept}")


def changed(result: TaskResult) -> bool:
    """Did this run give the task a schedule the build would pick over the one it had?"""
    return result.best_us is not None and (result.best_before_us is None or result.best_us < result.best_before_us)


def keep_if_faster(optimized: tvm.IRModule, plain: tvm.IRModule, target: tvm.target.Target,
                   tasks: list[ms.ExtractedTask], results: list[TaskResult], inputs: dict[str, np.ndarray],
                   database_dir: Path, build_database, before: tvm.runtime.Module, layout_rewrite: bool) -> ModelCheck:
    """Build `optimized` with `build_database` (every database the build reads, the tuned one included), profile it
    and `before` (the build before tuning) in CHECK_ROUNDS interleaved rounds, note each task's time in both
    (`model_before_us`, `model_us`: medians), and drop the records this run found for a task whose kernels were not
    faster in the tuned build: the median over the rounds of its tuned / before ratio, each round's pair profiled
    back to back, is 1 or more (`TaskResult.slower_in_model`)."""
    tuned = build_executable(optimized, target, build_database, layout_rewrite)
    us = interleaved_task_us(plain, tasks, [before, tuned], target, inputs, CHECK_ROUNDS)
    ratios = np.median(us[:, 1] / np.maximum(us[:, 0], 1e-9), axis=0)
    before_us, tuned_us = np.median(us[:, 0], axis=0), np.median(us[:, 1], axis=0)
    database = open_database(database_dir, create=False)
    reverted, untouched = [], []
    for index, (task, result) in enumerate(zip(tasks, results, strict=True)):
        result.model_before_us, result.model_us = float(before_us[index]), float(tuned_us[index])
        if not changed(result):
            untouched.append(ratios[index])
            continue
        if ratios[index] < 1:
            continue
        records = records_faster_than(database, task.dispatched[0], result.best_before_us)
        if not records:
            continue
        log.warning("%s: %.2fx its time before in the tuned model (%.1f against %.1f µs); its %d new record(s) are "
                    "dropped", task.task_name, ratios[index], tuned_us[index], before_us[index], len(records))
        database = drop_records(database_dir, records)
        result.slower_in_model = len(records)
        result.best_us = best_latency_us(database, task.dispatched[0])
        reverted.append(task.task_name)
    return ModelCheck(float(before_us.sum()), float(tuned_us.sum()), tuple(reverted),
                      float(np.median(untouched)) if untouched else None)
