"""Lower a Relax module for a target, count its kernels, compile it, export the library.

Three recipes share the same lowering tail, so the only difference between builds is the
graph-level work before it. The tail is TVM's backend for the target kind (cpu_generic for llvm,
cuda for cuda); on cuda it also gives every kernel a GPU schedule (dlight's default rules) unless
one is scheduled already (`tirx.is_scheduled`, e.g. from a tuned database), on CPUs every kernel no
database covers its default schedule (kernels/default_schedule.py), and a module marked by the `cuda_graph`
pass gets TVM's CUDA-graph rewrite. The pass lists are kernels/lowering.py's.
A kernel whose schedule (default or tuned) fails to lower on a CPU is built with plain loops instead, and the
build names it (`Built.fell_back`): TVM's internal errors there are the workbench's or the database's fault,
never a reason to refuse the user's model.
A tuned schedule database (MetaSchedule) is applied to the workbench build as one separate step
right after legalization, for any target; kernels it has no record for keep the default schedule.
- `workbench`: the configured pipeline already ran; legalize what is left, then lower;
- `tvm_default`: TVM's own default pipeline for the target (legalize, fold, fuse, lower);
- `tvm_unoptimized`: legalize only, no folding or fusion, then lower.

With `layout_rewrite`, tuned kernels read their constant weights in the layout MetaSchedule chose
for them; the weights are rewritten once, at build time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import tvm
from tvm import relax

from workbench.kernels.lowering import COMPILE_CONFIG, legalize_passes, tail_passes, weight_layout_passes
from workbench.passes.cuda_graph import CUDA_GRAPH_ATTR
from workbench.passes.figures import count_kernels

log = logging.getLogger("workbench.build")

SourceOf = Callable[[tvm.IRModule], str]  # a kernel's workload -> the database that supplies its schedule


@dataclass
class Built:
    executable: tvm.runtime.Executable
    lowered: tvm.IRModule
    kernels: int
    tuning: dict | None = None  # {"covered", "fallback"[, "sources"]} kernel names, when a database was applied
    fell_back: list[str] = field(default_factory=list)  # kernels built with plain loops: their schedule failed to lower

    def export(self, path: Path) -> Path:
        """Write the compiled library (.so) so the build can be loaded again without recompiling."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part.so")
        self.executable.export_library(str(tmp))
        tmp.replace(path)
        return path


def tuning_coverage(scheduled: tvm.IRModule, lowered: tvm.IRModule) -> dict:
    """Which of the build's kernels got a schedule from the database (MetaSchedule marks them) and which kept the
    default: read from `scheduled`, right after the database is applied (before the default schedules mark the
    rest scheduled too), for the kernels `lowered` still has (some became VM reshapes; a kernel whose weight
    rewrite was split off is there as `<name>_prepacked`)."""
    kept = {gv.name_hint.removesuffix("_prepacked") for gv, func in lowered.functions.items()
            if isinstance(func, tvm.tirx.PrimFunc)}
    kernels = {gv.name_hint: func for gv, func in scheduled.functions.items()
               if isinstance(func, tvm.tirx.PrimFunc) and gv.name_hint in kept}
    covered = sorted(name for name, func in kernels.items() if func.attrs and func.attrs.get("tirx.is_scheduled"))
    return {"covered": covered, "fallback": sorted(set(kernels) - set(covered))}


@contextmanager
def _build_context(mod: tvm.IRModule, target: tvm.target.Target, database=None) -> Iterator[None]:
    """Target, tuned database (if any) and pass options (the `cuda_graph` pass's mark) for lowering `mod`."""
    cuda_graph = bool(mod.attrs and mod.attrs.get(CUDA_GRAPH_ATTR))
    with target, database if database is not None else nullcontext(), \
            tvm.transform.PassContext(opt_level=3, config={"relax.backend.use_cuda_graph": cuda_graph}):
        yield


def _compiled(lowered: tvm.IRModule, target: tvm.target.Target, tuning: dict | None = None) -> Built:
    with tvm.transform.PassContext(config=COMPILE_CONFIG):
        executable = tvm.compile(lowered, target, relax_pipeline=None)
    return Built(executable, lowered, count_kernels(lowered), tuning)


def legalized(mod: tvm.IRModule, target: tvm.target.Target, database=None, layout_rewrite: bool = False) -> tvm.IRModule:
    """`mod` dispatched, legalized to TIR and (with a database) given its tuned schedules: the build's kernels
    before GPU scheduling and lowering. Tuning extracts its tasks from `legalized(mod, target, layout_rewrite=...)`,
    so their workloads are these kernels exactly (the layout-free marks included)."""
    with target:
        passes = tvm.transform.Sequential(legalize_passes(target, False, layout_rewrite))
    with _build_context(mod, target):
        plain = passes(mod)
    return plain if database is None else _with_database(mod, plain, target, database)


def _with_database(mod: tvm.IRModule, plain: tvm.IRModule, target: tvm.target.Target, database) -> tvm.IRModule:
    """`plain` (legalized `mod`) with the database's schedules applied to the kernels it has records for."""
    with target:  # MetaScheduleApplyDatabase reads the current target when it is created
        apply = relax.transform.MetaScheduleApplyDatabase()
    with _build_context(mod, target, database):
        return apply(plain)


def kernel_sources(plain: tvm.IRModule, covered: list[str], source_of: SourceOf) -> dict[str, list[str]]:
    """Which database supplied each covered kernel: `source_of` its workload (the kernel as legalized, normalized
    as MetaScheduleApplyDatabase looks it up), kernels grouped by the answer."""
    normalize = tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")
    by_source: dict[str, list[str]] = {}
    for name in covered:
        by_source.setdefault(source_of(normalize(plain[name])), []).append(name)
    return by_source


def build_lowered(mod: tvm.IRModule, target: tvm.target.Target, database=None, layout_rewrite: bool = False,
                  source_of: SourceOf | None = None) -> Built:
    """Build a module whose graph-level passes already ran (the workbench and tvm_unoptimized recipes).

    `database` (a MetaSchedule database) supplies tuned schedules for the kernels it has records for; with
    `layout_rewrite` the tuned kernels may read their constant weights pre-packed (see
    `kernels.lowering.weight_layout_passes`). With `source_of` (a database made of several, as
    compile/schedule_sources.py has it), `Built.tuning['sources']` says which of them supplied each tuned kernel.
    """
    plain = legalized(mod, target, None, layout_rewrite)
    scheduled = plain if database is None else _with_database(mod, plain, target, database)
    lowered = _lowered(mod, scheduled, target, database, layout_rewrite)
    coverage = tuning_coverage(scheduled, lowered) if database is not None else None
    if coverage is not None and source_of is not None:
        coverage["sources"] = kernel_sources(plain, coverage["covered"], source_of)
    try:
        return _compiled(lowered, target, coverage)
    except Exception:  # noqa: BLE001 - TVM raises InternalError and others; compiling each kernel alone tells
        names = {gv.name_hint for gv in scheduled.functions}
        failing = (_failing_kernels(lowered, target) & names) if target.kind.name == "llvm" else set()
        if not failing:
            raise
    log.warning("%d kernels failed to lower with their schedule and are built with plain loops: %s",
                len(failing), ", ".join(sorted(failing)))
    for name in failing:  # a tuned schedule is replaced too: the kernel as legalized, before any schedule
        scheduled[name] = plain[name]
    if coverage is not None:  # a tuned kernel that fell back runs plain loops, not its record
        coverage = {**coverage, "covered": sorted(set(coverage["covered"]) - failing),
                    "fallback": sorted(set(coverage["fallback"]) | (failing & set(coverage["covered"])))}
        if "sources" in coverage:
            coverage["sources"] = {key: [name for name in names if name not in failing]
                                   for key, names in coverage["sources"].items()}
    built = _compiled(_lowered(mod, scheduled, target, database, layout_rewrite, frozenset(failing)), target, coverage)
    built.fell_back = sorted(failing)
    return built


def _lowered(mod: tvm.IRModule, scheduled: tvm.IRModule, target: tvm.target.Target, database,
             layout_rewrite: bool, plain: frozenset[str] = frozenset()) -> tvm.IRModule:
    """`scheduled` (legalized `mod`) through the weight-layout and tail passes, the kernels in `plain` left
    without a default schedule."""
    with target:
        lower = tvm.transform.Sequential((weight_layout_passes() if layout_rewrite else []) + tail_passes(target, plain))
    with _build_context(mod, target, database):
        return lower(scheduled)


def _failing_kernels(lowered: tvm.IRModule, target: tvm.target.Target) -> set[str]:
    """Names (as legalized) of the kernels of `lowered` that fail to compile on their own."""
    failing = set()
    for gv, func in lowered.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        try:
            tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target)
        except Exception:  # noqa: BLE001 - any failure to compile it alone
            failing.add(gv.name_hint.removesuffix("_prepacked"))
    return failing


def build_tvm_default(mod: tvm.IRModule, target: tvm.target.Target) -> Built:
    """Build with TVM's default pipeline for the target, as `tvm.compile` users get it."""
    with _build_context(mod, target):
        lowered = relax.get_default_pipeline(target)(mod)
    return _compiled(lowered, target)


BASELINE_BUILDS = {"tvm_default": build_tvm_default, "tvm_unoptimized": build_lowered}  # the TVM baselines' builds
