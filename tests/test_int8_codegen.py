"""Machine code of int8 kernels: integer SIMD on this host, VNNI dot products cross-compiled, dp4a in CUDA PTX.

This host is an AVX2 CPU without VNNI, so VNNI code is only compiled (for cascadelake) and read, never run.
"""

import platform
import re

import pytest
import tvm
from tvm import te, s_tir

from workbench.compile.build import build_lowered
from workbench.passes.pipeline import run_pipeline
from workbench.passes.pipeline_spec import parse_text

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")


def asm(executable) -> str:
    """Assembly of a compiled Relax VM executable's host kernels."""
    return "\n".join(m.inspect_source("asm") for m in executable.mod.imports if m.kind == "llvm")


def instructions(text: str, *names: str) -> dict[str, int]:
    return {n: len(re.findall(rf"^\s+{n}\s", text, re.MULTILINE)) for n in names}


@x86
def test_int8_kernels_use_integer_multiply_add_on_the_host(zoo_relax, llvm):
    mod = zoo_relax("convnet_small")[1]
    int8, _ = run_pipeline(mod, parse_text("fold_batchnorm,quantize(execute=int8),fuse"), llvm, stats=False)
    fp32, _ = run_pipeline(mod, parse_text("fold_batchnorm,fuse"), llvm, stats=False)
    int8_asm, fp32_asm = asm(build_lowered(int8, llvm).executable), asm(build_lowered(fp32, llvm).executable)
    # AVX2: int8 products sign-extended to 16 bit and multiply-added pairwise into int32 (vpmaddwd)
    assert instructions(int8_asm, "vpmaddwd")["vpmaddwd"] > 0
    assert instructions(fp32_asm, "vpmaddwd")["vpmaddwd"] == 0


def _vnni_packed_matmul(m: int, n: int, k: int) -> tvm.IRModule:
    """u8[m, k] x s8 weight packed [n/16, k/4, 16, 4] -> s32[m, n], tensorized with the VNNI dot product."""
    from workbench.compile.x86_int8 import VNNI_DOT_16x4

    x = te.placeholder((m, k), "uint8", name="X")
    w = te.placeholder((n // 16, k // 4, 16, 4), "int8", name="W")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(
        x[i, r].astype("int32") * w[j // 16, r // 4, j % 16, r % 4].astype("int32"), axis=r), name="C")
    sch = s_tir.Schedule(te.create_prim_func([x, w, c]))
    block = sch.get_sblock("C")
    i, j, kk = sch.get_loops(block)
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(i, jo, ko, ji, ki)
    sch.decompose_reduction(block, ko)
    sch.tensorize(ji, VNNI_DOT_16x4)
    return sch.mod


@x86
def test_vnni_dot_product_in_cross_compiled_assembly():
    mod = _vnni_packed_matmul(16, 64, 256)
    lib = tvm.compile(mod, tvm.target.Target({"kind": "llvm", "mcpu": "cascadelake"}))
    text = lib.mod.inspect_source("asm")
    counts = instructions(text, "vpdpbusd")
    assert counts["vpdpbusd"] >= 1, counts  # one per 16 outputs x 4 reduction steps, unrolled or looped
    assert re.search(r"vpdpbusd\s+[^\n]*%zmm", text)  # the 512-bit AVX-512 VNNI form
