"""The variant function every executor runs, and the local executor: a pool of crash-isolated worker processes.

A segfault or abort inside TVM kills a worker, never the sweep; the worker is replaced and only its task fails.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from workbench.config import Experiment, validate
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.errors import UserError
from workbench.runtime.threads import TVM_THREADS_ENV, cpu_threads
from workbench.sweep.spec import Sweep, ir_key

if TYPE_CHECKING:
    from workbench.compile.build import Built


class Task(NamedTuple):
    """One task for a pool: hash a variant's pipeline, or build and measure it (`run`)."""

    key: Any  # what on_done reports it under
    kind: str  # "hash" or "run"
    config: dict  # the variant's experiment
    prefer: int | None  # the worker that ran its pipeline (and still holds the optimized module), if any
    reference: dict | None = None  # a run's full pipeline to time beside it (a study's ablation variant)


@dataclass(frozen=True)
class WorkerSetup:
    plugins: tuple[str, ...]
    paths: tuple[str, ...]  # put first on sys.path (the sweep file's folder, the working directory)
    base_dir: str
    threads: int = 1  # each worker's share of the cores: its kernels' threads, where the variant sets no num_cores


class VariantRunner:
    """Runs the tasks of one sweep in this process and keeps what repeats across them (the imported model,
    the optimized modules of recent pipelines, compiled builds)."""

    def __init__(self, setup: WorkerSetup):
        import importlib

        self.setup = setup
        os.environ[TVM_THREADS_ENV] = str(setup.threads)  # read when a target first sizes this process's pool
        for p in reversed(setup.paths):
            if p not in sys.path:
                sys.path.insert(0, p)
        self.plugin_error = None
        for module in setup.plugins:
            try:
                importlib.import_module(module)
            except Exception as exc:  # reported on every task: the user's plugin is broken
                self.plugin_error = f"plugin {module!r} failed to import: {exc.__class__.__name__}: {exc}"
        self.prepared_models: dict[str, Any] = {}  # model, target -> (seed, stages.Prepared)
        self.optimized: dict[str, tuple[Any, bool]] = {}  # ir_key -> (stages.Optimized, with stats), the last few
        from workbench.compile.build_cache import BuildCache

        self.builds = BuildCache()  # compiled modules by IR, reused across this process's runs

    def __call__(self, kind: str, config: dict, reference: dict | None = None) -> tuple[str, Any]:
        """("ok", structural hash) for a "hash" task, ("ok", {"result", "median_ms"}) for a "run" task (with a
        `reference` config, that pipeline's build timed beside the variant's under the label `full`),
        ("error", message) when the variant raises."""
        import traceback

        print(f"--- {datetime.now():%H:%M:%S} {kind} {config.get('output')} {config.get('pipeline')}", flush=True)
        try:
            experiment = validate(config, "variant")
            if kind == "hash":
                import tvm_ffi

                optimized = self.optimized_module(experiment, config).module
                return "ok", f"{tvm_ffi.structural_hash(optimized) & 0xFFFFFFFFFFFFFFFF:016x}"
            return "ok", self._run(experiment, config, reference)
        except BaseException as exc:  # noqa: BLE001 - everything a variant raises is its failure
            traceback.print_exc()
            return "error", f"{exc.__class__.__name__}: {exc}".strip()

    def prepared(self, experiment: Experiment):
        """The variant's model prepared (stages.prepare): imported once per model and target in this process, its
        inputs drawn for the variant's seed (the import does not depend on it)."""
        import dataclasses

        from workbench.models.inputs import make_inputs
        from workbench.stages import prepare

        base_dir = Path(self.setup.base_dir)
        key = json.dumps([experiment.model.model_dump(mode="json"), experiment.target.model_dump(mode="json")],
                         sort_keys=True)
        if key not in self.prepared_models:
            self.prepared_models[key] = (experiment.seed, prepare(experiment, base_dir))
        seed, prepared = self.prepared_models[key]
        if seed == experiment.seed:
            return prepared
        return dataclasses.replace(prepared, inputs=make_inputs(prepared.canonical, experiment.model, experiment.seed,
                                                                base_dir))

    def optimized_module(self, experiment: Experiment, config: dict, stats: bool = False):
        """The variant's pipeline run on its prepared model (stages.Optimized), from the last few this process ran.
        `stats` (the kernels and planned bytes after each pass, for a measured run's record) lowers the module after
        every pass, 5x the pipeline's own time: hashing a variant, building a study's reference and tuning do
        without."""
        from workbench.stages import optimize

        if self.plugin_error:
            raise UserError(self.plugin_error)
        key = ir_key(config)
        if key in self.optimized and (self.optimized[key][1] or not stats):
            self.optimized[key] = self.optimized.pop(key)  # the most recently used last
        else:
            self.optimized.pop(key, None)
            self.optimized[key] = (optimize(self.prepared(experiment), experiment.pipeline, stats=stats), stats)
            while len(self.optimized) > 16:  # bound the memory (a study's model has 13 variants): drop the LRU
                self.optimized.pop(next(iter(self.optimized)))
        return self.optimized[key][0]

    def reference_build(self, reference: dict) -> Built:
        """The build of a study variant's full pipeline (compiled once per process: BuildCache)."""
        from workbench.compile.schedule_sources import schedule_sources
        from workbench.stages import build

        experiment = validate(reference, "study reference")
        prepared = self.prepared(experiment)
        sources = schedule_sources(experiment, Path(self.setup.base_dir), prepared.target, "workbench sweep")
        return build(self.optimized_module(experiment, reference), prepared.target, sources,
                     experiment.layout_rewrite, self.builds)

    def _run(self, experiment: Experiment, config: dict, reference: dict | None) -> dict:
        import io
        import traceback

        from rich.console import Console

        from workbench.experiment import run_experiment
        from workbench.sweep.study import FULL

        optimized = self.optimized_module(experiment, config, stats=True)  # its record has each pass's kernels
        beside = None
        if reference is not None:
            try:
                beside = {FULL: self.reference_build(reference)}
            except Exception:  # noqa: BLE001 - the full pipeline's own cell says why; this one is timed alone
                traceback.print_exc()
                print("the full pipeline failed to build: this variant is timed without it beside", flush=True)
        result = run_experiment(experiment, Path(self.setup.base_dir), console=Console(file=io.StringIO()), store=False,
                                builds=self.builds, prepared=self.prepared(experiment), optimized=optimized,
                                beside=beside)
        return {"result": result.to_json(), "median_ms": result.measurements[WORKBENCH_LABEL].median_ms}


_RUNNER: VariantRunner | None = None


def run_variant_task(setup: WorkerSetup, kind: str, config: dict, reference: dict | None = None) -> tuple[str, Any]:
    """The variant function both executors call (a worker process keeps one VariantRunner per sweep)."""
    global _RUNNER
    if _RUNNER is None or _RUNNER.setup != setup:
        _RUNNER = VariantRunner(setup)
    return _RUNNER(kind, config, reference)


# ---------------------------------------------------------------------------------------------
# the local executor: a pool of worker processes


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the sweep process dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(0)
    except (OSError, AttributeError):
        pass


def child_process_setup(log_path: str) -> None:
    """What every process a sweep starts does first: die with the sweep, leave Ctrl-C to it, log to a file."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def _worker_main(conn, log_path: str, setup: WorkerSetup) -> None:
    """Worker loop: receive (kind, config, reference) tasks, answer with `run_variant_task`."""
    child_process_setup(log_path)
    while True:
        try:
            kind, config, reference = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(run_variant_task(setup, kind, config, reference))


def worker_setup(sweep: Sweep, base_dir: Path, workers: int) -> WorkerSetup:
    """What each of `workers` processes needs; they measure side by side, so each runs its kernels on its share
    of the cores (with a pool of every core each, N workers would run N threads per core)."""
    return WorkerSetup(tuple(sweep.plugins), (str(sweep.path.parent.resolve()), str(base_dir)), str(base_dir),
                       max(1, cpu_threads() // workers))


def signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class _Worker:
    def __init__(self, ctx, index: int, sweep: Sweep, base_dir: Path, workers: int):
        self.conn, child = ctx.Pipe()
        logs = sweep.output / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log = logs / f"worker-{index}.log"
        self.process = ctx.Process(target=_worker_main, daemon=True, name=f"workbench-sweep-{index}",
                                   args=(child, str(self.log), worker_setup(sweep, base_dir, workers)))
        self.process.start()
        child.close()
        self.task: Task | None = None
        self.deadline = 0.0

    def assign(self, task: Task, timeout_s: float) -> None:
        self.task = task
        self.deadline = time.monotonic() + timeout_s
        self.conn.send((task.kind, task.config, task.reference))

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


def stealable(pending: deque[Task], pool: list[_Worker]) -> Task | None:
    """The oldest task an idle worker may take: routed nowhere (or to a worker gone), or routed to a busy
    worker that is not running the same IR."""
    running = {ir_key(w.task.config) for w in pool if w.task}
    for task in pending:
        prefer = task.prefer
        if prefer is None or prefer >= len(pool):
            return task
        if pool[prefer].task is not None and ir_key(task.config) not in running:
            return task
    return None


class LocalPool:
    """Worker processes kept for the whole sweep (each keeps its imported model and recent pipelines), started
    as tasks need them."""

    def __init__(self, sweep: Sweep, workers: int, base_dir: Path):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")
        self.sweep, self.size, self.base_dir = sweep, workers, base_dir
        self.pool: list[_Worker] = []

    def run(self, pending: deque, on_done) -> None:
        """Run tasks; `on_done(key, ok, value, worker_index)` for each.

        A task preferring a worker (the one that ran its pipeline already) waits for it while that worker is
        busy; an idle worker with nothing routed to it takes such a task only when no busy worker is running
        the same IR: a second seed of an IR the busy worker is compiling would be compiled twice
        (scripts/bench_sweep.py measures the variants a minute). A worker that dies
        (signal, os.abort, segfault) or runs past the timeout fails only its task and is replaced.
        """
        from multiprocessing.connection import wait

        sweep, base_dir = self.sweep, self.base_dir
        timeout_s = sweep.section.timeout_s
        while len(self.pool) < min(self.size, len(pending)):
            self.pool.append(_Worker(self.ctx, len(self.pool), sweep, base_dir, self.size))
        pool = self.pool
        while pending or any(w.task for w in pool):
            for i, w in enumerate(pool):
                if w.task is None and pending:
                    pick = next((t for t in pending if t.prefer == i), None) or stealable(pending, pool)
                    if pick is None:
                        continue  # what is left waits for the workers that hold its IR
                    pending.remove(pick)
                    w.assign(pick, timeout_s)
            busy = [w for w in pool if w.task]
            if not busy:
                continue
            wait_s = max(0.05, min(w.deadline for w in busy) - time.monotonic())
            wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=min(wait_s, 1.0))
            for i, w in enumerate(pool):
                if w.task is None:
                    continue
                key, kind = w.task.key, w.task.kind
                failure = None
                try:
                    if w.conn.poll():
                        status, value = w.conn.recv()
                        w.task = None
                        on_done(key, status == "ok", value, i)
                        continue
                except (EOFError, OSError):
                    pass
                if not w.process.is_alive():
                    w.process.join()
                    failure = (f"worker crashed ({signal_name(w.process.exitcode)}) during "
                               f"{'the pipeline' if kind == 'hash' else 'build/measure'}; log: {w.log}")
                elif time.monotonic() > w.deadline:
                    failure = f"timeout after {timeout_s:g} s (worker killed); log: {w.log}"
                if failure:
                    w.kill()
                    pool[i] = _Worker(self.ctx, i, sweep, base_dir, self.size)
                    on_done(key, False, failure, i)

    def close(self) -> None:
        for w in self.pool:
            w.kill()
        self.pool = []
