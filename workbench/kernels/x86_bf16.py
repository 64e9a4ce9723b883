"""The x86 bf16 dot-product tensor intrinsic of the bf16 packed conv: AVX512_BF16's `vdpbf16ps`.

Its description is C[16] += A_bf16[2] . B_bf16[16, 2] in fp32: 16 fp32 sums, each of 2 bf16 activations times 2
bf16 weights (the packed kernel's 16 output x 2 input channel block, kernels/packed_conv.py). One `vdpbf16ps` on a
zmm register does it, with the activation pair broadcast to every lane, as `vpdpbusd` does for int8 quadruples.

TIR cannot hand the instruction its operands: LLVM declares `llvm.x86.avx512bf16.dpbf16ps.512` on `<32 x bfloat>`,
and TVM's lowering turns every bf16 value into fp32 arithmetic (BF16ComputeLegalize) and bf16 storage into uint16
(BF16StorageLegalize) for CPU targets, so a call whose operands are bf16 vectors reaches LLVM as `<32 x float>` and
fails verification. The implementation therefore calls a small LLVM IR function on buffer pointers, imported into
the kernel's module with the loop annotation `pragma_import_llvm` (TVM's codegen links it and forces it inline, so
the build holds a bare `vdpbf16ps` in the kernel's loop; tests/test_bf16.py reads the assembly).
"""

from __future__ import annotations

import tvm
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T
from tvm.target.codegen import target_has_features

BF16_DOT_16x2 = "workbench_dot_16x2_bf16"
BF16_FEATURE = "avx512bf16"
_FUNCTION = "workbench_dpbf16ps_16x2"
IMPORT_ANNOTATION = "pragma_import_llvm"  # a loop annotation: TVM's LLVM codegen links this IR into the module

# C[0:16] (fp32) += A[0:2] (bf16, broadcast as one 32-bit pair) . B[0:16, 0:2] (bf16, 64 contiguous bytes). The
# broadcast pair is the instruction's last operand, the one that may be memory: LLVM then folds the load and the
# broadcast into it (`vdpbf16ps (mem){1to16}`). As its first operand, each step took a `vbroadcastss` of its own and
# the packed conv ran at 3/4 of its speed (a 1x1 conv 256 -> 256 at 14x14: 79 -> 60 us, znver4, 2 threads).
DOT_LLVM_IR = f"""
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)

define i32 @{_FUNCTION}(ptr noalias %c, ptr noalias %a, ptr noalias %b) {{
  %sums = load <16 x float>, ptr %c, align 4
  %pair = load i32, ptr %a, align 2
  %pair1 = insertelement <16 x i32> poison, i32 %pair, i64 0
  %pairs = shufflevector <16 x i32> %pair1, <16 x i32> poison, <16 x i32> zeroinitializer
  %activations = bitcast <16 x i32> %pairs to <32 x bfloat>
  %weights = load <32 x bfloat>, ptr %b, align 2
  %out = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %sums, <32 x bfloat> %weights,
                                                              <32 x bfloat> %activations)
  store <16 x float> %out, ptr %c, align 4
  ret i32 0
}}
"""


def bf16_target(target: tvm.target.Target | None) -> bool:
    """An llvm target whose CPU has AVX512_BF16 (cooperlake, sapphirerapids, znver4, ...)."""
    return target is not None and target.kind.name == "llvm" and bool(target_has_features(BF16_FEATURE, target))


@T.prim_func(s_tir=True)
def _dot_16x2_desc(
    A: T.Buffer((2,), "bfloat16", offset_factor=1),
    B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
    C: T.Buffer((16,), "float32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:2], B[0:16, 0:2])
        T.writes(C[0:16])
        for i in T.serial(0, 16):
            for k in T.serial(0, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "float32") * T.cast(B[vi, vk], "float32")


@T.prim_func(s_tir=True)
def _dot_16x2_impl(
    A: T.Buffer((2,), "bfloat16", offset_factor=1),
    B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
    C: T.Buffer((16,), "float32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:2], B[0:16, 0:2])
        T.writes(C[0:16])
        # the bf16 operands as their uint16 storage: TVM's bf16 lowering rewrites the type of a bf16 pointer
        A_bits = T.decl_buffer((2,), "uint16", data=A.data, elem_offset=A.elem_offset)
        B_bits = T.decl_buffer((16, 2), "uint16", data=B.data, elem_offset=B.elem_offset)
        T.evaluate(T.call_extern("int32", _FUNCTION, C.access_ptr("rw"), A_bits.access_ptr("r"),
                                 B_bits.access_ptr("r")))


TensorIntrin.register(BF16_DOT_16x2, _dot_16x2_desc, _dot_16x2_impl)
