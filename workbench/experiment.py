"""Run one experiment end to end: model -> canonical ONNX -> Relax -> pipeline -> build -> measure vs baselines.

Every stage result is kept under the output folder (canonical model, inputs, IR dumps, the
exported library, ORT's optimized model, result.json, report). result.json is rewritten after
each measured label, so a crash loses at most the label being measured.
"""

from __future__ import annotations

import platform
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
from rich.console import Console

from workbench import pipeline_spec
from workbench.accuracy import compare
from workbench.atomic import atomic_write_bytes, atomic_write_json
from workbench.build import build_lowered, build_tvm_default
from workbench.config import WORKBENCH_LABEL, Experiment
from workbench.errors import UserError
from workbench.inputs import input_specs, make_inputs
from workbench.measure import time_call
from workbench.models.canonicalize import canonicalize
from workbench.models.importer import import_to_relax
from workbench.models.sources import resolve_source
from workbench.pipeline import run_pipeline
from workbench.report import write_report
from workbench.results import ResultsStore
from workbench.runners import Runner, ort_runner, tvm_runner
from workbench.targets import describe, make_target


@contextmanager
def step(console: Console, title: str) -> Iterator[None]:
    """Show a spinner while a stage runs, then one line with its duration."""
    started = time.perf_counter()
    with console.status(f"{title}…"):
        yield
    console.print(f"[green]✓[/] {title} [dim]({time.perf_counter() - started:.1f} s)[/]")


def provenance(experiment: Experiment) -> dict:
    versions = {dist: metadata.version(dist) for dist in ("apache-tvm", "apache-tvm-ffi", "onnx", "onnxruntime")}
    return {
        "tvm": versions["apache-tvm"], "tvm_ffi": versions["apache-tvm-ffi"], "onnx": versions["onnx"],
        "onnxruntime": versions["onnxruntime"], "python": platform.python_version(),
        "config_hash": experiment.config_hash(), "seed": experiment.seed, "host": socket.gethostname(),
        "machine": platform.machine(),
    }


def _baseline_runner(label: str, canonical: onnx.ModelProto, imported, inputs: dict[str, np.ndarray],
                     target, out_dir: Path) -> Runner:
    """Build the runner for one baseline label."""
    if label == "ort_all":
        return ort_runner(label, canonical, inputs, optimized_path=out_dir / "ort_all.optimized.onnx")
    if label == "ort_none":
        return ort_runner(label, canonical, inputs)
    if label == "tvm_default":
        return tvm_runner(label, build_tvm_default(imported, target), inputs, target)
    if label == "tvm_unoptimized":
        return tvm_runner(label, build_lowered(imported, target), inputs, target)
    raise ValueError(f"no runner for baseline {label!r}")


def _writable_output(out_dir: Path) -> Path:
    """Create the run folder and prove it is writable before any long work starts."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out_dir / ".write-check", b"")
        (out_dir / ".write-check").unlink()
    except OSError as exc:
        raise UserError(f"output folder {str(out_dir)!r}: cannot write there ({exc.strerror or exc}); "
                        "set `output:` (or --set output=DIR) to a writable folder") from exc
    return out_dir


def _not_measured(note: str) -> dict:
    return {"median_ms": None, "p90_ms": None, "repeats": 0, "note": note}


def run_experiment(experiment: Experiment, base_dir: Path, console: Console | None = None,
                   dump_ir: Path | None = None) -> dict:
    """Run the experiment, write its files and store row; return the result dict."""
    console = console or Console(stderr=True)
    out_dir = _writable_output(experiment.output_dir(base_dir))
    target = make_target(experiment.target)
    result: dict = {
        "name": experiment.name,
        "status": "running",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": experiment.model.model_dump(mode="json", exclude_none=True),
        "target": describe(experiment.target),
        "pipeline": [spec.to_yaml() for spec in experiment.pipeline],
        "pipeline_text": pipeline_spec.to_text(experiment.pipeline),
        "reference": experiment.accuracy.reference,
        "passes": [], "measurements": {}, "accuracy": {}, "kernels": {},
        "provenance": provenance(experiment),
    }

    database = None
    if experiment.tuning is not None:  # MetaSchedule is imported only by runs that use it
        from workbench.tune import open_database

        if not experiment.tuning.tune:  # a missing database is reported before any long work
            database = open_database(experiment.database_dir(base_dir), create=False)
    with step(console, f"Loading {experiment.model.source}"):
        source_model = resolve_source(experiment.model.source, base_dir, experiment.model.cache_dir)
        canonical = canonicalize(source_model, input_specs(experiment.model, base_dir))
        atomic_write_bytes(out_dir / "model.canonical.onnx", canonical.SerializeToString())
        inputs = make_inputs(canonical, experiment.model, experiment.seed, base_dir)
        np.savez(out_dir / "inputs.npz", **inputs)
        result["model"]["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in inputs.items()}
    with step(console, "Importing to Relax"):
        imported = import_to_relax(canonical)
    with step(console, f"Running pipeline [bold]{result['pipeline_text'] or '(empty)'}[/]"):
        optimized, records = run_pipeline(imported, experiment.pipeline, target, dump_ir)
        result["passes"] = [vars(record) for record in records]
    if experiment.tuning is not None and experiment.tuning.tune:
        from workbench.tune_run import tune_optimized

        result["tuning_trials"] = [r.as_dict() for r in tune_optimized(optimized, target, experiment, base_dir,
                                                                        console)]
        database = open_database(experiment.database_dir(base_dir), create=False)
    with step(console, f"Building workbench for {target.kind.name}"
                       + (" with tuned schedules" if database is not None else "")):
        built = build_lowered(optimized, target, database)
        built.export(out_dir / "workbench.so")
        if built.tuning is not None:
            result["tuning"] = {"database": str(experiment.database_dir(Path())), **built.tuning}

    runners = {WORKBENCH_LABEL: lambda: tvm_runner(WORKBENCH_LABEL, built, inputs, target)}
    for label in experiment.baselines:
        runners[label] = lambda label=label: _baseline_runner(label, canonical, imported, inputs, target, out_dir)

    outputs: dict[str, list[np.ndarray]] = {}
    protocol = experiment.measure
    for label, make_runner in runners.items():
        with step(console, f"Measuring {label} ({protocol.repeat} repeats)"):
            try:
                runner = make_runner()
                outputs[label] = runner.infer()
                timing = time_call(runner.run_once, protocol.warmup, protocol.repeat, runner.sync)
                result["measurements"][label] = {**timing.as_dict(), "note": None}
                result["kernels"][label] = runner.kernels
            except Exception as exc:  # a baseline that cannot run is reported, the run goes on
                if label == WORKBENCH_LABEL:
                    raise
                result["measurements"][label] = _not_measured(f"not available: {exc.__class__.__name__}: {exc}")
                result["kernels"][label] = None
        atomic_write_json(out_dir / "result.json", result)

    reference = outputs.get(experiment.accuracy.reference)
    for label, produced in outputs.items():
        if reference is None:
            result["accuracy"][label] = {"ok": None, "note": f"reference {experiment.accuracy.reference} did not run"}
        elif label != experiment.accuracy.reference:
            result["accuracy"][label] = compare(produced, reference, experiment.accuracy.rtol, experiment.accuracy.atol)
    result["status"] = "complete"
    atomic_write_json(out_dir / "result.json", result)
    write_report(result, out_dir)
    with ResultsStore(experiment.results_path(base_dir)) as store:
        result["run_id"] = store.add(result)
    return result
