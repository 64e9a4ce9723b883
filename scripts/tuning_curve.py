"""The tuning curve of a committed database, read from its records: does more budget still pay?

    python scripts/tuning_curve.py CONFIG [--database DIR] [--png docs/tuning_curve_NAME.png]

MetaSchedule appends every measured candidate to the database in the order it was measured, so
each task's best-so-far latency after k trials can be read back without tuning again. Printed per
task: trials, best µs, and the trial that first came within 5% of that best; then the estimated
model time (sum over tasks of uses x best kernel µs) had every task stopped after k trials. Where
that sum stops falling, more trials per task buy little. The PNG shows both (per-task curves
normalized to their final best; the summed estimate).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import tvm_ffi
from matplotlib.figure import Figure

from workbench.compile.databases import RECORDS_FILE, WORKLOADS_FILE, choose_database
from workbench.compile.targets import make_target
from workbench.compile.tasks import FAILED_RUN_SECS, extract_tasks, tuning_module
from workbench.config import load_experiment
from workbench.stages import optimized_module

NEAR_BEST = 1.05


def best_so_far(database: Path) -> dict[str, list[float]]:
    """Workload hash -> best mean run time (µs) after each of its measured trials, in measuring order."""
    hashes = [json.loads(line)[0] for line in (database / WORKLOADS_FILE).read_text().splitlines()]
    curves: dict[str, list[float]] = {}
    for line in (database / RECORDS_FILE).read_text().splitlines():
        index, (_trace, run_secs, _target, _args) = json.loads(line)
        seconds = float(np.mean(run_secs)) if run_secs else FAILED_RUN_SECS
        curve = curves.setdefault(hashes[index], [])
        curve.append(min(seconds * 1e6, curve[-1] if curve else np.inf))
    return curves


def tuned_tasks(config: Path, database: Path | None) -> tuple[str, Path, list[dict]]:
    """The config's tasks with their uses and best-so-far curve (tasks without records are left out)."""
    experiment = load_experiment(config)
    target = make_target(experiment.target)
    tasks = extract_tasks(tuning_module(optimized_module(experiment, Path.cwd(), target), target,
                                        experiment.layout_rewrite), target)
    database = database or choose_database(experiment.database_root(Path.cwd()), target, "").path
    curves = best_so_far(database)
    rows = []
    for task in tasks:
        curve = curves.get(str(tvm_ffi.structural_hash(task.dispatched[0])))
        if curve:
            rows.append({"task": task.task_name, "uses": task.weight, "curve": curve})
    return experiment.name, database, rows


def summed_estimate(rows: list[dict], budget: int) -> float:
    """Sum over tasks of uses x best µs after `budget` trials of each (a task with fewer keeps its best)."""
    return sum(row["uses"] * row["curve"][min(budget, len(row["curve"])) - 1] for row in rows)


def plot(name: str, rows: list[dict], budgets: list[int], path: Path) -> None:
    figure = Figure(figsize=(11, 4))
    per_task, summed = figure.subplots(1, 2)
    for row in sorted(rows, key=lambda r: -r["uses"] * r["curve"][-1])[:8]:
        curve = np.asarray(row["curve"])
        per_task.plot(np.arange(1, curve.size + 1), curve / curve[-1], label=row["task"][:32])
    per_task.set(xlabel="trials of the task", ylabel="best so far / final best", yscale="log",
                 title=f"{name}: per-task best so far (top 8 by time)")
    per_task.legend(fontsize=6)
    per_task.grid(alpha=0.3)
    summed.plot(budgets, [summed_estimate(rows, b) / 1e3 for b in budgets], marker="o")
    summed.set(xlabel="trials per task", ylabel="summed best kernel time (ms)", xscale="log",
               title="model time estimate had tuning stopped there")
    summed.set_ylim(bottom=0)
    summed.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--database", type=Path, help="default: the one the config applies on this CPU")
    parser.add_argument("--png", type=Path)
    args = parser.parse_args()
    name, database, rows = tuned_tasks(Path(args.config), args.database)
    print(f"{name}: database {database}, {len(rows)} tuned tasks, {sum(len(r['curve']) for r in rows)} trials")
    print(f"{'task':<60}{'uses':>5}{'trials':>7}{'best µs':>10}{'within 5% at':>14}")
    for row in rows:
        curve = row["curve"]
        near = next(i for i, value in enumerate(curve, 1) if value <= curve[-1] * NEAR_BEST)
        print(f"{row['task'][:59]:<60}{row['uses']:>5}{len(curve):>7}{curve[-1]:>10.1f}{near:>14}")
    longest = max(len(row["curve"]) for row in rows)
    budgets = sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b < longest} | {longest})
    print("trials per task -> summed best kernel time (ms): " +
          ", ".join(f"{b}: {summed_estimate(rows, b) / 1e3:.3f}" for b in budgets))
    if args.png:
        plot(name, rows, budgets, args.png)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
