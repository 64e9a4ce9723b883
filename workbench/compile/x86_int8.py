"""x86 VNNI code for the int8 path: a dot-product tensor intrinsic that builds with the LLVM TVM 0.27 links,
and the schedule an untuned VNNI conv kernel (passes/int8_vnni.py) gets.

TVM's own `dot_16x4_vnni` (tvm.s_tir.tensor_intrin.x86, the one MetaSchedule's x86 VNNI rule uses)
passes `llvm.x86.avx512.vpdpbusd.512` its operands as <16 x i32>; LLVM now declares them <64 x i8>,
so any kernel tensorized with it fails LLVM's module verification ("Call parameter type does not match
function signature"). This one has the same description (C[16] += A_u8[4] . B_s8[16, 4]) and passes
the operands as 64 bytes. It compiles for any VNNI CPU (cascadelake, icelake-server, znver4) and runs
only there.
"""

from __future__ import annotations

import logging

import tvm
from tvm.s_tir import Schedule, ScheduleError, TensorIntrin
from tvm.script import tirx as T

from workbench.passes.int8_vnni import KERNEL_MARK, KERNEL_NAME, vnni_target

log = logging.getLogger("workbench.build")

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


PIXELS_PER_STEP = 8  # output pixels whose 16-channel sums one weight block is used for


def _vnni_conv_schedule(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """The conv block tensorized (16 output channels x 4 input channels per `vpdpbusd`, up to 8 pixels along a
    row per weight block), rows x channel blocks in parallel, the fused epilogue computed per 8 pixels, vectorized.
    Measured on convnet_small (rocketlake): as fast as 16 tuned trials per kernel (0.22 vs 0.21 ms)."""
    sch = Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    conv = next(b for b in blocks if sch.get(b).annotations.get(KERNEL_MARK) == KERNEL_NAME)
    epilogue = blocks[blocks.index(conv) + 1:]
    batch, row, col, channel_block, channel, kh, kw, in_block, _ = sch.get_loops(conv)
    width = int(sch.get(col).extent)
    col_outer, col_inner = sch.split(col, [None, max(f for f in range(1, PIXELS_PER_STEP + 1) if width % f == 0)])
    sch.reorder(batch, row, channel_block, col_outer, kh, kw, in_block, col_inner, channel)
    sch.parallel(sch.fuse(batch, row, channel_block))
    for block in epilogue[:-1]:  # elementwise: scale, bias, activation, requantization
        sch.compute_inline(block)
    if epilogue:
        sch.reverse_compute_at(epilogue[-1], col_outer)
        sch.vectorize(sch.get_loops(epilogue[-1])[-1])
    init = sch.decompose_reduction(conv, kh)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.unroll(col_inner)
    sch.tensorize(channel, VNNI_DOT_16x4)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True)


def _has_vnni_conv(func) -> bool:
    return isinstance(func, tvm.tirx.PrimFunc) and not (func.attrs and func.attrs.get("tirx.is_scheduled")) \
        and f'"{KERNEL_MARK}": "{KERNEL_NAME}"' in func.script()


def default_vnni_schedule(target: tvm.target.Target) -> tvm.transform.Pass:
    """Schedule the VNNI conv kernels no database covered (on a VNNI target; elsewhere they stay plain loops).

    A kernel the fixed schedule does not fit (it raises a ScheduleError) keeps its plain loops, and the build
    logs which."""

    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if not vnni_target(target):
            return mod
        for gv, func in list(mod.functions.items()):
            if _has_vnni_conv(func):
                try:
                    mod[gv] = _vnni_conv_schedule(func)
                except (ScheduleError, TypeError) as exc:  # TypeError: TVM 0.27 failing to word some errors
                    log.warning("VNNI kernel %s keeps plain loops: %s", gv.name_hint, str(exc).splitlines()[0])
        return mod

    return tvm.transform.module_pass(run, opt_level=0, name="default_vnni_schedule")
