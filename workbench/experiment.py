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
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
import tvm
import tvm_ffi
from rich.console import Console

from workbench.atomic import atomic_write_bytes
from workbench.compile.build import Built, build_lowered, build_tvm_default
from workbench.compile.cuda_report import kernel_report
from workbench.compile.schedule_sources import ScheduleSources, schedule_sources
from workbench.compile.targets import GENERIC_CPU, describe, device_for, is_cuda, make_target, resolved, target_key
from workbench.config import Experiment, pipeline_spec
from workbench.config.baselines import BASELINES, WORKBENCH_LABEL, runs_on_tvm
from workbench.errors import BaselineUnavailable, ReferenceFailed, UserError
from workbench.measure.iree import iree_runner, iree_version
from workbench.measure.runners import Runner, ort_runner, tvm_runner
from workbench.models.accuracy import compare
from workbench.models.canonicalize import CONVERTED_OPSET
from workbench.record import mlflow_sink
from workbench.record.report import schedules_line, write_report
from workbench.record.result import Accuracy, Measurement, PassEntry, RunResult
from workbench.record.store import ResultsStore
from workbench.runtime.rpc import connect
from workbench.runtime.threads import target_threads
from workbench.stages import Optimized, Prepared, optimize, prepare
from workbench.stages.tuning import tune_optimized


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
        "machine": platform.machine(), **({"iree": iree_version()} if "iree" in experiment.baselines else {}),
    }


TVM_RECIPES = {"tvm_default": build_tvm_default, "tvm_unoptimized": build_lowered}  # the TVM baselines' builds


def _cached(builds: dict | None, recipe, mod, target, state: tuple = (), name: str | None = None):
    """`recipe(mod, target)`, or with `builds` (one dict for all runs of a sweep worker) the build made
    before for a structurally equal module and the same `state` (what else the build reads): equal IR, target and
    state compile to the same code. Builds are keyed by `name` (default: the recipe's)."""
    if builds is None:
        return recipe(mod, target)
    key = (name or recipe.__name__, str(target), tvm_ffi.structural_hash(mod), *state)
    if key not in builds:
        builds[key] = recipe(mod, target)
    return builds[key]


def _workbench_build(optimized, target, library: Path, builds: dict | None, sources: ScheduleSources | None,
                     layout_rewrite: bool = False):
    """Build the optimized module (with the tuned schedules of `sources`' databases, each kernel's source noted)
    and export it to `library`; with `builds`, a build of a structurally equal module with the databases as they
    are now (`ScheduleSources.state`: tuning may have grown one since) is reused and its library copied, not
    emitted again."""
    database = sources.database if sources is not None else None
    source_of = sources.source_of if sources is not None else None

    def with_schedules(mod, target):
        return build_lowered(mod, target, database, layout_rewrite, source_of)

    state = (sources.state(), layout_rewrite) if sources is not None else ()
    built = _cached(builds, with_schedules, optimized, target, state, name="build_lowered")
    key = ("library", str(target), tvm_ffi.structural_hash(optimized), *state)
    exported = builds.get(key) if builds is not None else None
    if exported is not None and exported.is_file():
        atomic_write_bytes(library, exported.read_bytes())
    else:
        built.export(library)
        if builds is not None:
            builds[key] = library
    return built


def _tvm_build(label: str, imported, target, builds: dict | None) -> Built:
    """Build one baseline TVM recipe (the workbench build is made before measuring starts)."""
    return _cached(builds, TVM_RECIPES[label], imported, target)


@dataclass
class TvmPlace:
    """Where TVM builds are measured: here, in an RPC session, or nowhere (`unavailable` says why)."""

    session: object | None = None
    unavailable: str | None = None


def _tvm_place(experiment: Experiment, target) -> TvmPlace:
    """Connect to the RPC tracker first (a wrong address fails in seconds), or check for a local device."""
    if experiment.measure.rpc is not None:
        return TvmPlace(session=connect(experiment.measure.rpc))
    if is_cuda(target) and not device_for(target).exist:
        return TvmPlace(unavailable="not measured: no CUDA device (measure on a GPU host with measure.rpc)")
    return TvmPlace()


def _quantize_params(experiment: Experiment):
    """The pipeline's `quantize` step parameters (its defaults without one)."""
    from workbench.passes.precision import QuantizeParams

    return QuantizeParams.model_validate(next((s.params for s in experiment.pipeline if s.name == "quantize"), {}))


def calibration_samples(experiment: Experiment, canonical: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
    """The input sets the pipeline's `quantize` step calibrates on, by ONNX input name."""
    from workbench.passes.calibration import InputSig, file_inputs, random_inputs

    params = _quantize_params(experiment)
    inits = {init.name for init in canonical.graph.initializer}
    sigs = [InputSig(value.name, tuple(d.dim_value for d in value.type.tensor_type.shape.dim),
                     onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name)
            for value in canonical.graph.input if value.name not in inits]
    return file_inputs(sigs, params.files) if params.files else random_inputs(sigs, params.samples, params.seed)


def ort_int8_model(experiment: Experiment, canonical: onnx.ModelProto, out_dir: Path) -> onnx.ModelProto:
    """The canonical model quantized by ONNX Runtime on the `quantize` step's calibration inputs and method,
    cached as ort_int8.onnx in the run folder."""
    from workbench.measure.ort_quant import quantized_model

    params = _quantize_params(experiment)
    return quantized_model(canonical, calibration_samples(experiment, canonical), params.calibration,
                           out_dir / "ort_int8.onnx", params.percentile)


def _precision_note(experiment: Experiment, target) -> str | None:
    """Say so where fp16 runs on a CPU without half-precision arithmetic: every op converts to fp32 and back."""
    from tvm.target import codegen

    if target.kind.name != "llvm" or not any(s.name == "fp16" for s in experiment.pipeline) \
            or codegen.target_has_features("avx512fp16", target):
        return None
    return "fp16 on a CPU without native fp16 arithmetic (no avx512fp16): converted around each op, expect slower"


def _runner(label: str, built: Built | None, canonical: onnx.ModelProto, inputs: dict[str, np.ndarray],
            target, place: TvmPlace, out_dir: Path) -> Runner:
    """The runner for one label: TVM builds where `place` says, IREE and ONNX Runtime here.

    The workbench build runs from its exported library (already written); a baseline build is exported
    only when it must travel to an RPC server."""
    if built is not None:
        if label == WORKBENCH_LABEL:
            library = out_dir / "workbench.so"
        else:
            library = built.export(out_dir / f"{label}.so") if place.session is not None else None
        return tvm_runner(label, built, inputs, target, place.session, library)
    threads = target_threads(target)
    if BASELINES[label].runtime == "iree":
        return iree_runner(canonical, inputs, out_dir, target.kind.name, arch=target.attrs.get("arch"),
                           cpu=target.attrs.get("mcpu", GENERIC_CPU), threads=threads)
    optimized = out_dir / "ort_all.optimized.onnx" if label == "ort_all" else None
    return ort_runner(label, canonical, inputs, optimized_path=optimized, threads=threads)


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


def _not_measured(note: str) -> Measurement:
    return Measurement(median_ms=None, p90_ms=None, repeats=0, note=note)


def _profiles(experiment: Experiment, canonical: onnx.ModelProto, inputs: dict[str, np.ndarray], target,
              place: TvmPlace, out_dir: Path) -> dict:
    """Per-kernel profiles of the workbench build (measured where it runs locally) and of ort_all, side by side."""
    from workbench.measure.profile import ort_profile, tvm_profile

    config = experiment.profile
    profiles = {"ort_all": ort_profile(canonical, inputs, out_dir, config.warmup, config.runs).as_dict(config.top)}
    if place.session is None and not place.unavailable:
        module = tvm.runtime.load_module(str(out_dir / "workbench.so"))
        ours = tvm_profile(module, inputs, device_for(target), config.warmup, config.runs)
        profiles = {WORKBENCH_LABEL: ours.as_dict(config.top), **profiles}
    return profiles


def log_mlflow(experiment: Experiment, base_dir: Path, result: RunResult, out_dir: Path,
               parent_run_id: str | None = None) -> str:
    """Log the run into `record.mlflow` (record/mlflow_sink.py), with the tuning budget the result lacks."""
    tuning = experiment.tuning
    budget = {} if tuning is None else {"tuning.trials": tuning.trials, "tuning.trials_per_task":
                                        tuning.trials_per_task, "tuning.hot_trials": tuning.hot_trials,
                                        "tuning.tune": tuning.tune}
    return mlflow_sink.log_run(result, out_dir, mlflow_sink.resolve_uri(experiment.record.mlflow, base_dir),
                               experiment.record.mlflow_experiment or experiment.name, parent_run_id, budget)


def run_experiment(experiment: Experiment, base_dir: Path, console: Console | None = None,
                   dump_ir: Path | None = None, store: bool = True, builds: dict | None = None,
                   config_path: Path | None = None, prepared: Prepared | None = None,
                   optimized: Optimized | None = None) -> RunResult:
    """Run the experiment, write its files and (with `store`) its store row; return its RunResult.

    A baseline that cannot run is reported and the run goes on, but when that baseline is the accuracy
    reference nothing was checked: every label is still measured and written, with status "failed" and
    `error` the reason, and then ReferenceFailed (carrying the result) is raised.

    A sweep passes store=False (its parent process adds the row together with the variants it measures)
    and one `builds` dict for all runs of a worker: a TVM baseline, or an optimized module equal to one
    built before (another seed, another repeat), is compiled once per worker and measured afresh in each run.
    `config_path` is only shown, in the command that would tune this experiment when no database fits.
    A caller that holds the experiment's `prepared` model (and its `optimized` one: the sweep keeps those it
    hashed) passes them in; the stages they stand for are not run again."""
    console = console or Console(stderr=True)
    out_dir = _writable_output(experiment.output_dir(base_dir))
    target = prepared.target if prepared is not None else make_target(experiment.target)
    place = _tvm_place(experiment, target)
    result = RunResult(
        name=experiment.name, status="running", created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=experiment.model.model_dump(mode="json", exclude_none=True), target=describe(experiment.target),
        target_resolved=resolved(target),
        threads=target_threads(target),  # every runtime's kernels (TVM, ONNX Runtime, IREE) on the CPU
        pipeline=[spec.to_yaml() for spec in experiment.pipeline],
        pipeline_text=pipeline_spec.to_text(experiment.pipeline),
        reference=experiment.accuracy.reference, passes=[], measurements={}, accuracy={}, kernels={},
        provenance=provenance(experiment), **({"cuda": {}} if is_cuda(target) else {}))

    tuning = experiment.tuning
    tune_hint = f"workbench tune {config_path or 'CONFIG'}"
    sources = None
    if tuning is None or not tuning.tune:  # a missing database is reported before any long work
        sources = schedule_sources(experiment, base_dir, target, tune_hint)
    if prepared is None:
        with step(console, f"Loading {experiment.model.source} and importing it to Relax"):
            prepared = prepare(experiment, base_dir, target)
    canonical, inputs, imported = prepared.canonical, prepared.inputs, prepared.imported
    result.canonicalize = {**prepared.folding.as_dict(), "converted_from_opset": prepared.converted_from}
    if prepared.converted_from is not None:
        console.print(f"[yellow]![/] the model uses an op form of opset {prepared.converted_from} TVM's frontend "
                      f"gets wrong: converted to opset {CONVERTED_OPSET} first (ONNX's version converter)")
    if prepared.folding.unfolded:
        console.print(f"[yellow]![/] {len(prepared.folding.unfolded)} shape node(s) could not be folded (they stay "
                      f"computed; result.json lists them), the first: {prepared.folding.unfolded[0]}")
    atomic_write_bytes(out_dir / "model.canonical.onnx", canonical.SerializeToString())
    np.savez(out_dir / "inputs.npz", **inputs)
    result.model["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in inputs.items()}
    if optimized is None:
        with step(console, f"Running pipeline [bold]{result.pipeline_text or '(empty)'}[/]"):
            optimized = optimize(prepared, experiment.pipeline, dump_ir)
    result.passes = [PassEntry(**vars(record)) for record in optimized.records]
    if tuning is not None and tuning.tune:
        tuned = tune_optimized(optimized.module, target, experiment, base_dir, console, inputs)
        result.tuning_trials = [r.as_dict() for r in tuned.tasks]
        result.tuning_time = tuned.clock.as_dict()
        console.print(f"[green]✓[/] {tuned.summary()}")
        sources = schedule_sources(experiment, base_dir, target, tune_hint)
    database = sources.database if sources is not None else None
    with step(console, f"Building workbench for {target_key(target)}"
                       + (f" with tuned schedules ({len(sources.sources)} databases)" if database is not None else "")):
        library = out_dir / "workbench.so"
        built = _workbench_build(optimized.module, target, library, builds, sources, experiment.layout_rewrite)
    if built.fell_back:
        result.kernels_fell_back = built.fell_back
        console.print(f"[yellow]![/] {len(built.fell_back)} kernels failed to lower with their schedule and run "
                      f"plain loops: {', '.join(built.fell_back)}")
    if sources is not None:
        result.tuning = sources.record(built.tuning, experiment.layout_rewrite)
        if database is not None:
            console.print(f"[green]✓[/] {schedules_line(result.tuning)}")
        if sources.own.note:
            console.print(f"[yellow]![/] {sources.own.note}")

    labels = [WORKBENCH_LABEL, *experiment.baselines, *(["ort_cuda"] if is_cuda(target) else [])]
    outputs: dict[str, list[np.ndarray]] = {}
    protocol = experiment.measure
    for label in labels:
        with step(console, f"Measuring {label} ({protocol.repeat} repeats)"):
            try:
                tvm_build = (built if label == WORKBENCH_LABEL else _tvm_build(label, imported, target, builds)) \
                    if runs_on_tvm(label) else None
                if tvm_build is not None:
                    result.kernels[label] = tvm_build.kernels
                    if is_cuda(target):
                        result.cuda[label] = kernel_report(label, tvm_build, experiment.target.arch,
                                                              out_dir / "cuda")
                if tvm_build is not None and place.unavailable:
                    result.measurements[label] = _not_measured(place.unavailable)
                else:
                    model = ort_int8_model(experiment, canonical, out_dir) if label == "ort_int8" else canonical
                    runner = _runner(label, tvm_build, model, inputs, target, place, out_dir)
                    outputs[label] = runner.infer()
                    timing = runner.measure(protocol.warmup, protocol.repeat)
                    on_cpu = is_cuda(target) and label in ("ort_all", "ort_none")
                    note = _precision_note(experiment, target) if label == WORKBENCH_LABEL else None
                    result.measurements[label] = Measurement(**timing.as_dict(),
                                                             note="ONNX Runtime on the CPU" if on_cpu else note)
                    result.kernels[label] = runner.kernels
            except Exception as exc:  # a baseline that cannot run is reported, the run goes on
                if label == WORKBENCH_LABEL:
                    raise
                reason = str(exc) if isinstance(exc, BaselineUnavailable) else f"{exc.__class__.__name__}: {exc}"
                result.measurements[label] = _not_measured(f"not available: {reason}")
                result.kernels.setdefault(label, None)
                if label == experiment.accuracy.reference:
                    result.error = (f"accuracy reference {label} did not run, no output was checked: "
                                       + " ".join(reason.split()))  # one line: ORT's messages end in newlines
        result.write(out_dir)

    if experiment.profile is not None:
        with step(console, f"Profiling workbench kernels and ort_all nodes ({experiment.profile.runs} runs)"):
            result.profile = _profiles(experiment, canonical, inputs, target, place, out_dir)
        result.write(out_dir)

    reference = outputs.get(experiment.accuracy.reference)
    for label, produced in outputs.items():
        if reference is None:
            result.accuracy[label] = Accuracy(ok=None, note=f"reference {experiment.accuracy.reference} did not run")
        elif label != experiment.accuracy.reference:
            result.accuracy[label] = Accuracy(**compare(produced, reference, experiment.accuracy.rtol,
                                                        experiment.accuracy.atol))
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
