"""conv_transpose_as_conv: a stride-k, k x k transposed convolution as a 1x1 conv2d and a pixel shuffle.

With kernel == stride (and no padding), every output pixel gets exactly one input pixel's contribution:

    out[n, o, i*k + a, j*k + b] = sum_c x[n, c, i, j] * W[c, o, a, b]

which is a 1x1 conv2d to O*k*k channels (weight W permuted to [O, k, k, C]) followed by a reshape /
permute_dims / reshape that interleaves the k*k channel groups into the pixels (depth-to-space). TVM
lowers conv2d_transpose as a dilated input padded and convolved, so most of its multiply-adds are with
zeros (k*k - 1 of every k*k for kernel == stride), and a detector's upsampling layers took a large share of its
run. The 1x1 conv is a GEMM MetaSchedule tunes like any other, and once no conv2d_transpose is
left the model can also take `convert_layout` (TVM 0.27 lowers conv2d_transpose in NCHW only).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from workbench.passes.registry import register
from workbench.passes.rewrite import op_rewrite_pass


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _why_not(call: relax.Call) -> str | None:
    """Why this conv2d_transpose has no 1x1-conv form (None when it has one)."""
    a = call.attrs
    weight = call.args[1]
    if not isinstance(weight, tvm.ir.expr.Constant):
        return "weight is not a constant"
    if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "IOHW" or str(a.out_layout or "NCHW") != "NCHW":
        return f"layout {a.data_layout}/{a.kernel_layout} (needs NCHW/IOHW)"
    kernel = _ints(weight.value.shape[2:])
    if (_ints(a.strides) != kernel or any(_ints(a.padding)) or any(_ints(a.output_padding))
            or _ints(a.dilation) != [1, 1] or int(a.groups) != 1):
        return (f"kernel {kernel}, strides {_ints(a.strides)}, padding {_ints(a.padding)}, groups {int(a.groups)} "
                "(needs kernel == strides, no padding, groups 1)")
    return None


def _as_conv(builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    w = call.args[1].value.numpy()  # [C, O, kh, kw]
    channels, out_channels, kh, kw = w.shape
    w1x1 = np.ascontiguousarray(w.transpose(1, 2, 3, 0)).reshape(out_channels * kh * kw, channels, 1, 1)
    out_dtype = call.attrs.out_dtype if str(call.attrs.out_dtype) else ""
    y = builder.emit(relax.op.nn.conv2d(call.args[0], relax.const(w1x1), out_dtype=out_dtype))
    n, _, h, wd = (int(d) for d in y.ty.shape)
    y = builder.emit(relax.op.reshape(y, [n, out_channels, kh, kw, h, wd]))
    y = builder.emit(relax.op.permute_dims(y, [0, 1, 4, 2, 5, 3]))
    return relax.op.reshape(y, [n, out_channels, h * kh, wd * kw])


@register("conv_transpose_as_conv", "layout")
def conv_transpose_as_conv(_params) -> tvm.transform.Pass:
    """conv2d_transpose with kernel == stride as a 1x1 conv2d + pixel shuffle (no multiply-adds with zeros)."""
    return op_rewrite_pass("conv_transpose_as_conv", "relax.nn.conv2d_transpose", _why_not, _as_conv,
                           "conv_transpose_rewritten", "conv_transpose_kept")
