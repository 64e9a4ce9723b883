"""Running a whole sweep: every variant not yet done (or the ordering search), in a pool of workers, into the
sweep's store; `--resume` goes on where a run stopped."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workbench.errors import UserError
from workbench.runtime.heartbeat import heartbeat
from workbench.sweep.pools import make_pool
from workbench.sweep.run import SweepRun, write_marker
from workbench.sweep.search import OrderingSearch
from workbench.sweep.spec import Sweep, Variant
from workbench.sweep.store import SweepStore
from workbench.sweep.tuning import read_tuning_summary


def model_batches(variants: list[Variant], tuned: bool) -> list[list[Variant]]:
    """An untuned study's variants model by model (hashed, then measured, one model at a time: a stopped study
    has whole models, and a worker still holds the model's optimized modules when it measures them); one batch
    otherwise (a tuned sweep tunes the union of every model's kernels once, so it hashes them all first)."""
    batches: dict[str, list[Variant]] = {}
    for v in variants:
        batches.setdefault(v.grid.get("model", "") if v.ablation is not None and not tuned else "", []).append(v)
    return list(batches.values())


def run_sweep(sweep: Sweep, base_dir: Path, *, workers: int | None = None, resume: bool = False,
              console: Console | None = None) -> dict[str, dict]:
    """Run every variant not already done (or the search); return the sweep_variants rows by id."""
    console = console or Console(stderr=True)
    sweep.output.mkdir(parents=True, exist_ok=True)
    store = SweepStore(sweep.store_path)
    try:
        existing = store.rows()
        if existing and not resume:
            raise UserError(f"{sweep.output}: this folder already holds a sweep ({len(existing)} variants recorded); "
                            "pass --resume to continue it, or remove the folder / set another `output:`")
        write_marker(sweep)
        todo = [v for v in sweep.variants if existing.get(v.id, {}).get("status") != "done"]
        if not todo and sweep.search is None:
            console.print(f"all {len(sweep.variants)} variants already done")
            return existing
        started = time.monotonic()
        tuning_before = read_tuning_summary(sweep.output).get("seconds", 0.0)
        progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console)
        pool = make_pool(sweep, workers or sweep.section.workers, base_dir)
        try:
            with progress:
                run = SweepRun(sweep, base_dir, store, pool, progress)
                # rich's bars draw nothing in a log without a terminal: a status line every 30 s there instead
                with heartbeat(console, run.status_line) if not console.is_terminal else nullcontext():
                    try:
                        if sweep.search is not None:
                            OrderingSearch(sweep, run).run()
                        else:
                            for batch in model_batches(todo, sweep.tuning is not None):
                                run.measure(batch, run.hash(batch))
                    except BaseException:
                        run.end_mlflow(failed=True)
                        raise
                    run.end_mlflow()
        finally:
            pool.close()
        elapsed = time.monotonic() - started
        tuning_s = read_tuning_summary(sweep.output).get("seconds", 0.0) - tuning_before
        rows = store.rows()
        classes = len({r["class_id"] for r in rows.values() if r["status"] == "done"})
        split = f" (tuning {tuning_s:.1f} s, the rest {elapsed - tuning_s:.1f} s)" if sweep.tuning else ""
        console.print(f"{len(sweep.variants)} variants in {elapsed:.1f} s{split}; {classes} equivalence classes "
                      f"measured or reused, {run.failed} variants failed")
        return rows
    finally:
        store.close()
