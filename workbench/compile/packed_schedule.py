"""The schedule an untuned packed conv kernel (passes/packed_conv.py) gets in a CPU build.

A row of up to 8 output pixels (4 without AVX-512) x 16 output channels accumulates while each weight block is
loaded once: for int8 on a VNNI CPU one `vpdpbusd` per pixel and 4 input channels (tensorized with
compile/x86_int8.py's intrinsic), for fp32 one 16-lane FMA per pixel and input channel (LLVM vectorizes the 16
channels). Rows x channel blocks run in parallel, and the fused epilogue (scale, bias, activation,
requantization) is computed per 8 pixels, vectorized. Measured on convnet_small (rocketlake): int8 0.24 ms
against 0.21 ms after 16 tuned trials per kernel; fp32 0.42 ms against 17.5 ms for the untuned relax conv2d
build (and 1.25 ms after 16 trials of MetaSchedule's own search; tuning now measures this schedule first, see
tune.py).
"""

from __future__ import annotations

import logging

import tvm
from tvm.s_tir import Schedule, ScheduleError
from tvm.target.codegen import target_has_features

from workbench.compile.x86_int8 import VNNI_DOT_16x4
from workbench.passes.packed_conv import DEPTHWISE_FP32, FP32, KERNEL_MARK, VNNI_U8S8, PackedKind

log = logging.getLogger("workbench.build")


def pixels_per_step(target: tvm.target.Target) -> int:
    """Output pixels whose 16-channel sums one weight block is used for: 8 zmm accumulators on AVX-512; on AVX2
    16 channels are two ymm registers, so 4 pixels keep the sums in registers."""
    return 8 if target_has_features("avx512f", target) else 4


def _schedule(sch: Schedule, kind: PackedKind, pixels: int) -> None:
    """Apply the fixed schedule to the packed conv (and its fused epilogue) in `sch`'s main function."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    conv = next(b for b in blocks if sch.get(b).annotations.get(KERNEL_MARK) == kind.name)
    epilogue = blocks[blocks.index(conv) + 1:]
    batch, row, col, channel_block, channel, kh, kw, *in_blocks = sch.get_loops(conv)  # depthwise: no in_blocks
    width = int(sch.get(col).extent)
    col_outer, col_inner = sch.split(col, [None, max(f for f in range(1, pixels + 1) if width % f == 0)])
    sch.reorder(batch, row, channel_block, col_outer, kh, kw, *in_blocks[:1], col_inner, channel)
    sch.parallel(sch.fuse(batch, row, channel_block))
    for block in epilogue[:-1]:  # elementwise: scale, bias, activation, requantization
        sch.compute_inline(block)
    if epilogue:
        sch.reverse_compute_at(epilogue[-1], col_outer)
        sch.vectorize(sch.get_loops(epilogue[-1])[-1])
    init = sch.decompose_reduction(conv, kh)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.unroll(col_inner)
    if kind == VNNI_U8S8:
        sch.tensorize(channel, VNNI_DOT_16x4)


def packed_kind(func: tvm.tirx.PrimFunc) -> PackedKind | None:
    """The packed kernel `func` holds, if any."""
    text = func.script()
    return next((kind for kind in (FP32, DEPTHWISE_FP32, VNNI_U8S8) if f'"{KERNEL_MARK}": "{kind.name}"' in text), None)


def packed_schedule(func: tvm.tirx.PrimFunc, kind: PackedKind, target: tvm.target.Target) -> Schedule | None:
    """The fixed schedule of a packed kernel of `kind` (its trace replays on the kernel, as a database record's
    does), or None when the schedule does not fit it (logged)."""
    sch = Schedule(tvm.IRModule({"main": func}))
    try:
        _schedule(sch, kind, pixels_per_step(target))
    except (ScheduleError, TypeError) as exc:  # TypeError: TVM 0.27 failing to word some errors
        log.warning("%s keeps plain loops: %s", kind.name, str(exc).splitlines()[0])
        return None
    return sch
