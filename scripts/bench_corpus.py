"""Benchmark: every real-model corpus entry built by the workbench (one pipeline, untuned) vs ONNX Runtime and IREE.

For each entry of workbench/models/corpus.yaml (or those named with --only), in this one process, on the same
canonical ONNX and the same seeded inputs: the workbench build with --pipeline (default: the named pipeline
`default`) and default schedules, ort_all (ORT_ENABLE_ALL) and IREE (llvm-cpu for this CPU), all on the same
thread count. The labels are timed in interleaved rounds (median of round medians); the workbench's outputs are
checked against ONNX Runtime without graph optimizations (ort_none) with the entry's rtol/atol. A model that
fails (fetch, import, pipeline, build, accuracy) is a row with its one-line reason and the next model runs.

Writes corpus_<cpu>.md, .csv and .png into --out (default docs/results/) and prints one line per model per
stage, so the log of a long run reads well without a terminal.

With --tune-minutes N, each model is timed untuned and then tuned (from a cold, empty database; with --shared
starting from the committed schedules/ of the other configs, never those tuned on the same model, as a user's
tuning and build read them) in steps up to N wall-clock minutes (--checkpoints, default N/4, N/2 and N), and after
each step built with the database(s) and timed against ort_all again: the time to parity, written as
parity_[warm_][shared_]<cpu>.md/.csv/.png after every model (no corpus page: that one is the untuned run's). Each
step first profiles the build as it stands and tunes its hottest kernels first (inside the step's minutes). With
--resume the models that page already has are kept and only the others run (and those with a failed point, again):
a long run goes on where it stopped.

    python scripts/bench_corpus.py [--only magika silero_vad] [--pipeline default] [--baselines ort_all,iree]
                                   [--repeat 10] [--rounds 3] [--out docs/results] [--corpus FILE]
                                   [--tune-minutes 10 [--checkpoints 1 2 5 10] [--trials-per-task 16]
                                    [--cost-model xgb_warm] [--shared] [--resume]]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import yaml
from rich.console import Console

from workbench.compile.schedule_sources import COMMITTED_SCHEDULES, schedule_sources
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment, TuningConfig
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.config.pipeline_spec import to_text
from workbench.errors import UserError, one_line
from workbench.models.corpus import CORPUS_FILE, load_corpus
from workbench.record.corpus_table import Row, Setting, write
from workbench.record.parity import CHECKPOINT_PASSED, ParityPoint, read_points, write_parity
from workbench.record.results_page import Machine, cpu_name, versions
from workbench.runtime.threads import target_threads
from workbench.stages import optimize, prepare
from workbench.stages.side_by_side import COMPARED, bench
from workbench.stages.tuning import tune_optimized

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
    parser.add_argument("--tune-minutes", type=float, help="tune each model up to this many minutes (time to parity)")
    parser.add_argument("--checkpoints", type=float, nargs="+",
                        help="minutes at which to measure (default N/4, N/2, N)")
    parser.add_argument("--trials-per-task", type=int, default=16, help="per-kernel trials before the hot rounds")
    parser.add_argument("--cost-model", choices=["xgb", "xgb_warm"], default="xgb",
                        help="xgb_warm: pre-trained on the committed databases (its page: parity_warm_<cpu>.md)")
    parser.add_argument("--shared", action="store_true",
                        help="tuning and builds read the committed schedules/ of the other configs (read only)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the models the parity CSV in --out already has (without a failed point) and "
                             "run only the others")
    args = parser.parse_args(argv)
    if args.tune_minutes:
        args.checkpoints = sorted(set(args.checkpoints or [args.tune_minutes / 4, args.tune_minutes / 2,
                                                           args.tune_minutes]))
        if args.checkpoints[0] <= 0 or args.checkpoints[-1] > args.tune_minutes:
            parser.error("--checkpoints: minutes in (0, --tune-minutes]")
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
    if args.tune_minutes:
        return parity_run(experiments, target, args)
    rows = []
    for i, experiment in enumerate(experiments, 1):
        log = progress(f"[{i}/{len(experiments)}] ")
        rows.append(untuned_row(experiment, args, log))
    setting = Setting(date=datetime.now().strftime("%Y-%m-%d %H:%M"), cpu=cpu_name(), target=target_key(target),
                      threads=target_threads(target), pipeline=args.pipeline, passes=to_text(experiments[0].pipeline),
                      baselines=tuple(args.baselines), repeat=args.repeat, rounds=args.rounds, versions=versions())
    written = write(rows, {entry.name: entry for entry in entries}, setting, args.out, f"corpus_{host_cpu()}")
    print("wrote " + ", ".join(str(path) for path in written), flush=True)
    return written


def untuned_row(experiment: Experiment, args: argparse.Namespace, log: Callable[[str], None]) -> Row:
    with tempfile.TemporaryDirectory(prefix="bench_corpus_") as work_dir:
        row = bench(experiment, args.baselines, Path(work_dir), args.repeat, args.rounds, log)
    log(summary(row, args.baselines))
    return row


def parity_run(experiments: list[Experiment], target, args: argparse.Namespace) -> list[Path]:
    """Time to parity, model by model, the page rewritten after each (a crash loses at most the model in flight;
    with --resume the models the page already has without a failure are kept and not run again)."""
    stem = f"parity_{'warm_' if args.cost_model == 'xgb_warm' else ''}{'shared_' if args.shared else ''}{host_cpu()}"
    found = read_points(args.out / f"{stem}.csv") if args.resume else []
    failed = {point.model for point in found if point.failed}  # run again: the cause may be fixed since
    kept = [point for point in found if point.model not in failed]
    done = {point.model for point in kept}
    start = ("starting from the committed schedules/ of the other configs (never the model's own; read only)"
             if args.shared else "from an empty database (no shared schedules)")
    protocol = (f"- workbench: pipeline `{args.pipeline}`, tuned {start}, hottest kernels of the current build's "
                f"profile first, cost model `{args.cost_model}`, {args.trials_per_task} trials per kernel then "
                f"hot rounds, measured after {', '.join(f'{m:g}' for m in args.checkpoints)} min of tuning (wall "
                f"clock; 0: untuned)\n"
                f"- timing: median of {args.rounds} interleaved rounds of {args.repeat} runs, beside ort_all")
    machine = Machine(target_key(target), target_threads(target))
    points = list(kept)
    for i, experiment in enumerate(experiments, 1):
        log = progress(f"[{i}/{len(experiments)}] ")
        if experiment.name in done:
            log(f"{experiment.name}: kept from {stem}.csv (--resume)")
            continue
        points += time_to_parity(experiment, untuned_row(experiment, args, log), args)
        write_parity(points, machine, "ort_all", protocol, args.out, stem)  # a crash loses only the model in flight
    written = write_parity(points, machine, "ort_all", protocol, args.out, stem)
    print("wrote " + ", ".join(str(path) for path in written), flush=True)
    return written


def own_roots(experiment: Experiment) -> set[str]:
    """The committed schedule roots tuned on this very model: the one named after it, and those whose config
    (configs/<root>.yaml) builds the same model source (schedules/quickstart is convnet_small's)."""
    names = {experiment.name}
    for config in (ROOT / "configs").glob("*.yaml"):
        source = (yaml.safe_load(config.read_text()) or {}).get("model", {}).get("source")
        if source == experiment.model.source:
            names.add(config.stem)
    return names


def time_to_parity(experiment: Experiment, untuned: Row, args: argparse.Namespace) -> list[ParityPoint]:
    """The untuned row as the 0-minute point, then one point per checkpoint: tune (resuming) until it, build with
    the database, time it beside ort_all. A checkpoint the previous step's last round already ran past is not
    tuned again: its point is the measurement at the minutes actually spent, noted as such. A model that failed
    untuned, or fails to tune, keeps its reason."""
    log = progress(f"[parity {experiment.name}] ")
    points = [ParityPoint(experiment.name, 0, 0, 0, untuned.medians_ms.get(WORKBENCH_LABEL),
                          untuned.medians_ms.get("ort_all"), untuned.reason or "")]
    if untuned.failure:
        return points
    target = make_target(experiment.target)
    prepared, module = None, None  # the model after its pipeline: the same at every checkpoint, made once
    own = own_roots(experiment)
    shared = [root for root in sorted(COMMITTED_SCHEDULES.iterdir()) if root.is_dir() and root.name not in own
              ] if args.shared else []
    with tempfile.TemporaryDirectory(prefix="parity_") as work:
        spent, trials = 0.0, 0
        for checkpoint in args.checkpoints:
            if spent >= checkpoint:  # the previous step's last round ran past this checkpoint: nothing left to tune
                previous = points[-1]  # a failure's reason (a bench that failed) stays: the point is that one
                points.append(replace(previous, checkpoint=checkpoint, note=previous.note if previous.failed else
                                      f"{CHECKPOINT_PASSED}: the step to {previous.checkpoint:g} min ran to "
                                      f"{spent:.2f} min"))
                log(f"{checkpoint:g} min: already passed ({spent:.2f} min spent); its point is that measurement")
                continue
            tuning = TuningConfig(minutes=checkpoint - spent, trials=1_000_000, trials_per_task=args.trials_per_task,
                                  database=Path(work) / "db", shared=shared, cost_model=args.cost_model)
            tuned_experiment = experiment.model_copy(update={"tuning": tuning, "output": Path(work) / "out"})
            try:
                if module is None:
                    prepared = prepare(experiment, Path.cwd(), target)
                    module = optimize(prepared, experiment.pipeline, stats=False).module
                tuned = tune_optimized(module, target, tuned_experiment, Path.cwd(), Console(quiet=True),
                                       prepared.inputs)
            except Exception as exc:  # a model that cannot be tuned is a point with its reason, not a crash
                points.append(ParityPoint(experiment.name, checkpoint, spent, trials, None, None,
                                          f"tuning: {one_line(exc)}"))
                break
            spent += tuned.clock.used()
            trials += sum(task.trials_run for task in tuned.tasks)
            log(f"{spent:.1f} min, {trials} trials: {tuned.clock.reason()}")
            row = bench(tuned_experiment, ["ort_all"], Path(work), args.repeat, args.rounds, log,
                        database=schedule_sources(tuned_experiment, Path.cwd(), target, "").database)
            points.append(ParityPoint(experiment.name, checkpoint, round(spent, 2), trials,
                                      row.medians_ms.get(WORKBENCH_LABEL), row.medians_ms.get("ort_all"),
                                      row.reason or ""))
            log(f"after {spent:.1f} min: ort_all/workbench {points[-1].ratio or 0:.2f}x")
    return points


if __name__ == "__main__":
    try:
        main()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(UserError.exit_code)
