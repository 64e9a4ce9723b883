"""Tuned vs untuned vs ONNX Runtime, measured side by side in one process (same inputs, same timing loop).

    python scripts/bench_tuning.py [CONFIG] [--database DIR] [--repeat N]

CONFIG defaults to configs/quickstart.yaml and DIR to the database it applies on this CPU
(schedules/quickstart/llvm-<cpu>, or the closest one).
Prints each label's median latency and the ratios; timings on a loaded machine move, ratios less so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.compile.build import build_tvm_default  # noqa: E402
from workbench.compile.databases import (
    choose_database,  # noqa: E402
    open_database,  # noqa: E402
)
from workbench.compile.targets import host_cpu, target_key  # noqa: E402
from workbench.config import load_experiment  # noqa: E402
from workbench.measure.runners import ort_runner, tvm_runner  # noqa: E402
from workbench.measure.timing import time_call  # noqa: E402
from workbench.record.results_page import Machine, write_results_page  # noqa: E402
from workbench.runtime.threads import cpu_threads  # noqa: E402
from workbench.stages import build, optimize, prepare  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/quickstart.yaml")
    parser.add_argument("--database", help="schedule database folder (default: the config's)")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "results",
                        help="folder for the docs/results page")
    args = parser.parse_args()

    base = Path.cwd()
    experiment = load_experiment(Path(args.config))
    prepared = prepare(experiment, base)
    target, canonical, inputs, imported = prepared.target, prepared.canonical, prepared.inputs, prepared.imported
    optimized = optimize(prepared, experiment.pipeline, stats=False)
    database_dir = Path(args.database) if args.database else \
        choose_database(experiment.database_root(base), target, f"workbench tune {args.config}").path
    if database_dir is None:
        raise SystemExit(f"no database for {target_key(target)} under {experiment.database_root(base)}: "
                         f"workbench tune {args.config}")
    tuned = build(optimized, target, open_database(database_dir, create=False), experiment.layout_rewrite)

    runners = {
        "workbench tuned": tvm_runner("tuned", tuned, inputs, target),
        "workbench untuned": tvm_runner("untuned", build(optimized, target), inputs, target),
        "tvm_default": tvm_runner("tvm_default", build_tvm_default(imported, target), inputs, target),
        "ort_all": ort_runner("ort_all", canonical, inputs),
    }
    medians = {}
    for label, runner in runners.items():
        medians[label] = time_call(runner.run_once, 5, args.repeat, runner.sync).median_ms
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
