"""Tuned vs untuned vs ONNX Runtime, measured side by side in one process (same inputs, same timing loop).

    python scripts/bench_tuning.py [CONFIG] [--database DIR] [--repeat N]

CONFIG defaults to configs/quickstart.yaml and DIR to the database it applies on this CPU
(schedules/quickstart/llvm-<cpu>, or the closest one).
Prints each label's median latency and the ratios; timings on a loaded machine move, ratios less so.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from workbench.compile.build import BASELINE_BUILDS, build_lowered
from workbench.compile.databases import choose_database, open_database
from workbench.compile.targets import host_cpu, target_key
from workbench.config import load_experiment
from workbench.measure.factory import Bench, runner_for
from workbench.measure.timing import interleaved
from workbench.record.results_page import Machine, write_results_page
from workbench.runtime.threads import cpu_threads
from workbench.stages import build, optimize, prepare

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/quickstart.yaml")
    parser.add_argument("--database", help="schedule database folder (default: the config's)")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results",
                        help="folder for the docs/results page")
    args = parser.parse_args()

    base = Path.cwd()
    experiment = load_experiment(Path(args.config))
    prepared = prepare(experiment, base)
    target = prepared.target
    optimized = optimize(prepared, experiment.pipeline, stats=False)
    database_dir = Path(args.database) if args.database else \
        choose_database(experiment.database_root(base), target, f"workbench tune {args.config}").path
    if database_dir is None:
        raise SystemExit(f"no database for {target_key(target)} under {experiment.database_root(base)}: "
                         f"workbench tune {args.config}")
    tuned = build_lowered(optimized.module, target, open_database(database_dir, create=False),
                          experiment.layout_rewrite)
    with tempfile.TemporaryDirectory() as work_dir:
        bench = Bench(prepared.canonical, prepared.inputs, target, Path(work_dir))
        runners = {
            "workbench tuned": runner_for("workbench tuned", bench, tuned),
            "workbench untuned": runner_for("workbench untuned", bench, build(optimized, target)),
            "tvm_default": runner_for("tvm_default", bench, BASELINE_BUILDS["tvm_default"](prepared.imported, target)),
            "ort_all": runner_for("ort_all", bench),
        }
        medians = {label: timing.median_ms for label, timing in interleaved(runners, 5, args.repeat, 1).items()}
    covered, fallback = tuned.tuning["covered"], tuned.tuning["fallback"]
    setting = (f"{experiment.name} ({experiment.model.source}) on {target_key(target)}; database {database_dir}: "
               f"{len(covered)} kernels tuned, {len(fallback)} default ({', '.join(fallback) or 'none'})")
    print(setting)
    print(f"{'label':<20}{'median ms':>10}{'tuned speedup':>15}")
    for label, median in medians.items():
        print(f"{label:<20}{median:>10.3f}{median / medians['workbench tuned']:>14.2f}x")
    best = medians["workbench tuned"]
    rows = [[label, f"{median:.3f}", f"{median / best:.2f}×"] for label, median in medians.items()]
    page = write_results_page(args.out, f"tuning_{experiment.name}_{host_cpu()}", f"{experiment.name}: tuned, untuned",
                              Machine(target=target_key(target), threads=cpu_threads()),
                              f"{setting}; median of {args.repeat} runs per label.",
                              ("label", "median ms", "tuned speedup"), rows)
    print(f"wrote {page}")
    print(f"tuned / untuned: {medians['workbench untuned'] / medians['workbench tuned']:.1f}x faster; "
          f"tuned vs ort_all: {medians['workbench tuned'] / medians['ort_all']:.1f}x slower")


if __name__ == "__main__":
    main()
