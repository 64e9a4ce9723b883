"""What passes report about a module while a pipeline runs: op and kernel counts, and figures for the running
step's `analysis` (`report_analysis`). Below every pass module, so passes and the pipeline that runs them share
them without importing each other."""

from __future__ import annotations

import contextvars
from collections import Counter

import tvm
from tvm import relax

# the `analysis` dict of the pass that is running (None outside run_pipeline)
ANALYSIS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("workbench_analysis", default=None)


def report_analysis(**figures) -> None:
    """Record figures (JSON-able values) for the pipeline step that is running; a no-op outside a pipeline."""
    sink = ANALYSIS.get()
    if sink is not None:
        sink.update(figures)


def count_ops(mod: tvm.IRModule) -> dict[str, int]:
    """Count Relax operator calls by op name over every Relax function (call_tir counts as one op)."""
    counts: Counter[str] = Counter()

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            counts[expr.op.name] += 1

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return dict(sorted(counts.items()))


def count_kernels(mod: tvm.IRModule) -> int:
    """Number of TIR functions in a module: after lowering, the kernels one inference launches at most."""
    return sum(isinstance(func, tvm.tirx.PrimFunc) for func in mod.functions.values())
