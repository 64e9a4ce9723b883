"""The pass lists that take a pipeline's output to a module `tvm.compile` takes: library dispatch and legalization,
a tuned database's schedules, each remaining kernel's default schedule (GPU kernels dlight's rules, CPU kernels
default_schedule.py's), and TVM's backend tail for the target kind (cpu_generic for llvm, cuda for cuda).

They are here, below the passes, because two rooms lower with exactly these lists: compile/build.py, which
builds, and the analysis passes, which count kernels and planned bytes on a lowered copy after every pass.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
from tvm.relax.backend.cuda import pipeline as cuda_backend

from workbench.kernels.default_schedule import default_cpu_schedule  # also registers the VNNI dot product

# TIR codegen options of every build and every tuning candidate: a loop with constant bounds is split where a
# condition on it changes (a pad's border), so the interior runs without the predicate; the small convnets'
# pads and depthwise borders gain a few percent (`workbench bench corpus`)
COMPILE_CONFIG = {"s_tir.LoopPartition": {"partition_const_loop": True}}


def _backend(target: tvm.target.Target):
    return cuda_backend if target.kind.name == "cuda" else cpu_generic


def schedule_passes(target: tvm.target.Target, plain: frozenset[str] = frozenset()) -> list[tvm.transform.Pass]:
    """Kernels the database did not schedule: GPU kernels need a thread binding (dlight's default rules, the ones
    TVM's cuda pipeline uses); on CPUs each kernel its default schedule (default_schedule.py: packed convs
    and matmuls register-blocked, elementwise ops and reductions parallel and vectorized, other contractions plain
    loops), but those named in `plain`."""
    if target.kind.name != "cuda":
        return [default_cpu_schedule(target, plain)]
    from tvm.s_tir import dlight as dl

    return [dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                    dl.gpu.Fallback())]


def legalize_passes(target: tvm.target.Target, tuned: bool, layout_rewrite: bool = False) -> list[tvm.transform.Pass]:
    """Library dispatch, legalize what is left to TIR, (for weight layout rewriting) mark the constant weights
    each kernel reads as layout-free, and (with a database) apply its tuned schedules."""
    return (_backend(target).library_dispatch_passes(target) + [relax.transform.LegalizeOps()]
            + ([relax.transform.AttachAttrLayoutFreeBuffers()] if layout_rewrite else [])
            + ([relax.transform.MetaScheduleApplyDatabase()] if tuned else []))


def weight_layout_passes() -> list[tvm.transform.Pass]:
    """A tuned kernel that reads its weight in another layout starts with a rewrite block: split it into a
    function of its own and fold it on the constant weight, so the rewrite is computed once, at build time."""
    return [relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination()]


def tail_passes(target: tvm.target.Target, plain: frozenset[str] = frozenset()) -> list[tvm.transform.Pass]:
    """Schedule the kernels the database did not cover, then TVM's dataflow lowering and VM finalization.

    A scheduled kernel that only moves data as a reshape does (a transpose of unit axes, once inlined) becomes a
    VM reshape (no copy); DeadCodeElimination then drops its PrimFunc, so the build's kernels are the ones run."""
    backend = _backend(target)
    return (schedule_passes(target, plain) + [relax.transform.RewriteDataflowReshape(), relax.transform.DeadCodeElimination()]
            + backend.dataflow_lower_passes(target) + backend.finalize_passes(target))


def lowering_passes(target: tvm.target.Target, tuned: bool = False) -> list[tvm.transform.Pass]:
    """Every pass from a pipeline's output to a module `tvm.compile` can take (the analysis passes lower copies)."""
    return legalize_passes(target, tuned) + tail_passes(target)
