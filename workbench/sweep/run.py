"""Running a sweep: the two phases, recording as results arrive, resume.

Execution has two phases, both in worker processes (see workers.py):
1. per distinct (model, target, pipeline): run only the pipeline and take `tvm.ir.structural_hash` of the
   optimized module (seconds);
2. per equivalence class (same optimized IR, same everything else, same repeat index): one full
   `run_experiment`; every member of the class is recorded with the representative's run id.
Each variant's outcome is one row of `sweep_variants` in `<output>/results.sqlite`, committed in its own
transaction; `--resume` skips variants already done.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

from workbench.atomic import atomic_write_json
from workbench.errors import UserError
from workbench.sweep.spec import SWEEP_MARKER, Sweep, Variant, _digest
from workbench.sweep.store import SweepStore
from workbench.sweep.workers import run_tasks



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
                from workbench.sweep.ray import run_tasks_ray

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


