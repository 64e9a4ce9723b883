"""Tuning a kernel no database has starts from the best schedule of the same op at other shapes, adapted.

An NHWC conv is tuned at one shape into a "shared" database (two trials, seconds); tuning the conv at another shape
against it measures the adapted schedule first. No mocks: the schedules are built and run here.
"""

from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from workbench.compile.databases import RECORDS_FILE, WORKLOADS_FILE, open_database, tuning_folder
from workbench.compile.design_spaces import postprocs
from workbench.compile.similar_workloads import adapt, perfect_tiles, shape_of, similar, similar_schedule
from workbench.compile.targets import make_target
from workbench.compile.tasks import extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.config import TargetConfig, TuningConfig

HOST = make_target(TargetConfig())
TINY = TuningConfig(trials=2, trials_per_task=2, trials_per_iter=2, cost_model="random")


def task(op, *shapes: tuple[int, ...], names: str = "xw") -> ms.ExtractedTask:
    """The one tuning task of a Relax function applying `op` to inputs of `shapes` (named by `names`)."""
    bb = relax.BlockBuilder()
    inputs = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in zip(names, shapes)]
    with bb.function("main", inputs):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(op(*inputs)))
        bb.emit_func_output(out)
    (found,) = extract_tasks(tuning_module(bb.get(), HOST), HOST)
    return found


def tile_decisions(trace: tvm.s_tir.Trace) -> list[list[int]]:
    return [[int(f) for f in trace.decisions[inst]] for inst in trace.insts if inst.kind.name == "SamplePerfectTile"]


def conv(x: tuple[int, ...], w: tuple[int, ...]) -> ms.ExtractedTask:
    """An NHWC conv (HWIO weights, no padding): no default schedule, so its records all come from the search."""
    return task(lambda data, weight: relax.op.nn.conv2d(data, weight, data_layout="NHWC", kernel_layout="HWIO"),
                x, w)


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """A database holding a 16x16x8 -> 14x14x16 conv's records (two searched trials)."""
    folder = tmp_path_factory.mktemp("shared")
    database = tuning_folder(folder / "other", HOST)
    (result,) = tune_tasks([conv((1, 16, 16, 8), (3, 3, 8, 16))], HOST, TINY, database, folder / "logs")
    assert result.trials_run == 2 and result.best_us is not None
    return database


def test_the_same_op_at_other_shapes_is_similar_and_another_op_or_the_same_workload_is_not():
    matmul = task(relax.op.matmul, (32, 64), (64, 48)).dispatched[0]
    other_shapes = task(relax.op.matmul, (7, 40), (40, 13), names="ab").dispatched[0]  # other names, too
    assert similar(matmul, other_shapes) and similar(other_shapes, matmul)
    assert not similar(matmul, task(relax.op.matmul, (32, 64), (64, 48), names="ab").dispatched[0])  # exact
    assert not similar(task(relax.op.add, (8, 16), (8, 16)).dispatched[0],
                       task(relax.op.multiply, (8, 32), (8, 32)).dispatched[0])
    assert not similar(matmul, task(relax.op.add, (32, 64), (32, 64)).dispatched[0])
    assert shape_of(matmul).literals != shape_of(other_shapes).literals


@pytest.mark.parametrize(("factors", "extent", "expected"), [
    ([4, 4, 2, 1], 64, [8, 4, 2, 1]), ([4, 4, 2, 1], 13, [13, 1, 1, 1]), ([1, 8, 16], 7, [1, 1, 7]),
    ([2, 32], 97, [97, 1]), ([8, 6, 1, 1], 40, [8, 5, 1, 1]), ([4, 16], 1, [1, 1]), ([1, 1, 64], 96, [2, 1, 48]),
    ([2, 4, 8], 6, [1, 1, 6])])
def test_tiles_are_refit_to_a_perfect_tiling_keeping_the_inner_factors_that_divide(factors, extent, expected):
    """Prime extents, extents below the old factors: the tiles multiply to the new extent, no inner tile grows."""
    tiles = perfect_tiles(factors, extent)
    assert tiles == expected and int(np.prod(tiles)) == extent
    assert all(1 <= new <= old for new, old in zip(tiles[1:], factors[1:]))


@pytest.mark.slow
def test_every_record_of_a_similar_workload_adapts_to_awkward_extents_and_computes_the_same(shared):
    """Prime extents, extents below the old tiles: each of the shared conv's records replays on a 7x13x5 -> 5x11x11
    conv with perfect tiles, passes the postprocessors, builds and computes what numpy does."""
    new = conv((1, 7, 13, 5), (3, 3, 5, 11))
    records = open_database(shared, create=False).get_all_tuning_records()
    assert len(records) == 2
    for record in records:
        schedule = adapt(record.trace, new.dispatched[0], postprocs(new))
        assert schedule is not None
        extents = [1, 5, 11, 11, 3, 3, 5]  # n, h, w, out channels, kh, kw, in channels
        # TVM would resample a tiling that does not fit at random; the old tiles are refit instead
        assert tile_decisions(schedule.trace) == [perfect_tiles(old, extent) for old, extent
                                                  in zip(tile_decisions(record.trace), extents, strict=True)]
        kinds = [inst.kind.name for inst in schedule.trace.insts]  # the postprocessors ran: they consume the
        assert "Unannotate" in kinds[kinds.index("EnterPostproc"):]  # search's parallel/vectorize annotations
        assert_computes_conv(schedule.mod, (1, 7, 13, 5), (3, 3, 5, 11))


def assert_computes_conv(mod: tvm.IRModule, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_shape, dtype="float32"), rng.standard_normal(w_shape, dtype="float32")
    windows = np.lib.stride_tricks.sliding_window_view(x, w_shape[:2], axis=(1, 2))  # n, h, w, c, kh, kw
    expected = np.einsum("nhwcij,ijco->nhwo", windows, w)
    out = tvm.runtime.tensor(np.zeros(expected.shape, "float32"))
    tvm.compile(mod, target=HOST)["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_new_shape_starts_from_the_similar_kernels_adapted_schedule_measured_here(shared, tmp_path):
    """The own database is empty and the shared one has the conv at other shapes: tuning measures the adapted
    schedule first (a real measurement, committed as the first record), says so, and leaves the shared database
    as it was. Another op finds nothing similar there."""
    before = {name: (shared / name).read_bytes() for name in (WORKLOADS_FILE, RECORDS_FILE)}
    new = conv((1, 12, 12, 4), (3, 3, 4, 24))
    own = tuning_folder(tmp_path / "own", HOST)
    (result,) = tune_tasks([new], HOST, TINY, own, tmp_path / "logs",
                           shared=[("other (shared)", open_database(shared, create=False))])
    assert result.seeded_from == "a similar kernel (1x14x14x16 → 1x10x10x24) in other (shared)"
    assert f"started from {result.seeded_from}'s schedule" in result.flags
    assert result.as_dict()["seeded_from"] == result.seeded_from and result.trials_run == 2
    database = open_database(shared, create=False)
    (best,) = database.get_top_k(database.get_all_tuning_records()[0].workload, 1)  # what was adapted
    adapted = [perfect_tiles(old, extent) for old, extent
               in zip(tile_decisions(best.trace), [1, 10, 10, 24, 3, 3, 4], strict=True)]
    # the own database lists its records fastest first: the search's trial may have beaten the adapted one
    first = next(r for r in open_database(own, create=False).get_all_tuning_records()
                 if tile_decisions(r.trace) == adapted)
    assert 0 < min(float(s) for s in first.run_secs) < 1  # measured here
    assert_computes_conv(replay(first, new), (1, 12, 12, 4), (3, 3, 4, 24))
    assert {name: (shared / name).read_bytes() for name in before} == before

    add = task(relax.op.add, (8, 16), (8, 16))
    assert similar_schedule(add, [("other (shared)", open_database(shared, create=False))], list) is None


def replay(record: ms.database.TuningRecord, new: ms.ExtractedTask) -> tvm.IRModule:
    """The record's schedule of the task's kernel, as a build applies it."""
    schedule = tvm.s_tir.Schedule(new.dispatched[0])
    record.trace.apply_to_schedule(schedule, remove_postproc=False)
    return schedule.mod


@pytest.mark.slow
def test_a_kernel_of_the_model_tuned_first_lends_its_schedule_to_the_same_op_at_another_shape(tmp_path):
    """No shared database: of two convs of one model, the one tuned second starts from the first one's best
    schedule, adapted and measured here (its first record has the refit tiles and computes the conv)."""
    big, small = conv((1, 18, 18, 8), (3, 3, 8, 16)), conv((1, 9, 9, 8), (3, 3, 8, 24))
    own = tuning_folder(tmp_path / "own", HOST)
    both = TINY.model_copy(update={"trials": 4})  # two trials each
    first, second = tune_tasks([big, small], HOST, both, own, tmp_path / "logs")  # tuned in this order
    assert first.seeded_from is None  # the big conv: nothing tuned before it
    assert second.seeded_from == "a similar kernel (1x16x16x16 → 1x7x7x24) in the database being tuned"
    database = open_database(own, create=False)
    (lender,) = {r.workload for r in database.get_all_tuning_records()
                 if shape_of(r.workload.mod).literals == shape_of(big.dispatched[0]).literals}
    adapted = [perfect_tiles(old, extent) for old, extent
               in zip(tile_decisions(database.get_top_k(lender, 1)[0].trace), [1, 7, 7, 24, 3, 3, 8], strict=True)]
    seeded = [r for r in database.get_all_tuning_records() if tile_decisions(r.trace) == adapted
              and shape_of(r.workload.mod).literals == shape_of(small.dispatched[0]).literals]
    assert seeded and 0 < min(float(s) for s in seeded[0].run_secs) < 1
    assert_computes_conv(replay(seeded[0], small), (1, 9, 9, 8), (3, 3, 8, 24))
