"""The `workbench bench corpus|parity|ops|conformance` verb: cli.py registers it; the benchmarks are imported only
when one runs (they import TVM)."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.bench.output import RESULTS
from workbench.config.baselines import SIDE_BY_SIDE, SIDE_BY_SIDE_DEFAULT


def _corpus_options(args: argparse.Namespace):
    from workbench.bench.corpus import CorpusOptions

    baselines = tuple(label for label in args.baselines.split(",") if label)
    return CorpusOptions(only=args.only, pipeline=args.pipeline, baselines=baselines, repeat=args.repeat,
                         rounds=args.rounds, out=args.out, corpus=args.corpus or CorpusOptions.corpus,
                         load=getattr(args, "load", 0))


def cmd_corpus(args: argparse.Namespace) -> int:
    from workbench.bench.corpus import run_corpus
    from workbench.bench.load import busy_processes

    with busy_processes(args.load):
        run_corpus(_corpus_options(args))
    return 0


def cmd_parity(args: argparse.Namespace) -> int:
    from workbench.bench.parity import ParityOptions, run_parity

    run_parity(ParityOptions(_corpus_options(args), args.tune_minutes, tuple(args.checkpoints or ()),
                             args.trials_per_task, args.cost_model, args.shared, args.resume))
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from workbench.bench.load import busy_processes
    from workbench.bench.ops import run_ops

    with busy_processes(args.load):
        run_ops(args.only, args.repeat, args.rounds, args.out, load=args.load)
    return 0


def cmd_conformance(args: argparse.Namespace) -> int:
    from workbench.bench.conformance import run_conformance

    run_conformance(args.only, args.out)
    return 0


def _timing(parser: argparse.ArgumentParser, repeat: int) -> None:
    parser.add_argument("--repeat", type=int, default=repeat, help=f"timed runs per label per round (default {repeat})")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")


def _corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", nargs="+", metavar="NAME", help="corpus entries to run (default: all)")
    parser.add_argument("--pipeline", default="default", help="the workbench pipeline: a named one or pass text")
    parser.add_argument("--baselines", default=",".join(SIDE_BY_SIDE_DEFAULT),
                        help=f"comma-separated, of {', '.join(SIDE_BY_SIDE)} (empty: the workbench alone)")
    parser.add_argument("--corpus", type=Path, help="a corpus YAML file (default: the package's corpus.yaml)")
    _timing(parser, 10)


def add_parser(verbs) -> argparse.ArgumentParser:
    """Register `bench` and its four benchmarks under the CLI's verbs."""
    bench = verbs.add_parser("bench", help="benchmarks that write a results page (docs/results/): the corpus, time to "
                                           "parity, op classes, op conformance")
    kinds = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    corpus = kinds.add_parser("corpus", help="every corpus model, untuned workbench vs ort_all and IREE: "
                                             "corpus_<cpu>.md/.csv/.png")
    _corpus_arguments(corpus)
    corpus.set_defaults(handler=cmd_corpus)
    parity = kinds.add_parser("parity", help="time to parity: each corpus model tuned in steps and timed against "
                                             "ort_all after each: parity_[warm_][shared_]<cpu>.md/.csv/.png")
    _corpus_arguments(parity)
    parity.add_argument("--tune-minutes", type=float, required=True, metavar="N",
                        help="tune each model up to N wall-clock minutes")
    parity.add_argument("--checkpoints", type=float, nargs="+", metavar="MIN",
                        help="minutes at which to measure (default N/4, N/2, N)")
    parity.add_argument("--trials-per-task", type=int, default=None,
                        help="cap on each kernel's trials (default: none; the minutes go where the model gains)")
    parity.add_argument("--cost-model", choices=["xgb", "xgb_warm"], default="xgb",
                        help="xgb_warm: pre-trained on the committed databases")
    parity.add_argument("--shared", action="store_true",
                        help="tuning and builds read the committed schedules/ of the other configs (read only)")
    parity.add_argument("--resume", action="store_true",
                        help="keep the models the page already has (without a failed point); run only the others")
    parity.set_defaults(handler=cmd_parity)
    ops = kinds.add_parser("ops", help="each heavy op class alone at corpus shapes vs ort_all: ops_<cpu>.md")
    ops.add_argument("--only", nargs="+", metavar="NAME", help="these op cases only")
    _timing(ops, 20)
    ops.set_defaults(handler=cmd_ops)
    conformance = kinds.add_parser("conformance", help="every op of the ONNX frontend at each opset, built and "
                                                       "compared with ONNX Runtime: conformance.md/.csv")
    conformance.add_argument("--only", nargs="+", metavar="OP", help="these ops only (default: every op)")
    conformance.set_defaults(handler=cmd_conformance)
    for sub in (corpus, ops):
        sub.add_argument("--load", type=int, default=0, metavar="N",
                         help="time beside N processes that each keep a core busy (the page's name ends in _loadN)")
    for sub in (corpus, parity, ops, conformance):
        sub.add_argument("--out", type=Path, default=RESULTS, help=f"folder for the page (default {RESULTS})")
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return bench
