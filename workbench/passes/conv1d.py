"""conv1d_as_conv2d: a 1-D convolution as a conv2d over a one-pixel-high image, so every later conv pass takes it.

TVM 0.27 lowers relax.nn.conv1d to a plain loop nest that no default schedule covers, and `convert_layout` and
`pack_conv2d` only know conv2d: on the zoo's byte classifier (Magika's shape, Conv1d over 512 byte embeddings)
the conv1d kernels took most of an untuned run. ONNX Runtime itself runs a Conv1d as a 2-D conv with height 1.
Here

    conv1d(x [N, C, W], w [O, C/g, K]) = squeeze(conv2d(x [N, C, 1, W], w [O, C/g, 1, K]), axis 2)

with the strides, padding and dilation on the W axis, groups as they were; a constant weight is reshaped once.
The conv2d then takes convert_layout and the packed kernel like any other (the packed schedule blocks output
pixels along W, which is where a 1-D conv's length now lies). Layouts other than NCW/OIW are kept and listed.
"""

from __future__ import annotations

import tvm
from tvm import relax

from workbench.passes.registry import register
from workbench.passes.rewrite import op_rewrite_pass


def _why_not(call: relax.Call) -> str | None:
    """Why this conv1d is kept as it is (None when it is rewritten)."""
    a = call.attrs
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout))
    if layouts != ("NCW", "OIW", "NCW"):
        return f"layouts {'/'.join(layouts)} (needs NCW/OIW)"
    return None


def _weight_2d(weight: relax.Expr) -> relax.Expr:
    """[O, C/g, K] as [O, C/g, 1, K]: a constant reshaped here, anything else by an op."""
    if isinstance(weight, tvm.ir.expr.Constant):
        w = weight.value.numpy()
        return relax.const(w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]))
    return relax.op.expand_dims(weight, 2)


def _as_conv2d(builder: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    a = call.attrs
    left, right = (int(p) for p in a.padding)
    image = builder.emit(relax.op.expand_dims(call.args[0], 2))
    out_dtype = a.out_dtype if str(a.out_dtype) else None
    conv = builder.emit(relax.op.nn.conv2d(image, builder.emit(_weight_2d(call.args[1])),
                                           strides=(1, int(a.strides[0])), padding=(0, left, 0, right),
                                           dilation=(1, int(a.dilation[0])), groups=int(a.groups),
                                           out_dtype=out_dtype))
    return relax.op.squeeze(conv, [2])


@register("conv1d_as_conv2d", "layout")
def conv1d_as_conv2d(_params) -> tvm.transform.Pass:
    """conv1d (NCW) as a conv2d of height 1, so convert_layout and pack_conv2d take it."""
    return op_rewrite_pass("conv1d_as_conv2d", "relax.nn.conv1d", _why_not, _as_conv2d, "conv1d_rewritten",
                           "conv1d_kept")
