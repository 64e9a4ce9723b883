"""The schedule an untuned CPU kernel that reduces rows and then uses the result gets: softmax, layer norm, RMS
norm (reductions over the innermost axis, and elementwise blocks over the same rows after them).

TVM's CPU pipeline leaves them as plain loops, one thread, each block over the whole tensor in turn. TVM 0.27's
dlight CPU rule (s_tir.dlight.cpu.Reduction) puts every block under one parallel row loop, but keeps each
reduction one scalar chain: a float sum waits for the previous add (several cycles) on every element, and the
row is read at one element per add. Here each reduction over a contiguous innermost axis is split by rfactor into one partial per vector lane
(or per the largest divisor of the row up to that), vectorized and accumulated across the row, and a short sum of
the partials, so the row is read at vector speed (`workbench bench ops` times softmax and layer norm against
ONNX Runtime). An elementwise block feeding one elementwise block of as many elements is inlined into it first
(softmax's `x - max` into its exp: see `_inline_elementwise_chains`). Then, as in dlight's rule: the leading
spatial axes every block shares are fused into the row loop (parallel when the kernel is big enough), every block
but the last is computed under it, and elementwise blocks are vectorized along the row.

A kernel fits when, in TVM's normal form, it has two or more blocks, the last elementwise, at least one
reduction, every block starts with the same spatial axes (and the last has more), and every reduction reads along
its innermost reduction axis (an NHWC mean over H and W does not: loop_schedule.py walks it with C innermost).
"""

from __future__ import annotations

import tvm
from tvm.s_tir import Schedule, ScheduleError
from tvm.s_tir.dlight.analysis import SBlockInfo, normalize_prim_func
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr

from workbench.kernels.loop_schedule import (
    iterations,
    lane_partials,
    log_plain_loops,
    parallel_loops,
    vector_lanes,
    vectorize_loop,
)


def _leading_spatial(info: SBlockInfo) -> int:
    kinds = info.dom_kind()
    return len(kinds) - len(kinds.lstrip("S"))


def _reads_along_row(sch: Schedule, info: SBlockInfo) -> bool:
    """Does every read of this reduction that varies along its innermost reduction iter, vary along it in its last
    dimension (the row is contiguous)?"""
    innermost = [it for it in info.iters if it.kind == "R"][-1].var
    for read in sch.get(info.block_rv).reads:
        indices = [collect_vars_used_in_prim_expr(r.min) for r in read.region]
        if any(innermost in used for used in indices) and innermost not in indices[-1]:
            return False
    return True


def _fits(sch: Schedule, infos: list[SBlockInfo]) -> int | None:
    """The number of leading spatial axes the kernel's blocks share, if the kernel fits (see the module)."""
    if len(infos) < 2 or not infos[-1].is_injective() or all(info.is_injective() for info in infos):
        return None
    if any(it.kind not in "SR" for info in infos for it in info.iters):
        return None
    shared = min(_leading_spatial(info) for info in infos)
    if not shared or len(infos[-1].iters) == shared:  # the last block needs a row of its own to vectorize
        return None
    reductions = [info for info in infos if not info.is_injective()]
    if any(info.dom_kind()[-1] != "R" or not _reads_along_row(sch, info) for info in reductions):
        return None
    return shared


def _lane_partials(sch: Schedule, info: SBlockInfo, lanes: int):
    """The reduction's innermost loop split into lanes and rfactored (`lane_partials`), or None where the row is
    too short."""
    loops = sch.get_loops(info.block_rv)
    return lane_partials(sch, loops[-1], lanes, len(loops) - 1)


def _is_elementwise(sch: Schedule, block) -> bool:
    return all(int(iv.iter_type) == tvm.tirx.IterVar.DataPar for iv in sch.get(block).iter_vars)


def _elements(sch: Schedule, block) -> int | None:
    """How many elements the block computes (None where a shape is symbolic)."""
    total = 1
    for iv in sch.get(block).iter_vars:
        if not isinstance(iv.dom.extent, tvm.tirx.IntImm):
            return None
        total *= int(iv.dom.extent)
    return total


def _inline_elementwise_chains(sch: Schedule) -> None:
    """Inline each elementwise block into its one consumer where that is elementwise over as many elements
    (softmax's `x - max` into its exp); otherwise TVM writes the exp over its input in place, and LLVM 22 turns the
    in-place `max(exp, x)` of TOPI's fast exp into a masked store, which Zen 1-3 run microcoded: softmax 1.6 ms,
    ONNX Runtime 0.4 (znver3, `workbench bench ops`). A per-row value (`1 / sum`) stays a block, as does a block
    that cannot be inlined (its buffer an output of the kernel)."""
    for block in sch.get_child_blocks(sch.get_sblock("root"))[:-1]:
        consumers = sch.get_consumers(block)
        if not (_is_elementwise(sch, block) and len(consumers) == 1 and _is_elementwise(sch, consumers[0])):
            continue
        elements = _elements(sch, block)
        if elements is not None and _elements(sch, consumers[0]) == elements:
            try:
                sch.compute_inline(block)
            except ScheduleError:
                continue


def _schedule(sch: Schedule, infos: list[SBlockInfo], shared: int, target: tvm.target.Target) -> None:
    lanes = vector_lanes(sch, infos[-1].block_rv, target)
    partials = [rf for rf in (_lane_partials(sch, info, lanes) for info in infos if not info.is_injective()) if rf]
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    loops = sch.get_loops(blocks[-1])
    work = iterations(sch, loops)
    row = sch.fuse(*loops[:shared]) if shared > 1 else loops[0]
    for block in reversed(blocks[:-1]):
        sch.compute_at(block, row, preserve_unit_loops=True)
    for block in blocks:
        if _is_elementwise(sch, block):
            vectorize_loop(sch, sch.get_loops(block)[-1], lanes)
    for rf, width in partials:  # loops under the row: the lane loop, unit loops, the loop along the row; lanes inside
        loops = sch.get_loops(rf)
        lane = next(loop for loop in loops[1:] if int(sch.get(loop).extent) == width)
        sch.reorder(loops[-1], lane)
        sch.vectorize(lane)
    parallel_loops(sch, [row], work)


def row_schedule(func: tvm.tirx.PrimFunc, target: tvm.target.Target) -> Schedule | None:
    """The row schedule of `func` (its trace replays on the kernel), or None where it does not fit."""
    sch = Schedule(tvm.IRModule({"main": func}))
    infos = normalize_prim_func(sch)
    shared = _fits(sch, infos) if infos else None
    if shared is None:
        return None
    try:
        _inline_elementwise_chains(sch)
        _schedule(sch, normalize_prim_func(sch), shared, target)
    except (ScheduleError, TypeError) as exc:  # TypeError: TVM 0.27 failing to word some errors
        log_plain_loops(func, exc)
        return None
    return sch
