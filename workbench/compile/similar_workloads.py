"""A first candidate for a kernel no database has: the best schedule of the same op at other shapes, adapted.

A shared database (compile/schedule_sources.py) helps a new task only when it holds the exact workload; a model
with another input size or channel count has none. But a schedule's trace is mostly shape-independent (which
blocks are tiled, cached, parallelized, vectorized, unrolled); only its tile sizes are tied to loop extents. So a
workload whose TIR equals the new one's up to its integer literals and buffer names (its `skeleton`: the same op,
other shapes) lends its best record's trace, replayed on the new kernel with every `SamplePerfectTile` decision
turned into a perfect tiling of the new loop's extent and the task's postprocessors run again in the trace's
postprocessing section, as MetaSchedule's search does for a database trace (the caller checks that it fits the
search: compile/trace_fit.py). The caller measures it before committing it; nothing here writes a database.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm.s_tir import meta_schedule as ms

from workbench.kernels.loop_schedule import largest_divisor

CANDIDATES = 3  # similar workloads tried, closest first, before giving up (a failed adaptation is cheap)
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")  # an integer literal, not a digit of a name (int64) or a float


@dataclass(frozen=True)
class Shape:
    """A workload's TIR with its integer literals taken out (`skeleton`), and those literals in order."""

    skeleton: str
    literals: tuple[int, ...]


_SHAPES: dict[str, Shape] = {}  # by structural hash: databases hold hundreds of workloads, read once per process


def shape_of(mod: tvm.IRModule) -> Shape:
    """The workload's skeleton and literals; parameter names are numbered, as they come from the model's names."""
    key = ms.utils.shash2hex(mod)
    if key not in _SHAPES:
        text = mod.script()
        for index, param in enumerate(mod["main"].params):
            text = re.sub(rf"(?<![\w.]){re.escape(param.name)}(?![\w.])", f"p{index}", text)
        _SHAPES[key] = Shape(_INT.sub("#", text), tuple(int(n) for n in _INT.findall(text)))
    return _SHAPES[key]


def similar(a: tvm.IRModule, b: tvm.IRModule) -> bool:
    """The same op at other shapes: equal skeletons, other literals (the same workload is an exact match)."""
    shape_a, shape_b = shape_of(a), shape_of(b)
    return shape_a.skeleton == shape_b.skeleton and shape_a.literals != shape_b.literals


def distance(a: Shape, b: Shape) -> float:
    """How far apart two shapes of one skeleton are: the sum of their literals' log ratios."""
    return sum(abs(math.log((abs(x) + 1) / (abs(y) + 1))) for x, y in zip(a.literals, b.literals))


def perfect_tiles(factors: list[int], extent: int) -> list[int]:
    """`factors` (a tiling of another extent, outermost first) made a perfect tiling of `extent`: from the
    innermost out, each keeps its factor where it divides what is left, else the largest divisor below it; the
    outermost takes the rest."""
    inner = []
    left = extent
    for factor in reversed(factors[1:]):
        tile = largest_divisor(left, factor)
        inner.append(tile)
        left //= tile
    return [left, *reversed(inner)]


def _retile(sch: tvm.s_tir.Schedule) -> Callable:
    """A decision provider for `Trace.apply_to_schedule`: SamplePerfectTile decisions fit to the loop as bound
    in `sch` (the new kernel's); every other decision kept."""

    def provide(inst, inputs, _attrs, decision):
        if inst.kind.name != "SamplePerfectTile":
            return decision
        extent = int(sch.get(inputs[0]).extent)
        return perfect_tiles([int(f) for f in decision], extent)

    return provide


def adapt(trace: tvm.s_tir.Trace, mod: tvm.IRModule, postprocs: list[ms.postproc.Postproc]) -> tvm.s_tir.Schedule | None:
    """Another shape's trace replayed on `mod` with its tiles refit and the postprocessors applied; None where the
    trace does not apply (a compute location that no longer exists) or a postprocessor rejects it."""
    sch = tvm.s_tir.Schedule(mod)
    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=_retile(sch))
        sch.enter_postproc()  # what the postprocessors add stays in the section the search replays them into
        if all(post.apply(sch) for post in postprocs):
            return sch
    except Exception as error:  # noqa: BLE001 - TVM raises ScheduleError, InternalError, ...: any means "does not fit"
        logging.getLogger("workbench.tuning").debug("a similar schedule did not apply: %s", error)
    return None


def _candidates(mod: tvm.IRModule, databases: list[tuple[str, ms.database.Database]]
                ) -> list[tuple[str, ms.database.Database, ms.database.Workload]]:
    """The databases' workloads similar to `mod`, each with its database and that database's name, closest in
    shape first."""
    found = [(distance(shape_of(mod), shape_of(workload.mod)), name, database, workload)
             for name, database in databases
             for workload in {record.workload for record in database.get_all_tuning_records()}
             if similar(mod, workload.mod)]
    return [(name, database, workload) for _, name, database, workload in sorted(found, key=lambda f: f[0])]


_BUFFER = re.compile(r"T\.Buffer\(\(((?:[^()]|\([^()]*\))*)\)")  # a buffer's shape tuple in TVMScript


def _output_shape(mod: tvm.IRModule) -> str:
    """The kernel's last buffer's shape (its output, `64x40`), to name a workload in a label."""
    shapes = _BUFFER.findall(mod.script())
    return "x".join(_INT.findall(shapes[-1])) if shapes else "?"


def similar_schedule(task: ms.ExtractedTask, databases: list[tuple[str, ms.database.Database]],
                     postprocs: Callable[[], list[ms.postproc.Postproc]]) -> tuple[str, tvm.s_tir.Schedule] | None:
    """The best record of the closest similar workload in `databases` (read only) adapted to the task's kernel,
    and a label saying where it came from (`a similar kernel (1x32x32x32 → 1x16x16x64) in quickstart (shared)`);
    the next closest where one does not adapt, at most CANDIDATES; None where none is similar or adapts.
    `postprocs` gives the task's search's postprocessors (asked only once there is a candidate: a TuneContext)."""
    mod = task.dispatched[0]
    candidates = [(name, workload, best[0]) for name, database, workload in _candidates(mod, databases)
                  if (best := database.get_top_k(workload, 1))]  # a workload with only failed records has none
    post = postprocs() if candidates else []
    for name, workload, record in candidates[:CANDIDATES]:
        schedule = adapt(record.trace, mod, post)
        if schedule is not None:
            return f"a similar kernel ({_output_shape(workload.mod)} → {_output_shape(mod)}) in {name}", schedule
    return None
