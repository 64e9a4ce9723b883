"""One bad schedule costs itself, never the tuning run.

The tuned ordering sweep died in tuning (`old_outputs.size() == new_outputs.size()`): a similar kernel's adapted
schedule had its postprocessors recorded into the trace's body, so MetaSchedule's search, replaying it at other
tiles, could not, and the C++ search ended the whole run. Here such a "baked" trace is made the way the old
adaptation made it, from a real design space's sample, and must be caught before it is offered; and a search
that fails anyway ends only its own task. No mocks: the schedules are built and run here.
"""

import logging

import pytest
import tvm
from test_similar_schedules import HOST, task
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from workbench.compile.databases import RECORDS_FILE, open_database, tuning_folder
from workbench.compile.design_spaces import postprocs, search_mutators, tune_context
from workbench.compile.similar_workloads import adapt
from workbench.compile.tasks import task_records
from workbench.compile.trace_fit import misfit
from workbench.compile.tune import tune_tasks
from workbench.config import TuningConfig

SMALL = TuningConfig(trials=16, trials_per_task=4, trials_per_iter=4, cost_model="random")


def sampled_trace(of: ms.ExtractedTask) -> tvm.s_tir.Trace:
    """One sample of the task's design space (tiles decided, no postprocessor run yet): what a search measures."""
    return tune_context(of, 1, "replay-trace").generate_design_space()[0].trace


def baked(trace: tvm.s_tir.Trace, of: ms.ExtractedTask) -> tvm.s_tir.Schedule:
    """`trace` on the task's kernel with its postprocessors run outside a postprocessing section, as the similar-
    kernel seed once was."""
    sch = tvm.s_tir.Schedule(of.dispatched[0])
    trace.apply_to_schedule(sch, remove_postproc=True)
    assert all(post.apply(sch) for post in postprocs(of))
    return sch


def commit(database: ms.database.Database, of: ms.ExtractedTask, schedule: tvm.s_tir.Schedule) -> None:
    """A record of `schedule` for the task, as fast as a record gets (so the search starts from it)."""
    database.commit_tuning_record(ms.database.TuningRecord(
        schedule.trace, database.commit_workload(of.dispatched[0]), [1e-7], HOST,
        ms.arg_info.ArgInfo.from_entry_func(schedule.mod)))


@pytest.fixture(scope="module")
def convs() -> tuple[ms.ExtractedTask, ms.ExtractedTask]:
    """Two padded NCHW convs (the sweep's) of one skeleton at other shapes: the pad's compute location is a
    decision the search mutates."""
    def conv(name: str, x: tuple[int, ...], w: tuple[int, ...]) -> ms.ExtractedTask:
        found = task(lambda data, weight: relax.op.nn.conv2d(data, weight, padding=1), x, w)
        return ms.ExtractedTask(name, found.mod, found.target, found.dispatched, found.weight)

    return conv("conv_a", (1, 8, 16, 16), (16, 8, 3, 3)), conv("conv_b", (1, 4, 12, 12), (24, 4, 3, 3))


def kinds(trace: tvm.s_tir.Trace) -> list[str]:
    return [inst.kind.name for inst in trace.insts]


def test_an_adapted_schedule_keeps_its_postprocessing_apart_and_a_baked_one_is_a_misfit(convs):
    """The similar kernel's trace, adapted, replays after every mutation the search makes; the same trace with its
    postprocessors baked in does not once the pad's compute location moves (the sweep's very error), and `misfit`
    says so."""
    lender, new = convs
    mod, search = new.dispatched[0], search_mutators(new)
    trace = sampled_trace(lender)
    adapted = adapt(trace, mod, postprocs(new))
    assert adapted is not None and "EnterPostproc" in kinds(adapted.trace)
    assert "Parallel" in kinds(adapted.trace)[kinds(adapted.trace).index("EnterPostproc"):]  # postprocessors ran
    assert misfit(mod, adapted.trace, search) is None
    bad = baked(sampled_trace(new), new)
    assert "EnterPostproc" not in kinds(bad.trace)
    assert misfit(mod, bad.trace, []) is None  # as it stands it replays: only a mutation shows it
    reason = misfit(mod, bad.trace, search)
    assert reason.startswith("it does not replay once Mutate") and "old_outputs.size() == new_outputs.size()" in reason
    assert misfit(mod, sampled_trace(new), search) is None  # a search's own sample fits


@pytest.mark.slow
def test_a_shared_schedule_that_would_break_the_search_is_not_offered(convs, tmp_path, caplog):
    """A shared database holds a baked record for the very workload: it is skipped with the reason logged, and the
    task is tuned from the design space to its budget."""
    _lender, new = convs
    shared = open_database(tuning_folder(tmp_path / "shared", HOST), create=True)
    commit(shared, new, baked(sampled_trace(new), new))
    with caplog.at_level(logging.WARNING, logger="workbench.tuning"):
        (result,) = tune_tasks([new], HOST, SMALL, tuning_folder(tmp_path / "own", HOST), tmp_path / "logs",
                               shared=[("baked (shared)", shared)])
    assert result.seeded_from is None and result.failed is None
    assert result.trials_run == result.budget and result.best_us is not None
    assert "the schedule from baked (shared) is not offered: it does not replay once Mutate" in caplog.text


@pytest.mark.slow
def test_a_failed_search_drops_the_records_that_break_it_and_searches_again(convs, tmp_path, caplog):
    """The task's own database (an earlier run's) holds a baked record; its search stops with an error while that
    record is there: the record is dropped, the task searched again to its budget, and the next task tuned."""
    first, second = convs
    folder = tuning_folder(tmp_path / "own", HOST)
    commit(open_database(folder, create=True), first, baked(sampled_trace(first), first))
    baked_line = (folder / RECORDS_FILE).read_text()

    def progress(result) -> None:
        """An error inside the search while the baked record is in the database (MetaSchedule's own may come
        first: either way the search stops)."""
        if result.name == first.task_name and result.trials_run and baked_line in (folder / RECORDS_FILE).read_text():
            raise RuntimeError("the search stopped")

    with caplog.at_level(logging.WARNING, logger="workbench.tuning"):
        results = tune_tasks([first, second], HOST, SMALL, folder, tmp_path / "logs", progress=progress)
    assert [r.failed for r in results] == [None, None]
    assert results[0].trials == results[0].budget and results[1].trials_run == results[1].budget
    assert "a record that breaks its search is dropped from the database: it does not replay" in caplog.text
    database = open_database(folder, create=False)
    records = task_records(database, first.dispatched[0])
    assert records and all(misfit(first.dispatched[0], r.trace, search_mutators(first)) is None for r in records)


@pytest.mark.slow
def test_a_search_that_keeps_failing_ends_its_task_with_the_reason_and_the_next_is_tuned(convs, tmp_path):
    """No record explains the error: the task is marked failed (the tune table's note says why), not searched in
    hot rounds, and the other task is tuned to its budget."""
    first, second = convs

    def progress(result) -> None:
        """An error inside every search of the first task (once it has failed, its reports are not)."""
        if result.name == first.task_name and result.trials_run and not result.failed:
            raise RuntimeError("the search stopped")

    results = tune_tasks([first, second], HOST, SMALL.model_copy(update={"hot_trials": 8}),
                         tuning_folder(tmp_path / "own", HOST), tmp_path / "logs", progress=progress)
    assert results[0].failed == "RuntimeError: the search stopped"
    assert "search failed: RuntimeError: the search stopped" in results[0].flags
    assert results[0].as_dict()["failed"] == results[0].failed
    assert results[1].failed is None and results[1].trials_run >= results[1].budget  # and the hot trials went here


@pytest.mark.slow
def test_the_orderings_sweep_in_small_tunes_every_kernel_and_commits_only_records_that_fit(tmp_path):
    """convnet_small's kernels under two orderings (fold then fuse, fuse first): the unfused convs seed each other
    (similar kernels) next to the fused one, as the tuned ordering sweep's union had them. Every task is tuned to its
    budget and every record the database holds replays after the search's mutations (the similar-kernel seed did
    not: its postprocessors were in the trace's body)."""
    from workbench.compile.tasks import extract_tasks, tuning_module
    from workbench.config import validate
    from workbench.stages import optimize, prepare

    base = {"name": "orderings", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}}}
    prepared = prepare(validate({**base, "pipeline": "fold_constant,fold_batchnorm,fuse,dce"}, "base"), tmp_path)
    union: dict[str, ms.ExtractedTask] = {}
    for pipeline in ("fold_constant,fold_batchnorm,fuse,dce", "fuse,fold_constant,fold_batchnorm,dce"):
        module = optimize(prepared, validate({**base, "pipeline": pipeline}, pipeline).pipeline, stats=False).module
        for found in extract_tasks(tuning_module(module, HOST), HOST):
            union.setdefault(ms.utils.shash2hex(found.dispatched[0]), found)
    by_name = {found.task_name: found for found in union.values()}
    tasks = [by_name["conv2d1"], by_name["fused_conv2d_add_relu"], by_name["conv2d"]]  # the last seeded by the first
    folder = tuning_folder(tmp_path / "union", HOST)
    results = tune_tasks(tasks, HOST, SMALL, folder, tmp_path / "logs")
    assert [(r.failed, r.trials_run == r.budget) for r in results] == [(None, True)] * 3
    assert results[2].seeded_from is not None and results[2].seeded_from.startswith("a similar kernel")
    database = open_database(folder, create=False)
    for found, result in zip(tasks, results):
        mod, search = found.dispatched[0], search_mutators(found)
        records = task_records(database, mod)
        assert len(records) == result.budget and all(misfit(mod, r.trace, search) is None for r in records)


@pytest.mark.slow
def test_the_same_error_in_every_task_stops_the_run_saying_it_is_not_a_tasks(convs, tmp_path):
    """A runner or builder that is down fails every search the same way: after SAME_ERROR_TASKS tasks the run
    stops with the reason instead of failing every task quietly."""
    from workbench.compile.tune import SAME_ERROR_TASKS

    third = task(lambda data, weight: relax.op.nn.conv2d(data, weight, padding=1), (1, 4, 10, 10), (8, 4, 3, 3))
    tasks = [*convs, ms.ExtractedTask("conv_c", third.mod, third.target, third.dispatched, third.weight)]

    def progress(result) -> None:
        if result.trials_run and not result.failed:
            raise RuntimeError("the runner is down")

    assert SAME_ERROR_TASKS == len(tasks)
    with pytest.raises(RuntimeError, match="the same error ended the search of 3 tasks, so it is not a task's: "
                                           "RuntimeError: the runner is down"):
        tune_tasks(tasks, HOST, SMALL, tuning_folder(tmp_path / "own", HOST), tmp_path / "logs", progress=progress)
