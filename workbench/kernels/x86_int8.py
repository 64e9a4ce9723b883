"""An x86 VNNI dot-product tensor intrinsic that builds with the LLVM TVM 0.27 links.

TVM's own `dot_16x4_vnni` (tvm.s_tir.tensor_intrin.x86, the one MetaSchedule's x86 VNNI rule uses)
passes `llvm.x86.avx512.vpdpbusd.512` its operands as <16 x i32>; LLVM now declares them <64 x i8>,
so any kernel tensorized with it fails LLVM's module verification ("Call parameter type does not match
function signature"). This one has the same description (C[16] += A_u8[4] . B_s8[16, 4]) and passes
the operands as 64 bytes. It compiles for any VNNI CPU (cascadelake, icelake-server, znver4) and runs
only there.
"""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

VNNI_DOT_16x4 = "workbench_dot_16x4_vnni"


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
