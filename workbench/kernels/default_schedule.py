"""The schedule each CPU kernel no database covered gets: packed convs their fixed register-blocked schedule
(packed_schedule.py), matmul-like kernels (dense, matmul, batch_matmul and their epilogues) a register-blocked
tile (gemm_schedule.py), row reductions and what follows them (softmax, layer norm) one parallel row loop with
lane-wise partial sums (row_schedule.py), elementwise ops and one-input reductions inlined, parallel and vectorized
(loop_schedule.py); other contractions (relax's convs) keep plain loops. Tuning measures the same schedule as
each task's first record (compile/design_spaces.py), so a tuned build starts from what an untuned one runs."""

from __future__ import annotations

import tvm
from tvm.s_tir import Schedule

from workbench.kernels.gemm_schedule import gemm_schedule
from workbench.kernels.loop_schedule import log_plain_loops, loop_schedule
from workbench.kernels.packed_conv import runs_on
from workbench.kernels.packed_schedule import packed_kind, packed_schedule
from workbench.kernels.row_schedule import row_schedule


def default_schedule(func, target: tvm.target.Target) -> Schedule | None:
    """The default schedule of a CPU kernel, or None (already scheduled, a contraction other than a matmul, a
    packed kernel whose dot product is not the CPU's (`runs_on`: a VNNI kernel on an AVX2 CPU, a bf16 kernel
    without AVX512_BF16), or a schedule that does not fit)."""
    if not isinstance(func, tvm.tirx.PrimFunc) or (func.attrs and func.attrs.get("tirx.is_scheduled")):
        return None
    kind = packed_kind(func)
    if kind is None:
        for schedule in (gemm_schedule, row_schedule, loop_schedule):
            sch = schedule(func, target)
            if sch is not None:
                return sch
        return None
    if not runs_on(kind, target):  # its dot product is not this CPU's
        return None
    return packed_schedule(func, kind, target)


def _scheduled_or_none(func, target: tvm.target.Target) -> Schedule | None:
    """`default_schedule`, or None (plain loops, logged) where scheduling the kernel fails in any other way than
    the schedules expect: a build never ends on a default schedule."""
    try:
        return default_schedule(func, target)
    except Exception as exc:  # noqa: BLE001 - TVM raises many types
        log_plain_loops(func, exc)
        return None


def default_cpu_schedule(target: tvm.target.Target, plain: frozenset[str] = frozenset()) -> tvm.transform.Pass:
    """Give every CPU kernel no database covered its default schedule, but the kernels named in `plain`."""

    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = mod.clone()  # the caller's module (the build's legalized one, read for coverage after) stays as it was
        for gv, func in list(mod.functions.items()):
            sch = None if gv.name_hint in plain else _scheduled_or_none(func, target)
            if sch is not None:
                mod[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
        return mod

    return tvm.transform.module_pass(run, opt_level=0, name="default_cpu_schedule")
