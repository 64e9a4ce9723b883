"""The recording stage: what each stage of a run made, written into its RunResult as it comes (result.json is
rewritten after every step, so a crash loses at most the step in flight), then the accuracy check, report.md, the
store row and the MLflow run.
"""

from __future__ import annotations

import platform
import socket
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np
import tvm
from rich.console import Console

from workbench.atomic import atomic_write_bytes
from workbench.compile.build import Built
from workbench.compile.schedule_sources import ScheduleSources
from workbench.compile.targets import describe, is_cuda, resolved
from workbench.config import Experiment, pipeline_spec
from workbench.config.baselines import runtime_of
from workbench.errors import ReferenceFailed, UserError
from workbench.measure.iree import iree_version
from workbench.measure.openvino import openvino_version
from workbench.models.accuracy import compare, runs_bf16
from workbench.models.canonicalize import CONVERTED_OPSET
from workbench.record import mlflow_sink
from workbench.record.report import write_report
from workbench.record.result import Accuracy, CudaReport, Measurement, PassEntry, RunResult
from workbench.record.store import ResultsStore
from workbench.record.tuning_notes import schedules_line
from workbench.runtime.threads import target_threads
from workbench.stages import Optimized, Prepared
from workbench.stages.measuring import LabelMeasured, Measured
from workbench.stages.tuning import Tuned


def writable_output(out_dir: Path) -> Path:
    """Create the run folder and prove it is writable before any long work starts."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out_dir / ".write-check", b"")
        (out_dir / ".write-check").unlink()
    except OSError as exc:
        raise UserError(f"output folder {str(out_dir)!r}: cannot write there ({exc.strerror or exc}); "
                        "set `output:` (or --set output=DIR) to a writable folder") from exc
    return out_dir


def provenance(experiment: Experiment) -> dict:
    """The versions, seed, config hash and host a result was made with."""
    versions = {dist: metadata.version(dist) for dist in ("apache-tvm", "apache-tvm-ffi", "onnx", "onnxruntime")}
    return {
        "tvm": versions["apache-tvm"], "tvm_ffi": versions["apache-tvm-ffi"], "onnx": versions["onnx"],
        "onnxruntime": versions["onnxruntime"], "python": platform.python_version(),
        "config_hash": experiment.config_hash(), "seed": experiment.seed, "host": socket.gethostname(),
        "machine": platform.machine(), **({"iree": iree_version()} if "iree" in experiment.baselines else {}),
        **({"openvino": openvino_version()} if any(runtime_of(label) == "openvino" for label in experiment.baselines)
           else {}),
    }


def started(experiment: Experiment, target: tvm.target.Target) -> RunResult:
    """The result of a run that has just begun: what it is (model, target, pipeline, protocol), nothing measured."""
    return RunResult(
        name=experiment.name, status="running", created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=experiment.model.model_dump(mode="json", exclude_none=True), target=describe(experiment.target),
        target_resolved=resolved(target),
        threads=target_threads(target),  # every runtime's kernels (TVM, ONNX Runtime, IREE) on the CPU
        pipeline=[spec.to_yaml() for spec in experiment.pipeline],
        pipeline_text=pipeline_spec.to_text(experiment.pipeline),
        reference=experiment.accuracy.reference, passes=[], measurements={}, accuracy={}, kernels={},
        provenance=provenance(experiment), **({"cuda": {}} if is_cuda(target) else {}))


def note_prepared(result: RunResult, prepared: Prepared, out_dir: Path, console: Console) -> None:
    """The canonical model and inputs into the run folder; what canonicalization folded, converted, could not."""
    result.canonicalize = {**prepared.folding.as_dict(), "converted_from_opset": prepared.converted_from}
    if prepared.converted_from is not None:
        console.print(f"[yellow]![/] the model uses an op form of opset {prepared.converted_from} TVM's frontend "
                      f"gets wrong: converted to opset {CONVERTED_OPSET} first (ONNX's version converter)")
    if prepared.folding.unfolded:
        console.print(f"[yellow]![/] {len(prepared.folding.unfolded)} shape node(s) could not be folded (they stay "
                      f"computed; result.json lists them), the first: {prepared.folding.unfolded[0]}")
    atomic_write_bytes(out_dir / "model.canonical.onnx", prepared.canonical.SerializeToString())
    np.savez(out_dir / "inputs.npz", **prepared.inputs)
    result.model["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in prepared.inputs.items()}


def note_optimized(result: RunResult, optimized: Optimized) -> None:
    """One entry per pipeline step: its time, op counts before and after, what it reported."""
    result.passes = [PassEntry(**vars(record)) for record in optimized.records]


def note_tuned(result: RunResult, tuned: Tuned, console: Console) -> None:
    """The tuning a run did first (stages/tuning.py's `Tuned`): per task, and the minutes it used."""
    result.tuning_trials = [task.as_dict() for task in tuned.tasks]
    result.tuning_time = tuned.clock.as_dict()
    console.print(f"[green]✓[/] {tuned.summary()}")


def note_built(result: RunResult, built: Built, sources: ScheduleSources | None, layout_rewrite: bool,
               console: Console) -> None:
    """Kernels that fell back to plain loops, and the databases the build applied (with what each gave)."""
    if built.fell_back:
        result.kernels_fell_back = built.fell_back
        console.print(f"[yellow]![/] {len(built.fell_back)} kernels failed to lower with their schedule and run "
                      f"plain loops: {', '.join(built.fell_back)}")
    if sources is None:
        return
    result.tuning = sources.record(built.tuning, layout_rewrite)
    if sources.database is not None:
        console.print(f"[green]✓[/] {schedules_line(result.tuning)}")
    if sources.own.note:
        console.print(f"[yellow]![/] {sources.own.note}")


def _not_measured(note: str | None) -> Measurement:
    """A label without a figure, and why (every field written: readers see median null, not a missing key)."""
    return Measurement(median_ms=None, p90_ms=None, repeats=0, note=note)


def note_label(result: RunResult, measured: LabelMeasured, out_dir: Path) -> None:
    """One label as far as it got (run, timed, or failed with its reason), and result.json rewritten."""
    label = measured.label
    result.kernels[label] = measured.kernels
    if measured.cuda is not None:
        result.cuda[label] = CudaReport.model_validate(measured.cuda)
    if measured.failure is not None:
        result.measurements[label] = _not_measured(f"not available: {measured.failure}")
        if label == result.reference:
            result.error = f"accuracy reference {label} did not run, no output was checked: {measured.failure}"
    elif measured.timing is not None:
        result.measurements[label] = Measurement(**measured.timing.as_dict(), note=measured.note)
    elif measured.outputs is None:  # a TVM build where no device is
        result.measurements[label] = _not_measured(measured.note)
    else:  # ran once, its timing to come: its place in the table kept, in the order of the labels
        result.measurements[label] = _not_measured("being timed")
    result.write(out_dir)


def note_accuracy(result: RunResult, measured: Measured, experiment: Experiment) -> None:
    """Every label's outputs against the reference's, within the experiment's tolerance."""
    outputs = measured.outputs()
    reference = outputs.get(experiment.accuracy.reference)
    for label, produced in outputs.items():
        if reference is None:
            result.accuracy[label] = Accuracy(ok=None, note=f"reference {experiment.accuracy.reference} did not run")
        elif label != experiment.accuracy.reference:
            bf16 = runs_bf16(label, experiment.pipeline)
            result.accuracy[label] = Accuracy(**compare(produced, reference, experiment.accuracy.rtol,
                                                        experiment.accuracy.atol, bf16))


def log_mlflow(experiment: Experiment, base_dir: Path, result: RunResult, out_dir: Path,
               parent_run_id: str | None = None) -> str:
    """Log the run into `record.mlflow` (record/mlflow_sink.py), with the tuning budget the result lacks."""
    tuning = experiment.tuning
    budget = {} if tuning is None else {"tuning.trials": tuning.trials, "tuning.trials_per_task":
                                        tuning.trials_per_task, "tuning.hot_trials": tuning.hot_trials,
                                        "tuning.tune": tuning.tune}
    return mlflow_sink.log_run(result, out_dir, mlflow_sink.resolve_uri(experiment.record.mlflow, base_dir),
                               experiment.record.mlflow_experiment or experiment.name, parent_run_id, budget)


def finish(result: RunResult, experiment: Experiment, base_dir: Path, out_dir: Path, store: bool,
           console: Console) -> RunResult:
    """The run's status, result.json and report.md, its store row and MLflow run (with `store`); ReferenceFailed
    (carrying the result) where the accuracy reference did not run, so nothing was checked."""
    result.status = "failed" if result.error is not None else "complete"
    result.write(out_dir)
    write_report(result, out_dir)
    if store:
        with ResultsStore(experiment.results_path(base_dir)) as results:
            result.run_id = results.add(result)
        if experiment.record.mlflow:
            try:
                log_mlflow(experiment, base_dir, result, out_dir)
            except Exception as exc:  # noqa: BLE001 - the run is measured and stored; a sink that fails only warns
                console.print(f"[yellow]![/] not logged to MLflow ({experiment.record.mlflow}): {exc}")
    if result.status == "failed":
        raise ReferenceFailed(result)
    return result
