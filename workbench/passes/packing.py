"""pack_conv2d: fp32 conv2d with a constant weight as the packed kernel (packed_conv.py), for CPUs.

relax conv2d legalizes to a plain loop nest that an untuned CPU build runs as it is, orders of magnitude behind
ONNX Runtime (scripts/bench_levers.py); the packed kernel gets a fixed register-blocked schedule in the build
(kernels/packed_schedule.py) and MetaSchedule tunes it like any kernel. The weight is packed here, once, to
[O/16, KH, KW, C, 16] with zero weights padding O to 16; a depthwise conv (one output channel per input
channel) takes the kernel's depthwise kind, [C/16, KH, KW, 16]; another grouped conv one kernel per group. Convs
it does not take (a weight that is not a constant yet, other dtypes) are kept and listed in the pass's `analysis`.
An NCHW conv (where convert_layout could not convert it) runs between two transposes, counted in the analysis:
convert_layout first is better, as it moves whole chains of ops to NHWC and leaves transposes only at the ends.
"""

from __future__ import annotations

import tvm
from tvm import relax

from workbench.kernels.packed_conv import DEPTHWISE_FP32, FP32, LANES, emit_conv2d, emit_matmul, to_ohwi
from workbench.passes.figures import report_analysis
from workbench.passes.registry import register
from workbench.passes.rewrite import op_rewrite_pass, rewrite_calls

NHWC_FROM_NCHW, NCHW_FROM_NHWC = [0, 2, 3, 1], [0, 3, 1, 2]


def _depthwise(groups: int, channels: int, w_ohwi) -> bool:
    """groups == input channels == output channels: each output channel reads only its own input channel."""
    return groups > 1 and groups == channels == w_ohwi.shape[0]


def float32_constant_weight(call: relax.Call, rank: int | None = None) -> str | None:
    """Why a conv2d or matmul is not fp32 throughout with a constant weight (of `rank` dimensions), or None: what
    the packed kernels' passes (this one, bf16) need before they can pack the weight once."""
    weight = call.args[1]
    if not isinstance(weight, tvm.ir.expr.Constant) or (rank is not None and len(weight.ty.shape) != rank):
        return f"weight is not a {f'{rank}-D ' if rank else ''}constant (run fold_constant after convert_layout)"
    dtypes = {str(call.args[0].ty.dtype), str(weight.ty.dtype), str(call.ty.dtype)}
    return None if dtypes == {"float32"} else f"dtypes {sorted(dtypes)} (needs float32)"


def _why_not(call: relax.Call) -> str | None:
    """Why this conv2d does not take the packed kernel (None when it does)."""
    a = call.attrs
    layout = str(a.data_layout)
    if layout not in ("NHWC", "NCHW") or str(a.out_layout or layout) != layout:
        return f"layout {layout} -> {a.out_layout} (needs NHWC, or NCHW in and out)"
    return float32_constant_weight(call)


def _grouped(builder: relax.BlockBuilder, x: relax.Expr, attrs, w_ohwi) -> relax.Expr:
    """A grouped conv that is not depthwise (ResNeXt, ShuffleNet) as one packed conv per group on its slice of the
    input channels, concatenated: relax's grouped conv2d has no default schedule and runs as plain loops."""
    groups = int(attrs.groups)
    per_in, per_out = int(x.ty.shape[3]) // groups, w_ohwi.shape[0] // groups
    outs = []
    for g in range(groups):
        part = builder.emit(relax.op.strided_slice(x, axes=[3], begin=[g * per_in], end=[(g + 1) * per_in]))
        outs.append(builder.emit(emit_conv2d(builder, FP32, part, w_ohwi[g * per_out:(g + 1) * per_out],
                                             attrs.strides, attrs.padding, attrs.dilation)))
    return relax.op.concat(outs, axis=3)


def _packed_nhwc(builder: relax.BlockBuilder, call: relax.Call, x: relax.Expr) -> relax.Expr:
    """The packed kernel's call on NHWC `x`."""
    a = call.attrs
    w_ohwi = to_ohwi(call.args[1].value.numpy(), str(a.kernel_layout))
    kind = DEPTHWISE_FP32 if _depthwise(int(a.groups), int(x.ty.shape[3]), w_ohwi) else FP32
    if int(a.groups) > 1 and kind == FP32:
        return _grouped(builder, x, a, w_ohwi)
    return emit_conv2d(builder, kind, x, w_ohwi, a.strides, a.padding, a.dilation)


class _Packer:
    """pack_conv2d's rewrite, counting the NCHW convs it wraps in transposes (where convert_layout could not
    convert them: TVM's ConvertLayout fails on silero-vad, whose Conv1d stack then ran as plain loops)."""

    def __init__(self) -> None:
        self.in_nchw = 0

    def __call__(self, builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        if str(call.attrs.data_layout) == "NHWC":
            return _packed_nhwc(builder, call, call.args[0])
        self.in_nchw += 1
        x = builder.emit(relax.op.permute_dims(call.args[0], NHWC_FROM_NCHW))
        return relax.op.permute_dims(builder.emit(_packed_nhwc(builder, call, x)), NCHW_FROM_NHWC)


@register("pack_conv2d", "layout")
def pack_conv2d(_params) -> tvm.transform.Pass:
    """fp32 conv2d with a constant weight as the packed CPU kernel (weight packed once, 16 channels innermost); an
    NCHW conv between transposes."""

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        packer = _Packer()
        mod, packed, kept = rewrite_calls(mod, "relax.nn.conv2d", _why_not, packer)
        report_analysis(conv2d_packed=packed, conv2d_packed_in_nchw=packer.in_nchw, conv2d_kept=kept)
        return relax.transform.DeadCodeElimination()(mod)

    return tvm.transform.module_pass(run, opt_level=0, name="pack_conv2d")


WIDE = 4 * LANES  # narrower matmuls fit the default tile whatever their column count (a classifier's 10 classes)


def _matmul_why_not(call: relax.Call) -> str | None:
    """Why this matmul keeps its relax form (None when it takes the packed kernel)."""
    problem = float32_constant_weight(call, rank=2)
    if problem:
        return problem
    columns = int(call.args[1].ty.shape[1])
    if columns % LANES == 0 or columns < WIDE:
        return f"{columns} columns: a multiple of {LANES} or under {WIDE} (the default matmul tile takes them)"
    return None


def _packed_matmul(builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    return emit_matmul(builder, FP32, call.args[0], call.args[1].value.numpy())


@register("pack_matmul", "layout")
def pack_matmul(_params) -> tvm.transform.Pass:
    """fp32 matmuls by a constant [K, N] weight whose N (64 or more) is not a multiple of 16 as the packed kernel
    (a 1x1 conv over the rows, the weight padded to 16 columns once): the default matmul tile blocks columns by a
    divisor of N, and a classifier head's N (PP-OCR's 6625 or 18385 classes) has none near a vector width, so its
    tile was one column wide."""
    return op_rewrite_pass("pack_matmul", "relax.matmul", _matmul_why_not, _packed_matmul, "matmul_packed",
                           "matmul_kept")
