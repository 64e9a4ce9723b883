"""The loops custom rewrites need: one PyExprMutator over each Relax function of a module, the rewrite of every
call of one op (unless a check says why not), and the module pass made of that rewrite."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from workbench.passes.figures import report_analysis


def rewrite_functions(mutator: PyExprMutator, mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with every Relax function visited by `mutator` (TIR functions kept as they are)."""
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


WhyNot = Callable[[relax.Call], "str | None"]  # why a call is kept as it is (None: rewrite it)
Rewrite = Callable[[relax.BlockBuilder, relax.Call], relax.Expr]


@mutator
class _CallRewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, op_name: str, why_not: WhyNot, rewrite: Rewrite):
        super().__init__(mod)
        self.op = tvm.ir.Op.get(op_name)
        self.why_not, self.rewrite = why_not, rewrite
        self.rewritten = 0
        self.kept: list[str] = []

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = super().visit_call_(op)
        if not call.op.same_as(self.op):
            return call
        reason = self.why_not(call)
        if reason is not None:
            self.kept.append(reason)
            return call
        self.rewritten += 1
        return self.rewrite(self.builder_, call)


def rewrite_calls(mod: tvm.IRModule, op_name: str, why_not: WhyNot, rewrite: Rewrite) -> tuple[tvm.IRModule, int, list[str]]:
    """`mod` with every call of `op_name` that `why_not` lets through replaced by `rewrite(builder, call)`;
    also the number rewritten and the reason for each call kept."""
    rewriter = _CallRewriter(mod, op_name, why_not, rewrite)
    return rewrite_functions(rewriter, mod), rewriter.rewritten, rewriter.kept


def op_rewrite_pass(name: str, op_name: str, why_not: WhyNot, rewrite: Rewrite, done: str,
                    kept: str) -> tvm.transform.Pass:
    """A module pass that rewrites every call of `op_name` (`rewrite_calls`), records how many as the analysis
    figure `done` and the kept calls' reasons as `kept`, and drops what the rewrite left unused."""

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        mod, rewritten, reasons = rewrite_calls(mod, op_name, why_not, rewrite)
        report_analysis(**{done: rewritten, kept: reasons})
        return relax.transform.DeadCodeElimination()(mod)

    return tvm.transform.module_pass(run, opt_level=0, name=name)
