"""relax.stack as concat of expand_dims, so TVM's ConvertLayout can pass it.

TVM 0.27's layout inference for relax.stack gives its output the inputs' layout, one axis short: the next op
with a layout rule over it stops ConvertLayout with an internal error ("Invalid SLayout: can't find S in source
layout ABC"), whatever the desired layouts. The ONNX frontend emits stack for a Max/Min of several inputs (Magika's
layer norm, a JAX export: max(0, variance)). concat and expand_dims compute the same and carry layouts correctly.
"""

from __future__ import annotations

import tvm
from tvm import relax

from workbench.passes.rewrite import rewrite_calls


def _as_concat(builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    axis = int(call.attrs.axis)
    fields = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else \
        [relax.TupleGetItem(call.args[0], i) for i in range(len(call.args[0].ty.fields))]
    expanded = [builder.emit(relax.op.expand_dims(field, axis)) for field in fields]
    return relax.op.concat(expanded, axis)


def stack_as_concat(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with every relax.stack written as concat of expand_dims."""
    return rewrite_calls(mod, "relax.stack", lambda _call: None, _as_concat)[0]
