"""Which tuning tasks hold the model's time now: the per-kernel profile of the current best build, per task.

A minutes budget is spent on the tasks in this order, so the kernels that cost the most in the model as it would be
built now (every schedule known so far, own and shared databases, default schedules elsewhere) are tuned first.
The other order, FLOPs x uses (compile/tasks.py), misjudges memory-bound kernels (a depthwise conv, a softmax, a
layout transpose) and kernels a shared database or the default schedule already serves well.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from workbench.compile.build import build_lowered
from workbench.compile.targets import device_for, runs_here
from workbench.measure.profile import Profile, tvm_profile

WARMUP, RUNS = 2, 5  # enough to rank kernels; the profile's build costs far more than its runs


@dataclass(frozen=True)
class TaskTime:
    """One task's share of the current build's time: its kernels' µs per inference (all their calls)."""

    name: str
    us: float
    share: float


def _workload_key(func: tvm.tirx.PrimFunc) -> str:
    """The key MetaSchedule files a kernel's workload under (its normalized module's structural hash)."""
    normalize = tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")
    return ms.utils.shash2hex(normalize(func))


def can_profile(target: tvm.target.Target) -> bool:
    """A CPU build this machine runs (a GPU or an RPC device would need the model shipped there)."""
    return target.kind.name == "llvm" and runs_here(target)


def build_executable(optimized: tvm.IRModule, target: tvm.target.Target, database=None,
                     layout_rewrite: bool = False) -> tvm.runtime.Module:
    """`optimized` built with `database` (None: default schedules only), as a build would."""
    return build_lowered(optimized, target, database, layout_rewrite).executable


def profile_executable(executable: tvm.runtime.Module, target: tvm.target.Target,
                       inputs: dict[str, np.ndarray]) -> Profile:
    return tvm_profile(executable, inputs, device_for(target), WARMUP, RUNS, label="current build")


def task_times(plain: tvm.IRModule, profile: Profile, tasks: list[ms.ExtractedTask]) -> list[TaskTime]:
    """Each task's share of `profile`: the summed time of the kernels of `plain` (the module tasks are extracted
    from, compile/tasks.py `tuning_module`) that are its workload, in the order of `tasks`. A task none of whose
    kernels the VM calls (a reshape the VM does itself) gets 0."""
    per_kernel = {kernel.name.removesuffix("_prepacked"): kernel.us for kernel in profile.kernels}
    per_workload: dict[str, float] = defaultdict(float)
    for gv, func in plain.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            per_workload[_workload_key(func)] += per_kernel.get(gv.name_hint, 0.0)
    total = profile.total_us or 1.0
    times = [per_workload.get(ms.utils.shash2hex(task.dispatched[0]), 0.0) for task in tasks]
    return [TaskTime(task.task_name, us, us / total) for task, us in zip(tasks, times, strict=True)]


def interleaved_task_us(plain: tvm.IRModule, tasks: list[ms.ExtractedTask], executables: list[tvm.runtime.Module],
                        target: tvm.target.Target, inputs: dict[str, np.ndarray], rounds: int) -> np.ndarray:
    """Each task's µs (`task_times`) per round and executable, shape (rounds, executables, tasks): in each round
    every executable is profiled in turn, so a change in the machine's speed meanwhile (another process, a clock)
    hits all of them alike, and the executables are best compared round by round."""
    return np.array([[[t.us for t in task_times(plain, profile_executable(executable, target, inputs), tasks)]
                      for executable in executables] for _ in range(rounds)])


def hottest_first(tasks: list[ms.ExtractedTask], times: list[TaskTime]) -> tuple[list[ms.ExtractedTask],
                                                                                  list[TaskTime]]:
    """`tasks` (and their times) by profiled time, most first; ties keep their order (FLOPs x uses)."""
    order = sorted(range(len(tasks)), key=lambda i: -times[i].us)
    return [tasks[i] for i in order], [times[i] for i in order]
