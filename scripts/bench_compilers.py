"""Benchmark: the best workbench pipeline vs ONNX Runtime vs IREE vs TVM's default pipeline, in one run, on this CPU.

For each model, every candidate is built for llvm (IREE: llvm-cpu for the host CPU) from the same
canonical ONNX and run on the same seeded inputs by the same timing loop. Labels are timed in
interleaved rounds (each round times every label once), so a load change on the machine hits all
of them alike; a label's figure is the median of its round medians. Ratios are label median /
best-workbench median (> 1: the workbench build is faster). `kernels` is TVM's kernel count (distinct
TIR functions) or IREE's dispatch count: how much each compiler fused.

The workbench figure is the best of a few pipelines (`--pipelines`, `;`-separated), untuned, and with
`--database DIR` each also built with that MetaSchedule database's tuned schedules (kernels it has no
record for keep the default schedule; such a candidate's label ends in `+tuned COVERED/KERNELS`).
Usage:

    python scripts/bench_compilers.py [--repeat 10] [--rounds 3] [--models convnet_small,rapidocr_det]
    python scripts/bench_compilers.py --models convnet_small --database schedules/quickstart/llvm-znver2
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from workbench.compile.build import BASELINE_BUILDS, build_lowered
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment, TargetConfig, load_experiment, validate
from workbench.config.pipeline_spec import parse_text
from workbench.errors import BaselineUnavailable
from workbench.measure.factory import Bench, runner_for
from workbench.measure.runners import Runner
from workbench.measure.timing import interleaved_medians
from workbench.models import zoo
from workbench.record.results_page import Machine, rich_rows, write_results_page
from workbench.runtime.threads import cpu_threads
from workbench.stages import Prepared, build, optimize, prepare

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = "fold_constant,fold_batchnorm,fuse,dce;fold_constant,fold_batchnorm,fuse_patterns,fuse,dce"
MODELS = (*zoo.NAMES, "rapidocr_det")
COMPARED = ("ort_all", "iree", "tvm_default")


def experiment_for(name: str) -> Experiment:
    """A zoo model at its default inputs, or a model with a config in configs/ (rapidocr_det)."""
    if name in zoo.NAMES:
        return validate({"name": name, "model": {"source": f"zoo:{name}", "inputs": zoo.default_inputs(name)}}, name)
    return load_experiment(ROOT / "configs" / f"{name}.yaml")


def workbench_candidates(prepared: Prepared, bench: Bench, pipelines: list[str], database=None) -> dict[str, Runner]:
    """One runner per workbench pipeline, and with a `database` one more per pipeline with tuned schedules."""
    runners, target = {}, prepared.target
    for text in pipelines:
        optimized = optimize(prepared, parse_text(text))
        label = f"workbench[{text}]"
        runners[label] = runner_for(label, bench, build(optimized, target))
        tuned = build_lowered(optimized.module, target, database) if database is not None else None
        if tuned is not None and tuned.tuning["covered"]:  # a database for another model covers nothing here
            label = f"workbench[{text}+tuned {len(tuned.tuning['covered'])}/{tuned.kernels}]"
            runners[label] = runner_for(label, bench, tuned)
    return runners


def bench_model(name: str, pipelines: list[str], repeat: int, rounds: int, console: Console, database=None) -> dict:
    experiment = experiment_for(name)
    with console.status(f"{name}: building"), tempfile.TemporaryDirectory() as work_dir:
        prepared = prepare(experiment, ROOT, make_target(TargetConfig()))  # this machine's CPU
        bench = Bench(prepared.canonical, prepared.inputs, prepared.target, Path(work_dir))
        runners = workbench_candidates(prepared, bench, pipelines, database)
        runners["ort_all"] = runner_for("ort_all", bench)
        runners["tvm_default"] = runner_for("tvm_default", bench,
                                            BASELINE_BUILDS["tvm_default"](prepared.imported, prepared.target))
        notes = {}
        try:
            runners["iree"] = runner_for("iree", bench)
        except BaselineUnavailable as exc:
            notes["iree"] = f"not available: {exc}"
    with console.status(f"{name}: timing {len(runners)} labels, {rounds} rounds of {repeat}"):
        medians = interleaved_medians(runners, repeat, rounds)
    best = min((label for label in runners if label.startswith("workbench[")), key=medians.__getitem__)
    row = {"model": name, "best pipeline": best[len("workbench["):-1], "workbench ms": medians[best],
           "kernels": {"workbench": runners[best].kernels}, "notes": notes}
    for label in COMPARED:
        row[f"{label} ms"] = medians.get(label)
        row["kernels"][label] = runners[label].kernels if label in runners else None
    return row


def table_of(rows: list[dict], repeat: int, rounds: int) -> Table:
    table = Table(title=f"best workbench pipeline vs other compilers (llvm for this CPU, {rounds}x{repeat} runs)")
    columns = ["model", "best pipeline", "workbench ms", *(f"{label} ms" for label in COMPARED),
               *(f"{label} / workbench" for label in COMPARED), "kernels wb/iree/tvm_default"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "best pipeline") else "right",
                         overflow="fold")
    for row in rows:
        times = [f"{row[f'{label} ms']:.3f}" if row[f"{label} ms"] else "—" for label in COMPARED]
        ratios = [f"{row[f'{label} ms'] / row['workbench ms']:.2f}×" if row[f"{label} ms"] else "—"
                  for label in COMPARED]
        kernels = "/".join("—" if row["kernels"][k] is None else str(row["kernels"][k])
                           for k in ("workbench", "iree", "tvm_default"))
        table.add_row(row["model"], row["best pipeline"], f"{row['workbench ms']:.3f}", *times, *ratios, kernels)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per label per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--pipelines", default=PIPELINES, help="workbench candidates, ';'-separated pipeline texts")
    parser.add_argument("--database", help="a MetaSchedule database folder: tuned builds join the candidates")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="folder for the docs/results page")
    args = parser.parse_args()
    database = None
    if args.database:
        from workbench.compile.databases import open_database

        database = open_database(Path(args.database), create=False)
    console = Console(width=max(Console().width, 200))
    rows = []
    for name in args.models.split(","):
        rows.append(bench_model(name, args.pipelines.split(";"), args.repeat, args.rounds, console, database))
        for label, note in rows[-1]["notes"].items():
            console.print(f"{name}: {label} {note}")
    table = table_of(rows, args.repeat, args.rounds)
    console.print(table)
    machine = Machine(target=target_key(make_target(TargetConfig())), threads=cpu_threads())
    protocol = (f"The best workbench pipeline per model against IREE, ONNX Runtime and TVM's default pipeline, "
                f"{args.rounds} interleaved rounds of {args.repeat} runs in one process.")
    page = write_results_page(args.out, f"compilers_{host_cpu()}", "Workbench vs other compilers", machine, protocol,
                              *rich_rows(table))
    console.print(f"wrote {page}")


if __name__ == "__main__":
    main()
