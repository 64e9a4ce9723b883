"""Benchmark: what each CPU lever buys on its own, measured side by side in one process.

    python scripts/bench_levers.py [quickstart|transformer_block|rapidocr_det] [--repeat 20] [--rounds 3] [--json out.json]

Each variant is the config with a few keys overridden (pipeline, target.mcpu, tuning.*). Variants
that need a database of their own are tuned first into runs/levers/<config>/<variant>/ (resumed if
there; `--no-tune` skips them); `first N` variants apply only the first N records per kernel of the
committed database (MetaSchedule tunes kernels one after another, so these are what tuning had found
after N trials of each). All variants, ort_all and IREE run on the same inputs, timed in interleaved
rounds; ratios are ort_all / variant (> 1: the variant beats ONNX Runtime).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from workbench.compile.build import build_lowered
from workbench.compile.databases import RECORDS_FILE, WORKLOADS_FILE, applied_database, choose_database
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment, load_experiment
from workbench.errors import BaselineUnavailable
from workbench.measure.factory import Bench, runner_for
from workbench.measure.runners import Runner
from workbench.measure.timing import interleaved_medians
from workbench.models.inputs import canonical_model, make_inputs
from workbench.record.results_page import Machine, rich_rows, write_results_page
from workbench.runtime.threads import cpu_threads
from workbench.stages import optimized_module
from workbench.stages.tuning import tune_experiment

ROOT = Path(__file__).resolve().parent.parent
NCHW = "pipeline=fold_constant,fold_batchnorm,fuse,dce"
NHWC_RELAX = "pipeline=fold_constant,fold_batchnorm,convert_layout(conv2d=NHWC),fold_constant,fuse,dce"
UNTUNED = "tuning=null"


@dataclass
class Variant:
    label: str
    overrides: list[str] = field(default_factory=list)
    tune_here: bool = False  # tune into runs/levers/<config>/<slug> before building
    first: int | None = None  # apply only the first N records per kernel of the config's database


VARIANTS: dict[str, list[Variant]] = {
    "quickstart": [
        Variant("untuned NCHW, generic x86-64", [NCHW, UNTUNED, "target.mcpu=generic"]),
        Variant("untuned NCHW, host CPU", [NCHW, UNTUNED]),
        Variant("untuned NHWC relax conv2d, host CPU", [NHWC_RELAX, UNTUNED]),
        Variant("untuned NHWC + pack_conv2d (default schedules)", [UNTUNED]),
        Variant("tuned NCHW 16/kernel", [NCHW, "tuning.trials_per_task=16", "tuning.trials=160"], tune_here=True),
        Variant("tuned NHWC relax conv2d 16/kernel", [NHWC_RELAX, "tuning.trials_per_task=16", "tuning.trials=176"],
                tune_here=True),
        Variant("tuned NHWC relax conv2d 16/kernel + weight pre-packing",
                [NHWC_RELAX, "tuning.trials_per_task=16", "tuning.trials=176", "tuning.layout_rewrite=true"],
                tune_here=True),
        Variant("tuned NHWC + pack_conv2d, first 8/kernel", first=8),
        Variant("tuned NHWC + pack_conv2d, 32/kernel + hot (committed)"),
        Variant("the same schedules compiled for generic x86-64", ["target.mcpu=generic"]),
    ],
    "transformer_block": [
        Variant("untuned, exact erf and softmax", ["pipeline=fold_constant,fuse,dce", UNTUNED]),
        Variant("untuned, fast_math", [UNTUNED]),
        Variant("tuned, exact erf and softmax (no fast_math)", ["pipeline=fold_constant,fuse,dce"]),
        Variant("tuned fast_math, first 16/kernel", first=16),
        Variant("tuned fast_math, 48/kernel (committed)"),
    ],
    "rapidocr_det": [
        Variant("untuned, no fold_batchnorm, generic x86-64",
                ["pipeline=fold_constant,fuse,dce", UNTUNED, "target.mcpu=generic"]),
        Variant("untuned NCHW relax conv2d, host CPU",
                ["pipeline=fold_constant,fold_batchnorm,conv_transpose_as_conv,fuse,dce", UNTUNED]),
        Variant("untuned NHWC + pack_conv2d (default schedules)", [UNTUNED]),
        Variant("tuned NHWC + pack_conv2d, 8/kernel on the heaviest + hot (committed)"),
    ],
}


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_")


def first_records(database: Path, count: int, into: Path) -> Path:
    """A copy of `database` holding only the first `count` records of each workload."""
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy(database / WORKLOADS_FILE, into / WORKLOADS_FILE)
    seen: Counter = Counter()
    kept = []
    for line in (database / RECORDS_FILE).read_text().splitlines():
        workload = json.loads(line)[0]
        seen[workload] += 1
        if seen[workload] <= count:
            kept.append(line)
    (into / RECORDS_FILE).write_text("\n".join(kept) + "\n")
    return into


def variant_experiment(config: Path, variant: Variant, scratch: Path, tune: bool, console: Console) -> Experiment:
    """The config with the variant's overrides, its own database tuned (or cut to its first N records) first."""
    overrides = list(variant.overrides)
    if variant.tune_here:
        overrides.append(f"tuning.database={ROOT / 'runs' / 'levers' / config.stem / slug(variant.label)}")
    experiment = load_experiment(config, overrides)
    if variant.tune_here and tune:
        console.print(f"[bold]{variant.label}[/]: tuning (resumes what is there)")
        tune_experiment(experiment, ROOT, console)
    if variant.first is not None:
        target = make_target(experiment.target)
        committed = choose_database(experiment.database_root(ROOT), target, "").path
        cut = first_records(committed, variant.first, scratch / slug(variant.label) / target_key(target))
        experiment = load_experiment(config, [*overrides, f"tuning.database={cut.parent}"])
    return experiment


def variant_runner(label: str, experiment: Experiment, bench: Bench) -> tuple[Runner, str]:
    """The workbench build of `experiment` with its own database only (no shared ones, so each lever is measured on
    its own), its runner, and which database it used."""
    target = make_target(experiment.target)
    optimized = optimized_module(experiment, ROOT, target)
    choice, database = applied_database(experiment, ROOT, target, "")
    note = "—" if choice is None else f"{choice.tuned_for}"
    built = build_lowered(optimized, target, database, experiment.layout_rewrite)
    if built.tuning:
        note += f", {len(built.tuning['covered'])}/{built.kernels} kernels tuned"
    return runner_for(label, replace(bench, target=target), built), f"{target_key(target)}; {note}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="quickstart", choices=sorted(VARIANTS))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-tune", action="store_true", help="do not tune the variants' own databases first")
    parser.add_argument("--tune-only", action="store_true", help="tune the variants' own databases, then stop")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="folder for the docs/results page")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 180))
    config = ROOT / "configs" / f"{args.config}.yaml"
    if args.tune_only:
        for variant in VARIANTS[args.config]:
            if variant.tune_here:
                variant_experiment(config, variant, ROOT, True, console)
        return
    base = load_experiment(config)
    model = canonical_model(base.model, ROOT).model
    inputs = make_inputs(model, base.model, base.seed, ROOT)
    notes: dict[str, str] = {"ort_all": "ONNX Runtime, ORT_ENABLE_ALL"}
    with tempfile.TemporaryDirectory() as scratch:
        bench = Bench(model, inputs, make_target(base.target), Path(scratch))
        runners: dict[str, Runner] = {"ort_all": runner_for("ort_all", bench)}
        try:
            runners["iree"] = runner_for("iree", bench)
            notes["iree"] = "IREE llvm-cpu, host CPU"
        except BaselineUnavailable as exc:
            console.print(f"iree: {exc}")
        for variant in VARIANTS[args.config]:
            experiment = variant_experiment(config, variant, Path(scratch), not args.no_tune, console)
            if variant.tune_here and not experiment.database_root(ROOT).is_dir():
                console.print(f"{variant.label}: skipped, --no-tune and no database at {experiment.database_root(ROOT)}")
                continue
            with console.status(f"building {variant.label}"):
                runners[variant.label], notes[variant.label] = variant_runner(variant.label, experiment, bench)
        with console.status(f"timing {len(runners)} labels, {args.rounds} rounds of {args.repeat}"):
            medians = interleaved_medians(runners, args.repeat, args.rounds)
    table = Table(title=f"{args.config}: each lever on its own (median of {args.rounds} interleaved rounds "
                        f"x {args.repeat} runs)")
    for column in ("variant", "median ms", "ort_all / this", "built for; database"):
        table.add_column(column, justify="right" if "ms" in column or "/" in column else "left")
    rows = [{"variant": label, "median_ms": medians[label], "ort_all_over_this": medians["ort_all"] / medians[label],
             "note": notes[label]} for label in runners]
    for row in rows:
        table.add_row(row["variant"], f"{row['median_ms']:.3f}", f"{row['ort_all_over_this']:.2f}×", row["note"])
    console.print(table)
    machine = Machine(target=target_key(make_target(base.target)), threads=cpu_threads())
    tuned = "variants tuned first" if not args.no_tune else "--no-tune"
    protocol = (f"Each lever built on its own for this CPU and timed with ort_all and IREE in {args.rounds} "
                f"interleaved rounds of {args.repeat} runs in one process ({tuned}).")
    page = write_results_page(args.out, f"levers_{args.config}_{host_cpu()}", f"{args.config}: each lever on its own",
                              machine, protocol, *rich_rows(table))
    console.print(f"wrote {page}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
