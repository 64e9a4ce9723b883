"""Lower a Relax module for a target, count its kernels, compile it, export the library.

Three recipes share the same lowering tail, so the only difference between builds is the
graph-level work before it. The tail is TVM's backend for the target kind (cpu_generic for llvm,
cuda for cuda); on cuda it also gives every kernel a GPU schedule (dlight's default rules) unless
one is scheduled already (`tirx.is_scheduled`, e.g. from a tuned database), and a module marked by
the `cuda_graph` pass gets TVM's CUDA-graph rewrite.
- `workbench`: the configured pipeline already ran; legalize what is left, then lower;
- `tvm_default`: TVM's own default pipeline for the target (legalize, fold, fuse, lower);
- `tvm_unoptimized`: legalize only, no folding or fusion, then lower.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
from tvm.relax.backend.cuda import pipeline as cuda_backend

from workbench.pipeline import count_kernels


@dataclass
class Built:
    executable: tvm.runtime.Executable
    lowered: tvm.IRModule
    kernels: int

    def export(self, path: Path) -> Path:
        """Write the compiled library (.so) so the build can be loaded again without recompiling."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part.so")
        self.executable.export_library(str(tmp))
        tmp.replace(path)
        return path


CUDA_GRAPH_ATTR = "workbench.cuda_graph"  # module attr set by the `cuda_graph` pass


def _schedule_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """GPU kernels need a thread binding: dlight's default rules (the ones TVM's cuda pipeline uses)
    schedule every PrimFunc not already scheduled; CPU kernels need none."""
    if target.kind.name != "cuda":
        return []
    from tvm.s_tir import dlight as dl

    return [dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                    dl.gpu.Fallback())]


def _lowering_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """Legalize remaining high-level ops, schedule GPU kernels, then TVM's dataflow lowering and VM finalization."""
    backend = cuda_backend if target.kind.name == "cuda" else cpu_generic
    return (
        backend.library_dispatch_passes(target)
        + [relax.transform.LegalizeOps()]
        + _schedule_passes(target)
        + backend.dataflow_lower_passes(target)
        + backend.finalize_passes(target)
    )


def _compile(mod: tvm.IRModule, target: tvm.target.Target, passes: tvm.transform.Pass) -> Built:
    cuda_graph = bool(mod.attrs and mod.attrs.get(CUDA_GRAPH_ATTR))
    with target, tvm.transform.PassContext(opt_level=3, config={"relax.backend.use_cuda_graph": cuda_graph}):
        lowered = passes(mod)
    executable = tvm.compile(lowered, target, relax_pipeline=None)
    return Built(executable, lowered, count_kernels(lowered))


def build_lowered(mod: tvm.IRModule, target: tvm.target.Target) -> Built:
    """Build a module whose graph-level passes already ran (the workbench and tvm_unoptimized recipes)."""
    return _compile(mod, target, tvm.transform.Sequential(_lowering_passes(target)))


def build_tvm_default(mod: tvm.IRModule, target: tvm.target.Target) -> Built:
    """Build with TVM's default pipeline for the target, as `tvm.compile` users get it."""
    return _compile(mod, target, relax.get_default_pipeline(target))
