"""Evaluate on the CPU every constant subgraph TVM's FoldConstant leaves computed.

FoldConstant folds a call only where its op legalizes to one `call_tir` with one tensor output and constant
tensor arguments, inside a dataflow block. A weight an exporter builds from initializers through anything else —
`arange` (ONNX Range with constant bounds, larger than canonicalize folds), `cumsum`, `sort`/`topk`, a split whose
pieces are read through a tuple, a binding outside a dataflow block — stays a kernel that recomputes the weight on
every inference, and a conv reading it is not packed ("weight is not a constant"). Here those bindings are
gathered into one parameterless Relax function, compiled for the host and run once; their values replace them.
What could not be evaluated stays computed and the pass's record says why (`constants_unfolded`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from workbench.errors import one_line
from workbench.passes.figures import report_analysis

# Leaves an op may read and still be evaluated now: constants and compile-time scalars and strings (and shapes
# whose dims are numbers, `_leaf`).
_IMMEDIATE = (tvm.ir.Constant, tvm.ir.StringImm)  # tvm.ir.Constant: tensors and IntImm/FloatImm
_CALLS_NOT_EVALUATED = frozenset({"relax.call_packed", "relax.call_dps_packed", "relax.call_pure_packed",
                                  "relax.call_builtin_with_ctx", "relax.call_inplace_packed"})


@dataclass(frozen=True)
class _Root:
    """A constant-valued binding a computed binding (or the function's result) reads: what gets evaluated."""

    var: relax.Var
    ops: tuple[str, ...]  # the ops of the subgraph that computes it, for the record


def _is_static(ty: relax.Type) -> bool:
    if isinstance(ty, relax.TensorType):
        return ty.shape is not None and all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values)
    if isinstance(ty, relax.TupleType):
        return all(isinstance(f, relax.TensorType) and _is_static(f) for f in ty.fields)
    return False


def _pure_op(op: tvm.ir.Op) -> bool:
    return op.name not in _CALLS_NOT_EVALUATED and bool(op.get_attr("FPurity"))


class _ConstantBindings:
    """Which bindings of a function depend on constants only, and which of those the rest of it reads."""

    def __init__(self, func: relax.Function, mod: tvm.IRModule) -> None:
        self.mod = mod
        self.prim_funcs = {gvar for gvar, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        self.constant: dict[relax.Var, relax.Expr] = {}  # var -> its value, in binding order
        self.read_outside: dict[relax.Var, None] = {}  # an ordered set
        for block in func.body.blocks:
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding) and self._computable(binding):
                    self.constant[binding.var] = binding.value
                else:
                    self._note_reads(binding.value)
        self._note_reads(func.body.body)

    def _leaf(self, expr: relax.Expr) -> bool:
        if isinstance(expr, relax.Tuple):
            return all(self._leaf(field) for field in expr.fields)
        if isinstance(expr, relax.ShapeExpr):  # a shape is known only where every dim is a number
            return all(isinstance(dim, tvm.tirx.IntImm) for dim in expr.values)
        return isinstance(expr, _IMMEDIATE) or (isinstance(expr, relax.Var) and expr in self.constant)

    def _computable(self, binding: relax.VarBinding) -> bool:
        value = binding.value
        if not _is_static(binding.var.ty):
            return False
        if isinstance(value, relax.Tuple):
            return self._leaf(value)
        if isinstance(value, relax.TupleGetItem):
            return isinstance(value.tuple_value, relax.Var) and value.tuple_value in self.constant
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op) or not _pure_op(value.op):
            return False
        if value.op.name == "relax.call_tir":
            return value.args[0] in self.prim_funcs and all(self._leaf(arg) for arg in value.args[1:])
        return all(self._leaf(arg) for arg in value.args)

    def _note_reads(self, expr: relax.Expr) -> None:
        for var in relax.analysis.free_vars(expr):
            if var in self.constant:
                self.read_outside[var] = None

    def roots(self) -> list[_Root]:
        """Constant bindings read by computed ones, where something is left to compute (not a constant or a tuple of
        constants, which FoldConstant and CanonicalizeBindings already substitute)."""
        found = []
        for var in self.read_outside:
            value = self.constant[var]
            if isinstance(value, tvm.ir.GenericConst) or (
                    isinstance(value, relax.Tuple) and all(isinstance(f, tvm.ir.GenericConst) for f in value.fields)):
                continue
            found.append(_Root(var, tuple(sorted(self._ops_under(var)))))
        return found

    def _needed(self, variables: list[relax.Var]) -> set[relax.Var]:
        """`variables` and every constant binding they are computed from."""
        needed: set[relax.Var] = set()
        pending = list(variables)
        while pending:
            var = pending.pop()
            if var in needed:
                continue
            needed.add(var)
            pending.extend(v for v in relax.analysis.free_vars(self.constant[var]) if v in self.constant)
        return needed

    def _ops_under(self, var: relax.Var) -> set[str]:
        return {self.constant[v].op.name.removeprefix("relax.") for v in self._needed([var])
                if isinstance(self.constant[v], relax.Call)}

    def evaluator(self, roots: list[_Root]) -> tvm.IRModule:
        """A module whose parameterless `main` computes the roots (a tuple of them, tuples flattened) from the constant
        bindings they need, with the PrimFuncs those call (only those: another may not build for the host)."""
        needed = self._needed([root.var for root in roots])
        bindings = [relax.VarBinding(var, value) for var, value in self.constant.items() if var in needed]
        outputs = []
        for root in roots:
            if isinstance(root.var.ty, relax.TupleType):
                outputs.extend(relax.TupleGetItem(root.var, i) for i in range(len(root.var.ty.fields)))
            else:
                outputs.append(root.var)
        result = relax.Var("evaluated", relax.TupleType([output.ty for output in outputs]))
        body = relax.SeqExpr([relax.DataflowBlock([*bindings, relax.VarBinding(result, relax.Tuple(outputs))])], result)
        called = {b.value.args[0] for b in bindings
                  if isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"}
        evaluator = tvm.IRModule({gvar: self.mod[gvar] for gvar in called})
        evaluator["main"] = relax.Function([], body, result.ty, is_pure=True)
        return evaluator


def _evaluate(evaluator: tvm.IRModule) -> list[np.ndarray]:
    """Compile the evaluator for the host CPU (whatever the pipeline's target) and run it once."""
    host = tvm.target.Target({"kind": "llvm"})
    with host:
        executable = tvm.compile(evaluator, target=host)
    return [value.numpy() for value in relax.VirtualMachine(executable, tvm.cpu())["main"]()]


def _evaluated(bindings: _ConstantBindings, roots: list[_Root]) -> tuple[list[_Root], list[np.ndarray], list[str]]:
    """The roots evaluated and their values (a tuple root's fields in a row), and why each of the others was not: all
    in one compile, or one at a time where that fails, so one op the host cannot build keeps only its own subgraph."""
    try:
        return roots, _evaluate(bindings.evaluator(roots)), []
    except Exception:  # noqa: BLE001 - TVM raises its own error types from legalization and codegen
        if len(roots) == 1:
            raise
    done, values, failed = [], [], []
    for root in roots:
        try:
            values.extend(_evaluate(bindings.evaluator([root])))
            done.append(root)
        except Exception as exc:  # noqa: BLE001 - as above
            failed.append(f"{root.var.name} ({', '.join(root.ops)}): {one_line(exc)}")
    return done, values, failed


def _rebound(func: relax.Function, values: dict[relax.Var, relax.Expr]) -> relax.Function:
    """`func` with each evaluated binding bound to its value; FoldConstant then substitutes it into its readers and
    drops the subgraph that computed it (its RemoveAllUnused)."""
    blocks = []
    for block in func.body.blocks:
        bindings = [relax.VarBinding(b.var, values[b.var]) if isinstance(b, relax.VarBinding) and b.var in values else b
                    for b in block.bindings]
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock)
                      else relax.BindingBlock(bindings))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs)


def _replacements(roots: list[_Root], values: list[np.ndarray]) -> dict[relax.Var, relax.Expr]:
    replaced, position = {}, 0
    for root in roots:
        if isinstance(root.var.ty, relax.TupleType):
            width = len(root.var.ty.fields)
            replaced[root.var] = relax.Tuple([relax.const(v) for v in values[position:position + width]])
            position += width
        else:
            replaced[root.var] = relax.const(values[position])
            position += 1
    return replaced


@tvm.transform.module_pass(opt_level=0, name="EvaluateConstantSubgraphs")
def evaluate_constant_subgraphs(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Replace each constant-only binding the rest of a function reads by its value (see the module docstring)."""
    evaluated: list[str] = []
    unfolded: list[str] = []
    updated = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        bindings = _ConstantBindings(func, mod)
        roots = bindings.roots()
        if not roots:
            continue
        try:
            done, values, failed = _evaluated(bindings, roots)
        except Exception as exc:  # noqa: BLE001 - TVM raises its own error types from legalization and codegen
            done, values, failed = [], [], [f"{roots[0].var.name} ({', '.join(roots[0].ops)}): {one_line(exc)}"]
        unfolded.extend(failed)
        evaluated.extend(f"{root.var.name} ({', '.join(root.ops)})" for root in done)
        if done:
            updated[gvar] = _rebound(func, _replacements(done, values))
    if evaluated or unfolded:
        report_analysis(constants_evaluated=evaluated, constants_unfolded=unfolded)
    if not updated:
        return mod
    for gvar, func in updated.items():
        mod[gvar] = func
    return relax.transform.FoldConstant()(mod)
