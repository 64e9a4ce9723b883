"""The schedule an untuned CPU kernel that is neither a packed conv nor a contraction gets: inlined, parallel,
vectorized.

TVM's CPU pipeline leaves untuned kernels as plain loops: one thread, intermediate buffers between the fused
ops, and reductions walking memory in whatever order the op's axes come (an NHWC mean over H and W strides C
apart on every step); on a detector in NHWC with packed convs most of the untuned time was in such kernels
(docs/results/ops_<cpu>.md measures each op class). Here each elementwise stage is inlined into its consumer, the outer
loops run in parallel and the innermost, contiguous one is vectorized; a transpose (NCHW to NHWC and back) runs
in square tiles, so neither its reads nor its writes stride a row apart on every step (to a few channels, an
image's 3, it is left to LLVM, which interleaves whole vectors); a row that concatenates inputs (NHWC channels)
is cut where each input starts, so no vector reads them all and selects; a reduction whose read is
contiguous along a spatial axis (NHWC mean over H, W) has that axis moved inside the reduction loops and
vectorized.
Contractions (a reduction over two or more inputs: convs, matmuls) are left as they were here: matmuls get
gemm_schedule.py's tile, packed convs packed_schedule.py's, relax's convs are MetaSchedule's job.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm.s_tir import Schedule, ScheduleError
from tvm.s_tir.dlight.analysis import SBlockInfo, normalize_prim_func
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.s_tir.dlight.base.common_schedules import try_inline
from tvm.target.codegen import llvm_get_vector_width

log = logging.getLogger("workbench.build")
MIN_PARALLEL_ITERATIONS = 1 << 14  # below it a thread pool launch costs more than it buys
MAX_WHOLE_VECTOR = 64  # an innermost loop this short, not a multiple of the vector width, is vectorized whole
MIN_PARTIALS = 4  # fewer independent sums than this do not pay for a reduction's partials buffer
MIN_HALF_STEP = 4  # a long loop is split by half a step's lanes only where that is still a vector this wide
SHORT_ROW = 4  # a transpose's output rows this short or shorter (RGB, RGBA) are interleaved by LLVM, not tiled
MAX_PIECES = 16  # a row cut into more (a stack of many narrow inputs) stays whole: each piece copies the block


def loop_extent(sch: Schedule, loop) -> int | None:
    """A loop's extent, None where it is symbolic."""
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tvm.tirx.IntImm) else None


def vector_lanes(sch: Schedule, block, target: tvm.target.Target) -> int:
    """Lanes a vectorized loop steps by: LLVM's vector width in the block's output type. TVM 0.27 reports 512 bits
    on every x86 CPU, so on AVX2 a step is two registers, whose independent halves ran an NHWC max pool 1.5x as
    fast as one register a step (znver3)."""
    bits = sch.get(block).writes[0].source.dtype.bits
    return max(2, max(llvm_get_vector_width(target), 128) // bits)


def step_lanes(extent: int, lanes: int) -> int | None:
    """The lanes a loop of `extent`, longer than `lanes`, is split by: `lanes` where they divide it; else, where the
    loop is too long to be one vector, half of them (one AVX2 register) where that divides it and is at least
    MIN_HALF_STEP; else None. A row of 200 channels left to LLVM's own vectorizer got its max pool's running
    maximum stored with `vmaskmovps`, which Zen 1-3 run microcoded (LLVM 22 folds a store of a select of the
    loaded value into a masked store: llvm-project issue 213195)."""
    if extent <= lanes:  # one vector
        return None
    if extent % lanes == 0:
        return lanes
    half = lanes // 2
    return half if extent > MAX_WHOLE_VECTOR and half >= MIN_HALF_STEP and extent % half == 0 else None


def vectorize_loop(sch: Schedule, loop, lanes: int) -> None:
    """Vectorize `loop`: in vector-width pieces when they divide it (`step_lanes`), whole when short, else leave it
    to LLVM (as a loop not starting at 0, a partition's later piece, which TVM 0.27 cannot split, is when long)."""
    extent = loop_extent(sch, loop)
    if extent is None or extent < 2:
        return
    starts_at_0 = isinstance(sch.get(loop).min, tvm.tirx.IntImm) and int(sch.get(loop).min) == 0
    width = step_lanes(extent, lanes) if starts_at_0 else None
    if width is not None:
        loop = sch.split(loop, [None, width])[1]
    elif extent > MAX_WHOLE_VECTOR:
        return
    sch.vectorize(loop)


def parallel_loops(sch: Schedule, loops: list, work: int) -> None:
    """Run `loops` (outermost first, fused) in parallel when the kernel does enough work for it."""
    if loops and work >= MIN_PARALLEL_ITERATIONS:
        sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])


def largest_divisor(extent: int, cap: int) -> int:
    """The largest divisor of `extent` up to `cap` (at least 1): a tile or step that needs no predicate."""
    return max(f for f in range(1, max(1, min(extent, cap)) + 1) if extent % f == 0)


def iterations(sch: Schedule, loops: list) -> int:
    total = 1
    for loop in loops:
        total *= loop_extent(sch, loop) or 1
    return total


def _shifted_var(expr: tvm.tirx.PrimExpr) -> tuple[tvm.tirx.Var, int] | None:
    """(v, k) where `expr` is one var shifted by a constant, `v + k` (a pad's `w - 1`, an inlined concat's
    `c + -24`, nested shifts alike), else None."""
    if isinstance(expr, tvm.tirx.Var):
        return expr, 0
    if isinstance(expr, (tvm.tirx.Add, tvm.tirx.Sub)) and isinstance(expr.b, tvm.tirx.IntImm):
        inner = _shifted_var(expr.a)
        if inner is not None:
            return inner[0], inner[1] + (int(expr.b) if isinstance(expr, tvm.tirx.Add) else -int(expr.b))
    return None


def _transposed(sch: Schedule, info: SBlockInfo) -> int | None:
    """The loop (its position) whose var indexes the last dimension of the block's one read, where that is not the
    innermost loop's var (a transpose: NCHW to NHWC and back, a pad fused after it included); None for any other
    block."""
    block = sch.get(info.block_rv)
    if len(block.reads) != 1 or len(info.iters) < 2:
        return None
    last = block.reads[0].region[-1]
    shifted = _shifted_var(last.min)
    var = shifted[0] if shifted else None
    if var is None or (isinstance(last.extent, tvm.tirx.IntImm) and int(last.extent) != 1):
        return None
    found = [i for i, it in enumerate(info.iters) if it.var.same_as(var)]
    return found[0] if found and found[0] != len(info.iters) - 1 else None


def _tile(sch: Schedule, loop, lanes: int) -> int:
    """A transpose tile side along `loop`: its largest divisor up to `lanes` where that is more than half of them,
    else `lanes` with a partial last tile (a padded 82 would otherwise tile by 2; loop partitioning splits the
    tail off)."""
    extent = loop_extent(sch, loop) or 1
    exact = largest_divisor(extent, lanes)
    return exact if 2 * exact > lanes or extent < lanes else lanes


def _schedule_transpose(sch: Schedule, info: SBlockInfo, source: int, lanes: int) -> None:
    """A transpose in square tiles: the loop along the read's last dimension and the innermost (the write's) both
    split by about a vector's lanes, the two tile loops innermost; each tile reads whole cache lines of its input
    and writes whole vectors of its output, where element by element one side strides a row apart each step."""
    loops = sch.get_loops(info.block_rv)
    work = iterations(sch, loops)
    inner, across = loops[-1], loops[source]
    inner_tile = _tile(sch, inner, lanes)
    inner_outer, inner_in = sch.split(inner, [None, inner_tile])
    across_outer, across_in = sch.split(across, [None, _tile(sch, across, lanes)])
    outer = [loop for i, loop in enumerate(loops[:-1]) if i != source]
    sch.reorder(*outer, across_outer, inner_outer, across_in, inner_in)
    parallel_loops(sch, [*outer, across_outer], work)
    if inner_tile > 1:
        sch.vectorize(inner_in)


def _schedule_short_rows_transpose(sch: Schedule, info: SBlockInfo) -> None:
    """A transpose whose output rows are a few elements (an image's 3 channels, NCHW to NHWC): the rows unrolled,
    the loop outside them left whole to LLVM's loop vectorizer, which reads a vector along the input's row for
    each channel and interleaves them into whole vectors of output (shuffles); the outer loops parallel. A tile of
    16 pixels x 3 channels read each 3-lane vector element by element from 3 planes: the first conv's transpose
    and pad at 640x640 ran 220 us, 70 this way (rapidocr_det, znver4, the kernel alone; 294 -> 231 us in the
    model, its input cold)."""
    loops = sch.get_loops(info.block_rv)
    parallel_loops(sch, loops[:-2], iterations(sch, loops))
    sch.unroll(loops[-1])


def _schedule_injective(sch: Schedule, info: SBlockInfo, target: tvm.target.Target) -> None:
    loops = sch.get_loops(info.block_rv)
    if not loops:  # a scalar
        return
    lanes = vector_lanes(sch, info.block_rv, target)
    source = _transposed(sch, info)
    if source is not None and len(loops) == len(info.iters):
        if source == len(loops) - 2 and (loop_extent(sch, loops[-1]) or lanes) <= SHORT_ROW:
            _schedule_short_rows_transpose(sch, info)
        else:
            _schedule_transpose(sch, info, source, lanes)
        return
    parallel_loops(sch, loops[:-1], iterations(sch, loops))
    for piece in _row_pieces(sch, info, sch.get_loops(info.block_rv)[-1]):
        vectorize_loop(sch, piece, lanes)


def _row_pieces(sch: Schedule, info: SBlockInfo, row) -> list:
    """The row loop cut where each input of a concatenation along it starts (`_segment_bounds`), or the row whole
    where there is no cut, more than MAX_PIECES pieces, or a partition TVM refuses."""
    bounds = _segment_bounds(sch, info, loop_extent(sch, row))
    if not bounds or len(bounds) >= MAX_PIECES:
        return [row]
    sizes = [end - start for start, end in zip([0, *bounds], bounds)]
    try:
        return sch.loop_partition(row, [*sizes, None])
    except ScheduleError:
        return [row]


_COMPARISONS = (tvm.tirx.LT, tvm.tirx.LE, tvm.tirx.GT, tvm.tirx.GE)


def crossing(node: tvm.tirx.PrimExpr, var: tvm.tirx.Var) -> int | None:
    """The first value of `var` at which `node`, a comparison of `var + k` with a constant (either side), gives
    the other answer than at the value before (None for any other expression)."""
    if not isinstance(node, _COMPARISONS):
        return None
    for left, (this, other) in ((True, (node.a, node.b)), (False, (node.b, node.a))):
        shifted = _shifted_var(this)
        if shifted is not None and shifted[0].same_as(var) and isinstance(other, tvm.tirx.IntImm):
            # v + k <= c and v + k > c change at c - k + 1 (as c >= v + k and c < v + k do); <, >= at c - k
            past = isinstance(node, (tvm.tirx.LE, tvm.tirx.GT) if left else (tvm.tirx.LT, tvm.tirx.GE))
            return int(other) - shifted[1] + int(past)
    return None


def _segment_bounds(sch: Schedule, info: SBlockInfo, extent: int | None) -> list[int]:
    """Where the block's innermost iter crosses a constant its conditions compare it with (a concatenation's
    inputs along the innermost axis: NHWC channels, `c < 24`, `c >= 48`; a pad's edge), inside the row: the
    points a loop partition cuts the row at, so that each piece reads one input with no select. Vectorized
    whole, a row of 4 x 24 channels (a detector's FPN concat) read every vector from all four inputs and
    selected: 361 us alone at 160x160x96, 90 us cut into its inputs (rapidocr_det, znver4)."""
    if extent is None:
        return []
    var = info.iters[-1].var
    found: set[int] = set()

    def visit(node: tvm.tirx.PrimExpr) -> None:
        bound = crossing(node, var)
        if bound is not None:
            found.add(bound)

    tvm_ffi.structural_walk(sch.get(info.block_rv).body, (_COMPARISONS, visit))
    return sorted(bound for bound in found if 0 < bound < extent)


def _contiguous_spatial(sch: Schedule, info: SBlockInfo) -> int | None:
    """The position of the one spatial iter that indexes the last dimension of every read that depends on an
    iter there (after inlining: a layer norm's variance reads its input and the mean; Magika's GELU + global max
    pool its conv's output and the bias), if no reduction iter indexes it."""
    used: set = set()
    for read in sch.get(info.block_rv).reads:
        used |= set(collect_vars_used_in_prim_expr(read.region[-1].min))
    spatial = [i for i, it in enumerate(info.iters) if it.kind == "S" and it.var in used]
    return spatial[-1] if len(spatial) == 1 and not any(it.var in used for it in info.iters if it.kind == "R") \
        else None


def _row_tail(sch: Schedule, info: SBlockInfo) -> int:
    """How many of the block's last iters are reductions that index its read's last dimensions in order (an NCHW
    global pool's H and W): the row the reduction walks contiguously."""
    read = sch.get(info.block_rv).reads[0].region
    count = 0
    for it, dim in zip(reversed(info.iters), reversed(read)):
        if it.kind != "R" or not isinstance(dim.min, tvm.tirx.Var) or not dim.min.same_as(it.var):
            break
        count += 1
    return count


def lane_partials(sch: Schedule, loop, lanes: int, factor_axis: int):
    """Split a reduction `loop` into lanes and rfactor them (the partials block at `factor_axis` of its buffer, and
    the lane count), or None where the loop is too short. The lanes are the loop's largest divisor up to `lanes` (no
    predicate: TVM 0.27's rfactor under compute_at gave wrong sums with a cut-short last step), if at least
    MIN_PARTIALS: PP-OCRv5's 18385 classes take 5 independent sums instead of one chain."""
    extent = loop_extent(sch, loop)
    if extent is None:
        return None
    width = largest_divisor(extent, lanes)
    if width < MIN_PARTIALS or extent < 2 * width:
        return None
    lane = sch.split(loop, [None, width])[1]
    return sch.rfactor(lane, factor_axis=factor_axis), width


def _lane_partials_along_row(sch: Schedule, info: SBlockInfo, spatial: list, reduction: list, lanes: int) -> None:
    """Where a reduction walks a contiguous row (`_row_tail`), sum it in one partial per vector lane (rfactor,
    vectorized) instead of one chain that waits for each add: an NCHW global average pool over 20x20 ran 0.083 ms
    (ONNX Runtime 0.024). The lanes are the row's largest divisor up to a vector, if at least MIN_PARTIALS."""
    tail = _row_tail(sch, info)
    if not tail:
        return
    split = lane_partials(sch, sch.fuse(*reduction[-tail:]) if tail > 1 else reduction[-1], lanes, 0)
    if split is None:
        return
    partials, _ = split
    if not spatial:
        sch.vectorize(sch.get_loops(partials)[-1])
        return
    # the partials of a row computed where its sum is, under the same (parallel) spatial loops; there the new loops
    # follow the partials block's iters, the lane first: the walk along the row goes outside it
    sch.compute_at(partials, spatial[-1], preserve_unit_loops=True)
    loops = sch.get_loops(partials)
    at = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(spatial[-1])))
    lane, *rest = loops[at + 1:]
    along = [loop for loop in rest if loop_extent(sch, loop) != 1]
    if along:
        sch.reorder(along[-1], lane)
    sch.vectorize(lane)


def _schedule_reduction(sch: Schedule, info: SBlockInfo, target: tvm.target.Target) -> None:
    """A one-input reduction: walk its read contiguously (the spatial axis that indexes the read's last
    dimension innermost, vectorized, split in parallel), or else run its spatial loops in parallel."""
    loops = [it.loop_rv for it in info.iters]
    work = iterations(sch, loops)
    spatial = [loop for loop, it in zip(loops, info.iters) if it.kind == "S"]
    reduction = [loop for loop, it in zip(loops, info.iters) if it.kind == "R"]
    inner = _contiguous_spatial(sch, info)
    lanes = vector_lanes(sch, info.block_rv, target)
    if inner is None:
        sch.reorder(*spatial, *reduction)
        _lane_partials_along_row(sch, info, spatial, reduction, lanes)
        parallel_loops(sch, spatial, work)
        return
    channel = loops[inner]
    outer_spatial = [loop for loop in spatial if not loop.same_as(channel)]
    width = step_lanes(loop_extent(sch, channel) or 0, lanes)
    if width is not None:
        channel_outer, channel = sch.split(channel, [None, width])
        outer_spatial.append(channel_outer)
    sch.reorder(*outer_spatial, *reduction, channel)
    parallel_loops(sch, outer_spatial, work)
    vectorize_loop(sch, channel, lanes)  # the init stays in the block: vectorize refuses a decomposed update


def loop_schedule(func: tvm.tirx.PrimFunc, target: tvm.target.Target) -> Schedule | None:
    """The inline/parallel/vectorize schedule of `func` (its trace replays on the kernel, as a database
    record's does), or None for contractions and kernels not in TVM's normal form (one loop per block iter,
    each spatial or a reduction)."""
    sch = Schedule(tvm.IRModule({"main": func}))
    infos = normalize_prim_func(sch)
    if not infos or any(it.kind == "O" for info in infos for it in info.iters):
        return None
    reads = [len(sch.get(info.block_rv).reads) for info in infos if not info.is_injective()]
    if any(count != 1 for count in reads):
        return None
    try:
        for info in try_inline(sch, infos):
            if info.is_injective():
                _schedule_injective(sch, info, target)
            else:
                _schedule_reduction(sch, info, target)
    except (ScheduleError, TypeError) as exc:  # TypeError: TVM 0.27 failing to word some errors
        log_plain_loops(func, exc)
        return None
    return sch


def log_plain_loops(func: tvm.tirx.PrimFunc, exc: Exception) -> None:
    """Say which kernel keeps plain loops because a default schedule did not fit it (TVM's first message line)."""
    name = func.attrs.get("global_symbol", "a kernel") if func.attrs else "a kernel"
    log.warning("%s keeps plain loops: %s", name, str(exc).splitlines()[0])
