"""Integer execution of Q/DQ-annotated conv2d/matmul (the `quantize` pass with `execute: int8`).

`quantize` leaves fake quantization: each selected op reads dequantize(quantize(x)) and
dequantize(int8 weight) and computes in fp32. Here every such conv2d/matmul becomes

    acc   = conv2d/matmul(q_x int8, w int8, out_dtype=int32)     # integer multiply-accumulate
    y     = astype(acc, float32) * (x_scale * w_scale[c])        # per output channel
    ...   the float epilogue that follows (bias add, relu, ...)
    q_y   = quantize(y, next_scale)                              # the next int8 op's input, if any

so after `fuse` the epilogue (scale, bias, activation, and the next op's requantization) runs in the
integer kernel's loop nest and no dequantize is left between two int8 ops. An asymmetric (uint8,
zero point z) activation multiplies as it is, u8 x s8 (VNNI's operand types), and the zero point is
taken off the sum: acc - z * sum(w[c]) per output channel, exact because a padded conv input is padded
with z (an explicit pad before the conv) rather than with 0. The bias stays fp32, added
after scaling: that equals an int32 bias of scale x_scale*w_scale without rounding the bias to it.
Where the consumer is fp32 (a pool, the graph output), `y` simply stays fp32.

When the target is an x86 CPU with AVX2, an ungrouped NHWC conv (and a matmul) is emitted as the workbench's
own kernel instead (packed_conv.py: pre-packed weight, u8 x s8, the layout the dot-product instructions read;
symmetric int8 activations are shifted to uint8, zero point 128), which the default schedule and MetaSchedule
tensorize: with `vpdpbusd` where the CPU has AVX-512 VNNI (`VNNI_U8S8`), else with `vpmaddubsw` + `vpmaddwd`
(`AVX2_U8S8`). `vpmaddubsw` sums two u8 x s8 products into a saturating int16, exact only for 7-bit weights
(255 x 64 x 2 fits, 255 x 127 x 2 does not), so on those CPUs `quantize` quantizes weights to [-63, 63]
(`weight_qmax`: one bit of weight precision less, ONNX Runtime's `reduce_range`), and a weight outside
[-64, 64] (a Q/DQ annotation made elsewhere) keeps relax conv2d, which is exact for any int8. NCHW convs keep
relax conv2d, and the pass says that convert_layout(conv2d=NHWC) before quantize would reach the dot product.

An annotated op this path cannot run in integers keeps its Q/DQ pair (fake quantization, fp32 kernel);
the pass records which ones and why in its pipeline record (`analysis.int8.kept_fp32`) and logs it.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from workbench.kernels.packed_conv import AVX2_U8S8, VNNI_U8S8, emit_conv2d, emit_matmul, int8_kind, to_ohwi
from workbench.kernels.x86_int8 import AVX2_WEIGHT_MAX
from workbench.passes.calibration import INT8_MAX
from workbench.passes.rewrite import rewrite_functions

log = logging.getLogger("workbench.int8")

_CONV2D, _MATMUL = "relax.nn.conv2d", "relax.matmul"
AVX2_WEIGHT_QMAX = 63  # the weights' symmetric range where the AVX2 kernel runs them: [-63, 63], 7 bits


def weight_qmax(target: tvm.target.Target | None) -> int:
    """The largest |int8 weight| `quantize(execute=int8)` quantizes to for `target`: 63 where its CPU gets the AVX2
    kernel (`vpmaddubsw`'s int16 pair sums saturate beyond 7-bit weights), else 127."""
    return AVX2_WEIGHT_QMAX if int8_kind(target) == AVX2_U8S8 else INT8_MAX


def _const(expr: relax.Expr) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) else None


@mutator
class _Int8Lowering(PyExprMutator):
    """Rewrites conv2d/matmul on dequantized int8 operands into int8 x int8 -> int32 calls + fp32 rescale."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod_ = mod
        self.dequantize = tvm.ir.Op.get("relax.dequantize")
        self.lowered: dict[str, int] = {}
        self.kept: list[str] = []
        self.kind = int8_kind(tvm.target.Target.current(allow_none=True))  # the packed kernel this CPU runs
        self.packed = {VNNI_U8S8.name: 0, AVX2_U8S8.name: 0}  # convs and matmuls lowered to each packed kernel
        self.not_nhwc = 0  # convs that would take the packed kernel in NHWC
        self.wide_weights = 0  # convs and matmuls whose weights exceed the AVX2 kernel's 7 bits

    def _dequantized(self, expr: relax.Expr) -> relax.Call | None:
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr
        if isinstance(bound, relax.Call) and bound.op.same_as(self.dequantize):
            return bound
        return None

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if not isinstance(call.op, tvm.ir.Op) or len(call.args) < 2:
            return call
        act, weight = self._dequantized(call.args[0]), self._dequantized(call.args[1])
        if act is None or weight is None:
            return call  # not annotated by `quantize`
        reason = self._unsupported(call, act, weight)
        if reason is not None:
            self.kept.append(f"{call.op.name}: {reason}")
            return call
        self.lowered[call.op.name] = self.lowered.get(call.op.name, 0) + 1
        return self._integer(call, act, weight)

    def _unsupported(self, call: relax.Call, act: relax.Call, weight: relax.Call) -> str | None:
        """Why `call` cannot run in integers (None when it can)."""
        if call.op.name not in (_CONV2D, _MATMUL):
            return "no int8 lowering for this op (kept as fake quantization in fp32)"
        w_int8, w_zero, x_zero = _const(weight.args[0]), _const(weight.args[2]), _const(act.args[2])
        x_scale, x_dtype = _const(act.args[1]), str(act.args[0].ty.dtype)
        if w_int8 is None or w_int8.dtype != np.int8 or x_dtype not in ("int8", "uint8"):
            return "operands are not int8/uint8 (activation) and an int8 constant (weight)"
        if x_scale is None or x_scale.size != 1 or x_zero is None or x_zero.size != 1 or w_zero is None or np.any(w_zero):
            return "needs a constant per-tensor activation scale and zero point, and symmetric weights"
        if x_dtype == "int8" and np.any(x_zero):
            return "int8 activation with a nonzero zero point"
        if call.op.name == _MATMUL and w_int8.ndim != 2:
            return f"batched weight of rank {w_int8.ndim} (int8 matmul takes a 2-D [K, N] weight)"
        if call.op.name == _CONV2D and not _plain_layouts(call.attrs):
            return f"packed layout {call.attrs.data_layout}/{call.attrs.kernel_layout} (int8 conv2d takes NCHW/NHWC)"
        return None

    def _integer(self, call: relax.Call, act: relax.Call, weight: relax.Call) -> relax.Expr:
        q_x, w_int8 = act.args[0], weight.args[0]
        w = _const(w_int8)
        zero = int(_const(act.args[2]).reshape(()))
        if call.op.name == _MATMUL:
            weight_sums = w.astype(np.int64).sum(axis=0)  # [K, N] -> per output column
            if self.kind is not None and self._fits(w):
                q_x, zero = self._as_uint8(q_x, zero)
                acc = emit_matmul(self.builder_, self.kind, q_x, w, zero)
                self.packed[self.kind.name] += 1
            else:
                acc = relax.op.matmul(q_x, w_int8, out_dtype="int32")
        else:
            a = call.attrs
            out_axis = str(a.kernel_layout).index("O")
            weight_sums = w.astype(np.int64).sum(axis=tuple(i for i in range(w.ndim) if i != out_axis))
            if self._packed_conv(a, w):
                q_x, zero = self._as_uint8(q_x, zero)
                acc = emit_conv2d(self.builder_, self.kind, q_x, to_ohwi(w, str(a.kernel_layout)), a.strides,
                                  a.padding, a.dilation, zero)
                self.packed[self.kind.name] += 1
            else:
                padding = [int(p) for p in a.padding]
                if zero and any(padding):
                    q_x = self.builder_.emit(relax.op.nn.pad(q_x, _pad_width(str(a.data_layout), padding),
                                                             pad_value=zero))
                    padding = [0, 0, 0, 0]
                acc = relax.op.nn.conv2d(q_x, w_int8, a.strides, padding, a.dilation, a.groups, a.data_layout,
                                         a.kernel_layout, a.out_layout, out_dtype="int32")
        acc = self.builder_.emit(acc)
        out_ndim = len(acc.ty.shape)
        channel = out_ndim - 1 if call.op.name == _MATMUL else str(call.attrs.out_layout or call.attrs.data_layout).index("C")
        shape = [1] * out_ndim
        shape[channel] = -1
        if zero:  # sum((q - z) * w) = sum(q * w) - z * sum(w)
            acc = self.builder_.emit(relax.op.subtract(acc, relax.const((zero * weight_sums).astype(np.int32).reshape(shape))))
        scale = (_const(act.args[1]).astype(np.float64) * _const(weight.args[1]).astype(np.float64)).astype(np.float32)
        y = self.builder_.emit(relax.op.astype(acc, "float32"))
        return relax.op.multiply(y, relax.const(scale.reshape(shape)))

    def _fits(self, w: np.ndarray) -> bool:
        """Can this CPU's packed kernel multiply weight `w` exactly? Any int8 on VNNI; on AVX2 |w| <= 64 (counted
        otherwise, so the pass can say why)."""
        if self.kind != AVX2_U8S8 or int(np.abs(w.astype(np.int16)).max(initial=0)) <= AVX2_WEIGHT_MAX:
            return True
        self.wide_weights += 1
        return False

    def _packed_conv(self, attrs, w: np.ndarray) -> bool:
        """Does this conv get the packed kernel (packed_conv.py)? On an x86 CPU with AVX2, an ungrouped NHWC conv
        whose weight fits the kernel does; an NCHW one is counted, so the pass can say how to reach it."""
        if self.kind is None or int(attrs.groups) != 1:
            return False
        if str(attrs.data_layout) != "NHWC" or str(attrs.out_layout or attrs.data_layout) != "NHWC":
            self.not_nhwc += 1
            return False
        return self._fits(w)

    def _as_uint8(self, q_x: relax.Expr, zero: int) -> tuple[relax.Expr, int]:
        """The dot products multiply uint8 activations: an int8 one is shifted by 128 (its zero point becomes 128)."""
        if str(q_x.ty.dtype) == "uint8":
            return q_x, zero
        wide = relax.op.add(relax.op.astype(q_x, "int16"), relax.const(128, "int16"))
        return self.builder_.emit(relax.op.astype(wide, "uint8")), zero + 128

    def run(self) -> tvm.IRModule:
        return relax.transform.DeadCodeElimination()(rewrite_functions(self, self.mod_))


def _pad_width(layout: str, padding: list[int]) -> list[int]:
    """relax.nn.pad's flat (before, after) per axis for conv2d padding [top, left, bottom, right] in `layout`."""
    widths = {"H": (padding[0], padding[2]), "W": (padding[1], padding[3])}
    return [w for axis in layout for w in widths.get(axis, (0, 0))]


def _plain_layouts(attrs) -> bool:
    return str(attrs.data_layout) in ("NCHW", "NHWC") and str(attrs.kernel_layout) in ("OIHW", "HWIO", "OHWI") \
        and str(attrs.out_layout or attrs.data_layout) in ("NCHW", "NHWC")


def lower_int8(mod: tvm.IRModule) -> tuple[tvm.IRModule, dict]:
    """(module with int8 kernels, its record: lowered calls by op, how many run the VNNI kernel (`vnni`) and the
    AVX2 one (`avx2`), one line per op kept in fp32 with the reason)."""
    lowering = _Int8Lowering(mod)
    out = lowering.run()
    for line in lowering.kept:
        log.warning("int8: %s", line)
    if lowering.not_nhwc:
        log.warning("int8: %d NCHW conv2d on this CPU use no dot-product instructions (%s): run "
                    "convert_layout(conv2d=NHWC) before quantize", lowering.not_nhwc, lowering.kind.name)
    if lowering.wide_weights:
        log.warning("int8: %d conv2d/matmul have weights beyond 7 bits (|w| > %d), which the AVX2 kernel would "
                    "saturate: they keep relax's int8 ops (quantize them with quantize(execute=int8) for this "
                    "target)", lowering.wide_weights, AVX2_WEIGHT_MAX)
    return out, {"lowered": lowering.lowered, "vnni": lowering.packed[VNNI_U8S8.name],
                 "avx2": lowering.packed[AVX2_U8S8.name], "kept_fp32": lowering.kept}
