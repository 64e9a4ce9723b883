"""Benchmark: how far one model's latency moves from one process to the next, on each parallel launcher.

A user who runs the same model twice expects the same figure. Each run is a fresh `workbench run` process of one
corpus model (pipeline `default`, untuned, against ort_all); `--runs` processes per model and launcher
(`--launchers`: the workbench's, runtime/launcher.py, and TVM's own, WORKBENCH_LAUNCHER=tvm, one after the other for
each run index so both meet the same machine). The spread is the largest process median over the smallest, per
model, label and launcher (goal: ≤ 1.3 for the workbench on the sub-millisecond models). Written:
docs/results/spread_<cpu>.md and .png.

    python scripts/bench_spread.py [--models convnet_small mobilenet_block] [--runs 5] [--launchers workbench tvm]
                                   [--out docs/results]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from matplotlib.figure import Figure

from workbench.bench.load import fresh_run
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import TargetConfig
from workbench.measure.contention import contention_since, thread_contention
from workbench.models.corpus import load_corpus
from workbench.record.charts import save_png
from workbench.record.results_page import Machine, write_results_page
from workbench.runtime.launcher import LAUNCHER_ENV
from workbench.runtime.threads import target_threads

ROOT = Path(__file__).resolve().parent.parent
LABELS = ("workbench", "ort_all")


@dataclass(frozen=True)
class Run:
    """One process: the model, the run index, the launcher and each label's median (ms)."""

    model: str
    index: int
    launcher: str
    medians: dict[str, float]


def config_for(model: str, work: Path) -> Path:
    """The corpus entry's experiment as a YAML file: pipeline `default`, untuned, ort_all beside it."""
    entry = next(e for e in load_corpus().models if e.name == model)
    data = {"name": model, "model": entry.model_dump(include={"source", "inputs"}, mode="json", exclude_none=True),
            "target": "llvm", "pipeline": "default", "baselines": ["ort_all", "ort_none"],
            "measure": {"warmup": 5, "repeat": 100},
            "accuracy": {"reference": "ort_none", "rtol": entry.tolerance.rtol, "atol": entry.tolerance.atol}}
    path = work / f"{model}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def spread(runs: list[Run], model: str, launcher: str, label: str) -> float:
    values = [run.medians[label] for run in runs if run.model == model and run.launcher == launcher]
    return max(values) / min(values)


def figure(runs: list[Run], models: list[str], launchers: list[str]) -> Figure:
    """Per model, each process's workbench median on each launcher and ort_all's (dots), in ms."""
    fig = Figure(figsize=(4 * len(models), 3.6))
    for axes, model in zip(fig.subplots(1, len(models), squeeze=False)[0], models):
        series = [(f"workbench ({launcher})", launcher, "workbench") for launcher in launchers]
        series.append(("ort_all", launchers[0], "ort_all"))
        for x, (name, launcher, label) in enumerate(series):
            values = [run.medians[label] for run in runs if run.model == model and run.launcher == launcher]
            axes.plot([x] * len(values), values, "o", alpha=0.7)
        axes.set_xticks(range(len(series)), [name for name, _, _ in series], fontsize="small", rotation=15)
        axes.set_ylim(bottom=0)
        axes.set_ylabel("median per process (ms)")
        axes.set_title(model)
    fig.tight_layout()
    return fig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["convnet_small", "mobilenet_block"])
    parser.add_argument("--runs", type=int, default=5, help="processes per model and launcher (default 5)")
    parser.add_argument("--launchers", nargs="+", default=["workbench", "tvm"], choices=["workbench", "tvm"])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = parser.parse_args()
    target = make_target(TargetConfig())  # this machine's CPU, as every run built for
    threads = target_threads(target)
    contended = thread_contention(threads)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench_spread_") as folder:
        work = Path(folder)
        for model in args.models:
            config = config_for(model, work)
            for index in range(1, args.runs + 1):
                for launcher in args.launchers:
                    result = fresh_run(config, work / f"{model}_{index}_{launcher}", ROOT, env={LAUNCHER_ENV: launcher})
                    runs.append(Run(model, index, launcher,
                                    {label: result.measurements[label].median_ms for label in LABELS}))
                    print(f"{model} #{index} {launcher}: " + ", ".join(
                        f"{label} {ms:.3f} ms" for label, ms in runs[-1].medians.items()), flush=True)
    rows = [[run.model, f"{run.index}", run.launcher, *(f"{run.medians[label]:.3f}" for label in LABELS),
             f"{run.medians['ort_all'] / run.medians['workbench']:.2f}"] for run in runs]
    lines = [f"- **{model}**: " + "; ".join(
        f"{launcher}'s launcher: workbench {spread(runs, model, launcher, 'workbench'):.2f}, ort_all "
        f"{spread(runs, model, launcher, 'ort_all'):.2f}" for launcher in args.launchers) for model in args.models]
    text = ("Spread (largest process median / smallest) per model (goal for the workbench: ≤ 1.3):\n\n"
            + "\n".join(lines))
    print(text)
    stem = f"spread_{host_cpu()}"
    chart = save_png(figure(runs, args.models, args.launchers), args.out / f"{stem}.png")
    protocol = ("- each run a fresh `workbench run` process of one corpus model: pipeline `default`, untuned, "
                "ort_all beside it, 5 warm-up and 100 timed calls per label; the run indexes once per parallel "
                "launcher, one after the other (`workbench`: runtime/launcher.py; `tvm`: TVM's own, "
                "`WORKBENCH_LAUNCHER=tvm`)\n"
                "- ratio: ort_all's median / the workbench's in the same run (> 1: the workbench is faster)")
    write_results_page(args.out, stem, "The same model from one process to the next",
                       Machine(target_key(target), threads,
                               contention=contention_since(threads, contended)), protocol,
                       ("model", "run", "launcher", "workbench ms", "ort_all ms", "ort_all/workbench"), rows,
                       f"{text}\n\n![processes]({chart.name})")
    print(f"wrote {args.out / stem}.md, {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
