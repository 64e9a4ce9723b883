"""MetaSchedule driver: tune the TIR functions of a pipeline's output into a JSON schedule database.

What is tuned is the module the workbench builds, after the configured pipeline (so `fuse` decides
which fused kernels exist) and after LegalizeOps: one task per distinct TIR function.

Choices that are not MetaSchedule's defaults, and why:
- Tasks are tuned one after another, heaviest (FLOPs x uses) first, not by MetaSchedule's gradient
  scheduler over all tasks, so the trials already in the database can be counted per task: a task at
  its budget is skipped, a second `workbench tune` with the same budget measures nothing, and a
  capped `trials` goes where the time is. One cost model is shared by all tasks, so later tasks
  start from what earlier ones measured.
- XGBoost's `num_warmup_samples` is 8, not 100: with budgets of tens of trials per task the default
  would never train, and the search would stay random.
- The evolutionary search keeps a population of 128, not 512: sampling 512 schedules costs ~5 s a
  round here, which dominates small budgets.
- Importing `tvm.s_tir.tensor_intrin` costs ~50 s here (it parses every tensor intrinsic). MetaSchedule
  does it in every TuneContext and, by default, in every fresh builder worker (so builds time out).
  The builder's `f_build` is `workbench_build`, which skips it; and kernels without low-precision
  buffers get the plain rules of their target kind (llvm, cuda) instead of the VNNI/AVX-512 or
  tensor-core ones MetaSchedule picks for CPUs and GPUs that have them, so their contexts need no import.
  The int8 path's u8 x s8 kernels on a VNNI CPU get those llvm rules plus a tiling that tensorizes with
  the workbench's own VNNI dot product (`vnni_space`), again without the import.
- JSONDatabase appends each record as its batch is measured, so a kill loses only the batch being
  measured (a record line cut short is dropped when the database is opened again); Ctrl-C lets that
  batch finish first (a second Ctrl-C stops at once).
- A packed conv kernel (kernels/packed_conv.py) is first measured with the fixed schedule an untuned build gives
  it, committed as its first record, so the search starts from it.
- A task whose search space is used up (MetaSchedule finds no new candidate, e.g. a reshape with one
  schedule) is noted in `exhausted.json` next to the records, so a resumed run does not search it again.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.analysis import estimate_tir_flops

from workbench.atomic import atomic_write_json
from workbench.compile.build import legalized
from workbench.compile.databases import open_database
from workbench.kernels.default_schedule import default_schedule
from workbench.compile.targets import runs_here
from workbench.compile.verify import Reference, reject_wrong_best, untuned_reference
from workbench.kernels.x86_int8 import VNNI_DOT_16x4
from workbench.config import TuningConfig
from workbench.errors import UserError
from workbench.runtime.rpc import check_tracker
from workbench.runtime.threads import target_threads, use_tvm_threads
from workbench.kernels.packed_conv import vnni_target

MS_LOGGER = "tvm.s_tir.meta_schedule"
FAILED_RUN_SECS = 1e9  # MetaSchedule records a failed build or run as (about) 1e10 seconds
XGB_WARMUP_SAMPLES = 8
POPULATION_SIZE = 128
EXHAUSTED_FILE = "exhausted.json"
LIGHT_SHARE = 0.01  # of the model's FLOPs x uses: below it a kernel gets one search round (see `plan`)
# What MetaSchedule's CUDA rules read from the target; a plain {kind: cuda, arch: ...} lacks the last three.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
               "registers_per_block": 65536}


@dataclass
class TaskResult:
    """One task's outcome: trials found in the database, trials measured now, best latency after."""

    name: str
    weight: int
    budget: int
    trials_before: int
    exhausted: bool = False
    trials_run: int = 0
    best_us: float | None = None
    rejected: int = 0  # best records dropped for computing wrong outputs (compile/verify.py)

    @property
    def trials(self) -> int:
        return self.trials_before + self.trials_run

    @property
    def flags(self) -> list[str]:
        """What a progress row or the tune table notes of the task: its search space used up, wrong schedules
        dropped."""
        return (["search space used up"] if self.exhausted else []) + (
            [f"{self.rejected} wrong schedule(s) dropped"] if self.rejected else [])

    def as_dict(self) -> dict:
        return {"name": self.name, "weight": self.weight, "budget": self.budget, "trials_before": self.trials_before,
                "trials_run": self.trials_run, "exhausted": self.exhausted, "best_us": self.best_us,
                "rejected": self.rejected}


def workbench_build(mod: tvm.IRModule, target: tvm.target.Target, _params: dict | None) -> tvm.runtime.Module:
    """MetaSchedule's `default_build` minus its `import tvm.s_tir.tensor_intrin` (too slow per worker).

    Module level so the builder's worker processes can unpickle it by reference.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    """The target with what MetaSchedule needs: llvm its core count, cuda the GPU's per-block limits."""
    options = dict(target.export())
    if target.kind.name == "llvm" and "num-cores" not in options:
        options["num-cores"] = ms.utils.cpu_count(logical=False)
    elif target.kind.name == "cuda":
        options = {**CUDA_LIMITS, **{k: v for k, v in options.items() if v not in ("", None)}}
    return tvm.target.Target(options)


def tuning_module(optimized: tvm.IRModule, target: tvm.target.Target, layout_rewrite: bool = False) -> tvm.IRModule:
    """The pipeline's output as `build_lowered` has it before it applies the database (the build's own
    `legalized`): the tasks' workloads must match those kernels structurally, attributes included
    (running AnnotateTIROpPattern here would tag fused kernels the build does not tag, and nothing would match;
    with `layout_rewrite` the layout-free weight marks are part of the workload too).
    """
    return legalized(optimized, target, layout_rewrite=layout_rewrite)


def task_cost(task: ms.ExtractedTask) -> float:
    try:
        return estimate_tir_flops(task.dispatched[0]) * int(task.weight)
    except Exception:  # noqa: BLE001 - a kernel FLOPs cannot be estimated for is simply tuned last
        return 0.0


def extract_tasks(mod: tvm.IRModule, target: tvm.target.Target) -> list[ms.ExtractedTask]:
    """One task per structurally distinct, unscheduled TIR function, heaviest first.

    The same kernel used twice is one task of weight 2; `mod` is the output of `tuning_module`.
    """
    tasks = ms.relax_integration.extract_tasks(mod, tuning_target(target))
    tasks = [task for task in tasks if not task.mod.attrs.get("tirx.is_scheduled", False)]
    return sorted(tasks, key=task_cost, reverse=True)


def _workload_key(task_mod: tvm.IRModule) -> str:
    return ms.utils.shash2hex(task_mod)


def _records(database: ms.database.Database, task_mod: tvm.IRModule) -> list[ms.database.TuningRecord]:
    """Every record (measured, failed or not) the database holds for this task's workload."""
    if not database.has_workload(task_mod):
        return []
    workload = database.commit_workload(task_mod)  # returns the stored workload, adds nothing
    return [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]


def _seconds(record: ms.database.TuningRecord) -> float | None:
    if record.run_secs is None or len(record.run_secs) == 0:
        return None
    secs = sorted(float(s) for s in record.run_secs)
    median = secs[len(secs) // 2]
    return median if median < FAILED_RUN_SECS else None


def trials_done(database: ms.database.Database, task_mod: tvm.IRModule) -> int:
    return len(_records(database, task_mod))


def best_latency_us(database: ms.database.Database, task_mod: tvm.IRModule) -> float | None:
    """The fastest measured schedule of this task, in microseconds (None when nothing ran successfully)."""
    times = [s for s in map(_seconds, _records(database, task_mod)) if s is not None]
    return min(times) * 1e6 if times else None


def make_cost_model(config: TuningConfig, num_cores: int) -> ms.cost_model.CostModel:
    """XGBoost that trains after the first batch (see the module doc), or random scores."""
    if config.cost_model == "random":
        return ms.cost_model.RandomModel(seed=config.seed)
    return ms.cost_model.XGBModel(num_warmup_samples=XGB_WARMUP_SAMPLES, num_tuning_cores=num_cores,
                                  tree_method="auto")


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


def _exhausted(database_dir: Path) -> dict[str, str]:
    path = database_dir / EXHAUSTED_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def plan(tasks: list[ms.ExtractedTask], database: ms.database.Database, database_dir: Path,
         config: TuningConfig) -> list[TaskResult]:
    """Per task: its budget and what the database already holds. The budget is trials_per_task (or trials spread
    evenly), but a light kernel (under LIGHT_SHARE of the model's FLOPs x uses: a pool, a transpose) gets one
    search round: the profile puts such kernels under 1% of the time, and a full budget on each would cost as
    much tuning time as a conv."""
    per_task = config.trials_per_task or max(1, math.ceil(config.trials / max(1, len(tasks))))
    costs = [task_cost(t) for t in tasks]
    light = LIGHT_SHARE * sum(costs)
    exhausted = _exhausted(database_dir)
    return [TaskResult(t.task_name, int(t.weight), per_task if cost >= light else min(per_task, config.trials_per_iter),
                       trials_done(database, t.dispatched[0]), exhausted=_workload_key(t.dispatched[0]) in exhausted)
            for t, cost in zip(tasks, costs)]


def _low_precision(task: ms.ExtractedTask) -> bool:
    """Does the kernel read or write fp16/bf16/int8 buffers (the only ones tensor cores would take)?"""
    text = task.dispatched[0].script()  # PrimFunc exposes no buffer map in 0.27; dtypes appear quoted
    return any(f'"{dtype}"' in text for dtype in ("float16", "bfloat16", "int8", "uint8"))


def _vnni_kernel(task: ms.ExtractedTask) -> bool:
    """A u8 x s8 kernel (the int8 path's, kernels/packed_conv.py) on an x86 CPU with AVX-512 VNNI."""
    text = task.dispatched[0].script()
    return '"uint8"' in text and '"int8"' in text and vnni_target(task.target)


def vnni_space() -> ms.space_generator.PostOrderApply:
    """MetaSchedule's own VNNI rules (its "vnni" kind: the llvm rules with a VNNI-tensorizing tiling first and
    RewriteTensorize) with the workbench's dot product: TVM's `dot_16x4_vnni` fails LLVM verification
    (kernels/x86_int8.py). The int8 path's VNNI conv kernel maps whole; a block the intrinsic cannot map (an NCHW
    int8 conv, whose innermost input index is a spatial sum) falls through to the plain tiling."""
    rules = list(ms.schedule_rule.ScheduleRule.create("llvm"))
    tiling = next(i for i, rule in enumerate(rules) if isinstance(rule, ms.schedule_rule.MultiLevelTiling))
    rules.insert(tiling, ms.schedule_rule.MultiLevelTilingWithIntrin(
        VNNI_DOT_16x4, structure="SSRSRS", max_innermost_factor=64,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global")))
    postprocs = list(ms.postproc.Postproc.create("llvm"))
    layout = next(i for i, post in enumerate(postprocs) if isinstance(post, ms.postproc.RewriteLayout))
    postprocs.insert(layout, ms.postproc.RewriteTensorize(vectorize_init_loop=True))
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=postprocs, mutator_probs="llvm")


def _space_generator(task: ms.ExtractedTask) -> ms.space_generator.SpaceGenerator | str:
    """Kernels that cannot use tensor intrinsics (no fp16/bf16/int8 buffers) get the plain rules of their target
    kind. MetaSchedule would pick tensor-core rules for CUDA sm_70+ and VNNI/AVX-512 rules for x86 CPUs that
    have them: they help only low-precision kernels and need the ~50 s `tvm.s_tir.tensor_intrin` import.
    u8 x s8 kernels on a VNNI CPU get `vnni_space` (the workbench's own intrinsic, no import)."""
    kind = task.target.kind.name
    if kind in ("cuda", "llvm") and not _low_precision(task):
        return ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind)
    if _vnni_kernel(task):
        return vnni_space()
    return "post-order-apply"


def _needs_tensor_intrinsics(task: ms.ExtractedTask) -> bool:
    """Only MetaSchedule's target-default rules (low-precision kernels, other target kinds) may use them."""
    return isinstance(_space_generator(task), str)


@contextmanager
def _tensor_intrinsics_if_needed(task: ms.ExtractedTask) -> Iterator[None]:
    """Let TuneContext's `import tvm.s_tir.tensor_intrin` be a no-op when the task's rules use none."""
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules or _needs_tensor_intrinsics(task):
        yield
        return
    sys.modules[name] = types.ModuleType(name)
    try:
        yield
    finally:
        del sys.modules[name]


def tune_context(task: ms.ExtractedTask, num_cores: int, search_strategy: ms.search_strategy.SearchStrategy | str,
                 logger: logging.Logger | None = None, rand_state: int = -1) -> ms.TuneContext:
    """A TuneContext for one task with MetaSchedule's default rules for its target (tensor_intrin only if used)."""
    with _tensor_intrinsics_if_needed(task):
        return ms.TuneContext(mod=task.dispatched[0], target=task.target, space_generator=_space_generator(task),
                              search_strategy=search_strategy, task_name=task.task_name, logger=logger,
                              rand_state=rand_state, num_threads=num_cores).clone()


@contextmanager
def task_loggers(log_dir: Path, task_names: list[str]) -> Iterator[list[logging.Logger]]:
    """One logger per task writing MetaSchedule's per-round log to `log_dir/<task>.log`, closed afterwards.

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
        handler = logging.FileHandler(log_dir / f"{name}.log", mode="a")
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


def _contexts(tasks: list[ms.ExtractedTask], loggers: list[logging.Logger], num_cores: int,
              seed: int) -> list[ms.TuneContext]:
    """One TuneContext per task, like `extracted_tasks_to_tune_contexts` but with our search population."""
    return [tune_context(task, num_cores, ms.search_strategy.EvolutionarySearch(population_size=POPULATION_SIZE),
                         logger, rand_state)
            for task, logger, rand_state in zip(tasks, loggers, ms.utils.fork_seed(seed, n=len(tasks)))]


class _Interrupts:
    """Ctrl-C while tuning: the first stops after the batch being measured (its records reach the database), the
    second stops at once. The stop is raised from the measure callback, a point MetaSchedule's C++ loop is built
    to unwind from (a KeyboardInterrupt raised at an arbitrary point of the C++ search once ended the process
    in std::terminate); a RuntimeError the FFI makes of it becomes a KeyboardInterrupt again, so the CLI reports
    an interruption (exit 130), not an internal error."""

    def __init__(self) -> None:
        self.requested = False

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def _on_sigint(self, _signum, _frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write("\nCtrl-C: stopping after the batch being measured (its records are kept); "
                         "Ctrl-C again stops now\n")

    @contextmanager
    def handled(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield
        except Exception as exc:
            if self.requested:
                raise KeyboardInterrupt from exc
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
        self.check()  # requested during the last batch of a task: stop before the next task starts


def measure_default_schedule(task: ms.ExtractedTask, target: tvm.target.Target, database: ms.database.Database,
                             builder: ms.builder.Builder, runner: ms.runner.Runner) -> bool:
    """Measure the schedule an untuned build gives the kernel (kernels/default_schedule.py) and commit it as the
    task's first record, so the evolutionary search starts from it (it seeds its population with the database's
    best) rather than from random tilings, and a tuned kernel is never slower than the untuned one. False for
    kernels without one (contractions in plain loops), or if it failed to build or run."""
    schedule = default_schedule(task.dispatched[0]["main"], target)
    if schedule is None:
        return False
    (built,) = builder.build([ms.builder.BuilderInput(schedule.mod, target)])
    args_info = ms.arg_info.ArgInfo.from_entry_func(schedule.mod)
    device = "cpu" if target.kind.name == "llvm" else target.kind.name
    ran = None if built.error_msg else runner.run([ms.runner.RunnerInput(built.artifact_path, device,
                                                                         args_info)])[0].result()
    if ran is None or ran.error_msg:
        logging.getLogger("workbench.tuning").warning("%s: the default schedule failed to %s: %s", task.task_name,
                                                      "build" if ran is None else "run",
                                                      (built.error_msg or ran.error_msg).strip().splitlines()[-1])
        return False
    database.commit_tuning_record(ms.database.TuningRecord(
        schedule.trace, database.commit_workload(task.dispatched[0]), [float(s) for s in ran.run_secs], target,
        args_info))
    return True


def hottest(results: list[TaskResult]) -> int | None:
    """The task that holds the most time now (best µs x uses) and can still be searched, if any."""
    measured = [(r.best_us * r.weight, i) for i, r in enumerate(results) if r.best_us and not r.exhausted]
    return max(measured)[1] if measured else None


Progress = Callable[[TaskResult], None]  # called when a task starts, after each measured batch, when it ends


def tune_tasks(tasks: list[ms.ExtractedTask], target: tvm.target.Target, config: TuningConfig,
               database_dir: Path, log_dir: Path, progress: Progress | None = None,
               cost_model: ms.cost_model.CostModel | None = None) -> list[TaskResult]:
    """Tune each task up to its budget (skipping those already there), never past `config.trials` in all;
    then spend `config.hot_trials` one search round at a time on the task that holds the most time now
    (best µs x uses: what `workbench profile` would put on top), so tuning time goes where latency is.

    Trials already in the database count toward every budget (trials past a task's budget are hot trials),
    so a rerun with the same config only finishes what an interrupted run left (and measures nothing when
    the first run completed).
    """
    target = tuning_target(target)
    num_cores = target_threads(target)
    use_tvm_threads(num_cores)  # the runner's processes measure candidates on the threads the build runs on
    database = open_database(database_dir, create=True)
    results = plan(tasks, database, database_dir, config)
    runner = make_runner(config, target)
    builder = make_builder(num_cores)
    cost_model = cost_model or make_cost_model(config, num_cores)
    quiet_metaschedule()
    verifiable = config.runner == "local" and runs_here(target)
    left = config.trials - sum(min(r.trials_before, r.budget) for r in results)  # `trials` counts the database too
    report = progress or (lambda _result: None)
    interrupts = _Interrupts()
    with task_loggers(log_dir, [t.task_name for t in tasks]) as loggers:
        contexts = _contexts(tasks, loggers, num_cores, config.seed)

        def tune_one(index: int, want: int) -> None:
            """Up to `want` more trials of task `index`; a search that finds nothing new marks it exhausted."""
            task, result = tasks[index], results[index]
            before = result.trials_run

            def measured(count: int) -> None:
                result.trials_run += count
                result.best_us = best_latency_us(database, task.dispatched[0])
                report(result)
                interrupts.check()

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
            if result.trials_run - before < want:  # the search found nothing new to measure: the space is used up
                result.exhausted = True
                atomic_write_json(database_dir / EXHAUSTED_FILE,
                                  {**_exhausted(database_dir), _workload_key(task.dispatched[0]): task.task_name})

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

        for index, result in enumerate(results):
            want = 0 if result.exhausted else min(result.budget - result.trials_before, left)
            report(result)
            if want > 0 and result.trials_before == 0 and measure_default_schedule(tasks[index], target, database,
                                                                                    builder, runner):
                result.trials_run += 1
                want -= 1
            if want > 0:
                tune_one(index, want)
            left -= result.trials_run
            verify(index)
            report(result)
        hot = config.hot_trials - sum(max(0, r.trials_before - r.budget) for r in results)  # resumes, too
        while hot > 0:
            index = hottest(results)
            if index is None:
                break
            ran = results[index].trials_run
            tune_one(index, min(config.trials_per_iter, hot))
            hot -= results[index].trials_run - ran
            verify(index)
            report(results[index])
    return results
