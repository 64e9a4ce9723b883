"""Folding passes: evaluate at compile time what does not depend on the inputs."""

from __future__ import annotations

from collections import Counter

import numpy as np
import tvm
from tvm import relax

from workbench.passes.constant_eval import evaluate_constant_subgraphs
from workbench.passes.figures import report_analysis
from workbench.passes.registry import register

# Elementwise arithmetic on constants: FoldBatchnormToConv2D's scale = gamma / sqrt(var + eps), an index made
# non-negative (idx + n). numpy gives IEEE's bits for one float op, and two's complement for integer add, subtract
# and multiply; integer division (which TVM and numpy round differently) is left to FoldConstant.
_ARITHMETIC = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
               "relax.divide": np.divide, "relax.sqrt": np.sqrt,
               "relax.less": np.less, "relax.greater": np.greater, "relax.less_equal": np.less_equal,
               "relax.greater_equal": np.greater_equal, "relax.equal": np.equal,
               # LLVM's `fcmp one`, which TVM emits for float !=: false where either side is NaN (numpy's is true)
               "relax.not_equal": lambda a, b: np.less(a, b) | np.greater(a, b)}
_FLOAT_ONLY = {"relax.divide", "relax.sqrt"}
# TVM legalizes a 0-d constant operand to an immediate, and TIR's constant folding then simplifies by pattern
# (x * 0 -> 0, 0 / x -> 0, x + 0 -> x, x * 1 -> x) instead of IEEE arithmetic (NaN * 0 is 0, -0 + 0 is -0): those are
# left to FoldConstant, as is a division by a 0-d zero (TVM refuses it).
_PATTERN_FOLDED = (0.0, 1.0)


def _axes(attr) -> list[int] | None:
    return None if attr is None else [int(axis) for axis in attr]


# Ops that move or test values without computing new ones, exact in numpy for any dtype: an exporter's bias reshaped
# to [1, C, 1, 1], a weight transposed by convert_layout, the NaN test of a Clip bound, a static tensor's shape.
_LAYOUT_OPS = {
    "relax.reshape": lambda call, a, shape: a.reshape(shape),
    "relax.permute_dims": lambda call, a, shape: np.transpose(a, _axes(call.attrs.axes)),
    "relax.expand_dims": lambda call, a, shape: a.reshape(shape),
    "relax.squeeze": lambda call, a, shape: a.reshape(shape),
    "relax.isnan": lambda call, a, shape: np.isnan(a),
    "relax.isinf": lambda call, a, shape: np.isinf(a),
    "relax.shape_to_tensor": lambda call, a, shape: a,
}
_SELECTING = ("relax.where", "relax.take", "relax.concat")  # pick or join bits of their constant operands


def _take(data: np.ndarray, indices: np.ndarray, attrs) -> np.ndarray | None:
    """relax.take's gathered bits: TOPI's clip and wrap are numpy's; "fast" only where every index is in range;
    anything else (an empty axis, the "nan" mode) is left to FoldConstant."""
    axis = None if attrs.axis is None else int(attrs.axis)
    extent = data.size if axis is None else data.shape[axis]
    mode = str(attrs.mode)
    if extent == 0 or mode not in ("fast", "clip", "wrap"):
        return None
    if mode == "fast" and not np.all((indices >= 0) & (indices < extent)):
        return None
    return np.take(data, indices, axis=axis, mode="raise" if mode == "fast" else mode)


def _static_shape(ty: relax.Type) -> relax.ShapeExpr | None:
    if isinstance(ty, relax.TensorType) and ty.shape is not None:
        return relax.ShapeExpr(ty.shape.values)
    return None


@relax.expr_functor.mutator
class _NumpyFolder(relax.PyExprMutator):
    """Evaluate arithmetic, comparisons and layout ops on constants with numpy, in the call's dtype.

    FoldConstant legalizes and compiles each call it folds with LLVM, one compile per call (~0.1 s): a detector's
    52 bias reshapes, 48 NaN tests of Clip bounds and, after convert_layout, 52 weight transposes took 13 of its
    pipeline's 17.5 s, and an unrolled LSTM's 64 index tests 15 s. Each op here is exact in numpy (see
    `_ARITHMETIC`; the layout ops move bits), so the folded constants are the ones FoldConstant computes."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.folded: Counter[str] = Counter()  # op -> calls folded, for the pass's record

    def _bound(self, expr: relax.Expr) -> relax.Expr:
        """A variable's bound value (the folded constant where this pass folded it), else the expression."""
        return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

    def _constant(self, expr: relax.Expr) -> np.ndarray | None:
        expr = self._bound(expr)
        if isinstance(expr, tvm.ir.GenericConst):  # a tensor constant
            return expr.value.numpy()
        if isinstance(expr, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):  # a scalar such as batch_norm's epsilon
            return np.array(expr.value, dtype=str(expr.ty.dtype))
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.shape_of":
            expr = _static_shape(expr.args[0].ty)  # a static tensor's shape (an index exporters compute from it)
        if isinstance(expr, relax.ShapeExpr) and all(isinstance(d, tvm.tirx.IntImm) for d in expr.values):
            return np.array([int(d) for d in expr.values], dtype="int64")
        return None

    def _tuple(self, expr: relax.Expr) -> list[np.ndarray] | None:
        expr = self._bound(expr)
        if not isinstance(expr, relax.Tuple):
            return None
        fields = [self._constant(field) for field in expr.fields]
        return None if any(f is None for f in fields) else fields

    def _value(self, call: relax.Call, name: str, shape: list[int]) -> np.ndarray | None:
        """The call's value from its constant arguments, or None where it is not one numpy computes exactly."""
        if name in _LAYOUT_OPS:
            data = self._constant(call.args[0])
            return None if data is None else _LAYOUT_OPS[name](call, data, shape)
        if name == "relax.concat":
            fields = self._tuple(call.args[0])
            return None if fields is None else np.concatenate(fields, axis=int(call.attrs.axis))
        args = [self._constant(a) for a in call.args]
        if any(a is None for a in args):
            return None
        if name == "relax.where":  # selects bits (of two operands of one dtype: TOPI refuses others)
            return np.where(*args) if args[1].dtype == args[2].dtype else None
        if name == "relax.take":
            return _take(args[0], args[1], call.attrs)
        kinds = (np.floating,) if name in _FLOAT_ONLY else (np.floating, np.integer)
        if not all(any(np.issubdtype(a.dtype, kind) for kind in kinds) for a in args):
            return None
        if any(a.ndim == 0 and np.issubdtype(a.dtype, np.floating) and abs(float(a)) in _PATTERN_FOLDED
               for a in args):
            return None
        return _ARITHMETIC[name](*args)

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = super().visit_call_(op)
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
        info = op.ty  # the rebuilt call is not normalized yet; its args have the same types
        if name not in (*_ARITHMETIC, *_LAYOUT_OPS, *_SELECTING) or not isinstance(info, relax.TensorType):
            return call
        if info.shape is None or any(not isinstance(d, tvm.tirx.IntImm) for d in info.shape.values):
            return call
        shape = [int(d) for d in info.shape.values]
        value = self._value(call, name, shape)
        if value is None or list(np.shape(value)) != shape:
            return call
        self.folded[name.removeprefix("relax.")] += 1
        dtype = str(info.dtype)
        return relax.const(np.asarray(value, dtype=dtype), dtype)


@tvm.transform.module_pass(opt_level=0, name="FoldWithNumpy")
def _numpy_fold(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    folder = _NumpyFolder(mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gvar, folder.visit_expr(func))
    if folder.folded:
        report_analysis(folded_in_numpy=dict(folder.folded))
    return folder.builder_.get()


@register("fold_constant", "folding")
def fold_constant(_params) -> tvm.transform.Pass:
    """Evaluate every expression whose inputs are all constants, whatever its ops (numpy where it is exact, TVM's
    FoldConstant, then the rest)."""
    # CanonicalizeBindings reads a folded tuple's items (a constant Split's pieces) as the constants they are
    return tvm.transform.Sequential(
        [_numpy_fold, relax.transform.FoldConstant(), relax.transform.CanonicalizeBindings(),
         evaluate_constant_subgraphs],
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
