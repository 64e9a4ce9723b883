"""fast_math: replace float32 transcendental ops by TOPI's vectorizable polynomial approximations.

LLVM has no vector erf/exp/tanh, so TVM's exact lowering evaluates them one lane at a time: on a
transformer block's GELU the exact erf alone cost more than the matmul it is fused into, an order of magnitude
more than `topi.fast_erf` (tests/test_fast_math.py checks the approximation's error). ONNX Runtime's Gelu/Softmax kernels use such
approximations too. The rewritten calls are ordinary elementwise TIR, so `fuse` still fuses them into
the surrounding kernels; run this pass before `fuse` (which legalizes the exact ops).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import tvm
from pydantic import BaseModel, ConfigDict, Field
from tvm import relax, te, topi
from tvm.relax.expr_functor import PyExprMutator, mutator

from workbench.passes.figures import report_analysis
from workbench.passes.registry import register
from workbench.passes.rewrite import rewrite_functions

FastOp = Literal["erf", "exp", "tanh", "gelu", "softmax", "sigmoid", "power"]


def _fast_gelu(x: te.Tensor) -> te.Tensor:
    """GELU as ONNX/Relax define it, x * (1 + erf(x / sqrt 2)) / 2, with the fast erf."""
    return topi.multiply(x, topi.add(topi.multiply(topi.fast_erf(topi.multiply(x, 1 / math.sqrt(2))), 0.5), 0.5))


def _fast_sigmoid(x: te.Tensor) -> te.Tensor:
    """1 / (1 + exp(-x)) with the fast exp (YOLO's SiLU, x * sigmoid(x), in every conv block)."""
    return topi.divide(1.0, topi.add(topi.fast_exp(topi.negative(x)), 1.0))


def _fast_softmax(x: te.Tensor, axis: int) -> te.Tensor:
    """exp(x - max) / sum with the fast exp, the division as one reciprocal per row and a multiply per element."""
    axis = axis % len(x.shape)
    shifted = topi.fast_exp(topi.subtract(x, topi.max(x, axis=axis, keepdims=True)))
    return topi.multiply(shifted, topi.divide(1.0, topi.sum(shifted, axis=axis, keepdims=True)))


# Relax op -> (the option that enables it, its fast TE compute given the call's argument and attributes)
_FAST: dict[str, tuple[FastOp, Callable[[te.Tensor, object], te.Tensor]]] = {
    "relax.erf": ("erf", lambda x, _attrs: topi.fast_erf(x)),
    "relax.exp": ("exp", lambda x, _attrs: topi.fast_exp(x)),
    "relax.tanh": ("tanh", lambda x, _attrs: topi.fast_tanh(x)),
    "relax.nn.gelu": ("gelu", lambda x, _attrs: _fast_gelu(x)),
    "relax.nn.softmax": ("softmax", lambda x, attrs: _fast_softmax(x, int(attrs.axis))),
    "relax.sigmoid": ("sigmoid", lambda x, _attrs: _fast_sigmoid(x)),
}


# x ** e for the constant exponents models use (a layer norm's square, LRN's 0.75) as multiplies and square roots,
# which vectorize: LLVM calls libm's powf one lane at a time (AlexNet's LRN: 2.4 ns an element, OpenVINO 6x faster)
_POWERS: dict[float, Callable[[te.Tensor], te.Tensor]] = {
    2.0: lambda x: topi.multiply(x, x),
    3.0: lambda x: topi.multiply(topi.multiply(x, x), x),
    0.5: topi.sqrt,
    -0.5: topi.rsqrt,
    1.5: lambda x: topi.multiply(x, topi.sqrt(x)),
    0.75: lambda x: topi.multiply(topi.sqrt(x), topi.sqrt(topi.sqrt(x))),
    0.25: lambda x: topi.sqrt(topi.sqrt(x)),
    -1.0: lambda x: topi.divide(1.0, x),
}


def _constant_exponent(call: relax.Call) -> float | None:
    """The exponent of a `power` call where it is one constant number, else None."""
    exponent = call.args[1]
    if isinstance(exponent, tvm.ir.GenericConst) and exponent.value.numpy().size == 1:
        return float(exponent.value.numpy().reshape(()))
    return None


class FastMathParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ops: list[FastOp] = Field(
        default_factory=lambda: ["erf", "exp", "tanh", "gelu", "softmax", "sigmoid", "power"],
        description="which ops to approximate (float32 only; other dtypes keep the exact op)")


@mutator
class _FastMath(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, ops: set[str]):
        super().__init__(mod)
        self.ops = ops
        self.rewritten: dict[str, int] = {}

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = super().visit_call_(op)
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
        info = op.ty
        if not isinstance(info, relax.TensorType) or str(info.dtype) != "float32":
            return call
        if name == "relax.power" and "power" in self.ops and (power := _POWERS.get(_constant_exponent(call))):
            self.rewritten[name] = self.rewritten.get(name, 0) + 1
            return self.builder_.call_te(power, call.args[0], primfunc_name_hint="power")
        if name not in _FAST or _FAST[name][0] not in self.ops:
            return call
        compute = _FAST[name][1]
        self.rewritten[name] = self.rewritten.get(name, 0) + 1
        return self.builder_.call_te(lambda x: compute(x, call.attrs), call.args[0],
                                     primfunc_name_hint="fast_" + name.rsplit(".", 1)[-1])


@register("fast_math", "precision", FastMathParams)
def fast_math(params: FastMathParams) -> tvm.transform.Pass:
    """Approximate float32 erf/exp/tanh/gelu/softmax/sigmoid with TOPI's vectorizable fast_* kernels, and powers by a
    constant with multiplies and square roots (before fuse)."""

    @tvm.transform.module_pass(opt_level=0, name="FastMath")
    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        rewriter = _FastMath(mod, set(params.ops))
        mod = rewrite_functions(rewriter, mod)
        report_analysis(fast_math_rewritten=dict(sorted(rewriter.rewritten.items())))
        return mod

    return run
