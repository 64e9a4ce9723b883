"""Analysis passes: read-only, runnable anywhere in a pipeline; they return the module unchanged.

Each writes its figures with `report_analysis`, so they land in the step's `analysis` in result.json.
Kernel count and planned memory come from a lowered copy of the module, lowered exactly as
`workbench.compile.build.build_lowered` lowers it (kernels/lowering.py's passes, no compilation): kernels are the PrimFuncs
of that copy, planned bytes the sum of the `alloc_storage` sizes StaticPlanBlockMemory leaves (the
intermediate tensors after buffer reuse; the outputs, allocated per call, are counted apart as
`unplanned_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax

from workbench.kernels.lowering import lowering_passes
from workbench.passes.figures import count_kernels, count_ops, report_analysis
from workbench.passes.registry import register

_PLANNER = "StaticPlanBlockMemory"


def _target(target: tvm.target.Target | None) -> tvm.target.Target:
    return target or tvm.target.Target.current(allow_none=True) or tvm.target.Target({"kind": "llvm"})


def lower_copy(mod: tvm.IRModule, target: tvm.target.Target | None = None) -> tuple[tvm.IRModule, tvm.IRModule]:
    """(module right after memory planning, fully lowered module), lowered as build_lowered does."""
    target = _target(target)
    passes = lowering_passes(target)
    split = next(i for i, p in enumerate(passes) if p.info.name == _PLANNER) + 1
    with target, tvm.transform.PassContext(opt_level=3):  # a fresh context: no pipeline instruments
        planned = tvm.transform.Sequential(passes[:split])(mod)
        lowered = tvm.transform.Sequential(passes[split:])(planned)
    return planned, lowered


def _static_int(value) -> int | None:
    return int(value.value) if isinstance(value, tvm.tirx.IntImm) else None


def planned_bytes(planned: tvm.IRModule) -> dict[str, int]:
    """Bytes of planned storage (`memory.alloc_storage`) and of tensors left unplanned (`builtin.alloc_tensor`)."""
    figures = {"planned_bytes": 0, "storages": 0, "unplanned_bytes": 0}
    storage, unplanned = tvm.ir.Op.get("relax.memory.alloc_storage"), tvm.ir.Op.get("relax.builtin.alloc_tensor")

    def visit(expr: relax.Expr) -> None:
        if not isinstance(expr, relax.Call) or expr.op not in (storage, unplanned):
            return
        if expr.op.same_as(storage):
            size = _static_int(expr.args[0].values[0]) if isinstance(expr.args[0], relax.ShapeExpr) else None
            figures["planned_bytes"] += size or 0
            figures["storages"] += 1
        else:
            shape = expr.args[0]
            dims = [_static_int(v) for v in shape.values] if isinstance(shape, relax.ShapeExpr) else [None]
            if None not in dims:
                elements = 1
                for d in dims:
                    elements *= d
                figures["unplanned_bytes"] += elements * tvm.runtime.DataType(str(expr.args[1].value)).bits // 8

    for func in planned.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return figures


def module_stats(mod: tvm.IRModule, target: tvm.target.Target | None = None) -> dict:
    """Kernel count and planned bytes of a lowered copy of `mod`; an error is recorded, never raised."""
    try:
        planned, lowered = lower_copy(mod, target)
        return {"kernels": count_kernels(lowered), "planned_bytes": planned_bytes(planned)["planned_bytes"]}
    except Exception as exc:  # noqa: BLE001 - a module mid-pipeline may not lower yet; say so, keep going
        return {"stats_error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"}


def _static_type(ty) -> bool:
    """Whether a Relax type has every shape known at compile time (tensors, shapes, tuples)."""
    if isinstance(ty, relax.TensorType):
        return ty.shape is not None and all(_static_int(v) is not None for v in ty.shape.values)
    if isinstance(ty, relax.ShapeType):
        return ty.values is not None and all(_static_int(v) is not None for v in ty.values)
    if isinstance(ty, tvm.ir.TupleType):
        return all(_static_type(f) for f in ty.fields)
    return True  # objects, functions, prim values: no tensor shape to know


def shape_report(mod: tvm.IRModule, examples: int = 5) -> dict:
    """Bindings and parameters of every Relax function, and those whose shapes are not all static."""
    total, dynamic = 0, []
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        variables = list(func.params)

        def visit(expr: relax.Expr) -> None:
            if isinstance(expr, relax.SeqExpr):
                variables.extend(b.var for block in expr.blocks for b in block.bindings)

        relax.analysis.post_order_visit(func.body, visit)
        for var in variables:
            total += 1
            if not _static_type(var.ty):
                dynamic.append(f"{gv.name_hint}.{var.name}: {var.ty}")
    return {"bindings": total, "dynamic": len(dynamic), "dynamic_examples": dynamic[:examples]}


def _analysis_pass(name: str, figures: Callable[[tvm.IRModule], dict]) -> tvm.transform.Pass:
    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        report_analysis(**figures(mod))
        return mod

    return tvm.transform.module_pass(run, opt_level=0, name=name)


@register("op_histogram", "analysis")
def op_histogram(_params) -> tvm.transform.Pass:
    """Record how many calls of each Relax operator the module has (read-only)."""
    return _analysis_pass("op_histogram", lambda mod: {"ops": count_ops(mod)})


@register("static_shapes", "analysis")
def static_shapes(_params) -> tvm.transform.Pass:
    """Record whether every tensor shape is known at compile time: bindings, and how many are dynamic (read-only)."""
    return _analysis_pass("static_shapes", shape_report)


@register("planned_memory", "analysis")
def planned_memory(_params) -> tvm.transform.Pass:
    """Record the bytes StaticPlanBlockMemory plans for intermediates on a lowered copy (read-only)."""
    return _analysis_pass("planned_memory", lambda mod: planned_bytes(lower_copy(mod)[0]))


@register("kernel_count", "analysis")
def kernel_count(_params) -> tvm.transform.Pass:
    """Record the number of kernels (PrimFuncs) a lowered copy of the module has (read-only)."""
    return _analysis_pass("kernel_count", lambda mod: {"kernels": count_kernels(lower_copy(mod)[1])})
