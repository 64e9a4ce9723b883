"""The frontend's Clip as elementwise relax ops: relax.maximum/minimum.

TVM's ONNX frontend lowers Clip (ReLU6, HardSwish, HardSigmoid) to call_tir of TE maximum/minimum, or to
relax.clip. Graph passes cannot see through either: ToMixedPrecision fails on any call_tir ("Expected
TensorType" for the callee), and ConvertLayout knows no layout for call_tir or relax.clip, so it keeps them in
NCHW inside a transpose pair each (mobilenet_block in NHWC: 75% of its untuned time in those transposes). As
maximum/minimum with constant bounds they follow the layout and the precision like any elementwise op.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from workbench.passes.rewrite import rewrite_functions


def _elementwise_max_min(func: tvm.tirx.PrimFunc) -> str | None:
    """`relax.maximum`/`relax.minimum` when `func` is one loop nest storing a max/min (TE's topi.maximum/
    minimum), else None. Follows `.body`/`.block` down to the single store; any branching gives None."""
    node = func.body
    while not isinstance(node, tvm.tirx.BufferStore):
        node = getattr(node, "block", None) or getattr(node, "body", None)
        if node is None or isinstance(node, tvm.tirx.SeqStmt) or len(func.params) != 3:
            return None
    return {tvm.tirx.Max: "relax.maximum", tvm.tirx.Min: "relax.minimum"}.get(type(node.value))


def _bound(arg) -> float:
    """A relax.clip bound: a PrimValue holding an IntImm/FloatImm, or the number itself."""
    value = getattr(arg, "value", arg)
    return float(getattr(value, "value", value))


@mutator
class _ClipAsOps(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod_ = mod
        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.clip = tvm.ir.Op.get("relax.clip")

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if call.op.same_as(self.clip):
            x, low, high = call.args
            dtype = str(x.ty.dtype)
            lower = self.builder_.emit(relax.op.maximum(x, relax.const(_bound(low), dtype)))
            return relax.op.minimum(lower, relax.const(_bound(high), dtype))
        if not call.op.same_as(self.call_tir) or not isinstance(call.args[0], relax.GlobalVar):
            return call
        func = self.mod_[call.args[0]]
        op = _elementwise_max_min(func) if isinstance(func, tvm.tirx.PrimFunc) else None
        args = call.args[1]
        if op is None or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
            return call
        replaced = self.builder_.normalize(relax.Call(tvm.ir.Op.get(op), list(args.fields)))
        same_type = isinstance(replaced.ty, relax.TensorType) and \
            tvm_ffi.structural_hash(replaced.ty) == tvm_ffi.structural_hash(call.ty)
        return replaced if same_type else call


def clip_as_ops(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with every relax.clip, and every call_tir of a TE maximum/minimum, as relax.maximum/minimum."""
    return relax.transform.DeadCodeElimination()(rewrite_functions(_ClipAsOps(mod), mod))
