"""`workbench sweep`: expand orderings × grid into variants, run them in crash-isolated workers, resume, rank.

A sweep file names a base experiment and what to vary:

    base: ../quickstart.yaml            # path relative to the sweep file, or an inline experiment mapping
    plugins: [my_passes]                # modules the workers import first (custom passes register themselves)
    sweep:
      orderings: {permutations: [fold_constant, fold_batchnorm, fuse], suffix: [dce], sample: 4, seed: 0}
      #  or orderings: ["fold_constant,fuse,dce", [fuse, dce]]
      grid: {model.inputs.x: [[1, 3, 32, 32], [1, 3, 64, 64]]}
      repeats: 1
      timeout_s: 300
      workers: 2
    output: runs/sweeps/orderings

Execution has two phases, both in worker processes (a segfault or abort inside TVM kills a worker, never
the sweep; the worker is replaced and only that variant is marked failed):
1. per distinct (model, target, pipeline): run only the pipeline and take `tvm.ir.structural_hash` of the
   optimized module (seconds);
2. per equivalence class (same optimized IR, same everything else, same repeat index): one full
   `run_experiment`; every member of the class is recorded with the representative's run id.
Each variant's outcome is one row of `sweep_variants` in `<output>/results.sqlite`, committed in its own
transaction; `--resume` skips variants already done.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import itertools
import json
import os
import random
import signal
import sqlite3
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError

from workbench.passes import pipeline_spec
from workbench.atomic import atomic_write_json
from workbench.config import Experiment, Strict, _describe, apply_override, read_yaml, validate
from workbench.errors import UserError
from workbench.passes.pipeline_spec import PassSpec

SWEEP_MARKER = "sweep.json"
STORE_NAME = "results.sqlite"


# ---------------------------------------------------------------------------------------------
# the sweep file


class Permutations(Strict):
    """All orderings of `permutations`, each wrapped in `prefix` ... `suffix`; optionally a seeded sample."""

    permutations: list[Any] = Field(description="passes to permute (names or {name: {params}})")
    prefix: list[Any] | str = Field(default_factory=list)
    suffix: list[Any] | str = Field(default_factory=list)
    sample: PositiveInt | None = Field(default=None, description="keep N orderings drawn with `seed`")
    seed: int = 0


class SweepSection(Strict):
    orderings: list[Any] | Permutations | None = Field(
        default=None, description="pipeline texts / YAML lists, or {permutations: ...}; default: the base pipeline")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted.key: [values]")
    repeats: PositiveInt = 1
    timeout_s: PositiveFloat = 300
    workers: PositiveInt = 2
    executor: Literal["local", "ray"] = Field(
        default="local", description="local: a pool of worker processes; ray: one Ray task per task (extra `ray`)")
    ray_address: str | None = Field(default=None, description="Ray cluster to join (default: start a local one)")


class SweepFile(Strict):
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    base: str | dict[str, Any]
    plugins: list[str] = Field(default_factory=list, description="modules workers import before running")
    sweep: SweepSection = Field(default_factory=SweepSection)
    output: Path | None = None


@dataclass
class Variant:
    id: str
    position: int
    repeat: int
    pipeline_text: str
    grid: dict[str, Any]
    config: dict  # the validated experiment, JSON mode, with its output and results set

    @property
    def ir_key(self) -> str:
        return _ir_key(self.config)

    @property
    def setting_key(self) -> str:
        """Everything except the pipeline and where files go: two variants with equal IR and equal
        setting_key measure the same thing."""
        return _digest({k: v for k, v in self.config.items() if k not in ("pipeline", "output", "results")})


@dataclass
class Sweep:
    path: Path
    name: str
    output: Path
    plugins: list[str]
    section: SweepSection
    permuted: list[str]
    variants: list[Variant] = field(default_factory=list)

    @property
    def store_path(self) -> Path:
        return self.output / STORE_NAME


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _specs(value: Any, where: str) -> list[PassSpec]:
    try:
        return pipeline_spec.from_yaml(value)
    except (ValueError, UserError) as exc:
        raise UserError(f"{where}: {exc}") from exc


def expand_orderings(section: SweepSection, base_pipeline: Any, origin: str) -> list[list[PassSpec]]:
    """The list of pipelines the sweep tries, in a stable order."""
    orderings = section.orderings
    if orderings is None:
        return [_specs(base_pipeline or [], f"{origin}: base.pipeline")]
    if isinstance(orderings, list):
        return [_specs(entry, f"{origin}: sweep.orderings[{i}]") for i, entry in enumerate(orderings)]
    passes = _specs(orderings.permutations, f"{origin}: sweep.orderings.permutations")
    prefix = _specs(orderings.prefix, f"{origin}: sweep.orderings.prefix")
    suffix = _specs(orderings.suffix, f"{origin}: sweep.orderings.suffix")
    perms = [list(p) for p in itertools.permutations(passes)]
    if orderings.sample is not None and orderings.sample < len(perms):
        keep = sorted(random.Random(orderings.seed).sample(range(len(perms)), orderings.sample))
        perms = [perms[i] for i in keep]
    return [prefix + p + suffix for p in perms]


def _load_base(raw: SweepFile, path: Path) -> tuple[dict, str]:
    if isinstance(raw.base, dict):
        return copy.deepcopy(raw.base), f"{path}: base"
    base_path = Path(raw.base) if Path(raw.base).is_absolute() else path.parent / raw.base
    data = read_yaml(base_path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: base: {base_path} does not hold an experiment mapping")
    return data, str(base_path)


def load_sweep(path: Path, base_dir: Path | None = None) -> Sweep:
    """Read and validate a sweep file and expand it into validated variants (nothing runs)."""
    path = Path(path)
    base_dir = base_dir or Path.cwd()
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a sweep mapping (base, sweep, output), got {type(data).__name__}")
    try:
        raw = SweepFile.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(e, SweepFile) for e in exc.errors()]
        raise UserError(f"{path}: invalid sweep:\n  " + "\n  ".join(lines)) from exc
    base, base_origin = _load_base(raw, path)
    name = raw.name or path.stem
    output = raw.output or Path("runs") / "sweeps" / name
    output = (output if output.is_absolute() else base_dir / output).resolve()
    orderings = expand_orderings(raw.sweep, base.get("pipeline"), str(path))
    grid_keys = list(raw.sweep.grid)
    for key, values in raw.sweep.grid.items():
        if not values:
            raise UserError(f"the sweep expands to zero variants: {path}: sweep.grid.{key} is an empty list")
    if not orderings:
        raise UserError(f"the sweep expands to zero variants: {path}: sweep.orderings is empty"
                        + (" (sample/permutations gave nothing)" if isinstance(raw.sweep.orderings, Permutations) else ""))
    permuted = ([s.name for s in _specs(raw.sweep.orderings.permutations, str(path))]
                if isinstance(raw.sweep.orderings, Permutations) else [])
    sweep = Sweep(path, name, output, raw.plugins, raw.sweep, permuted)
    seen: set[str] = set()
    combos = list(itertools.product(*(raw.sweep.grid[k] for k in grid_keys)))
    for specs in orderings:
        text = pipeline_spec.to_text(specs)
        for combo in combos:
            grid = dict(zip(grid_keys, combo))
            variant_data = copy.deepcopy(base)
            variant_data["pipeline"] = [s.to_yaml() for s in specs]
            for key, value in grid.items():
                apply_override(variant_data, f"{key}={json.dumps(value)}")
            variant_data.pop("output", None)
            variant_data.pop("results", None)
            where = f"{path}: variant pipeline={text!r}" + (f" grid={grid}" if grid else "") + f" (base {base_origin})"
            experiment = validate(variant_data, where)
            digest = experiment.config_hash()
            for repeat in range(raw.sweep.repeats):
                vid = f"{digest[:12]}-r{repeat}"
                if vid in seen:
                    continue
                seen.add(vid)
                config = experiment.model_dump(mode="json")
                config["pipeline"] = [s.to_yaml() for s in experiment.pipeline]  # the form validate() reads
                config["output"] = str(output / "variants" / vid)
                config["results"] = str(output / STORE_NAME)
                sweep.variants.append(Variant(vid, len(sweep.variants), repeat,
                                              pipeline_spec.to_text(experiment.pipeline), grid, config))
    if not sweep.variants:
        raise UserError(f"the sweep expands to zero variants: {path}")
    return sweep


# ---------------------------------------------------------------------------------------------
# the sweep's own table, next to the runs in the sweep's results store

SWEEP_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_variants (
    id TEXT PRIMARY KEY,
    position INTEGER,
    repeat INTEGER,
    pipeline_text TEXT,
    grid_json TEXT,
    status TEXT NOT NULL,
    error TEXT,
    run_id INTEGER,
    structural_hash TEXT,
    class_id TEXT,
    representative TEXT,
    median_ms REAL,
    seconds REAL,
    updated TEXT
);
"""


class SweepStore:
    """The sweep's table next to `runs` in one SQLite store; a measured run and the variants it stands for
    are written in one transaction, so a kill at any moment leaves no run that no variant refers to."""

    def __init__(self, path: Path):
        from workbench.record.store import ResultsStore

        self.results = ResultsStore(path)
        self.db = self.results.db
        with self.results.transaction():
            self.db.execute(SWEEP_SCHEMA)

    def record(self, variants: list[Variant], status: str, *, result: dict | None = None, run_id: int | None = None,
               **columns: Any) -> int | None:
        """Record `variants` with one status; with `result`, first add that run and refer to it. Return the run id."""

        def insert(run_id: int | None) -> None:
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self.db.executemany(
                "INSERT OR REPLACE INTO sweep_variants VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(v.id, v.position, v.repeat, v.pipeline_text, json.dumps(v.grid, sort_keys=True), status,
                  columns.get("error"), run_id, columns.get("structural_hash"), columns.get("class_id"),
                  columns.get("representative"), columns.get("median_ms"), columns.get("seconds"), now)
                 for v in variants])

        if result is not None:
            return self.results.add(result, then=insert)
        with self.results.transaction():
            insert(run_id)
        return run_id

    def rows(self) -> dict[str, dict]:
        return {row["id"]: dict(row) for row in self.db.execute("SELECT * FROM sweep_variants ORDER BY position")}

    def close(self) -> None:
        self.results.close()


# ---------------------------------------------------------------------------------------------
# the variant function: what every executor runs for one task, in a worker process


@dataclass(frozen=True)
class WorkerSetup:
    plugins: tuple[str, ...]
    paths: tuple[str, ...]  # put first on sys.path (the sweep file's folder, the working directory)
    base_dir: str


class VariantRunner:
    """Runs the tasks of one sweep in this process and keeps what repeats across them (the imported model,
    the optimized module of a phase-1 pipeline until its phase-2 run)."""

    def __init__(self, setup: WorkerSetup):
        import importlib

        self.setup = setup
        for p in reversed(setup.paths):
            if p not in sys.path:
                sys.path.insert(0, p)
        self.plugin_error = None
        for module in setup.plugins:
            try:
                importlib.import_module(module)
            except Exception as exc:  # reported on every task: the user's plugin is broken
                self.plugin_error = f"plugin {module!r} failed to import: {exc.__class__.__name__}: {exc}"
        self.imported: dict[str, Any] = {}
        self.optimized: dict[str, Any] = {}  # ir_key -> (optimized module, pass records), until its run task
        self.builds: dict = {}  # compiled modules by IR, reused across this process's runs (run_experiment's cache)

    def __call__(self, kind: str, config: dict) -> tuple[str, Any]:
        """("ok", structural hash) for a "hash" task, ("ok", {"result", "median_ms"}) for a "run" task,
        ("error", message) when the variant raises."""
        import traceback

        print(f"--- {datetime.now():%H:%M:%S} {kind} {config.get('output')} {config.get('pipeline')}", flush=True)
        try:
            if self.plugin_error:
                raise UserError(self.plugin_error)
            experiment = validate(config, "variant")
            if kind == "hash":
                value, optimized = _structural_hash(experiment, Path(self.setup.base_dir), self.imported)
                self.optimized[_ir_key(config)] = optimized
                while len(self.optimized) > 8:  # routed elsewhere or not a class representative: drop oldest
                    self.optimized.pop(next(iter(self.optimized)))
                return "ok", value
            return "ok", self._run(experiment, config)
        except BaseException as exc:  # noqa: BLE001 - everything a variant raises is its failure
            traceback.print_exc()
            return "error", f"{exc.__class__.__name__}: {exc}".strip()

    def _run(self, experiment: Experiment, config: dict) -> dict:
        import io

        from rich.console import Console

        from workbench import experiment as experiment_module

        if len(self.builds) > 32:  # bound the memory a long sweep's worker holds in compiled modules
            self.builds.clear()
        original = experiment_module.run_pipeline
        cached = self.optimized.pop(_ir_key(config), None)
        if cached is not None:  # this process already ran the pipeline in phase 1: reuse it
            experiment_module.run_pipeline = lambda *_a, **_k: cached
        try:
            result = experiment_module.run_experiment(experiment, Path(self.setup.base_dir),
                                                      console=Console(file=io.StringIO()), store=False,
                                                      builds=self.builds)
        finally:
            experiment_module.run_pipeline = original
        return {"result": result, "median_ms": result["measurements"]["workbench"].get("median_ms")}


_RUNNER: VariantRunner | None = None


def run_variant_task(setup: WorkerSetup, kind: str, config: dict) -> tuple[str, Any]:
    """The variant function both executors call (a worker process keeps one VariantRunner per sweep)."""
    global _RUNNER
    if _RUNNER is None or _RUNNER.setup != setup:
        _RUNNER = VariantRunner(setup)
    return _RUNNER(kind, config)


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


def _worker_main(conn, log_path: str, setup: WorkerSetup) -> None:
    """Worker loop: receive (kind, config) tasks, answer with `run_variant_task`."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    while True:
        try:
            kind, config = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(run_variant_task(setup, kind, config))


def _ir_key(config: dict) -> str:
    """Everything that determines the optimized IR (model, inputs, target, pipeline)."""
    return _digest({k: config[k] for k in ("model", "target", "pipeline")})


def _structural_hash(experiment: Experiment, base_dir: Path, cache: dict) -> tuple[str, tuple]:
    import tvm_ffi

    from workbench.measure.inputs import input_specs
    from workbench.models.canonicalize import canonicalize
    from workbench.models.importer import import_to_relax
    from workbench.models.sources import resolve_source
    from workbench.passes.pipeline import run_pipeline
    from workbench.compile.targets import make_target

    key = json.dumps(experiment.model.model_dump(mode="json"), sort_keys=True)
    if key not in cache:
        source = resolve_source(experiment.model.source, base_dir, experiment.model.cache_dir)
        cache[key] = import_to_relax(canonicalize(source, input_specs(experiment.model, base_dir)))
    optimized, records = run_pipeline(cache[key], experiment.pipeline, make_target(experiment.target))
    return f"{tvm_ffi.structural_hash(optimized) & 0xFFFFFFFFFFFFFFFF:016x}", (optimized, records)


def worker_setup(sweep: Sweep, base_dir: Path) -> WorkerSetup:
    return WorkerSetup(tuple(sweep.plugins), (str(sweep.path.parent.resolve()), str(base_dir)), str(base_dir))


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class _Worker:
    def __init__(self, ctx, index: int, sweep: Sweep, base_dir: Path):
        self.conn, child = ctx.Pipe()
        logs = sweep.output / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log = logs / f"worker-{index}.log"
        self.process = ctx.Process(target=_worker_main, daemon=True, name=f"workbench-sweep-{index}",
                                   args=(child, str(self.log), worker_setup(sweep, base_dir)))
        self.process.start()
        child.close()
        self.task: tuple | None = None
        self.deadline = 0.0

    def assign(self, task: tuple, timeout_s: float) -> None:
        self.task = task
        self.deadline = time.monotonic() + timeout_s
        self.conn.send((task[1], task[2]))

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


def run_tasks(pending: deque, sweep: Sweep, workers: int, base_dir: Path, on_done) -> None:
    """Run (key, kind, config, preferred worker) tasks on `workers` worker processes.

    `on_done(key, ok, value, worker_index)` is called for each; it may append new tasks to `pending`
    (phase-2 runs are queued as soon as their class is known, preferring the worker that already holds
    the optimized module). A worker that dies (signal, os.abort, segfault) or runs past the timeout fails
    only its task and is replaced.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    timeout_s = sweep.section.timeout_s
    pool = [_Worker(ctx, i, sweep, base_dir) for i in range(max(1, min(workers, len(pending))))]
    try:
        while pending or any(w.task for w in pool):
            for i, w in enumerate(pool):
                if w.task is None and pending:
                    pick = next((t for t in pending if t[3] == i), None)
                    if pick is None:  # nothing routed here: take the oldest task not waiting for a busy worker
                        pick = next((t for t in pending if t[3] is None or pool[t[3]].task is not None
                                     or t[3] >= len(pool)), pending[0])
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
                key, kind, _config, _prefer = w.task
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
                    failure = (f"worker crashed ({_signal_name(w.process.exitcode)}) during "
                               f"{'the pipeline' if kind == 'hash' else 'build/measure'}; log: {w.log}")
                elif time.monotonic() > w.deadline:
                    failure = f"timeout after {timeout_s:g} s (worker killed); log: {w.log}"
                if failure:
                    w.kill()
                    pool[i] = _Worker(ctx, i, sweep, base_dir)
                    on_done(key, False, failure, i)
    finally:
        for w in pool:
            w.kill()


# ---------------------------------------------------------------------------------------------
# the sweep


def _progress_text(counts: dict[str, int], best: float | None) -> str:
    best_text = f"{best:.3f} ms" if best is not None else "—"
    return (f"done [green]{counts['done']}[/] failed [red]{counts['failed']}[/] "
            f"remaining {counts['remaining']} · best median {best_text}")


def run_sweep(sweep: Sweep, base_dir: Path, *, workers: int | None = None, resume: bool = False,
              console=None) -> dict[str, dict]:
    """Run every variant not already done; return the sweep_variants rows by id."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = console or Console(stderr=True)
    workers = workers or sweep.section.workers
    sweep.output.mkdir(parents=True, exist_ok=True)
    store = SweepStore(sweep.store_path)
    try:
        existing = store.rows()
        if existing and not resume:
            raise UserError(f"{sweep.output}: this folder already holds a sweep ({len(existing)} variants recorded); "
                            "pass --resume to continue it, or remove the folder / set another `output:`")
        atomic_write_json(sweep.output / SWEEP_MARKER, {
            "name": sweep.name, "sweep_file": str(sweep.path), "permuted": sweep.permuted,
            "section": sweep.section.model_dump(mode="json"), "plugins": sweep.plugins,
            "variants": [{"id": v.id, "pipeline_text": v.pipeline_text, "grid": v.grid, "repeat": v.repeat}
                         for v in sweep.variants],
        })
        todo = [v for v in sweep.variants if existing.get(v.id, {}).get("status") != "done"]
        counts = {"done": len(sweep.variants) - len(todo), "failed": 0, "remaining": len(todo)}
        done_medians = [r["median_ms"] for r in existing.values() if r["status"] == "done" and r["median_ms"]]
        best = [min(done_medians) if done_medians else None]
        if not todo:
            console.print(f"all {len(sweep.variants)} variants already done")
            return store.rows()
        started = time.monotonic()
        progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console)
        with progress:
            bar = progress.add_task(sweep.name, total=len(sweep.variants), completed=counts["done"],
                                    status=_progress_text(counts, best[0]))

            def finish(variant: Variant, ok: bool) -> None:
                counts["done" if ok else "failed"] += 1
                counts["remaining"] -= 1
                progress.update(bar, advance=1, status=_progress_text(counts, best[0]))

            # phase 1: structural hash of the optimized IR, once per distinct (model, target, pipeline);
            # phase 2: one full run per equivalence class and repeat, queued as soon as the class is known
            by_ir: dict[str, list[Variant]] = {}
            for v in todo:
                by_ir.setdefault(v.ir_key, []).append(v)
            reuse = {(r["class_id"], r["repeat"]): r for r in existing.values()
                     if r["status"] == "done" and r["class_id"]}
            classes: dict[tuple[str, int], dict] = {}  # -> {members, done: None | (ok, value), started}
            pending: deque = deque((k, "hash", vs[0].config, None) for k, vs in by_ir.items())

            def record_members(members: list[Variant], key: tuple[str, int], state: dict,
                               result: dict | None = None) -> None:
                """Record members of a measured class; with `result`, add that run in the same transaction."""
                ok, value = state["done"]
                common = dict(structural_hash=state["hash"], class_id=key[0], representative=state["representative"],
                              seconds=state.get("seconds"))
                if ok:
                    value["run_id"] = store.record(members, "done", result=result, run_id=value["run_id"],
                                                   median_ms=value["median_ms"], **common)
                else:
                    store.record(members, "failed", error=value, **common)
                for v in members:
                    finish(v, ok)

            def on_done(key: Any, ok: bool, value: Any, worker: int | None) -> None:
                if isinstance(key, str):  # a hash task
                    if not ok:
                        store.record(by_ir[key], "failed", error=value)
                        for v in by_ir[key]:
                            finish(v, False)
                        return
                    for v in by_ir[key]:
                        ckey = (_digest([value, v.setting_key])[:12], v.repeat)
                        state = classes.get(ckey)
                        if state is None:
                            state = classes[ckey] = {"members": [v], "done": None, "hash": value,
                                                     "representative": v.id}
                            if ckey in reuse:  # measured before an interruption: record, do not re-measure
                                r = reuse[ckey]
                                state["done"] = (True, {"run_id": r["run_id"], "median_ms": r["median_ms"]})
                                state["representative"] = r["representative"]
                                record_members([v], ckey, state)
                            else:
                                state["started"] = time.monotonic()
                                pending.append((ckey, "run", v.config, worker))
                        else:
                            state["members"].append(v)
                            if state["done"] is not None:
                                record_members([v], ckey, state)
                    return
                state = classes[key]
                state["seconds"] = time.monotonic() - state["started"]
                if ok:
                    state["done"] = (True, {"run_id": None, "median_ms": value["median_ms"]})
                    if value["median_ms"] is not None:
                        best[0] = value["median_ms"] if best[0] is None else min(best[0], value["median_ms"])
                    record_members(state["members"], key, state, result=value["result"])
                else:
                    state["done"] = (False, value)
                    record_members(state["members"], key, state)
                progress.update(bar, description=f"{sweep.name}: {len(classes)} classes")

            progress.update(bar, description=f"{sweep.name}: pipelines")
            if sweep.section.executor == "ray":
                from workbench.sweep_ray import run_tasks_ray

                run_tasks_ray(pending, sweep, workers, base_dir, on_done)
            else:
                run_tasks(pending, sweep, workers, base_dir, on_done)
            progress.update(bar, description=sweep.name)
        elapsed = time.monotonic() - started
        console.print(f"{len(todo)} variants in {elapsed:.1f} s ({len(todo) / elapsed * 60:.1f} variants/min); "
                      f"{len(classes)} equivalence classes measured or reused, {counts['failed']} failed")
        return store.rows()
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# CLI glue (kept here so cli.py only registers the verb)


def variants_table(sweep: Sweep):
    from rich.table import Table

    table = Table(title=f"sweep {sweep.name}: {len(sweep.variants)} variants → {sweep.output}")
    for column in ("#", "id", "pipeline", "grid", "repeat"):
        table.add_column(column)
    for v in sweep.variants:
        grid = ", ".join(f"{k}={json.dumps(val)}" for k, val in v.grid.items()) or "—"
        table.add_row(str(v.position), v.id, v.pipeline_text or "(empty)", grid, str(v.repeat))
    return table


def cmd_sweep(args: argparse.Namespace) -> int:
    from workbench.cli import stderr, stdout

    sweep = load_sweep(Path(args.sweep_file), Path.cwd())
    args.log_dir = sweep.output
    if args.dry_run:
        stdout.print(variants_table(sweep))
        return 0
    rows = run_sweep(sweep, Path.cwd(), workers=args.workers, resume=args.resume, console=stderr)
    from workbench.sweep_report import console_table, write_sweep_report

    report = write_sweep_report(sweep.output)
    stdout.print(console_table(sweep.output))
    failed = sum(r["status"] == "failed" for r in rows.values())
    stdout.print(f"Wrote {report} (and plots, variants.csv, all_rows.csv); store {sweep.store_path}"
                 + (f"; {failed} variants failed (see the report)" if failed else ""))
    return 0


def add_parser(verbs) -> argparse.ArgumentParser:
    sweep = verbs.add_parser("sweep", help="run many variants (orderings × grid) in crash-isolated workers, rank them")
    sweep.add_argument("sweep_file", metavar="SWEEP.yaml", help="sweep file (base experiment + what to vary)")
    sweep.add_argument("--workers", type=int, metavar="N", help="worker processes (default: the file's sweep.workers)")
    sweep.add_argument("--resume", action="store_true", help="continue a sweep: skip variants already done")
    sweep.add_argument("--dry-run", action="store_true", help="print the variants and exit")
    sweep.set_defaults(handler=cmd_sweep)
    return sweep


def report_dispatch(run_report):
    """`workbench report DIR`: a sweep folder gets the sweep report, anything else the run report."""

    def handler(args: argparse.Namespace) -> int:
        folder = Path(args.run_dir)
        if (folder / SWEEP_MARKER).is_file():
            from workbench.cli import stdout
            from workbench.sweep_report import console_table, write_sweep_report

            report = write_sweep_report(folder)
            stdout.print(console_table(folder))
            stdout.print(f"Wrote {report}")
            return 0
        return run_report(args)

    return handler
