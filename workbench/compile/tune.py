"""MetaSchedule driver: tune the TIR functions of a pipeline's output into a JSON schedule database.

Which tasks there are and their budgets: compile/tasks.py; each task's design space and first candidate:
compile/design_spaces.py; Ctrl-C: compile/interrupts.py.

Choices that are not MetaSchedule's defaults, and why:
- Tasks are tuned one after another, heaviest (FLOPs x uses) first, not by MetaSchedule's gradient
  scheduler over all tasks, so the trials already in the database can be counted per task: a task at
  its budget is skipped, a second `workbench tune` with the same budget measures nothing, and a
  capped `trials` goes where the time is. One cost model is shared by all tasks, so later tasks
  start from what earlier ones measured.
- XGBoost's `num_warmup_samples` is 8, not 100: with budgets of tens of trials per task the default
  would never train, and the search would stay random.
- The evolutionary search keeps a population of 128, not 512: sampling scales with the population, and at 512 it
  dominates the small budgets tuning runs here (scripts/bench_tuning.py times rounds).
- Importing `tvm.s_tir.tensor_intrin` parses every tensor intrinsic (tens of seconds); by default MetaSchedule does
  it in every fresh builder worker, so builds time out. The builder's `f_build` is `workbench_build`, which skips
  it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from workbench.compile.databases import drop_records, open_database
from workbench.compile.design_spaces import (
    SharedDatabase,
    measure_default_schedule,
    measure_shared_schedule,
    search_mutators,
    tune_context,
)
from workbench.compile.gain import Gains
from workbench.compile.interrupts import Interrupts
from workbench.compile.targets import runs_here
from workbench.compile.tasks import TaskResult, best_latency_us, mark_exhausted, plan, task_records, tuning_target
from workbench.compile.trace_fit import misfit
from workbench.compile.tuning_clock import TuningClock
from workbench.compile.verify import Reference, reject_wrong_best, untuned_reference
from workbench.compile.warm_model import new_model, warm_cost_model
from workbench.config import TuningConfig
from workbench.errors import UserError, one_line
from workbench.kernels.lowering import COMPILE_CONFIG
from workbench.runtime.rpc import check_tracker
from workbench.runtime.threads import target_threads, use_tvm_threads

MS_LOGGER = "tvm.s_tir.meta_schedule"
LOG_NAME_BYTES = 200  # a task's log file name, at most: file systems take 255, a fused kernel's name runs to 1000s
POPULATION_SIZE = 128
SAME_ERROR_TASKS = 3  # tasks whose searches failed with one error before it counts as the run's (a runner down)
log = logging.getLogger("workbench.tuning")
T = TypeVar("T")


def workbench_build(mod: tvm.IRModule, target: tvm.target.Target, _params: dict | None) -> tvm.runtime.Module:
    """MetaSchedule's `default_build` minus its `import tvm.s_tir.tensor_intrin` (too slow per worker).

    Module level so the builder's worker processes can unpickle it by reference.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with tvm.transform.PassContext(config=COMPILE_CONFIG):  # candidates compiled as the build compiles them
        return tvm_build(mod, target=target)


def make_cost_model(config: TuningConfig, num_cores: int, target: tvm.target.Target) -> ms.cost_model.CostModel:
    """XGBoost that trains after the first batch (see the module doc), the same pre-trained on the committed
    databases (compile/warm_model.py), or random scores."""
    if config.cost_model == "random":
        return ms.cost_model.RandomModel(seed=config.seed)
    if config.cost_model == "xgb_warm":
        return warm_cost_model(target, num_cores)
    return new_model(num_cores)


def make_runner(config: TuningConfig, target: tvm.target.Target) -> ms.runner.Runner:
    """Where candidates run: this machine, or a device from the RPC tracker (checked first: fail fast)."""
    if config.runner == "rpc":
        check_tracker(config.rpc)
        host, port = config.rpc.address
        rpc_config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=config.rpc.key,
                                         session_timeout_sec=int(config.rpc.session_timeout_s))
        return ms.runner.RPCRunner(rpc_config=rpc_config)
    if target.kind.name == "cuda" and not tvm.cuda(0).exist:
        raise UserError("tuning for cuda: candidates are built here, but measuring them needs a GPU and this "
                        "machine has none; set tuning.runner: rpc and tuning.rpc: {tracker: HOST:PORT, key: NAME} "
                        "for a GPU host running `python -m tvm.exec.rpc_server --tracker ... --key NAME`")
    return ms.runner.LocalRunner(timeout_sec=30)


def make_builder(num_cores: int) -> ms.builder.Builder:
    return ms.builder.LocalBuilder(f_build=workbench_build, timeout_sec=60, max_workers=num_cores)


@derived_object
class _ProgressCallback(ms.measure_callback.PyMeasureCallback):
    """Tells a Python function how many candidates each batch measured (after they reached the database)."""

    def __init__(self, report: Callable[[int], None]) -> None:
        super().__init__()
        self.report = report

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        if runner_results:
            self.report(len(runner_results))


def quiet_metaschedule() -> None:
    """MetaSchedule logs every round to its own logger (and console); keep only warnings and errors."""
    logging.getLogger(MS_LOGGER).setLevel(logging.WARNING)
    for handler in logging.getLogger(MS_LOGGER).handlers:
        handler.setLevel(logging.WARNING)


def task_log_path(log_dir: Path, task_name: str) -> Path:
    """`log_dir/<task>.log`; a name too long for a file (PP-OCR's fused kernels' are) is cut, and ends in a hash
    of the whole name, so two long names sharing a start still get a file each."""
    if len(task_name.encode()) <= LOG_NAME_BYTES:
        return log_dir / f"{task_name}.log"
    digest = hashlib.sha1(task_name.encode()).hexdigest()[:12]
    return log_dir / f"{task_name.encode()[:LOG_NAME_BYTES - 13].decode(errors='ignore')}-{digest}.log"


@contextmanager
def task_loggers(log_dir: Path, task_names: list[str]) -> Iterator[list[logging.Logger]]:
    """One logger per task writing MetaSchedule's per-round log to `log_dir/<task>.log` (`task_log_path`), closed
    afterwards.

    Not MetaSchedule's `get_loggers_from_work_dir`: that one reconfigures logging globally (dictConfig) and
    crashes when the MetaSchedule logger carries a handler without a name (pytest's, a notebook's, an
    embedding application's). These loggers do not propagate, so what a user attached elsewhere sees nothing
    of the per-round chatter and is left as it was.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    formatter = logging.Formatter("%(asctime)s [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")
    loggers, handlers = [], []
    for name in task_names:
        logger = logging.getLogger(f"workbench.tuning.{name}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        handler = logging.FileHandler(task_log_path(log_dir, name), mode="a")
        handler.setFormatter(formatter)
        logger.addHandler(handler)
        loggers.append(logger)
        handlers.append(handler)
    try:
        yield loggers
    finally:
        for logger, handler in zip(loggers, handlers):
            logger.removeHandler(handler)
            handler.close()


def _context(task: ms.ExtractedTask, logger: logging.Logger, num_cores: int, rand_state: int) -> ms.TuneContext:
    """A task's TuneContext, like `extracted_tasks_to_tune_contexts` makes them but with our search population."""
    return tune_context(task, num_cores, ms.search_strategy.EvolutionarySearch(population_size=POPULATION_SIZE),
                        logger, rand_state)


def _misfits(task: ms.ExtractedTask, database: ms.database.Database) -> list[tuple[ms.database.TuningRecord, str]]:
    """The task's records whose traces would break its search (compile/trace_fit.py), each with the reason."""
    mod, search = task.dispatched[0], search_mutators(task)
    found = [(record, misfit(mod, record.trace, search)) for record in task_records(database, mod)]
    return [(record, reason) for record, reason in found if reason is not None]


def hottest(results: list[TaskResult]) -> int | None:
    """The task that holds the most time now (best µs x uses) and can still be searched, if any."""
    measured = [(r.best_us * r.weight, i) for i, r in enumerate(results)
                if r.best_us and not r.exhausted and not r.failed]
    return max(measured)[1] if measured else None


Progress = Callable[[TaskResult], None]  # called when a task starts, after each measured batch, when it ends


def tune_tasks(tasks: list[ms.ExtractedTask], target: tvm.target.Target, config: TuningConfig,
               database_dir: Path, log_dir: Path, progress: Progress | None = None,
               cost_model: ms.cost_model.CostModel | None = None, clock: TuningClock | None = None,
               shared: list[SharedDatabase] | None = None,
               profiled_us: list[float] | None = None) -> list[TaskResult]:
    """Tune each task, in the order given, up to its budget (skipping those already there), never past
    `config.trials` in all;
    then spend `config.hot_trials` one search round at a time on the task that holds the most time now
    (best µs x uses: what `workbench profile` would put on top), so tuning time goes where latency is.

    Trials already in the database count toward every budget (trials past a task's budget are hot trials),
    so a rerun with the same config only finishes what an interrupted run left (and measures nothing when
    the first run completed). `clock` (default: one for `config.minutes`) stops tuning once the minutes are
    spent, after the round in flight, and says why tuning stopped. A task new to the database first measures
    the schedule the first of the `shared` databases (read only) holds for its workload, if any. `tasks` come
    heaviest first (FLOPs x uses, compile/tasks.py) or, with `profiled_us` (each task's time in the build
    profiled before tuning, stages/hot_kernels.py), hottest first.

    With a minutes budget and no `hot_trials` (`config.hot_until_time`: "tune for 10 minutes") there are no
    per-task budgets to fill first: until the minutes are spent, each round goes to the task that may win the
    model the most time (compile/gain.py), a new one starting from its seeds.
    """
    clock = clock or TuningClock(config.minutes)
    target = tuning_target(target)
    num_cores = target_threads(target)
    use_tvm_threads(num_cores)  # the runner's processes measure candidates on the threads the build runs on
    database = open_database(database_dir, create=True)
    results = plan(tasks, database, database_dir, config)
    for result, us in zip(results, profiled_us or [], strict=bool(profiled_us)):
        result.profiled_us = us
    runner = make_runner(config, target)
    builder = make_builder(num_cores)
    cost_model = cost_model or make_cost_model(config, num_cores, target)
    quiet_metaschedule()
    verifiable = config.runner == "local" and runs_here(target)
    # `trials` counts the database too (a task's trials past its budget were hot trials)
    left = config.trials - sum(min(r.trials_before, r.budget or r.trials_before) for r in results)
    report = progress or (lambda _result: None)
    interrupts = Interrupts()
    with task_loggers(log_dir, [t.task_name for t in tasks]) as loggers:
        rand_states = ms.utils.fork_seed(config.seed, n=2 * len(tasks))  # the second half: a failed search's rerun
        contexts = [_context(task, logger, num_cores, rand_state)
                    for task, logger, rand_state in zip(tasks, loggers, rand_states)]

        def search(index: int, want: int) -> None:
            """One MetaSchedule run of up to `want` trials of task `index`; once the clock's minutes are spent it
            stops after the round just measured (kept in the database)."""
            task, result = tasks[index], results[index]

            def measured(count: int) -> None:
                result.trials_run += count
                result.best_us = best_latency_us(database, task.dispatched[0])
                report(result)
                interrupts.check()
                clock.check()

            with interrupts.handled():
                ms.tune.tune_tasks(
                    tasks=[contexts[index]], task_weights=[float(task.weight)], work_dir=str(log_dir),
                    max_trials_global=want, max_trials_per_task=want,
                    num_trials_per_iter=min(config.trials_per_iter, want),
                    builder=builder, runner=runner, database=database, cost_model=cost_model,
                    measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                       _ProgressCallback(measured)],
                    task_scheduler="round-robin",
                )

        def dropped_misfits(index: int) -> int:
            """Take the task's records that would break its search out of the database (logged); how many (0 where
            looking for them failed too)."""
            nonlocal database
            try:
                misfits = _misfits(tasks[index], database)
            except Exception as error:  # noqa: BLE001 - a record that cannot even be mutated: the task fails instead
                log.warning("%s: its records could not be checked: %s", tasks[index].task_name, one_line(error))
                return 0
            for _record, reason in misfits:
                log.warning("%s: a record that breaks its search is dropped from the database: %s",
                            tasks[index].task_name, reason)
            if misfits:
                database = drop_records(database_dir, [record for record, _reason in misfits])
            return len(misfits)

        def tune_one(index: int, want: int) -> None:
            """Up to `want` more trials of task `index`; a search that finds nothing new marks it exhausted.

            A search that stops with an error (MetaSchedule's C++ search ends on a trace it cannot replay) costs
            that task, never the run: the task's records that would break a search are dropped and it searches
            once more from a new context (the failed one keeps its search's state); a second error, or one no
            record explains, marks the task failed with the reason, and tuning goes on with the next, unless the same
            error ended SAME_ERROR_TASKS tasks (then it is the run's: a runner or builder down) or it is an OSError."""
            task, result = tasks[index], results[index]
            before = result.trials_run
            for attempt in (1, 2):
                try:
                    search(index, want - (result.trials_run - before))
                    break
                except OSError:  # the machine's (a full disk, a lost file), not the task's
                    raise
                except Exception as error:  # noqa: BLE001 - see the docstring; OutOfTime may come back as RuntimeError
                    if clock.stopped == "minutes":
                        return
                    contexts[index] = _context(task, loggers[index], num_cores, rand_states[len(tasks) + index])
                    if attempt == 2 or not dropped_misfits(index):
                        result.failed = one_line(error)
                        log.warning("%s: its search failed and is skipped: %s", task.task_name, result.failed)
                        if sum(other.failed == result.failed for other in results) >= SAME_ERROR_TASKS:
                            raise RuntimeError(f"tuning stopped: the same error ended the search of "
                                               f"{SAME_ERROR_TASKS} tasks, so it is not a task's: {result.failed}"
                                               ) from error
                        return
            if result.trials_run - before < want:  # the search found nothing new to measure: the space is used up
                result.exhausted = True
                mark_exhausted(database_dir, task)

        def seed_first_records(index: int, want: int) -> int:
            """A new task's first records (at most `want`): the schedule a shared database holds for it (or a
            similar kernel's there or among the tasks tuned before it), then its default schedule; how many were
            measured."""
            task, result = tasks[index], results[index]
            seeded = offered(lambda: measure_shared_schedule(task, target, database, builder, runner, shared or []),
                             task, "a shared or similar schedule")
            result.seeded_from = seeded
            count = int(seeded is not None)
            if count < want and offered(lambda: measure_default_schedule(task, target, database, builder, runner),
                                        task, "the default schedule"):
                count += 1
            result.trials_run += count
            return count

        def offered(seed: Callable[[], T], task: ms.ExtractedTask, what: str) -> T | None:
            """A first record's outcome, or None where offering it raised: a bad seed costs itself (logged)."""
            try:
                return seed()
            except Exception as error:  # noqa: BLE001 - TVM raises ScheduleError, InternalError, ...
                log.warning("%s: %s was not offered: %s", task.task_name, what, one_line(error))
                return None

        references: dict[int, Reference] = {}  # computed once per task: hot rounds check the same task again

        def verify(index: int) -> None:
            """Drop the task's best records while they compute wrong outputs (compile/verify.py)."""
            nonlocal database
            if verifiable:
                if index not in references:
                    references[index] = untuned_reference(tasks[index].dispatched[0], target)
                database, rejected = reject_wrong_best(tasks[index], target, database, database_dir,
                                                       references[index])
                results[index].rejected += rejected
            results[index].best_us = best_latency_us(database, tasks[index].dispatched[0])

        @contextmanager
        def timed(index: int) -> Iterator[None]:
            """Count the wall-clock time of the block as spent on task `index` (the tune table's minutes column)."""
            started = time.monotonic()
            try:
                yield
            finally:
                results[index].seconds += time.monotonic() - started

        def budgets_then_hot() -> None:
            """Each task in order up to its budget (within `trials` in all), then `hot_trials` to the hottest."""
            nonlocal left
            for index, result in enumerate(results):  # heaviest or hottest first: a time budget goes where it matters
                if clock.spent() and any(r.trials_run for r in results):  # a run always measures its first round
                    break
                want = 0 if result.exhausted else min(result.budget - result.trials_before, left)
                report(result)
                with timed(index):
                    if want > 0 and result.trials_before == 0:
                        want -= seed_first_records(index, want)
                    if want > 0 and not clock.spent():
                        tune_one(index, want)
                    left -= result.trials_run
                    verify(index)
                report(result)
            hot = config.hot_trials - sum(max(0, r.trials_before - r.budget) for r in results)  # resumes, too
            while hot > 0 and not clock.spent():
                index = hottest(results)
                if index is None:
                    break
                ran = results[index].trials_run
                with timed(index):
                    tune_one(index, min(config.trials_per_iter, hot))
                    hot -= results[index].trials_run - ran
                    verify(index)
                report(results[index])

        def by_gain() -> None:
            """Until the minutes are spent: a round at a time to the task that may win the model the most time
            (compile/gain.py), a new task starting from its seeds; only `trials_per_task` (its budget) and `trials`,
            where set, cap it."""
            nonlocal left
            capped = "trials" in config.model_fields_set
            gains = Gains(results)
            while not (clock.spent() and any(r.trials_run for r in results)) and not (capped and left <= 0):
                index = gains.next()
                if index is None:
                    break
                result = results[index]
                report(result)
                with timed(index):
                    ran = result.trials_run
                    want = min([config.trials_per_iter, *([result.budget - result.trials] if result.budget else []),
                                *([left] if capped else [])])
                    if result.trials == 0:
                        want -= seed_first_records(index, want)
                        verify(index)
                    gains.began(index)
                    if want > 0 and not (clock.spent() and result.trials_run):  # a run measures its first round
                        tune_one(index, want)
                        verify(index)
                        gains.measured(index)
                    left -= result.trials_run - ran
                report(result)

        if config.hot_until_time:
            by_gain()
        else:
            budgets_then_hot()
    clock.finish()
    return results
