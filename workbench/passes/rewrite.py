"""The loop every custom rewrite needs: one PyExprMutator over each Relax function of a module."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator


def rewrite_functions(mutator: PyExprMutator, mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with every Relax function visited by `mutator` (TIR functions kept as they are)."""
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
