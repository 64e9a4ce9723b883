"""Machine code of int8 kernels: integer SIMD on this host, VNNI dot products cross-compiled, dp4a in CUDA PTX.

VNNI code is compiled here for cascadelake and read, so these run on any x86 host; test_int8_vnni.py runs it.
"""

import platform
import re

import pytest
import tvm
from tvm import s_tir, te

from workbench.compile.build import build_lowered
from workbench.compile.cuda_report import compile_ptx, cuda_source, find_nvcc
from workbench.compile.targets import make_target
from workbench.config import TargetConfig
from workbench.config.pipeline_spec import parse_text
from workbench.passes.pipeline import run_pipeline

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")


def asm(executable) -> str:
    """Assembly of a compiled Relax VM executable's host kernels."""
    return "\n".join(m.inspect_source("asm") for m in executable.mod.imports if m.kind == "llvm")


def instructions(text: str, *names: str) -> dict[str, int]:
    return {n: len(re.findall(rf"^\s+{n}\s", text, re.MULTILINE)) for n in names}


def fma(text: str) -> int:
    return len(re.findall(r"^\s+vfmadd\w*ps\s", text, re.MULTILINE))


@x86
def test_int8_kernels_multiply_integers_on_the_host(zoo_relax):
    host = make_target(TargetConfig())  # this CPU, as a run builds it
    mod = zoo_relax("convnet_small")[1]
    int8, _ = run_pipeline(mod, parse_text("fold_batchnorm,quantize(execute=int8),fuse"), host, stats=False)
    fp32, _ = run_pipeline(mod, parse_text("fold_batchnorm,fuse"), host, stats=False)
    int8_asm, fp32_asm = asm(build_lowered(int8, host).executable), asm(build_lowered(fp32, host).executable)
    # untuned AVX2 code: int8 conv products widened to int32 (vpmulld), the matmul's pairwise into int32
    # (vpmaddwd); the fp32 build multiplies with FMAs, which the int8 build keeps for the fp32 rescale only
    integer = instructions(int8_asm, "vpmulld", "vpmaddwd")
    assert integer["vpmulld"] > 0 and integer["vpmaddwd"] > 0, integer
    assert sum(instructions(fp32_asm, "vpmulld", "vpmaddwd").values()) == 0
    assert fma(int8_asm) * 10 < fma(fp32_asm), (fma(int8_asm), fma(fp32_asm))


def _vnni_packed_matmul(m: int, n: int, k: int) -> tvm.IRModule:
    """u8[m, k] x s8 weight packed [n/16, k/4, 16, 4] -> s32[m, n], tensorized with the VNNI dot product."""
    from workbench.kernels.x86_int8 import VNNI_DOT_16x4

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


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc to turn the CUDA source into PTX (no GPU needed)")
def test_int8_cuda_build_uses_dp4a(zoo_relax, llvm, tmp_path):
    mod = zoo_relax("convnet_small")[1]
    int8, _ = run_pipeline(mod, parse_text("fold_batchnorm,quantize(execute=int8),fuse"), llvm, stats=False)
    built = build_lowered(int8, tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))
    source = tmp_path / "int8.cu"
    source.write_text(cuda_source(built.executable))
    ptx, _ = compile_ptx(source, "sm_80")
    # the kernels' int8 x int8 -> int32 sums become 4-way byte dot products: nvcc emits dp4a for sm_61+
    assert len(re.findall(r"\bdp4a\.s32\.s32\b", ptx.read_text())) > 0
