"""Benchmark: the quickstart on a quiet machine and beside busy processes, as a new user first runs it.

Each run is a fresh `workbench run configs/quickstart.yaml` process (its build, its thread pool, its timing), `--runs`
times quiet and `--runs` times with `--load` processes spinning beside it (bench/load.py), once per parallel
launcher (`--launchers`: the workbench's, runtime/launcher.py, and TVM's own, WORKBENCH_LAUNCHER=tvm; one after
the other for each run index, so both meet the same machine). Read from each run's result.json: the workbench's
and ort_all's medians and 90th percentiles (a median hides stalls that one inference in ten meets). Written:
docs/results/load_<cpu>.md and .png (bars per run, quiet and loaded) with the figures the goal is stated in: the
slowest loaded run against the quiet median, and the median ratio ort_all/workbench loaded against quiet.

    python scripts/bench_load.py [--config configs/quickstart.yaml] [--runs 5] [--load 1] [--launchers workbench tvm]
                                 [--out docs/results]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from matplotlib.figure import Figure

from workbench.bench.load import fresh_run
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import load_experiment
from workbench.record.charts import save_png
from workbench.record.results_page import Machine, load_line, write_results_page
from workbench.runtime.launcher import LAUNCHER_ENV
from workbench.runtime.threads import target_threads

ROOT = Path(__file__).resolve().parent.parent
LABELS = ("workbench", "ort_all")


@dataclass(frozen=True)
class Run:
    """One `workbench run` process: its condition, its parallel launcher and the two labels' medians and p90 (ms)."""

    load: int
    index: int
    launcher: str
    workbench_ms: float
    ort_ms: float
    workbench_p90: float
    ort_p90: float

    @property
    def ratio(self) -> float:
        return self.ort_ms / self.workbench_ms


def one_run(config: Path, load: int, index: int, launcher: str, work: Path) -> Run:
    """`workbench run` in a fresh process on `launcher` beside `load` spinning ones; its figures from result.json."""
    out = work / f"load{load}_{index}_{launcher}"
    measured = fresh_run(config, out, ROOT, load, {LAUNCHER_ENV: launcher}).measurements
    run = Run(load, index, launcher, *(measured[label].median_ms for label in LABELS),
              *(measured[label].p90_ms for label in LABELS))
    print(f"load {load} run {index} {launcher}: workbench {run.workbench_ms:.3f} ms (p90 {run.workbench_p90:.3f}), "
          f"ort_all {run.ort_ms:.3f} ms (p90 {run.ort_p90:.3f})", flush=True)
    return run


def summary(runs: list[Run], load: int, launcher: str) -> str:
    """The goal's figures for one launcher's runs, as a sentence."""
    quiet = [run for run in runs if run.load == 0 and run.launcher == launcher]
    loaded = [run for run in runs if run.load == load and run.launcher == launcher]
    quiet_median = median(run.workbench_ms for run in quiet)
    slowest = max(run.workbench_ms for run in loaded)
    quiet_ratio, loaded_ratio = median(run.ratio for run in quiet), median(run.ratio for run in loaded)
    return (f"**{launcher}'s launcher.** Quiet: workbench median of the run medians {quiet_median:.3f} ms, ratio "
            f"ort_all/workbench {quiet_ratio:.2f}. Beside {load} busy process(es): the slowest run {slowest:.3f} ms = "
            f"{slowest / quiet_median:.2f}× the quiet median (goal ≤ 3×); median ratio ort_all/workbench "
            f"{loaded_ratio:.2f}, {max(quiet_ratio, loaded_ratio) / min(quiet_ratio, loaded_ratio):.2f}× apart from "
            f"the quiet one (goal ≤ 1.5×); median p90 workbench {median(run.workbench_p90 for run in loaded):.3f} ms, "
            f"ort_all {median(run.ort_p90 for run in loaded):.3f} ms.")


def rows(runs: list[Run]) -> list[list[str]]:
    return [[f"{run.load}", f"{run.index}", run.launcher, f"{run.workbench_ms:.3f}", f"{run.workbench_p90:.3f}",
             f"{run.ort_ms:.3f}", f"{run.ort_p90:.3f}", f"{run.ratio:.2f}"] for run in runs]


def figure(runs: list[Run], load: int) -> Figure:
    """Bars per run: the workbench's median on each launcher and ort_all's, quiet runs then loaded ones."""
    fig = Figure(figsize=(9, 3.8))
    axes = fig.subplots()
    launchers = list(dict.fromkeys(run.launcher for run in runs))
    cells = list(dict.fromkeys((run.load, run.index) for run in runs))
    width = 0.8 / (len(launchers) + 1)
    for offset, launcher in enumerate(launchers):
        ms = {(run.load, run.index): run.workbench_ms for run in runs if run.launcher == launcher}
        axes.bar([p + (offset - len(launchers) / 2) * width for p in range(len(cells))], [ms[c] for c in cells],
                 width, label=f"workbench ({launcher}'s launcher)")
    ort = {(run.load, run.index): run.ort_ms for run in runs if run.launcher == launchers[0]}
    axes.bar([p + len(launchers) / 2 * width for p in range(len(cells))], [ort[c] for c in cells], width,
             label="ort_all", color="grey")
    axes.set_xticks(list(range(len(cells))), [f"{'quiet' if cell[0] == 0 else f'load {load}'}\n#{cell[1]}"
                                              for cell in cells])
    axes.set_yscale("log")
    axes.set_ylabel("median latency (ms, log)")
    axes.set_title(f"quickstart per process: quiet and beside {load} busy process(es)")
    axes.legend(fontsize="small")
    fig.tight_layout()
    return fig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart.yaml")
    parser.add_argument("--runs", type=int, default=5, help="processes per condition (default 5)")
    parser.add_argument("--load", type=int, default=1, help="busy processes beside the loaded runs (default 1)")
    parser.add_argument("--launchers", nargs="+", default=["workbench", "tvm"], choices=["workbench", "tvm"],
                        help="parallel launchers to run each condition on (default: both)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = parser.parse_args()
    config = args.config.resolve()
    with tempfile.TemporaryDirectory(prefix="bench_load_") as work:
        runs = [one_run(config, load, index, launcher, Path(work)) for load in (0, args.load)
                for index in range(1, args.runs + 1) for launcher in args.launchers]
    text = "\n\n".join(summary(runs, args.load, launcher) for launcher in args.launchers)
    print(text)
    target = make_target(load_experiment(config).target)
    stem = f"load_{host_cpu()}" + (f"_load{args.load}" if args.load != 1 else "")
    chart = save_png(figure(runs, args.load), args.out / f"{stem}.png")
    protocol = (f"- each run a fresh `workbench run {config.relative_to(ROOT)}` process (build, thread pool, timing "
                "as a user's first run), its result.json's medians and p90; quiet runs first, then the loaded ones; "
                "each run index once per parallel launcher, one after the other (`workbench`: runtime/launcher.py; "
                "`tvm`: TVM's own, `WORKBENCH_LAUNCHER=tvm`)\n"
                f"{load_line(args.load)}"
                "- ratio: ort_all's median / the workbench's in the same run (> 1: the workbench is faster)")
    write_results_page(args.out, stem, "The quickstart on a busy machine", Machine(target_key(target),
                       target_threads(target)), protocol,
                       ("load", "run", "launcher", "workbench ms", "workbench p90", "ort_all ms", "ort_all p90",
                        "ort_all/workbench"), rows(runs), f"{text}\n\n![runs]({chart.name})")
    print(f"wrote {args.out / stem}.md, {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
