"""Folding passes: evaluate at compile time what does not depend on the inputs."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from workbench.passes.constant_eval import evaluate_constant_subgraphs
from workbench.passes.registry import register

# Elementwise ops FoldBatchnormToConv2D leaves on constants (scale = gamma / sqrt(var + eps), ...).
_NUMPY_OPS = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
              "relax.divide": np.divide, "relax.sqrt": np.sqrt}


@relax.expr_functor.mutator
class _NumpyFolder(relax.PyExprMutator):
    """Evaluate elementwise arithmetic and reshapes on constants with numpy, in the call's dtype.

    FoldConstant would legalize and compile each of these tiny calls with LLVM (one compile per call, dozens
    for a model's batch norms); IEEE float32 add/subtract/multiply/divide/sqrt give the same bits
    in numpy, so the folded weights are the ones FoldConstant computes."""

    def _constant(self, expr: relax.Expr) -> np.ndarray | None:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        if isinstance(expr, tvm.ir.GenericConst):  # a tensor constant
            return expr.value.numpy()
        if isinstance(expr, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):  # a scalar such as batch_norm's epsilon
            return np.array(expr.value, dtype=str(expr.ty.dtype))
        return None

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = super().visit_call_(op)
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
        info = op.ty  # the rebuilt call is not normalized yet; its args have the same types
        if name not in (*_NUMPY_OPS, "relax.reshape") or not isinstance(info, relax.TensorType):
            return call
        if info.shape is None or any(not isinstance(d, tvm.tirx.IntImm) for d in info.shape.values):
            return call
        args = [self._constant(a) for a in (call.args[:1] if name == "relax.reshape" else call.args)]
        if any(a is None for a in args):
            return call
        if name == "relax.reshape":
            value = args[0].reshape([int(d) for d in info.shape.values])
        else:
            value = _NUMPY_OPS[name](*args)
        dtype = str(info.dtype)
        return relax.const(np.asarray(value, dtype=dtype), dtype)


@tvm.transform.module_pass(opt_level=0, name="FoldArithmeticWithNumpy")
def _numpy_fold(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    folder = _NumpyFolder(mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gvar, folder.visit_expr(func))
    return folder.builder_.get()


@register("fold_constant", "folding")
def fold_constant(_params) -> tvm.transform.Pass:
    """Evaluate every expression whose inputs are all constants, whatever its ops (TVM's FoldConstant, then the rest)."""
    # CanonicalizeBindings reads a folded tuple's items (a constant Split's pieces) as the constants they are
    return tvm.transform.Sequential(
        [relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(), evaluate_constant_subgraphs],
        name="fold_constant",
    )


@register("fold_batchnorm", "folding")
def fold_batchnorm(_params) -> tvm.transform.Pass:
    """Fold batch_norm into the preceding conv2d's weights and bias (FoldBatchnormToConv2D, then FoldConstant)."""
    return tvm.transform.Sequential(
        [relax.transform.FoldBatchnormToConv2D(), _numpy_fold, relax.transform.FoldConstant()],
        name="fold_batchnorm",
    )


@register("decompose_for_inference", "folding")
def decompose_for_inference(_params) -> tvm.transform.Pass:
    """Rewrite training-style ops (batch_norm, layer_norm...) into inference arithmetic."""
    return relax.transform.DecomposeOpsForInference()
