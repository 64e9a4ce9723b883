"""The x86 u8 x s8 dot-product tensor intrinsics of the int8 packed conv: VNNI, and AVX2 for CPUs without it.

Both have one description, C[16] += A_u8[4] . B_s8[16, 4]: 16 int32 sums, each of 4 uint8 activations times
4 int8 weights (the packed kernel's 16 output x 4 input channel block, kernels/packed_conv.py).

VNNI (`VNNI_DOT_16x4`), one `vpdpbusd` on a zmm register, for CPUs with AVX-512 VNNI.

TVM's own `dot_16x4_vnni` (tvm.s_tir.tensor_intrin.x86, the one MetaSchedule's x86 VNNI rule uses)
passes `llvm.x86.avx512.vpdpbusd.512` its operands as <16 x i32>; LLVM now declares them <64 x i8>,
so any kernel tensorized with it fails LLVM's module verification ("Call parameter type does not match
function signature"). This one has the same description (C[16] += A_u8[4] . B_s8[16, 4]) and passes
the operands as 64 bytes. It compiles for any VNNI CPU (cascadelake, icelake-server, znver4) and runs
only there.

AVX2 (`AVX2_DOT_16x4`), for x86 CPUs with AVX2 but no VNNI (haswell, skylake, znver2/3), as ONNX Runtime's MLAS
does there: per 8 output channels (one ymm of int32 sums), `vpmaddubsw` (`llvm.x86.avx2.pmadd.ub.sw`) multiplies
the 32 u8 x s8 byte pairs and adds adjacent pairs into 16 int16, then `vpmaddwd` with ones
(`llvm.x86.avx2.pmadd.wd`) adds adjacent int16 into 8 int32, which are added to the sums; the 16 channels are two
such steps. TVM's own AVX-512 form without VNNI (`dot_16x4_avx512`) is the model. `vpmaddubsw` saturates its
int16 pair sums: 255 x 127 x 2 = 64770 overflows int16, so it is exact only for weights of 7 bits, |w| <= 64
(255 x 64 x 2 = 32640). The int8 lowering quantizes weights to [-63, 63] when it emits this kernel
(passes/int8.py: `weight_qmax`), as ONNX Runtime quantizes with `reduce_range` on CPUs without VNNI.
"""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

VNNI_DOT_16x4 = "workbench_dot_16x4_vnni"
AVX2_DOT_16x4 = "workbench_dot_16x4_avx2"
AVX2_WEIGHT_MAX = 64  # the largest |weight| whose u8 x s8 pair sums cannot saturate vpmaddubsw's int16


@T.prim_func(s_tir=True)
def _dot_16x4_desc(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    # TVM's own description, restated: importing tvm.s_tir.tensor_intrin registers every target's
    # intrinsics and takes about a minute
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        for i in T.serial(0, 16):
            for k in T.serial(0, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")


@T.prim_func(s_tir=True)
def _vnni_16x4(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a_u8x64 = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "uint8x4"), dtype="int32"), 16),
                                dtype="uint8x64")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"), a_u8x64, B.vload([0, 0], dtype="int8x64"), dtype="int32x16")


TensorIntrin.register(VNNI_DOT_16x4, _dot_16x4_desc, _vnni_16x4)


@T.prim_func(s_tir=True)
def _avx2_16x4(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a_u8x32 = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "uint8x4"), dtype="int32"), 8),
                                dtype="uint8x32")
        ones = T.broadcast(T.int16(1), 16)
        # output channels 0-7, then 8-15: 32 weight bytes each, 4 per channel
        C[T.ramp(T.int32(0), 1, 8)] = C.vload([0], dtype="int32x8") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"),
            T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.ub.sw"), a_u8x32,
                                    B.vload([0, 0], dtype="int8x32"), dtype="int16x16"),
            ones, dtype="int32x8")
        C[T.ramp(T.int32(8), 1, 8)] = C.vload([8], dtype="int32x8") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"),
            T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.ub.sw"), a_u8x32,
                                    B.vload([8, 0], dtype="int8x32"), dtype="int16x16"),
            ones, dtype="int32x8")


TensorIntrin.register(AVX2_DOT_16x4, _dot_16x4_desc, _avx2_16x4)
