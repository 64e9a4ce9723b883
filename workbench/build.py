"""Lower a Relax module for a target, count its kernels, compile it, export the library.

Three recipes share the same lowering tail, so the only difference between builds is the
graph-level work before it:
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


def _lowering_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """Legalize remaining high-level ops, then TVM's dataflow lowering and VM finalization."""
    return (
        cpu_generic.library_dispatch_passes(target)
        + [relax.transform.LegalizeOps()]
        + cpu_generic.dataflow_lower_passes(target)
        + cpu_generic.finalize_passes(target)
    )


def _compile(mod: tvm.IRModule, target: tvm.target.Target, passes: tvm.transform.Pass) -> Built:
    with target, tvm.transform.PassContext(opt_level=3):
        lowered = passes(mod)
    executable = tvm.compile(lowered, target, relax_pipeline=None)
    return Built(executable, lowered, count_kernels(lowered))


def build_lowered(mod: tvm.IRModule, target: tvm.target.Target) -> Built:
    """Build a module whose graph-level passes already ran (the workbench and tvm_unoptimized recipes)."""
    return _compile(mod, target, tvm.transform.Sequential(_lowering_passes(target)))


def build_tvm_default(mod: tvm.IRModule, target: tvm.target.Target) -> Built:
    """Build with TVM's default pipeline for the target, as `tvm.compile` users get it."""
    return _compile(mod, target, relax.get_default_pipeline(target))
