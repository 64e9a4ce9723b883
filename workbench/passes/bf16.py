"""bf16: conv2d and matmul by constant weights in bf16 on CPUs with AVX512_BF16, fp32 everywhere else.

Each NHWC conv2d (and each matmul by a 2-D constant weight, as a 1x1 conv over its rows) whose weight is a constant
becomes the packed kernel's `BF16` kind (kernels/packed_conv.py): the weight rounded to bf16 and packed once, the
activation rounded to bf16 at the kernel's input (an `astype` that `fuse` puts into the producer's epilogue where
it can), pairs of bf16 products summed into fp32 lanes by `vdpbf16ps` (kernels/x86_bf16.py), and the sums, the
epilogue (bias, activation) and every other op (softmax, layer norm, pools, the graph's outputs) in fp32. That is
what OpenVINO runs by default on such CPUs, and what PyTorch's autocast does on them. The narrow layers at high
resolution stay fp32 too (`fp32_below_products`, `fp32_from_positions`): in a mobile backbone's early layers bf16's
rounding cost the PP-OCR detectors their accuracy (docs/precision.md measured where).

Run it after `convert_layout(conv2d=NHWC)` and `fold_constant` (it needs NHWC convs and constant weights) and before
`pack_conv2d`, which packs the convs it kept in fp32 (grouped and depthwise convs, NCHW convs, the narrow ones);
the named pipeline `default_bf16` is `default` so ordered. The convs and matmuls it kept, and why, are in its analysis.

Where the target's CPU has no AVX512_BF16 the pass refuses (exit 2) naming the feature: without it every bf16 product
would be converted to fp32 and back, slower than fp32 itself. A target that names such a CPU (`mcpu: znver4`,
`sapphirerapids`) builds anywhere; its build runs only on a CPU that has the feature.
"""

from __future__ import annotations

from typing import Literal

import ml_dtypes
import numpy as np
import tvm
from pydantic import BaseModel, ConfigDict, Field
from tvm import relax

from workbench.errors import UserError
from workbench.kernels.packed_conv import BF16, emit_conv2d, emit_matmul, to_ohwi
from workbench.kernels.x86_bf16 import BF16_FEATURE, bf16_target
from workbench.passes.figures import report_analysis
from workbench.passes.packing import float32_constant_weight
from workbench.passes.registry import register
from workbench.passes.rewrite import rewrite_calls


class Bf16Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ops: list[Literal["conv2d", "matmul"]] = Field(
        default_factory=lambda: ["conv2d", "matmul"], description="the op kinds computed in bf16; the others stay fp32")
    keep_first_conv: bool = Field(
        default=False, description="the first conv (on the raw input: pixels, audio) stays fp32, where its "
                                   "rounding costs more accuracy than its time is worth")
    fp32_below_products: int = Field(
        default=128, ge=0,
        description="with fp32_from_positions: a conv or matmul summing fewer products per output (input channels "
                    "x kernel height x width; a matmul's inner dimension) stays fp32; 0 keeps none")
    fp32_from_positions: int = Field(
        default=4096, ge=0,
        description="... if it writes at least this many output positions (pixels; a matmul's rows): the narrow, "
                    "high-resolution early layers of a mobile backbone, where bf16's rounding costs a detector its "
                    "accuracy and which a recognizer's narrow layers, at low resolution, are not (precision.md)")


def _bf16(array: np.ndarray) -> np.ndarray:
    """An fp32 array rounded to bf16 (to nearest, ties to even)."""
    return array.astype(ml_dtypes.bfloat16)


def _narrow_and_wide(call: relax.Call, products: int, params: Bf16Params) -> str | None:
    """Why `call` stays fp32 as a narrow layer at high resolution (see the two parameters), or None."""
    positions = int(np.prod([int(d) for d in call.ty.shape][:-1]))  # NHWC output: N x H x W; a matmul's rows
    if products < params.fp32_below_products and positions >= params.fp32_from_positions:
        return (f"fewer than {params.fp32_below_products} products per output at {params.fp32_from_positions}+ "
                "positions (fp32_below_products)")
    return None


class _ConvRule:
    """Which conv2d calls the pass takes (`why_not`) and their rewrite (`__call__`); the first conv and the
    narrow, high-resolution ones kept where asked."""

    def __init__(self, params: Bf16Params) -> None:
        self.params, self.first = params, None

    def why_not(self, call: relax.Call) -> str | None:
        a = call.attrs
        self.first = call if self.first is None else self.first  # the rewrite visits the graph from its input
        if self.params.keep_first_conv and call.same_as(self.first):
            return "the first conv (keep_first_conv)"
        if str(a.data_layout) != "NHWC" or str(a.out_layout or "NHWC") != "NHWC":
            return f"layout {a.data_layout} (needs NHWC: run convert_layout(conv2d=NHWC) before bf16)"
        if int(a.groups) != 1:
            return f"grouped ({int(a.groups)} groups): kept fp32 (a depthwise conv has no channel sum to pair)"
        not_constant = float32_constant_weight(call)
        if not_constant:
            return not_constant
        weight = call.args[1].ty.shape  # a constant's: static
        products = int(np.prod([int(d) for d, axis in zip(weight, str(a.kernel_layout)) if axis != "O"]))
        return _narrow_and_wide(call, products, self.params)

    def __call__(self, builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        a = call.attrs
        w_ohwi = to_ohwi(call.args[1].value.numpy(), str(a.kernel_layout))
        x = builder.emit(relax.op.astype(call.args[0], "bfloat16"))
        return emit_conv2d(builder, BF16, x, _bf16(w_ohwi), a.strides, a.padding, a.dilation)


def _matmul(builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    x = builder.emit(relax.op.astype(call.args[0], "bfloat16"))
    return emit_matmul(builder, BF16, x, _bf16(call.args[1].value.numpy()))


def require_bf16(target: tvm.target.Target | None) -> None:
    """Refuse (UserError, exit 2) a target whose CPU has no AVX512_BF16, naming the feature and what to do."""
    if bf16_target(target):
        return
    cpu = target.attrs.get("mcpu", "generic") if target is not None and target.kind.name == "llvm" else None
    raise UserError(f"bf16: the target's CPU ({cpu or (target.kind.name if target else 'none')}) has no "
                    f"{BF16_FEATURE} (AVX512_BF16), so bf16 would run as fp32 conversions; use an fp32 pipeline "
                    "here, or build for a CPU that has it (target: {kind: llvm, mcpu: znver4 or sapphirerapids})")


@register("bf16", "precision", Bf16Params)
def bf16(params: Bf16Params) -> tvm.transform.Pass:
    """conv2d (NHWC) and matmul by constant weights in bf16 with fp32 sums (AVX512_BF16's vdpbf16ps); every other op
    and each conv or matmul it cannot take stays fp32 (its analysis says why)."""

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        require_bf16(tvm.target.Target.current(allow_none=True))
        figures: dict[str, object] = {}
        if "conv2d" in params.ops:
            rule = _ConvRule(params)
            mod, figures["conv2d_bf16"], figures["conv2d_kept_fp32"] = rewrite_calls(
                mod, "relax.nn.conv2d", rule.why_not, rule)
        if "matmul" in params.ops:
            mod, figures["matmul_bf16"], figures["matmul_kept_fp32"] = rewrite_calls(
                mod, "relax.matmul", lambda call: float32_constant_weight(call, rank=2) or _narrow_and_wide(
                    call, int(call.args[1].ty.shape[0]), params), _matmul)
        report_analysis(**figures)
        return relax.transform.DeadCodeElimination()(mod)

    return tvm.transform.module_pass(run, opt_level=0, name="bf16")
