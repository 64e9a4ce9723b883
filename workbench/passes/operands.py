"""Constant operands of elementwise ops in the shape ConvertLayout can follow.

ConvertLayout takes a binary op's layout from its first operand and transposes a constant only when it has the
other operand's rank. Paddle exports (rapidocr det's LearnableAffineBlocks) write `Mul(scale, x)` with a
scale of shape (1,): the constant comes first and has rank 1, so each such op stays NCHW inside a transpose pair
(det in NHWC kept 69 layout ops, 6 once its constants come second at full rank). Putting the constant second
(for commutative ops) and giving it the other operand's rank (leading 1s: numpy broadcasting, so the same
values) lets the layout pass through; `fold_constant` then folds the constants' transposes.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from workbench.passes.rewrite import rewrite_functions

COMMUTATIVE = ("relax.add", "relax.multiply", "relax.maximum", "relax.minimum")
BINARY = (*COMMUTATIVE, "relax.subtract", "relax.divide", "relax.power")


def _full_rank(operand: relax.Expr, rank: int) -> relax.Expr:
    """`operand` with leading 1s up to `rank` when it is a constant of a lower, non-zero rank."""
    if not isinstance(operand, tvm.ir.expr.Constant) or not 0 < len(operand.ty.shape) < rank:
        return operand
    value = operand.value.numpy()
    return relax.const(value.reshape((1,) * (rank - value.ndim) + value.shape), str(value.dtype))


@mutator
class _ConstantsLast(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, ranks: set[int]):
        super().__init__(mod)
        self.ranks = ranks
        self.binary = {tvm.ir.Op.get(name) for name in BINARY}
        self.commutative = {tvm.ir.Op.get(name) for name in COMMUTATIVE}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if call.op not in self.binary or not all(isinstance(arg.ty, relax.TensorType) for arg in call.args):
            return call
        rank = max(arg.ty.ndim for arg in call.args)
        if rank not in self.ranks:
            return call
        first, second = (_full_rank(arg, rank) for arg in call.args)
        constant = tvm.ir.expr.Constant
        if call.op in self.commutative and isinstance(first, constant) and not isinstance(second, constant):
            first, second = second, first
        if first.same_as(call.args[0]) and second.same_as(call.args[1]):
            return call
        return relax.Call(call.op, [first, second], call.attrs)


def constants_last(mod: tvm.IRModule, ranks: set[int]) -> tvm.IRModule:
    """`mod` with the constant operand of each binary elementwise op on tensors of one of `ranks` (those of the
    layouts being converted; other ops keep their kernels, and tuned records) at full rank, and second where the
    op commutes."""
    return rewrite_functions(_ConstantsLast(mod, ranks), mod)
