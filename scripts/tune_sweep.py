"""Tuning curves: end-to-end latency of the tuned build vs trials, per cost model, one PNG per model.

    python scripts/tune_sweep.py [CONFIG ...] --budgets 10,20,40 --cost-models xgb,random --out runs/tune_sweep

For each config and cost model a fresh database is tuned up to each budget in turn (each step resumes
the last, so a curve costs its largest budget once), then the model is built with it and timed.
Writes <out>/<name>.png and <out>/<name>.json (the points).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from matplotlib.figure import Figure
from rich.console import Console

from workbench.compile.build import build_lowered
from workbench.compile.databases import open_database
from workbench.compile.targets import make_target
from workbench.config import TuningConfig, load_experiment
from workbench.measure.factory import Bench, runner_for
from workbench.stages import build, optimize, prepare
from workbench.stages.tuning import tune_optimized


def curve(config_path: Path, budgets: list[int], cost_model: str, out: Path, repeat: int,
          console: Console) -> list[dict]:
    """Tune one config with one cost model through the budgets; the end-to-end latency after each."""
    base = Path.cwd()
    experiment = load_experiment(config_path)
    folder = out / experiment.name / cost_model
    target = make_target(experiment.target)
    prepared = prepare(experiment, base, target)
    optimized = optimize(prepared, experiment.pipeline, stats=False)
    bench = Bench(prepared.canonical, prepared.inputs, target, folder)
    untuned = runner_for("untuned", bench, build(optimized, target))
    points = [{"trials": 0, "median_ms": untuned.measure(3, repeat).median_ms}]
    for budget in budgets:
        tuning = TuningConfig(trials=budget, cost_model=cost_model, database=folder / "db",
                              seed=(experiment.tuning.seed if experiment.tuning else 0))
        step = experiment.model_copy(update={"tuning": tuning, "output": folder})
        tuned = tune_optimized(optimized.module, target, step, base, console)
        built = build_lowered(optimized.module, target, open_database(tuned.database, create=False))
        median = runner_for("tuned", bench, built).measure(3, repeat).median_ms
        points.append({"trials": sum(task.trials for task in tuned.tasks), "median_ms": median})
        console.print(f"{experiment.name} {cost_model} {points[-1]['trials']} trials: {median:.3f} ms")
    return points


def plot(name: str, curves: dict[str, list[dict]], path: Path) -> None:
    figure = Figure(figsize=(6, 4))
    axes = figure.subplots()
    for cost_model, points in curves.items():
        axes.plot([p["trials"] for p in points], [p["median_ms"] for p in points], marker="o", label=cost_model)
    axes.set(xlabel="measured trials (all tasks)", ylabel="end-to-end median latency (ms)",
             title=f"{name}: tuning curve")
    axes.set_ylim(bottom=0)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=["configs/quickstart.yaml"])
    parser.add_argument("--budgets", default="10,20,40", help="comma-separated total trial budgets")
    parser.add_argument("--cost-models", default="xgb,random")
    parser.add_argument("--out", default="runs/tune_sweep")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    budgets = sorted(int(b) for b in args.budgets.split(","))
    out = Path(args.out)
    console = Console(stderr=True)
    for config in args.configs:
        name = load_experiment(Path(config)).name
        curves = {cm: curve(Path(config), budgets, cm, out, args.repeat, console) for cm in args.cost_models.split(",")}
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(curves, indent=2))
        plot(name, curves, out / f"{name}.png")
        console.print(f"Wrote {out / f'{name}.png'}")


if __name__ == "__main__":
    main()
