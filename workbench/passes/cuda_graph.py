"""CUDA graphs: replay one inference's kernel launches as one captured graph (cuda targets only)."""

from __future__ import annotations

import tvm

from workbench.errors import UserError
from workbench.passes.registry import register

CUDA_GRAPH_ATTR = "workbench.cuda_graph"  # module attr this pass sets; the build's lowering tail reads it


@register("cuda_graph", "fusion")
def cuda_graph(_params) -> tvm.transform.Pass:
    """Capture the kernel launches into a CUDA graph (TVM RewriteCUDAGraph after memory planning; cuda only)."""

    def mark(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        # RewriteCUDAGraph needs the memory-planned module, so it runs in the build's lowering tail;
        # this step asks for it there.
        target = tvm.target.Target.current(allow_none=True)
        if target is None or target.kind.name != "cuda":
            kind = target.kind.name if target is not None else "none"
            raise UserError(f"pass 'cuda_graph' needs a cuda target (target.kind is {kind}); remove it from the "
                            "pipeline or set target: {kind: cuda, arch: ...}")
        return mod.with_attr(CUDA_GRAPH_ATTR, True)

    return tvm.transform.module_pass(mark, opt_level=0, name="cuda_graph")
