"""Benchmark: every real-model corpus entry built by the workbench (one pipeline, untuned) vs ONNX Runtime and IREE.

For each entry of workbench/models/corpus.yaml (or those named with --only), in this one process, on the same
canonical ONNX and the same seeded inputs: the workbench build with --pipeline (default: the named pipeline
`default`) and default schedules, ort_all (ORT_ENABLE_ALL) and IREE (llvm-cpu for this CPU), all on the same
thread count. The labels are timed in interleaved rounds (median of round medians); the workbench's outputs are
checked against ONNX Runtime without graph optimizations (ort_none) with the entry's rtol/atol. A model that
fails (fetch, import, pipeline, build, accuracy) is a row with its one-line reason and the next model runs.

Writes corpus_<cpu>.md, .csv and .png into --out (default docs/results/) and prints one line per model per
stage, so the log of a long run reads well without a terminal.

    python scripts/bench_corpus.py [--only magika silero_vad] [--pipeline default] [--baselines ort_all,iree]
                                   [--repeat 10] [--rounds 3] [--out docs/results] [--corpus FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.errors import UserError
from workbench.record.corpus_table import Row
from workbench.stages.side_by_side import COMPARED, bench
from workbench.runtime.threads import target_threads
from workbench.models.corpus import CORPUS_FILE, load_corpus
from workbench.config.pipeline_spec import to_text
from workbench.record.corpus_table import Setting, write
from workbench.record.results_page import cpu_name, versions

ROOT = Path(__file__).resolve().parent.parent


def progress(prefix: str) -> Callable[[str], None]:
    """Print a line at once (flushed: the log of a background run is read while it runs)."""
    return lambda line: print(prefix + line, flush=True)


def summary(row: Row, baselines: list[str]) -> str:
    ours = row.medians_ms.get(WORKBENCH_LABEL)
    timed = [f"workbench {ours:.3f} ms"] if ours else []
    timed += [f"{label}/workbench {row.ratio(label):.2f}x" for label in baselines if row.ratio(label)]
    return f"{row.name}: {row.status}" + (f", {', '.join(timed)}" if timed else "") + \
        (f" ({row.reason})" if row.reason else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="corpus entries to run (default: all)")
    parser.add_argument("--pipeline", default="default", help="the workbench pipeline: a named one or pass text")
    parser.add_argument("--baselines", default=",".join(COMPARED),
                        help=f"comma-separated, of {', '.join(COMPARED)} (empty: the workbench alone)")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per label per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="folder for the .md/.csv/.png")
    parser.add_argument("--corpus", type=Path, default=CORPUS_FILE)
    args = parser.parse_args(argv)
    args.baselines = [label for label in args.baselines.split(",") if label]
    unknown = sorted(set(args.baselines) - set(COMPARED))
    if unknown:
        parser.error(f"--baselines: {', '.join(unknown)} unknown; choose from {', '.join(COMPARED)}")
    return args


def main(argv: list[str] | None = None) -> list[Path]:
    """Run the benchmark; return the files written."""
    args = parse_args(argv)
    entries = load_corpus(args.corpus).select(args.only)
    experiments = [entry.experiment(args.pipeline, args.baselines) for entry in entries]  # bad pipelines fail here
    target = make_target(experiments[0].target)
    rows = []
    for i, experiment in enumerate(experiments, 1):
        log = progress(f"[{i}/{len(experiments)}] ")
        with tempfile.TemporaryDirectory(prefix="bench_corpus_") as work_dir:
            rows.append(bench(experiment, args.baselines, Path(work_dir), args.repeat, args.rounds, log))
        log(summary(rows[-1], args.baselines))
    setting = Setting(date=datetime.now().strftime("%Y-%m-%d %H:%M"), cpu=cpu_name(), target=target_key(target),
                      threads=target_threads(target), pipeline=args.pipeline, passes=to_text(experiments[0].pipeline),
                      baselines=tuple(args.baselines), repeat=args.repeat, rounds=args.rounds, versions=versions())
    written = write(rows, {entry.name: entry for entry in entries}, setting, args.out, f"corpus_{host_cpu()}")
    print("wrote " + ", ".join(str(path) for path in written), flush=True)
    return written


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(UserError.exit_code)
