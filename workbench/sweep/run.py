"""Measuring a sweep's variants: hash, (tune), measure; every outcome recorded as it arrives (driver.py runs the
whole sweep, or the ordering search, with it).

A batch of variants (a fixed sweep is one batch, a search one per step) goes through, in worker processes:
1. hash: per distinct (model, target, pipeline), run only the pipeline and take the structural hash of the
   optimized module (seconds);
2. tune (tuned sweeps only): one tuning process tunes the union of the new classes' kernels, deduplicated by
   workload, into the sweep's database (see tuning.py);
3. measure: per equivalence class (same optimized IR, same everything else, same repeat index) one full
   `run_experiment`, on the worker that ran its pipeline; every member is recorded with that run's id.
Each variant's outcome is one row of `sweep_variants` in `<output>/results.sqlite`, committed in its own
transaction together with the run it refers to; `--resume` skips variants done and reuses classes measured.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import Progress
from rich.text import Text

from workbench.atomic import atomic_write_json
from workbench.record import mlflow_sink
from workbench.record.result import RunResult
from workbench.sweep.spec import SWEEP_MARKER, Sweep, Variant, short_digest
from workbench.sweep.store import SweepStore
from workbench.sweep.tuning import tune_classes
from workbench.sweep.workers import Task


@dataclass
class _Class:
    key: tuple[str, int]  # (class id, repeat)
    hash: str
    worker: int | None  # the worker that ran the pipeline (and still holds the optimized module)
    members: list[Variant] = field(default_factory=list)
    started: float = 0.0


def write_marker(sweep: Sweep) -> None:
    """`sweep.json`: what the sweep is (rewritten as a search adds variants); `workbench report` looks for it."""
    atomic_write_json(sweep.output / SWEEP_MARKER, {
        "name": sweep.name, "sweep_file": str(sweep.path), "permuted": sweep.permuted,
        "section": sweep.section.model_dump(mode="json"), "plugins": sweep.plugins,
        "tuned": sweep.tuning is not None,
        "variants": [{"id": v.id, "pipeline_text": v.pipeline_text, "grid": v.grid, "repeat": v.repeat,
                      "tuned": v.tuned} for v in sweep.variants],
    })


def ran_on(worker: int | str | None) -> str | None:
    """Where a cell ran, for the store: a local pool's worker index, or the Ray node the pool names."""
    return f"worker {worker}" if isinstance(worker, int) else worker


class SweepRun:
    """One sweep being run: its store, its workers and its progress bar."""

    def __init__(self, sweep: Sweep, base_dir: Path, store: SweepStore, pool, progress: Progress):
        self.sweep, self.base_dir, self.store, self.pool, self.progress = sweep, base_dir, store, pool, progress
        self.rows = store.rows()
        self.failed, self.started = 0, time.monotonic()
        medians = [r["median_ms"] for r in self.rows.values() if r["status"] == "done" and r["median_ms"]]
        self.best = min(medians) if medians else None
        self.bar = progress.add_task(sweep.name, total=len(sweep.variants), completed=self._done(),
                                     status=self._status())
        record = sweep.base.get("record") or {}  # `record: {mlflow: URI}`: one parent run, a child per variant
        self.mlflow = mlflow_sink.resolve_uri(record["mlflow"], base_dir) if record.get("mlflow") else None
        self.mlflow_experiment = record.get("mlflow_experiment") or sweep.base.get("name") or sweep.name
        self.mlflow_parent: str | None = None

    def _done(self) -> int:
        return sum(self.rows.get(v.id, {}).get("status") == "done" for v in self.sweep.variants)

    def _status(self) -> str:
        best = f"{self.best:.3f} ms" if self.best is not None else "—"
        remaining = len(self.sweep.variants) - self._done() - self.failed
        return f"done [green]{self._done()}[/] failed [red]{self.failed}[/] remaining {remaining} · best median {best}"

    def status_line(self) -> str:
        """The progress bar's status as plain text, with the elapsed time: the line a log without a terminal gets."""
        status = Text.from_markup(self._status()).plain
        return f"sweep {self.sweep.name} {time.monotonic() - self.started:5.0f} s: {status}"

    def _record(self, members: list[Variant], status: str, result: RunResult | None = None, **columns: Any) -> None:
        run_id = self.store.record(members, status, result=result, **columns)
        for v in members:
            self.rows[v.id] = {"id": v.id, "status": status, "run_id": run_id, "repeat": v.repeat, **columns}
        if status == "failed":
            self.failed += len(members)
        elif columns.get("median_ms") is not None:
            self.best = columns["median_ms"] if self.best is None else min(self.best, columns["median_ms"])
        if result is not None and self.mlflow:
            result.run_id = run_id
            try:
                self._log_mlflow(members, result)
            except Exception as exc:  # noqa: BLE001 - the variant is measured and stored; a failing sink only warns
                self.progress.console.print(f"[yellow]![/] not logged to MLflow ({self.mlflow}): {exc}")
        self.progress.update(self.bar, total=len(self.sweep.variants), completed=self._done(), status=self._status())

    def _log_mlflow(self, members: list[Variant], result: RunResult) -> None:
        """Each variant a class measured, as a child of the sweep's MLflow run (opened with the first)."""
        if self.mlflow_parent is None:
            self.mlflow_parent = mlflow_sink.start_parent(self.mlflow, self.mlflow_experiment, f"sweep {self.sweep.name}",
                                                          {"sweep": self.sweep.name, "sweep_file": self.sweep.path})
        out_dir = Path(members[0].config["output"])  # the representative ran; equivalent members share its run
        for v in members:
            mlflow_sink.log_run(result, out_dir, self.mlflow, self.mlflow_experiment, self.mlflow_parent,
                                {"variant": v.id, "variant_pipeline": v.pipeline_text, "repeat": v.repeat,
                                 "representative": members[0].id,
                                 **{f"grid.{k}": value for k, value in v.grid.items()}})

    def end_mlflow(self, failed: bool = False) -> None:
        """Close the sweep's MLflow parent run, if one was opened."""
        if self.mlflow_parent is not None:
            mlflow_sink.end_parent(self.mlflow, self.mlflow_parent, failed)

    def hash(self, variants: list[Variant]) -> dict[str, tuple[str, str, int | None]]:
        """ir_key -> ("ok", structural hash, worker) or ("error", message, worker): each distinct pipeline run
        once; a pipeline with a variant done before keeps its recorded hash."""
        out: dict[str, tuple] = {}
        for v in variants:
            row = self.rows.get(v.id)
            if row and row["status"] == "done" and row.get("structural_hash"):
                out[v.ir_key] = ("ok", row["structural_hash"], None)
        todo: dict[str, Variant] = {}
        for v in variants:
            if v.ir_key not in out:
                todo.setdefault(v.ir_key, v)
        if todo:
            self.progress.update(self.bar, description=f"{self.sweep.name}: pipelines")

            def on_done(key: str, ok: bool, value: Any, worker: int | None) -> None:
                out[key] = ("ok" if ok else "error", value, worker)

            self.pool.run(deque(Task(k, "hash", v.config, None) for k, v in todo.items()), on_done)
        return out

    def measure(self, variants: list[Variant], hashes: dict[str, tuple]) -> None:
        """Record every variant not done yet: a failed pipeline as failed, a member of a class measured before
        with that class's run, the rest tuned (tuned classes) and measured, one run per class."""
        classes: dict[tuple[str, int], _Class] = {}
        for v in variants:
            if self.rows.get(v.id, {}).get("status") == "done":
                continue
            status, value, worker = hashes[v.ir_key]
            if status != "ok":
                self._record([v], "failed", error=value)
                continue
            key = (short_digest([value, v.setting_key])[:12], v.repeat)
            classes.setdefault(key, _Class(key, value, worker)).members.append(v)
        measured = {(r["class_id"], r["repeat"]): r for r in self.rows.values()
                    if r["status"] == "done" and r.get("class_id")}
        fresh = []
        for key, c in classes.items():
            if key in measured:  # measured before (an interruption, or an equivalent search candidate): reuse
                r = measured[key]
                self._record(c.members, "done", run_id=r["run_id"], median_ms=r["median_ms"],
                             structural_hash=c.hash, class_id=key[0], representative=r["representative"],
                             seconds=r.get("seconds"))
            else:
                fresh.append(c)
        tuned = [c for c in fresh if c.members[0].tuned]
        if tuned:
            self.progress.update(self.bar, description=f"{self.sweep.name}: tuning")
            error = tune_classes(self.sweep, self.base_dir, {c.key[0]: c.members[0].config for c in tuned},
                                 self.progress)
            if error:
                for c in tuned:
                    self._record(c.members, "failed", error=f"tuning failed: {error}", structural_hash=c.hash,
                                 class_id=c.key[0])
                fresh = [c for c in fresh if not c.members[0].tuned]
        by_key = {c.key: c for c in fresh}

        def on_done(key: tuple[str, int], ok: bool, value: Any, worker: int | str | None) -> None:
            c = by_key[key]
            common = dict(structural_hash=c.hash, class_id=key[0], representative=c.members[0].id,
                          seconds=time.monotonic() - c.started, ran_on=ran_on(worker))
            if ok:
                result = RunResult.from_json(value["result"], f"variant {c.members[0].id}")
                self._record(c.members, "done", result=result, median_ms=value["median_ms"], **common)
            else:
                self._record(c.members, "failed", error=value, **common)

        for c in fresh:
            c.started = time.monotonic()
        self.progress.update(self.bar, description=f"{self.sweep.name}: measuring")
        self.pool.run(deque(Task(c.key, "run", c.members[0].config, c.worker, c.members[0].reference) for c in fresh),
                      on_done)
        self.progress.update(self.bar, description=self.sweep.name)
