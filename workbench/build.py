"""Lower a Relax module for a target, count its kernels, compile it, export the library.

Three recipes share the same lowering tail, so the only difference between builds is the
graph-level work before it:
- `workbench`: the configured pipeline already ran; legalize what is left, then lower;
- `tvm_default`: TVM's own default pipeline for the target (legalize, fold, fuse, lower);
- `tvm_unoptimized`: legalize only, no folding or fusion, then lower.

A tuned schedule database (MetaSchedule) is applied to the workbench build as one separate step
right after legalization, for any target; kernels it has no record for keep the default schedule.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from workbench.pipeline import count_kernels


@dataclass
class Built:
    executable: tvm.runtime.Executable
    lowered: tvm.IRModule
    kernels: int
    tuning: dict | None = None  # {"covered": [...], "fallback": [...]} kernel names, when a database was applied

    def export(self, path: Path) -> Path:
        """Write the compiled library (.so) so the build can be loaded again without recompiling."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part.so")
        self.executable.export_library(str(tmp))
        tmp.replace(path)
        return path


def _lowering_passes(target: tvm.target.Target, tuned: bool = False) -> list[tvm.transform.Pass]:
    """Legalize remaining high-level ops, (apply tuned schedules,) then TVM's dataflow lowering and VM finalization."""
    return (
        cpu_generic.library_dispatch_passes(target)
        + [relax.transform.LegalizeOps()]
        + ([relax.transform.MetaScheduleApplyDatabase()] if tuned else [])
        + cpu_generic.dataflow_lower_passes(target)
        + cpu_generic.finalize_passes(target)
    )


def tuning_coverage(lowered: tvm.IRModule) -> dict:
    """Which kernels got a schedule from the database (MetaSchedule marks them) and which kept the default."""
    kernels = {gv.name_hint: func for gv, func in lowered.functions.items() if isinstance(func, tvm.tirx.PrimFunc)}
    covered = sorted(name for name, func in kernels.items() if func.attrs and func.attrs.get("tirx.is_scheduled"))
    return {"covered": covered, "fallback": sorted(set(kernels) - set(covered))}


def _compile(mod: tvm.IRModule, target: tvm.target.Target, passes: tvm.transform.Pass, database=None) -> Built:
    with target, database if database is not None else nullcontext(), tvm.transform.PassContext(opt_level=3):
        lowered = passes(mod)
    executable = tvm.compile(lowered, target, relax_pipeline=None)
    return Built(executable, lowered, count_kernels(lowered),
                 tuning_coverage(lowered) if database is not None else None)


def build_lowered(mod: tvm.IRModule, target: tvm.target.Target, database=None) -> Built:
    """Build a module whose graph-level passes already ran (the workbench and tvm_unoptimized recipes).

    `database` (a MetaSchedule database) supplies tuned schedules for the kernels it has records for.
    """
    with target:  # MetaScheduleApplyDatabase reads the current target when it is created
        passes = tvm.transform.Sequential(_lowering_passes(target, tuned=database is not None))
    return _compile(mod, target, passes, database)


def build_tvm_default(mod: tvm.IRModule, target: tvm.target.Target) -> Built:
    """Build with TVM's default pipeline for the target, as `tvm.compile` users get it."""
    return _compile(mod, target, relax.get_default_pipeline(target))
