"""conv2d as u8 x s8 -> s32 in the layout AVX-512 VNNI's dot product reads (`quantize(execute=int8)` on VNNI CPUs).

`vpdpbusd` adds to each of 16 int32 lanes the dot product of 4 uint8 activations with 4 int8 weights.
MetaSchedule tensorizes a kernel with it (compile/x86_int8.py) only where those 4 activations are the
innermost input channels and the 16 x 4 weight block is innermost and compact; relax.nn.conv2d gives
neither (NCHW's innermost activation index is a spatial sum; an OHWI weight's 16 output channels are a
row apart). On such CPUs the int8 lowering emits this kernel for NHWC convs (and matmuls, as 1x1 convs over
their rows) instead:

    data    NHWC uint8, spatial padding (the zero point) and input channels padded to a multiple of 4
    weight  a constant packed once, [O/16, KH, KW, C/4, 16, 4] (O padded to 16 with zero weights)
    out     NHWC int32 [N, OH, OW, O rounded up to 16], channels past O sliced off

Its iterators are already split (o = 16 oo + oi, c = 4 co + ci), so MetaSchedule's tiling with the
intrinsic maps whole blocks; a build for a VNNI CPU gives an untuned one a fixed tensorized schedule
(compile/x86_int8.py); for any other CPU it is a plain loop nest.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, s_tir, te
from tvm.target.codegen import target_has_features

LANES, GROUP = 16, 4  # vpdpbusd: 16 int32 sums of 4 byte products each
OUT_EWISE_FUSABLE = 4  # relax's OpPatternKind: an epilogue of elementwise ops fuses into the kernel
KERNEL_NAME = "conv2d_nhwc_u8s8_vnni"
KERNEL_MARK = "workbench.kernel"  # the conv block's annotation, so a build finds it in a fused kernel


def vnni_target(target: tvm.target.Target | None) -> bool:
    """An llvm target whose CPU has AVX-512 VNNI (cascadelake, icelake-server, rocketlake, znver4, ...)."""
    return target is not None and target.kind.name == "llvm" and bool(target_has_features("avx512vnni", target))


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pack_weight(w_ohwi: np.ndarray) -> np.ndarray:
    """[O, KH, KW, C] int8 -> [O16/16, KH, KW, C4/4, 16, 4], zero weights in the padding."""
    o, kh, kw, c = w_ohwi.shape
    padded = np.pad(w_ohwi, [(0, _round_up(o, LANES) - o), (0, 0), (0, 0), (0, _round_up(c, GROUP) - c)])
    blocks = padded.reshape(-1, LANES, kh, kw, padded.shape[3] // GROUP, GROUP)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 4, 1, 5))


def _int64(values: tuple[int, ...]) -> list[tvm.tirx.IntImm]:
    return [tvm.tirx.IntImm("int64", v) for v in values]


def conv2d_kernel(data_shape: tuple[int, ...], packed_shape: tuple[int, ...], strides: tuple[int, int],
                  dilation: tuple[int, int]) -> tuple[tvm.tirx.PrimFunc, list[int]]:
    """(The kernel over already padded NHWC uint8 data and a packed weight, its NHWC int32 output's shape)."""
    n, h, w, _ = data_shape
    oo, kh, kw, co, _, _ = packed_shape
    (sh, sw), (dh, dw) = strides, dilation
    out_h, out_w = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    # int64 extents, as LegalizeOps writes them: FuseTIR maps this kernel's buffers onto its epilogue's
    data = te.placeholder(_int64(data_shape), "uint8", name="data")
    weight = te.placeholder(_int64(packed_shape), "int8", name="weight")
    rh, rw = te.reduce_axis(_int64((0, kh)), "rh"), te.reduce_axis(_int64((0, kw)), "rw")
    rco, rci = te.reduce_axis(_int64((0, co)), "rco"), te.reduce_axis(_int64((0, GROUP)), "rci")
    acc = te.compute(_int64((n, out_h, out_w, oo, LANES)), lambda b, y, x, o_out, o_in: te.sum(
        data[b, y * sh + rh * dh, x * sw + rw * dw, rco * GROUP + rci].astype("int32")
        * weight[o_out, rh, rw, rco, o_in, rci].astype("int32"), axis=[rh, rw, rco, rci]), name="conv",
        attrs={KERNEL_MARK: KERNEL_NAME})
    sch = s_tir.Schedule(te.create_prim_func([data, weight, acc]))
    # one NHWC output buffer, written 16 channels at a time: the block keeps its split iterators
    sch.transform_layout(sch.get_sblock("conv"), ("write", 0), lambda b, y, x, o_out, o_in: (b, y, x, o_out * LANES + o_in))
    kernel = sch.mod["main"].without_attr("global_symbol").with_attr("op_pattern", OUT_EWISE_FUSABLE)
    return kernel, [n, out_h, out_w, oo * LANES]


def emit_conv2d(builder: relax.BlockBuilder, q_x: relax.Expr, w_ohwi: np.ndarray, strides, padding, dilation,
                zero: int) -> relax.Expr:
    """sum(q_x * w) in int32, NHWC, for uint8 NHWC `q_x` (zero point `zero`, which pads it) and an OHWI weight."""
    out_channels, _, _, channels = w_ohwi.shape
    top, left, bottom, right = (int(p) for p in padding)
    extra = _round_up(channels, GROUP) - channels
    if top or left or bottom or right or extra:
        q_x = builder.emit(relax.op.nn.pad(q_x, [0, 0, top, bottom, left, right, 0, extra], pad_value=zero))
    packed = pack_weight(w_ohwi)
    data_shape = tuple(int(v) for v in q_x.ty.shape.values)
    kernel, out_shape = conv2d_kernel(data_shape, packed.shape, tuple(int(s) for s in strides),
                                      tuple(int(d) for d in dilation))
    acc = builder.emit(relax.call_tir(builder.add_func(kernel, KERNEL_NAME), [q_x, relax.const(packed)],
                                      relax.TensorType(out_shape, "int32")))
    if out_shape[3] == out_channels:
        return acc
    return builder.emit(relax.op.strided_slice(acc, axes=[3], begin=[0], end=[out_channels]))


def emit_matmul(builder: relax.BlockBuilder, q_x: relax.Expr, w_kn: np.ndarray, zero: int) -> relax.Expr:
    """sum(q_x * w) in int32 for uint8 `q_x` [..., K] and a [K, N] weight: the conv kernel as a 1x1 conv over
    the rows of `q_x` ([1, 1, rows, K] NHWC), its result reshaped back to [..., N]."""
    shape = [int(v) for v in q_x.ty.shape.values]
    rows = int(np.prod(shape[:-1]))
    pixels = builder.emit(relax.op.reshape(q_x, [1, 1, rows, shape[-1]]))
    w_ohwi = np.ascontiguousarray(w_kn.T).reshape(w_kn.shape[1], 1, 1, w_kn.shape[0])
    acc = emit_conv2d(builder, pixels, w_ohwi, (1, 1), (0, 0, 0, 0), (1, 1), zero)
    return builder.emit(relax.op.reshape(acc, [*shape[:-1], w_kn.shape[1]]))
