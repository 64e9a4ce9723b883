"""The `workbench` command: verbs run, tune, profile, passes, inspect, report, runs, compare, sweep, bench.

Exit codes: 0 success, 2 a user mistake (one readable message; traceback only with --debug),
1 a run whose accuracy reference could not run (one message; what was measured is kept) or an internal
error (short message; the traceback goes to a log file), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from workbench.config.baselines import baselines_help
from workbench.errors import ERROR_LOG_FOLDER, ReferenceFailed, UserError

if TYPE_CHECKING:  # the config module is imported by the verbs that need it, not at start-up
    from workbench.config import Experiment
    from workbench.record.result import RunResult

# Tables are wide: when output is not a terminal (CI logs, pipes), do not squeeze them into 80 columns.
stdout = Console(width=None if sys.stdout.isatty() else 140)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else 140)

DEFAULT_STORE = "runs/results.sqlite"  # where `workbench run` writes, from the quickstart's output


def _print_run(result: RunResult, experiment: Experiment) -> None:
    """The run's table and where its files and store row went."""
    from workbench.record.tables import console_table

    stdout.print(console_table(result))
    out_dir = experiment.output_dir(Path.cwd())
    stdout.print(f"Wrote {out_dir / 'result.json'}, {out_dir / 'report.md'}; "
                 f"store {experiment.results_path(Path.cwd())} (run {result.run_id})")


def cmd_run(args: argparse.Namespace) -> int:
    from workbench.experiment import run_experiment

    overrides = list(args.set or [])
    if args.pipeline is not None:
        overrides.append(f"pipeline={json.dumps(args.pipeline)}")
    experiment, config_path = _run_config(args, overrides)
    ERROR_LOG_FOLDER.set(experiment.output_dir(Path.cwd()))
    try:
        result = run_experiment(experiment, Path.cwd(), stderr, Path(args.dump_ir) if args.dump_ir else None,
                                config_path=config_path)
    except ReferenceFailed as exc:  # what was measured is still shown; `main` then says why the run failed
        _print_run(exc.result, experiment)
        raise
    _print_run(result, experiment)
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """`run` of the workbench build and ort_all only, with the per-kernel profile of both, into <output>/profile."""
    from workbench.config import ProfileConfig, load_experiment
    from workbench.experiment import run_experiment
    from workbench.record.tables import profile_table, summary_table

    experiment = load_experiment(Path(args.config), list(args.set or []))
    out_dir = experiment.output_dir(Path.cwd()) / "profile"
    profile = (experiment.profile or ProfileConfig()).model_copy(update={"top": args.top} if args.top else {})
    experiment = experiment.model_copy(update={
        "baselines": ["ort_all"], "accuracy": experiment.accuracy.model_copy(update={"reference": "ort_all"}),
        "output": out_dir, "profile": profile})
    ERROR_LOG_FOLDER.set(out_dir)
    result = run_experiment(experiment, Path.cwd(), stderr, config_path=Path(args.config))
    stdout.print(summary_table(result))
    stdout.print(profile_table(result))
    stdout.print(f"Wrote {_shown(out_dir / 'result.json')}, {_shown(out_dir / 'report.md')}")
    return 0


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when it lies inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def cmd_tune(args: argparse.Namespace) -> int:
    from workbench.config import load_experiment
    from workbench.record.tables import tuning_table
    from workbench.stages.tuning import tune_experiment

    overrides = list(args.set or []) + ([f"tuning.minutes={args.minutes}"] if args.minutes is not None else [])
    experiment = load_experiment(Path(args.config), overrides)
    ERROR_LOG_FOLDER.set(experiment.output_dir(Path.cwd()))
    tuned = tune_experiment(experiment, Path.cwd(), stderr)
    title = f"{experiment.name}: tuning database {_shown(tuned.database)}"
    stdout.print(tuning_table(tuned.tasks, title, profiled=tuned.order == "profile"))
    stdout.print(f"{tuned.summary()}; database {_shown(tuned.database)}")
    return 0


def cmd_passes(_args: argparse.Namespace) -> int:
    from workbench.record.tables import registry_tables

    for table in registry_tables():
        stdout.print(table)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from workbench.record.report import write_report
    from workbench.record.result import RunResult
    from workbench.record.tables import console_table

    folder = Path(args.run_dir)
    result = RunResult.read(folder)
    report = write_report(result, folder if folder.is_dir() else folder.parent)
    stdout.print(console_table(result))
    stdout.print(f"Wrote {report}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from workbench.record.listing import listing_csv, listing_json, listing_rows, listing_table
    from workbench.record.store import ResultsStore

    with ResultsStore.open_existing(Path(args.store)) as store:
        rows = listing_rows(store.find(args.name, args.model, args.target, args.since, args.limit))
    if args.json:
        print(listing_json(rows))
    elif args.csv:
        print(listing_csv(rows), end="")
    else:
        stdout.print(listing_table(rows, f"{_shown(Path(args.store))}: {len(rows)} runs, newest first"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from workbench.record.charts import save_png
    from workbench.record.compare import compare_figure, compare_view, load_runs

    runs = load_runs(args.runs, Path(args.store))
    stdout.print(compare_view(runs))
    if args.png:
        stdout.print(f"Wrote {save_png(compare_figure(runs), Path(args.png))}")
    return 0


def _run_config(args: argparse.Namespace, overrides: list[str]) -> tuple[Experiment, Path | None]:
    """The experiment `run` runs: the YAML file's, or one made from `--model` (inputs from the model, dynamic dims
    from --input; written to --save-config so the next step is editing a file), and the config path to show."""
    from workbench.config import load_experiment, validate
    from workbench.models.summary import parse_input_flags
    from workbench.stages.inspect import model_experiment_data, save_experiment

    if (args.config is None) == (args.model is None):
        raise UserError("give an experiment YAML file or --model PATH_OR_SOURCE (exactly one of them), e.g. "
                        "workbench run configs/quickstart.yaml, or workbench run --model my.onnx --input x=1x3x224x224")
    if args.config is not None:
        if args.input or args.save_config:
            raise UserError("--input and --save-config go with --model; a config file sets model.inputs itself")
        return load_experiment(Path(args.config), overrides), Path(args.config)
    data = model_experiment_data(args.model, Path.cwd(), parse_input_flags(args.input or []), overrides)
    if not args.save_config:
        return validate(data, f"--model {args.model}"), None
    experiment = save_experiment(data, Path(args.save_config))
    stdout.print(f"Wrote {_shown(Path(args.save_config))}: the experiment this run runs (edit it, then "
                 f"`workbench run {_shown(Path(args.save_config))}`)")
    return experiment, Path(args.save_config)


def cmd_inspect(args: argparse.Namespace) -> int:
    from workbench.models.summary import parse_input_flags
    from workbench.stages.inspect import inspect_target, inspection_tables

    inspection = inspect_target(args.target, Path.cwd(), parse_input_flags(args.input or []), args.pipeline)
    if args.json:
        print(json.dumps(inspection.to_json(), indent=2))
        return 0
    for shown in inspection_tables(inspection):
        stdout.print(shown)
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks for every error")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    run = verbs.add_parser("run", help="run one experiment: import, pipeline, build, measure vs baselines",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="baselines (`baselines:` in the config):\n" + baselines_help())
    run.add_argument("config", nargs="?", help="experiment YAML file (or give --model instead)")
    run.add_argument("--model", metavar="SOURCE", help="run a model without a YAML file: a .onnx path, zoo:NAME or "
                                                       "pkg:DIST==VER/path.onnx; default pipeline, ort_all and "
                                                       "ort_none, output runs/<model stem>")
    run.add_argument("--input", action="append", metavar="NAME=SHAPE",
                     help="with --model: the shape of an input with dynamic dims, e.g. x=1x3x224x224 (repeatable)")
    run.add_argument("--save-config", metavar="FILE", help="with --model: write the experiment it runs as YAML")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    run.add_argument("--pipeline", metavar="TEXT", help="pipeline as one line, e.g. 'default' or 'fold_constant,fuse,dce'")
    run.add_argument("--dump-ir", metavar="DIR", help="write the Relax IR after each pass into DIR")
    run.set_defaults(handler=cmd_run)

    tune = verbs.add_parser("tune", help="tune the model's kernels (after the pipeline) into the schedule database; "
                                         "each best schedule is checked against the untuned outputs")
    tune.add_argument("config", help="experiment YAML file (its tuning: section; defaults if absent)")
    tune.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    tune.add_argument("--minutes", type=float, metavar="N",
                      help="stop after N wall-clock minutes (tuning.minutes; the hottest kernels of the current "
                           "build first; rerun resumes)")
    tune.set_defaults(handler=cmd_tune)

    profile = verbs.add_parser("profile", help="per-kernel time of the workbench build next to ONNX Runtime's "
                                                "per-node time (writes <output>/profile/)")
    profile.add_argument("config", help="experiment YAML file")
    profile.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    profile.add_argument("--top", type=int, metavar="N", help="kernels shown per side (default 10)")
    profile.set_defaults(handler=cmd_profile)

    passes = verbs.add_parser("passes", help="list the registered passes with their parameters, and the named "
                                             "pipelines with what they expand to")
    passes.set_defaults(handler=cmd_passes)

    report = verbs.add_parser("report", help="rebuild report.md and the table from a run folder")
    report.add_argument("run_dir", help="a run folder (or its result.json)")
    runs = verbs.add_parser("runs", help="list the runs of a results store, newest first",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="example:\n  workbench runs --name quickstart --target rocketlake --limit 5\n"
                                   "  workbench runs --since 2026-12-01 --csv > runs.csv")
    runs.add_argument("--store", default=DEFAULT_STORE, help=f"results store (default {DEFAULT_STORE})")
    runs.add_argument("--name", help="only the runs of this experiment name")
    runs.add_argument("--model", metavar="SUBSTR", help="only runs whose model source contains SUBSTR")
    runs.add_argument("--target", metavar="SUBSTR", help="only runs whose target (e.g. llvm-znver3) contains SUBSTR")
    runs.add_argument("--since", metavar="DATE", help="only runs created on or after DATE (ISO, e.g. 2026-12-01)")
    runs.add_argument("--limit", type=int, metavar="N", help="at most N runs")
    form = runs.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print JSON instead of the table")
    form.add_argument("--csv", action="store_true", help="print CSV instead of the table")
    runs.set_defaults(handler=cmd_runs)

    compare = verbs.add_parser("compare", help="runs side by side: what differs, medians with 95%% CI, ops, profile",
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog="RUN is a store id (see `workbench runs`) or a run folder, e.g.\n"
                                      "  workbench compare 3 7 --png compare.png\n"
                                      "  workbench compare runs/quickstart 12")
    compare.add_argument("runs", nargs="+", metavar="RUN", help="store id or run folder (two or more)")
    compare.add_argument("--store", default=DEFAULT_STORE, help=f"results store for ids (default {DEFAULT_STORE})")
    compare.add_argument("--png", metavar="FILE", help="also write a bar chart of each label's median per run")
    compare.set_defaults(handler=cmd_compare)

    inspect_verb = verbs.add_parser("inspect", help="a model's inputs (and a model.inputs: snippet), op histogram "
                                                   "with FLOPs and parameters, unsupported ops, and what each pass "
                                                   "of a pipeline changes (nothing built)")
    inspect_verb.add_argument("target", metavar="MODEL|CONFIG",
                              help="a .onnx path, zoo:NAME, pkg:DIST==VER/path.onnx, or an experiment YAML file")
    inspect_verb.add_argument("--input", action="append", metavar="NAME=SHAPE",
                              help="fix an input's dynamic dims, e.g. x=1x3x224x224 (repeatable)")
    inspect_verb.add_argument("--pipeline", metavar="TEXT", help="pipeline to show (default: `default`, or the config's)")
    inspect_verb.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    inspect_verb.set_defaults(handler=cmd_inspect)

    from workbench.bench import command as bench_verb  # light imports (no TVM): the verbs, the report dispatch
    from workbench.sweep import command as sweep_verb

    report.set_defaults(handler=sweep_verb.report_dispatch(cmd_report, stdout))  # a sweep folder: the sweep report
    sweep = sweep_verb.add_parser(verbs, stdout, stderr)
    bench = bench_verb.add_parser(verbs)
    for sub in (run, inspect_verb, tune, profile, passes, report, runs, compare, sweep, bench):
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return parser


def _log_internal_error(log_dir: Path | None) -> Path:
    """Write the traceback of the current exception to a log file; return its path."""
    folder = log_dir if log_dir is not None else Path(tempfile.gettempdir())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"workbench-error-{datetime.now():%Y%m%d-%H%M%S}.log"
        path.write_text(traceback.format_exc())
    except OSError:
        path = Path(tempfile.mkstemp(prefix="workbench-error-", suffix=".log")[1])
        path.write_text(traceback.format_exc())
    return path


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    ERROR_LOG_FOLDER.set(None)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (UserError, ReferenceFailed) as exc:
        if args.debug:
            traceback.print_exc()
        stderr.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        stderr.print("interrupted: results already written are kept")
        return 130
    except Exception as exc:  # an internal bug: short message here, the traceback in a log file
        if args.debug:
            traceback.print_exc()
        log = _log_internal_error(ERROR_LOG_FOLDER.get())
        stderr.print(f"[bold red]internal error:[/] {escape(f'{exc.__class__.__name__}: {exc}')}\n"
                     f"  traceback written to {escape(str(log))}",
                     highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
