"""Benchmark: the tuned workbench build of each shipped CPU config vs ONNX Runtime, IREE and TVM's default pipeline.

For each config (default: the quickstart, the two other zoo models and rapidocr det), in one process,
on the same canonical ONNX and the same seeded inputs: the workbench build exactly as `workbench run`
makes it (the config's pipeline, the schedule databases a run reads on this CPU, weight pre-packing if the
config asks for it), ort_all (ORT_ENABLE_ALL), IREE (llvm-cpu for this CPU) and tvm_default, all for
this machine's CPU. Labels are timed in interleaved rounds (median of round medians), so load changes
hit all of them alike. Printed: medians, the ratios ort_all/workbench and iree/workbench (> 1: the
workbench is faster), which databases supplied each build's schedules, and the workbench's max error
against ort_all.

    python scripts/bench_cpu.py [--configs quickstart,mobilenet_block,transformer_block,rapidocr_det]
                                [--repeat 20] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from workbench.compile.build import BASELINE_BUILDS, Built
from workbench.compile.schedule_sources import schedule_sources
from workbench.compile.targets import host_cpu, target_key
from workbench.config import load_experiment
from workbench.errors import BaselineUnavailable
from workbench.measure.factory import Bench, runner_for
from workbench.measure.timing import interleaved_medians
from workbench.record.results_page import Machine, write_results_page
from workbench.record.tuning_notes import tuning_note
from workbench.runtime.threads import cpu_threads
from workbench.stages import Prepared, build, optimize, prepare

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = "quickstart,mobilenet_block,transformer_block,rapidocr_det"
BASELINES = ("ort_all", "iree", "tvm_default")


def workbench_build(config: Path) -> tuple[Prepared, Built, dict]:
    """The config's workbench build as `workbench run` makes it (its pipeline, the databases it reads, weight
    pre-packing where the config asks for it), and what the row records of it."""
    experiment = load_experiment(config)
    prepared = prepare(experiment, ROOT)
    target = prepared.target
    optimized = optimize(prepared, experiment.pipeline, stats=False)
    sources = schedule_sources(experiment, ROOT, target, f"workbench tune {config}")
    built = build(optimized, target, sources, experiment.layout_rewrite)
    note = None if sources is None else tuning_note(sources.record(built.tuning, experiment.layout_rewrite))
    row = {"config": config.stem, "target": target_key(target), "database": note or "untuned (no database)",
           "kernels": built.kernels}
    return prepared, built, row


def bench_config(config: Path, repeat: int, rounds: int, console: Console) -> dict:
    with console.status(f"{config.stem}: building"), tempfile.TemporaryDirectory() as work_dir:
        prepared, built, row = workbench_build(config)
        bench = Bench(prepared.canonical, prepared.inputs, prepared.target, Path(work_dir))
        runners = {"workbench": runner_for("workbench", bench, built), "ort_all": runner_for("ort_all", bench)}
        try:
            runners["iree"] = runner_for("iree", bench)
        except BaselineUnavailable as exc:
            row["iree note"] = str(exc)
        runners["tvm_default"] = runner_for("tvm_default", bench,
                                            BASELINE_BUILDS["tvm_default"](prepared.imported, prepared.target))
        ours, theirs = runners["workbench"].infer(), runners["ort_all"].infer()
        row["max abs err vs ort_all"] = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs))
        with console.status(f"{config.stem}: timing {len(runners)} labels, {rounds} rounds of {repeat}"):
            medians = interleaved_medians(runners, repeat, rounds)
    row["workbench ms"] = medians["workbench"]
    for label in BASELINES:
        row[f"{label} ms"] = medians.get(label)
        row[f"{label}/workbench"] = medians[label] / medians["workbench"] if label in medians else None
    return row


COLUMNS = ("config", "workbench ms", *(f"{label} ms" for label in BASELINES), "ort_all/workbench", "iree/workbench",
           "max abs err vs ort_all", "database")
TITLE = "Tuned workbench vs ONNX Runtime, IREE, TVM default"


def cells(row: dict) -> list[str]:
    """One row as display strings (the console table and the docs/results page share them)."""
    def cell(key: str, suffix: str = "", fmt: str = ".3f") -> str:
        return "—" if row.get(key) is None else f"{row[key]:{fmt}}{suffix}"

    return [row["config"], cell("workbench ms"), *(cell(f"{label} ms") for label in BASELINES),
            cell("ort_all/workbench", "×", ".2f"), cell("iree/workbench", "×", ".2f"),
            cell("max abs err vs ort_all", fmt=".1e"), row["database"]]


def protocol(repeat: int, rounds: int) -> str:
    return ("Each config's workbench build as `workbench run` makes it (its pipeline and the schedule databases a "
            f"run reads on this CPU), timed with the baselines in {rounds} interleaved rounds of {repeat} runs in one "
            "process; "
            "ratios are the baseline's median / the workbench median (> 1: the workbench is faster).")


def table_of(rows: list[dict], repeat: int, rounds: int) -> Table:
    table = Table(title=f"{TITLE} ({rows[0]['target']}, median of {rounds} interleaved rounds x {repeat} runs)")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("config", "database") else "right", overflow="fold")
    for row in rows:
        table.add_row(*cells(row))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=CONFIGS, help="config names in configs/ (or YAML paths), comma-separated")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per label per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results",
                        help="folder for the page cpu_<this CPU>.md")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 200))
    rows = []
    for name in args.configs.split(","):
        config = Path(name) if name.endswith(".yaml") else ROOT / "configs" / f"{name}.yaml"
        rows.append(bench_config(config, args.repeat, args.rounds, console))
        console.print(f"{rows[-1]['config']}: workbench {rows[-1]['workbench ms']:.3f} ms, "
                      f"ort_all/workbench {rows[-1]['ort_all/workbench']:.2f}×")
    console.print(table_of(rows, args.repeat, args.rounds))
    machine = Machine(target=rows[0]["target"], threads=cpu_threads())
    page = write_results_page(args.out, f"cpu_{host_cpu()}", TITLE, machine, protocol(args.repeat, args.rounds),
                              COLUMNS, [cells(row) for row in rows])
    console.print(f"wrote {page}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
