"""Benchmark: the quickstart on a quiet machine and beside busy processes, as a new user first runs it.

Each run is a fresh `workbench run configs/quickstart.yaml` process (its build, its thread pool, its timing), `--runs`
times quiet and `--runs` times with `--load` processes spinning beside it (bench/load.py). Read from each run's
result.json: the workbench's and ort_all's medians. Written: docs/results/load_<cpu>.md and .png (bars per run,
quiet and loaded) with the figures the goal is stated in: the slowest loaded run against the quiet median, and the
median ratio ort_all/workbench loaded against quiet.

    python scripts/bench_load.py [--config configs/quickstart.yaml] [--runs 5] [--load 1] [--out docs/results]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from matplotlib.figure import Figure

from workbench.bench.load import busy_processes
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import load_experiment
from workbench.record.charts import save_png
from workbench.record.result import RESULT_FILE, RunResult
from workbench.record.results_page import Machine, load_line, write_results_page
from workbench.runtime.threads import target_threads

ROOT = Path(__file__).resolve().parent.parent
LABELS = ("workbench", "ort_all")


@dataclass(frozen=True)
class Run:
    """One `workbench run` process: its condition and the two medians (ms)."""

    load: int
    index: int
    workbench_ms: float
    ort_ms: float

    @property
    def ratio(self) -> float:
        return self.ort_ms / self.workbench_ms


def one_run(config: Path, load: int, index: int, work: Path) -> Run:
    """`workbench run` in a fresh process beside `load` spinning ones; its medians from result.json."""
    out = work / f"load{load}_{index}"
    with busy_processes(load):
        subprocess.run([sys.executable, "-m", "workbench.cli", "run", str(config), "--set", f"output={out}"],
                       check=True, cwd=ROOT, capture_output=True, text=True)
    result = RunResult.read(out / RESULT_FILE)
    medians = {label: result.measurements[label].median_ms for label in LABELS}
    run = Run(load, index, medians["workbench"], medians["ort_all"])
    print(f"load {load} run {index}: workbench {run.workbench_ms:.3f} ms, ort_all {run.ort_ms:.3f} ms", flush=True)
    return run


def summary(runs: list[Run], load: int) -> tuple[str, list[list[str]]]:
    """The goal's figures as a sentence, and one table row per run."""
    quiet = [run for run in runs if run.load == 0]
    loaded = [run for run in runs if run.load == load]
    quiet_median = median(run.workbench_ms for run in quiet)
    slowest = max(run.workbench_ms for run in loaded)
    quiet_ratio, loaded_ratio = median(run.ratio for run in quiet), median(run.ratio for run in loaded)
    text = (f"Quiet: workbench median of the run medians {quiet_median:.3f} ms, ratio ort_all/workbench "
            f"{quiet_ratio:.2f}. Beside {load} busy process(es): the slowest run {slowest:.3f} ms = "
            f"{slowest / quiet_median:.2f}× the quiet median (goal ≤ 3×); median ratio ort_all/workbench "
            f"{loaded_ratio:.2f}, {max(quiet_ratio, loaded_ratio) / min(quiet_ratio, loaded_ratio):.2f}× apart from "
            "the quiet one (goal ≤ 1.5×).")
    rows = [[f"{run.load}", f"{run.index}", f"{run.workbench_ms:.3f}", f"{run.ort_ms:.3f}", f"{run.ratio:.2f}"]
            for run in runs]
    return text, rows


def figure(runs: list[Run], load: int) -> Figure:
    """Bars per run: the workbench and ort_all medians, quiet runs then loaded ones."""
    fig = Figure(figsize=(8, 3.5))
    axes = fig.subplots()
    positions = range(len(runs))
    width = 0.4
    axes.bar([p - width / 2 for p in positions], [run.workbench_ms for run in runs], width, label="workbench")
    axes.bar([p + width / 2 for p in positions], [run.ort_ms for run in runs], width, label="ort_all")
    axes.set_xticks(list(positions), [f"{'quiet' if run.load == 0 else f'load {load}'}\n#{run.index}" for run in runs])
    axes.set_ylabel("median latency (ms)")
    axes.set_title(f"quickstart per process: quiet and beside {load} busy process(es)")
    axes.legend()
    fig.tight_layout()
    return fig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart.yaml")
    parser.add_argument("--runs", type=int, default=5, help="processes per condition (default 5)")
    parser.add_argument("--load", type=int, default=1, help="busy processes beside the loaded runs (default 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = parser.parse_args()
    config = args.config.resolve()
    with tempfile.TemporaryDirectory(prefix="bench_load_") as work:
        runs = [one_run(config, load, index, Path(work)) for load in (0, args.load)
                for index in range(1, args.runs + 1)]
    text, rows = summary(runs, args.load)
    print(text)
    target = make_target(load_experiment(config).target)
    stem = f"load_{host_cpu()}"
    chart = save_png(figure(runs, args.load), args.out / f"{stem}.png")
    protocol = (f"- each run a fresh `workbench run {config.relative_to(ROOT)}` process (build, thread pool, timing "
                "as a user's first run), its result.json's medians; quiet runs first, then the loaded ones\n"
                f"{load_line(args.load)}"
                "- ratio: ort_all's median / the workbench's in the same run (> 1: the workbench is faster)")
    write_results_page(args.out, stem, "The quickstart on a busy machine", Machine(target_key(target),
                       target_threads(target)), protocol, ("load", "run", "workbench ms", "ort_all ms",
                                                          "ort_all/workbench"), rows, f"{text}\n\n![runs]({chart.name})")
    print(f"wrote {args.out / stem}.md, {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
