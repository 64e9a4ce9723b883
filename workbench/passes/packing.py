"""pack_conv2d: fp32 NHWC conv2d with a constant weight as the packed kernel (packed_conv.py), for CPUs.

relax conv2d legalizes to a plain loop nest that an untuned CPU build runs as it is (convnet_small: 17.5 ms
against ONNX Runtime's 0.25 ms); the packed kernel gets a fixed register-blocked schedule in the build
(kernels/packed_schedule.py) and MetaSchedule tunes it like any kernel. The weight is packed here, once, to
[O/16, KH, KW, C, 16] with zero weights padding O to 16; a depthwise conv (one output channel per input
channel) takes the kernel's depthwise kind, [C/16, KH, KW, 16]. Convs it does not take (NCHW, other grouped
convs, a weight that is not a constant yet, other dtypes) are kept and listed in the pass's `analysis`.
"""

from __future__ import annotations

import tvm
from tvm import relax

from workbench.kernels.packed_conv import DEPTHWISE_FP32, FP32, emit_conv2d, to_ohwi
from workbench.passes.figures import report_analysis
from workbench.passes.registry import register
from workbench.passes.rewrite import rewrite_calls


def _depthwise(call: relax.Call) -> bool:
    """groups == input channels == output channels (NHWC): each output channel reads only its own input channel."""
    return int(call.attrs.groups) > 1 and int(call.attrs.groups) == int(call.args[0].ty.shape[3]) == int(call.ty.shape[3])


def _why_not(call: relax.Call) -> str | None:
    """Why this conv2d does not take the packed kernel (None when it does)."""
    a = call.attrs
    if str(a.data_layout) != "NHWC" or str(a.out_layout or a.data_layout) != "NHWC":
        return f"layout {a.data_layout} (needs NHWC: run convert_layout(conv2d=NHWC) first)"
    if int(a.groups) != 1 and not _depthwise(call):
        return f"groups {int(a.groups)} (needs 1, or depthwise: one output channel per input channel)"
    if not isinstance(call.args[1], tvm.ir.expr.Constant):
        return "weight is not a constant (run fold_constant after convert_layout)"
    dtypes = {str(call.args[0].ty.dtype), str(call.args[1].ty.dtype), str(call.ty.dtype)}
    if dtypes != {"float32"}:
        return f"dtypes {sorted(dtypes)} (needs float32)"
    return None


def _packed(builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    a = call.attrs
    w_ohwi = to_ohwi(call.args[1].value.numpy(), str(a.kernel_layout))
    kind = DEPTHWISE_FP32 if _depthwise(call) else FP32
    return emit_conv2d(builder, kind, call.args[0], w_ohwi, a.strides, a.padding, a.dilation)


@register("pack_conv2d", "layout")
def pack_conv2d(_params) -> tvm.transform.Pass:
    """fp32 NHWC conv2d with a constant weight as the packed CPU kernel (weight packed once, 16 channels innermost)."""

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        mod, packed, kept = rewrite_calls(mod, "relax.nn.conv2d", _why_not, _packed)
        report_analysis(conv2d_packed=packed, conv2d_kept=kept)
        return relax.transform.DeadCodeElimination()(mod)

    return tvm.transform.module_pass(run, opt_level=0, name="pack_conv2d")
