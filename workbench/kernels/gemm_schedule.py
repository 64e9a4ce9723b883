"""The schedule an untuned CPU matmul-like kernel gets: a register-blocked tile, vectorized, parallel when big.

TVM's CPU pipeline leaves dense, matmul and batch_matmul kernels (as LegalizeOps writes them, with their fused
elementwise epilogue: bias, residual add, GELU) as plain loops: one thread, one scalar multiply-add per output
element and K step, the sum stored and reloaded each time: an untuned transformer block or Magika spent nearly
all their time in such loops, an order of magnitude behind ONNX Runtime (`workbench bench ops`' matmul rows).

Here a tile of up to 8 output rows x one or two vector widths of output columns (12 accumulator vectors at most:
room for them, the B row and A's broadcast in AVX2's 16 registers) accumulates across the whole K loop, which runs
outside the tile loops: each K step loads one row of B's tile once and uses it for every row of the tile. The
rows are unrolled, the column loop vectorized; the epilogue (or, without one, the write-back of the tile) runs
per tile, vectorized, so the sums never make a round trip through a full-size intermediate. Batch, row-tile and
column-tile loops are fused and run in parallel when the kernel has enough vector multiply-adds to pay for the
thread pool. Tiles take the largest divisor of M (and N, below two vector widths) that fits, as the packed conv
schedule does, so no predicate guards the inner loops. A transposed B (attention's Q K^T, B read [.., n, k]) gets
the same tile: its column vector is a strided load.

A kernel fits when, after its elementwise producers are inlined, it is one reduction over two inputs, every index
of which is a block iter (or a constant): a spatial iter indexing the output's last dimension that one input (B)
reads and the other (A) does not, reduction iters both read, and at most one elementwise block after it. A 1x1
conv in NCHW is one (the weight times the image, the columns along W); other relax convs (an index like `h + kh`)
and everything else keep their old schedule (default_schedule.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm.s_tir import Schedule, ScheduleError
from tvm.s_tir.dlight.analysis import SBlockInfo, normalize_prim_func
from tvm.s_tir.dlight.base.common_schedules import try_inline
from tvm.target.codegen import llvm_get_vector_width, target_has_features

from workbench.kernels.loop_schedule import MIN_PARALLEL_ITERATIONS, largest_divisor, log_plain_loops

ACCUMULATORS = 12  # vector registers a tile's sums may take
MAX_ROWS = 8  # output rows per tile
GEMV_CHUNK_BYTES = 4096  # a GEMV's columns per task: one page of each row of B per K step, read in order
GEMV_K_STEPS = 8  # rows of B a GEMV adds into a vector of sums while it sits in a register
GEMV_TASKS = 4  # column chunks a GEMV is cut into at least: more, narrower chunks read B in shorter runs (bench ops)
GEMV_MIN_WIDTH = 4  # a narrower vector (columns a prime, say) is no GEMV schedule: the register tile takes it


@dataclass(frozen=True)
class GemmShape:
    """A matmul-like block's loops, by the part they play (the positions of its iters in `info.iters`)."""

    info: SBlockInfo
    outer: tuple[int, ...]  # batch and any other spatial iters: outside the tile
    row: int | None  # the last spatial iter only A reads (None for a GEMV: one row)
    col: int  # the spatial iter of the output's last dimension, only B reads
    reduction: tuple[int, ...]
    epilogue: SBlockInfo | None
    b_rows: bool = True  # B is read along its last dimension by the column (B[k, n], not a transposed B[n, k])


def vector_bits(target: tvm.target.Target) -> int:
    """The width of the vectors the tile's columns fill: 512 bits with AVX-512, 256 on other x86 CPUs (LLVM
    reports 512 for them too), else what LLVM reports."""
    if target_has_features("avx512f", target):
        return 512
    width = max(llvm_get_vector_width(target), 128)
    return min(width, 256) if target_has_features("avx", target) or target_has_features("sse2", target) else width


def _index_var(expr) -> tvm.tirx.Var | None | bool:
    """The var an index is, None for a constant, False for anything else (`h + kh`)."""
    if isinstance(expr, tvm.tirx.Var):
        return expr
    return None if isinstance(expr, tvm.tirx.IntImm) else False


def _indices(region) -> list | None:
    """The var (or None, a constant) of each dimension of a one-element access region, or None for any other."""
    found = [_index_var(r.min) for r in region]
    if any(v is False for v in found) or any(int(r.extent) != 1 for r in region if isinstance(r.extent, tvm.tirx.IntImm)):
        return None
    return found


def gemm_shape(sch: Schedule) -> GemmShape | None:
    """The matmul in `sch`'s main function (its elementwise producers inlined in `sch`), or None when it holds
    none the schedule fits."""
    infos = normalize_prim_func(sch)
    if not infos or any(it.kind == "O" for info in infos for it in info.iters):
        return None
    if sum(not info.is_injective() for info in infos) != 1:
        return None
    infos = try_inline(sch, infos)
    if not 1 <= len(infos) <= 2 or infos[0].is_injective() or (len(infos) == 2 and not infos[1].is_injective()):
        return None
    info = infos[0]
    block = sch.get(info.block_rv)
    if len(block.reads) != 2 or len(block.writes) != 1:
        return None
    reads = [_indices(read.region) for read in block.reads]
    written = _indices(block.writes[0].region)
    if reads[0] is None or reads[1] is None or not written or written[-1] is None:
        return None
    position = {it.var: i for i, it in enumerate(info.iters)}
    used = [{v for v in read if v is not None} for read in reads]
    col_var = written[-1]
    if col_var not in position or info.iters[position[col_var]].kind != "S":
        return None
    b = 0 if col_var in used[0] else 1
    a = 1 - b
    if col_var not in used[b] or col_var in used[a]:
        return None
    reduction = tuple(i for i, it in enumerate(info.iters) if it.kind == "R")
    if not reduction or any(info.iters[i].var not in used[a] or info.iters[i].var not in used[b] for i in reduction):
        return None
    rows = [i for i, it in enumerate(info.iters) if it.kind == "S" and it.var in used[a] and it.var not in used[b]]
    row = rows[-1] if rows else None
    col = position[col_var]
    for i in (row, col):
        if i is not None and not isinstance(sch.get(info.iters[i].loop_rv).extent, tvm.tirx.IntImm):
            return None
    outer = tuple(i for i, it in enumerate(info.iters) if it.kind == "S" and i not in (row, col))
    return GemmShape(info, outer, row, col, reduction, infos[1] if len(infos) == 2 else None,
                     b_rows=reads[b][-1] is not None and reads[b][-1].same_as(col_var))


def tile(rows: int, cols: int, lanes: int) -> tuple[int, int]:
    """(rows, columns) of the output tile: two vectors of columns where they divide N, else one, else the largest
    divisor of N up to two vectors; as many rows (dividing M) as the accumulator vectors allow."""
    if cols % (2 * lanes) == 0:
        width = 2 * lanes
    elif cols % lanes == 0:
        width = lanes
    else:
        width = largest_divisor(cols, 2 * lanes)
    vectors = -(-width // lanes)
    return largest_divisor(rows, min(MAX_ROWS, ACCUMULATORS // vectors)), width


def _vectorize(sch: Schedule, loop, lanes: int, unroll: bool = True) -> None:
    """Vectorize `loop`: in vectors of `lanes` (the pieces unrolled, with `unroll`) when it is a multiple, else
    whole."""
    extent = int(sch.get(loop).extent)
    if extent < 2:
        return
    if extent % lanes == 0 and extent > lanes:
        pieces, loop = sch.split(loop, [None, lanes])
        sch.vectorize(loop)
        if unroll:
            sch.unroll(pieces)
        return
    sch.vectorize(loop)


def _work(sch: Schedule, loops: list) -> int | None:
    total = 1
    for loop in loops:
        extent = sch.get(loop).extent
        if not isinstance(extent, tvm.tirx.IntImm):
            return None
        total *= int(extent)
    return total


def _schedule_gemv(sch: Schedule, shape: GemmShape, lanes: int) -> None:
    """A matrix-vector product (one row of A, B read row by row): each task owns a chunk of output columns and, K
    step after K step, adds A's element times that chunk of B's row to the chunk's sums. B, the large operand (a
    fully connected layer's weights at batch 1), is then read in order, a page per row per task, at memory speed;
    the register tile's column strip would jump a whole row of B at every K step instead."""
    info = shape.info
    block = info.block_rv
    loops = [it.loop_rv for it in info.iters]
    work = _work(sch, loops)
    n = int(sch.get(loops[shape.col]).extent)
    width = gemv_width(n, lanes)
    vectors = n // width
    most = max(1, min(GEMV_CHUNK_BYTES * 8 // sch.get(block).writes[0].source.dtype.bits // width,
                      vectors // GEMV_TASKS))
    chunk = width * largest_divisor(vectors, most)
    col_outer, col_inner = sch.split(loops[shape.col], [None, chunk])
    outer = [loops[i] for i in shape.outer] + [col_outer]
    reduction = [loops[i] for i in shape.reduction]
    sch.reorder(*outer, *reduction, col_inner)
    k = reduction[-1]
    steps = largest_divisor(int(sch.get(k).extent), GEMV_K_STEPS) if isinstance(sch.get(k).extent, tvm.tirx.IntImm) else 1
    if chunk > width:
        pieces, col_inner = sch.split(col_inner, [None, width])
        if steps > 1:  # each vector of sums loaded once for `steps` rows of B, not once per row
            k_outer, k_inner = sch.split(k, [None, steps])
            sch.reorder(k_outer, pieces, k_inner, col_inner)
            sch.unroll(k_inner)
            reduction = [*reduction[:-1], k_outer]
    sch.vectorize(col_inner)  # before decompose_reduction: only a whole reduction block may be vectorized
    if len(outer) > 1:
        outer = [sch.fuse(*outer)]
    if work is None or work // lanes >= MIN_PARALLEL_ITERATIONS:
        sch.parallel(outer[0])
    if shape.epilogue is not None:
        sch.reverse_compute_at(shape.epilogue.block_rv, outer[0])
        _vectorize(sch, sch.get_loops(shape.epilogue.block_rv)[-1], width, unroll=False)
    init = sch.decompose_reduction(block, reduction[0])
    _vectorize(sch, sch.get_loops(init)[-1], width, unroll=False)


def gemv_width(columns: int, lanes: int) -> int:
    """A GEMV's vector: the target's lanes where they divide the columns, else the largest divisor below (no
    predicate in the loop)."""
    return lanes if columns % lanes == 0 else largest_divisor(columns, lanes)


def _schedule(sch: Schedule, shape: GemmShape, target: tvm.target.Target) -> None:
    """Tile the matmul in `sch` (outer loops, K, the tile's rows unrolled, its columns vectorized), compute the
    epilogue (or a write-back) per tile, and split the init off the reduction."""
    info = shape.info
    block = info.block_rv
    loops = [it.loop_rv for it in info.iters]
    lanes = max(2, vector_bits(target) // sch.get(block).writes[0].source.dtype.bits)
    if shape.row is None and shape.b_rows and gemv_width(int(sch.get(loops[shape.col]).extent), lanes) >= GEMV_MIN_WIDTH:
        _schedule_gemv(sch, shape, lanes)
        return
    work = _work(sch, loops)
    row_extent = int(sch.get(loops[shape.row]).extent) if shape.row is not None else 1
    col_extent = int(sch.get(loops[shape.col]).extent)
    rows, cols = tile(row_extent, col_extent, lanes)
    outer = [loops[i] for i in shape.outer]
    row_inner = []
    if shape.row is not None:
        row_outer, row_in = sch.split(loops[shape.row], [None, rows])
        outer.append(row_outer)
        row_inner = [row_in]
    col_outer, col_inner = sch.split(loops[shape.col], [None, cols])
    if rows < row_extent < col_extent:  # B larger than A: each column of tiles reads its part of B once, A stays cached
        outer.insert(len(outer) - 1, col_outer)
    else:
        outer.append(col_outer)
    col_vectors = []
    if cols % lanes == 0 and cols > lanes:
        vectors, col_inner = sch.split(col_inner, [None, lanes])
        col_vectors = [vectors]
    reduction = [loops[i] for i in shape.reduction]
    sch.reorder(*outer, *reduction, *row_inner, *col_vectors, col_inner)
    if cols > 1:
        sch.vectorize(col_inner)  # before decompose_reduction: only a whole reduction block may be vectorized
    if work is None or work // lanes >= MIN_PARALLEL_ITERATIONS:
        outer = [sch.fuse(*outer)] if len(outer) > 1 else outer
        sch.parallel(outer[0])
    tile_loop = outer[-1]
    epilogue = shape.epilogue.block_rv if shape.epilogue is not None else sch.cache_write(block, 0, "global")
    sch.reverse_compute_at(epilogue, tile_loop)
    epilogue_loops = sch.get_loops(epilogue)
    at = next(i for i, loop in enumerate(epilogue_loops) if sch.get(loop).same_as(sch.get(tile_loop)))
    inner = epilogue_loops[at + 1:]
    if inner:
        _vectorize(sch, inner[-1], lanes)
    init = sch.decompose_reduction(block, reduction[0])
    _vectorize(sch, sch.get_loops(init)[-1], lanes)
    for loop in row_inner + col_vectors:
        sch.unroll(loop)


def gemm_schedule(func: tvm.tirx.PrimFunc, target: tvm.target.Target) -> Schedule | None:
    """The register-blocked schedule of a matmul-like kernel (its trace replays on the kernel, as a database
    record's does), or None when `func` is not one or the schedule does not fit it (logged)."""
    sch = Schedule(tvm.IRModule({"main": func}))
    try:
        shape = gemm_shape(sch)
        if shape is None:
            return None
        _schedule(sch, shape, target)
    except (ScheduleError, TypeError) as exc:  # TypeError: TVM 0.27 failing to word some errors
        log_plain_loops(func, exc)
        return None
    return sch
