"""Pattern fusion: named `relax.dpl` patterns grouped by FuseOpsByPattern, then lowered to one kernel each.

The patterns match the op graphs the ONNX importer produces (after `fold_constant,fold_batchnorm`
a Conv+BN is `conv2d -> add(const bias)`; the zoo's GELU is erf arithmetic). FuseOpsByPattern with
`annotate_codegen=False` makes private functions marked `Composite=<pattern>` and `Primitive`; no
BYOC codegen claims them on llvm, so by default the pass lowers them itself: LegalizeOps, then
FuseTIR turns each composite into one PrimFunc (tagged `workbench.pattern`). Like `fuse`, that
legalizes the whole module, so graph passes after it see TIR calls. With `lower=false` the
composites stay Relax functions (inspectable; a later `fuse` pass turns each into one kernel).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import tvm
from pydantic import BaseModel, ConfigDict, Field, field_validator
from tvm import relax
from tvm.relax.dpl import DFPattern, is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern

from workbench.errors import UserError
from workbench.passes.figures import report_analysis
from workbench.passes.registry import register

PATTERN_ATTR = "workbench.pattern"


def _add(a: DFPattern, b: DFPattern) -> DFPattern:
    """`a + b` in either operand order (exporters differ)."""
    return is_op("relax.add")(a, b) | is_op("relax.add")(b, a)


def _mul(a: DFPattern, b: DFPattern) -> DFPattern:
    return is_op("relax.multiply")(a, b) | is_op("relax.multiply")(b, a)


def _conv2d_bias_relu() -> DFPattern:
    """relu(conv2d(x, w) + const bias)"""
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    return is_op("relax.nn.relu")(_add(conv, is_const()))


def _conv2d_add_relu() -> DFPattern:
    """relu(conv2d(x, w) [+ const bias] + residual): the residual is a computed tensor, not a constant."""
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    body = _add(conv, is_const()) | conv
    return is_op("relax.nn.relu")(_add(body, ~is_const()))


def _gelu(x: DFPattern) -> DFPattern:
    """GELU of `x`: TVM's ops, or the erf arithmetic ONNX exports `x * (erf(x / sqrt2) + 1) * 0.5`."""
    erf = is_op("relax.erf")(is_op("relax.divide")(x, is_const()) | _mul(x, is_const()))
    arithmetic = _mul(_mul(x, _add(erf, is_const())), is_const()) | _mul(x, _mul(_add(erf, is_const()), is_const()))
    return is_op("relax.nn.gelu")(x) | is_op("relax.nn.gelu_tanh")(x) | arithmetic


def _matmul_bias() -> DFPattern:
    """matmul(x, w) + const bias"""
    return _add(is_op("relax.matmul")(wildcard(), wildcard()), is_const())


def _matmul_bias_gelu() -> DFPattern:
    """gelu(matmul(x, w) + const bias), GELU as TVM op or erf arithmetic"""
    return _gelu(_matmul_bias())


def _layernorm() -> DFPattern:
    """layer_norm as one op, or decomposed: (x - mean) / sqrt(var + eps) * gamma + beta"""
    x = wildcard()
    centered = is_op("relax.subtract")(x, is_op("relax.mean")(x))
    variance = is_op("relax.mean")(is_op("relax.power")(centered, is_const()) | _mul(centered, centered))
    normed = is_op("relax.divide")(centered, is_op("relax.sqrt")(_add(variance, is_const())))
    decomposed = _add(_mul(normed, is_const()), is_const())
    return is_op("relax.nn.layer_norm")(wildcard(), wildcard(), wildcard()) | decomposed


# name -> pattern builder, in priority order: longer patterns first, so they win over their prefixes.
PATTERNS: dict[str, Callable[[], DFPattern]] = {
    "conv2d_add_relu": _conv2d_add_relu,
    "conv2d_bias_relu": _conv2d_bias_relu,
    "matmul_bias_gelu": _matmul_bias_gelu,
    "matmul_bias": _matmul_bias,
    "layernorm": _layernorm,
}


class FusePatternsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    patterns: list[str] = Field(default=list(PATTERNS),
                                description=f"patterns to fuse, from: {', '.join(PATTERNS)} (default: all)")
    lower: bool = Field(default=True, description="lower each composite to one kernel now (legalize + FuseTIR)")

    @field_validator("patterns", mode="before")
    @classmethod
    def _one_name_is_a_list(cls, value):
        return [value] if isinstance(value, str) else value

    @field_validator("patterns")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in PATTERNS]
        if unknown:
            raise ValueError(f"unknown pattern(s) {', '.join(map(repr, unknown))}; known patterns: {', '.join(PATTERNS)}")
        if not names:
            raise ValueError(f"no pattern selected; known patterns: {', '.join(PATTERNS)}")
        return names


def _composite_names(mod: tvm.IRModule) -> dict[str, str]:
    """Function name -> pattern name, for the Relax functions marked `Composite`."""
    return {gv.name_hint: str(f.attrs["Composite"]) for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and f.attrs and "Composite" in f.attrs}


def composites(mod: tvm.IRModule) -> dict[str, int]:
    """Pattern name -> number of matches: calls to its `Composite` functions (identical matches share one)."""
    names, calls = _composite_names(mod), Counter()

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.GlobalVar) and expr.op.name_hint in names:
            calls[names[expr.op.name_hint]] += 1

    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not (func.attrs and "Composite" in func.attrs):
            relax.analysis.post_order_visit(func.body, visit)
    return dict(sorted(calls.items()))


def pattern_kernels(mod: tvm.IRModule) -> dict[str, int]:
    """Pattern name -> number of PrimFuncs this pass lowered from its composites."""
    return dict(sorted(Counter(str(f.attrs[PATTERN_ATTR]) for f in mod.functions.values()
                               if isinstance(f, tvm.tirx.PrimFunc) and f.attrs and PATTERN_ATTR in f.attrs).items()))


def fusion_patterns(names: list[str]) -> list[FusionPattern]:
    """FusionPatterns for `names`, in the registry's priority order whatever order they were given in."""
    unknown = [n for n in names if n not in PATTERNS]
    if unknown:
        raise UserError(f"unknown pattern(s) {', '.join(map(repr, unknown))}; known patterns: {', '.join(PATTERNS)}")
    return [FusionPattern(name, build()) for name, build in PATTERNS.items() if name in names]


def _lower_composites(mod: tvm.IRModule) -> tvm.IRModule:
    """Legalize, then FuseTIR: each Primitive composite becomes one PrimFunc tagged with its pattern."""
    names = _composite_names(mod)
    mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                    relax.transform.FuseTIR()])(mod)
    # a new module rather than `mod[gv] = ...`, whose copy-on-write result Python drops when `mod` is shared
    functions = {gv: func.with_attr(PATTERN_ATTR, names[gv.name_hint])
                 if isinstance(func, tvm.tirx.PrimFunc) and gv.name_hint in names else func
                 for gv, func in mod.functions.items()}
    tagged = tvm.IRModule(functions, global_infos=dict(mod.global_infos))
    return tagged.with_attrs(mod.attrs) if mod.attrs else tagged


@register("fuse_patterns", "fusion", FusePatternsParams)
def fuse_patterns(params: FusePatternsParams) -> tvm.transform.Pass:
    """Pattern fusion (conv2d+bias+relu, residual add, matmul+bias+GELU, layernorm): one kernel per distinct match."""
    group = relax.transform.FuseOpsByPattern(fusion_patterns(params.patterns), bind_constants=False,
                                             annotate_codegen=False)

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        mod = group(mod)
        report_analysis(composites=composites(mod),
                        composite_functions=dict(sorted(Counter(_composite_names(mod).values()).items())))
        if params.lower:
            mod = _lower_composites(mod)
        return mod

    return tvm.transform.module_pass(run, opt_level=0, name="fuse_patterns")
