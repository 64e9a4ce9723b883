"""Benchmark: latency of the unoptimized build vs each single pass vs the full pipeline, in one run.

For each model, every variant is built for llvm and timed by the same loop on the same inputs;
ratios are unoptimized median / variant median (> 1 means the pass helps). Usage:

    python scripts/bench_passes.py [--repeat 10] [--models convnet_small,rapidocr_det]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import tvm
from rich.console import Console
from rich.table import Table

from workbench.compile.targets import host_cpu
from workbench.config import load_experiment
from workbench.config.pipeline_spec import parse_text
from workbench.measure.factory import Bench, runner_for
from workbench.measure.timing import interleaved
from workbench.record.results_page import Machine, rich_rows, write_results_page
from workbench.runtime.threads import cpu_threads
from workbench.stages import build, optimize, prepare

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"convnet_small": ROOT / "configs/quickstart.yaml", "rapidocr_det": ROOT / "configs/rapidocr_det.yaml"}
SINGLE_PASSES = ["fold_constant", "fold_batchnorm", "fuse", "fuse_patterns", "convert_layout(conv2d=NHWC)", "fp16",
                 "dce", "cse", "canonicalize"]
FULL_PIPELINE = "fold_constant,fold_batchnorm,fuse,dce"


def bench_model(label: str, config: Path, repeat: int, console: Console) -> Table:
    experiment = load_experiment(config)
    prepared = prepare(experiment, ROOT, tvm.target.Target({"kind": "llvm"}))
    variants = {"unoptimized": ""} | {name: name for name in SINGLE_PASSES} | {"full pipeline": FULL_PIPELINE}
    runners, failed = {}, {}
    with tempfile.TemporaryDirectory() as work_dir:
        bench = Bench(prepared.canonical, prepared.inputs, prepared.target, Path(work_dir))
        for name, text in variants.items():
            with console.status(f"{label}: building {name}"):
                try:
                    built = build(optimize(prepared, parse_text(text)), prepared.target)
                except Exception as exc:  # a pass that makes the model unbuildable is a finding, not a crash
                    failed[name] = str(exc).strip().splitlines()[0][:60]
                    continue
                runners[name] = runner_for(name, bench, built)
        with console.status(f"{label}: timing {len(runners)} variants"):
            medians = {name: timing.median_ms for name, timing in interleaved(runners, 1, repeat, 1).items()}
    table = Table(title=f"{label}: unoptimized vs single passes vs full pipeline (llvm, median of {repeat})")
    for column in ("variant", "kernels", "median ms", "speedup vs unoptimized"):
        table.add_column(column, justify="right" if column != "variant" else "left")
    baseline_ms = None
    for name in variants:
        if name in failed:
            table.add_row(name, "—", "build failed", failed[name])
            continue
        baseline_ms = baseline_ms or medians[name]
        table.add_row(name, str(runners[name].kernels), f"{medians[name]:.3f}", f"{baseline_ms / medians[name]:.2f}×")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="folder for the docs/results page")
    args = parser.parse_args()
    console = Console()
    machine = Machine(target="llvm", threads=cpu_threads())
    for label in args.models.split(","):
        table = bench_model(label, MODELS[label], args.repeat, console)
        console.print(table)
        protocol = (f"Each pass alone, then the full pipeline, built untuned for generic llvm; median of "
                    f"{args.repeat} runs.")
        page = write_results_page(args.out, f"passes_{label}_{host_cpu()}", f"{label}: where each pass helps", machine,
                                  protocol, *rich_rows(table))
        console.print(f"wrote {page}")


if __name__ == "__main__":
    main()
