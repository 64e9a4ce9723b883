"""The measuring stage: every label of a run (the workbench build, its baselines) run on the same inputs and timed by
the same protocol, `measure.rounds` interleaved rounds of `measure.repeat` runs.

Each label is set up and run once (its outputs are what accuracy compares), then timed (measure/timing.py:
`interleaved`); a baseline that cannot run, at set-up or while timed, is kept with its reason and the others go on.
`done` is called after each label's step, so the conductor can write result.json each time and a crash loses at
most the step in flight.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm

from workbench.compile.build import BASELINE_BUILDS, Built
from workbench.compile.build_cache import BuildCache
from workbench.compile.cuda_report import kernel_report
from workbench.compile.targets import device_for, host_cpu, is_cuda, missing_features
from workbench.config import Experiment, MeasureConfig
from workbench.config.baselines import WORKBENCH_LABEL, runs_on_tvm, runtime_of
from workbench.errors import BaselineUnavailable
from workbench.measure.factory import Bench, runner_for
from workbench.measure.ort_quant import ort_int8_model
from workbench.measure.runners import Runner
from workbench.measure.timing import Timing, interleaved
from workbench.runtime.launcher import install as install_launcher
from workbench.runtime.rpc import connect
from workbench.runtime.threads import target_threads
from workbench.stages import Prepared

WORKBENCH_LIBRARY = "workbench.so"  # the workbench build's exported library, in the run folder


@dataclass
class Place:
    """Where TVM builds are measured: here, in an RPC session, or nowhere (`unavailable` says why)."""

    session: object | None = None
    unavailable: str | None = None


def place_for(experiment: Experiment, target: tvm.target.Target) -> Place:
    """Connect to the RPC tracker first (a wrong address fails in seconds), or check for a local device."""
    if experiment.measure.rpc is not None:
        return Place(session=connect(experiment.measure.rpc))
    if is_cuda(target) and not device_for(target).exist:
        return Place(unavailable="not measured: no CUDA device (measure on a GPU host with measure.rpc)")
    missing = missing_features(target) if target.kind.name == "llvm" else []
    if missing:
        return Place(unavailable=f"not measured: built for {target.attrs.get('mcpu')}, whose {', '.join(missing)} "
                                 f"this CPU ({host_cpu()}) lacks (measure on such a CPU with measure.rpc)")
    return Place()


@dataclass
class LabelMeasured:
    """One label of a run: its kernel count, outputs and timing once it ran, or why it did not (`failure`)."""

    label: str
    kernels: int | None = None
    cuda: dict | None = None  # the static CUDA kernel report of a TVM build for a cuda target
    outputs: list[np.ndarray] | None = None
    timing: Timing | None = None
    note: str | None = None  # not measured (no device), or a remark on the figure
    failure: str | None = None  # it could not run: the reason


@dataclass
class Measured:
    """Every label of a run, in order."""

    labels: dict[str, LabelMeasured]

    def outputs(self) -> dict[str, list[np.ndarray]]:
        return {label: m.outputs for label, m in self.labels.items() if m.outputs is not None}


def labels_of(experiment: Experiment, target: tvm.target.Target) -> list[str]:
    """The workbench build, the configured baselines, and ONNX Runtime on CUDA where the target is a GPU."""
    return [WORKBENCH_LABEL, *experiment.baselines, *(["ort_cuda"] if is_cuda(target) else [])]


def _note(experiment: Experiment, label: str, target: tvm.target.Target) -> str | None:
    """ONNX Runtime's CPU labels on a GPU run say where they ran; fp16 on a CPU without fp16 arithmetic says that
    every op converts to fp32 and back."""
    from tvm.target import codegen

    if is_cuda(target) and runtime_of(label) in ("onnxruntime", "openvino") and label != "ort_cuda":
        return f"{'OpenVINO' if runtime_of(label) == 'openvino' else 'ONNX Runtime'} on the CPU"
    if label != WORKBENCH_LABEL or target.kind.name != "llvm" or not any(s.name == "fp16" for s in experiment.pipeline) \
            or codegen.target_has_features("avx512fp16", target):
        return None
    return "fp16 on a CPU without native fp16 arithmetic (no avx512fp16): converted around each op, expect slower"


def _set_up(measured: LabelMeasured, experiment: Experiment, prepared: Prepared, built: Built, place: Place,
            bench: Bench, cache: BuildCache | None, beside: dict[str, Built]) -> Runner | None:
    """Build (a TVM baseline), start and run the label once, noting what each step gave in `measured`; no runner
    for a TVM label where no device is (its note says why)."""
    label = measured.label
    tvm_build = None
    if label == WORKBENCH_LABEL:
        tvm_build = built
    elif label in beside:
        tvm_build = beside[label]
    elif runs_on_tvm(label):
        def make() -> Built:
            return BASELINE_BUILDS[label](prepared.imported, prepared.target)

        tvm_build = cache.built(label, prepared.imported, prepared.target, make) if cache is not None else make()
    if tvm_build is not None:
        measured.kernels = tvm_build.kernels
        if is_cuda(prepared.target):
            measured.cuda = kernel_report(label, tvm_build, experiment.target.arch, bench.work_dir / "cuda")
        if place.unavailable:
            measured.note = place.unavailable
            return None
    library = bench.work_dir / WORKBENCH_LIBRARY if label == WORKBENCH_LABEL else None
    model = ort_int8_model(experiment, prepared.canonical, bench.work_dir) if label == "ort_int8" else None
    runner = runner_for(label, bench, tvm_build, library, model)
    measured.outputs = runner.infer()  # a runtime that fails at run time fails here, not in the middle of timing
    measured.kernels = runner.kernels
    return runner


def _failed(measured: LabelMeasured, exc: Exception) -> None:
    """A baseline that could not run: its reason, in one line; the workbench build must run."""
    if measured.label == WORKBENCH_LABEL:
        raise exc
    reason = str(exc) if isinstance(exc, BaselineUnavailable) else f"{exc.__class__.__name__}: {exc}"
    measured.outputs, measured.failure = None, " ".join(reason.split())


Step = Callable[[str], AbstractContextManager]  # a stage's title -> a context that shows its progress


def measure(experiment: Experiment, prepared: Prepared, built: Built, place: Place, out_dir: Path,
            cache: BuildCache | None = None, step: Step = lambda _: nullcontext(),
            done: Callable[[LabelMeasured], None] = lambda _: None, beside: dict[str, Built] | None = None
            ) -> Measured:
    """Every label set up and run once, then timed: with one round each label right after its set-up (its runtime
    released before the next), with more all of them in interleaved rounds. `beside` adds other TVM builds of the
    model under their labels. The workbench build (its library already exported to `out_dir`) must run; a baseline
    that cannot, at set-up or while timed, keeps its reason and the others go on. `done` is called after each label
    changes."""
    protocol = experiment.measure
    beside = beside or {}
    bench = Bench(prepared.canonical, prepared.inputs, prepared.target, out_dir, place.session)
    labels = {label: LabelMeasured(label, note=_note(experiment, label, prepared.target))
              for label in [*labels_of(experiment, prepared.target), *beside]}
    runners: dict[str, Runner] = {}
    for label, measured in labels.items():
        with step(f"Running {label}"):
            try:
                runner = _set_up(measured, experiment, prepared, built, place, bench, cache, beside)
            except Exception as exc:  # a baseline that cannot run is reported, the run goes on
                _failed(measured, exc)
                runner = None
        if label in beside:  # another pipeline's build: its own run checks its outputs, with its own tolerance
            measured.outputs = None
        done(measured)
        if runner is not None:
            runners[label] = runner
        if protocol.rounds == 1 and runner is not None:
            _time(labels, runners, protocol, step, done)
            runners.clear()
    if runners:
        _time(labels, runners, protocol, step, done)
    return Measured(labels)


def _time(labels: dict[str, LabelMeasured], runners: dict[str, Runner], protocol: MeasureConfig, step: Step,
          done: Callable[[LabelMeasured], None]) -> None:
    """Time `runners` by the protocol; each label's timing (or the failure that stopped it) into `labels`."""
    failures: dict[str, Exception] = {}
    title = f"Timing {', '.join(runners)}" + (f" ({protocol.rounds} interleaved rounds)" if protocol.rounds > 1 else "")
    with step(title):
        timings = interleaved(runners, protocol.warmup, protocol.repeat, protocol.rounds, failures,
                              protocol.round_seconds)
    for label in runners:
        if label in failures:
            _failed(labels[label], failures[label])
        else:
            labels[label].timing = timings[label]
        done(labels[label])


def profiles(experiment: Experiment, prepared: Prepared, place: Place, out_dir: Path) -> dict[str, dict]:
    """Per-kernel profiles of the workbench build (measured where it runs locally) and of ort_all, side by side."""
    from workbench.measure.profile import ort_profile, tvm_profile

    config = experiment.profile
    ort = ort_profile(prepared.canonical, prepared.inputs, out_dir, config.warmup, config.runs).as_dict(config.top)
    if place.session is not None or place.unavailable:
        return {"ort_all": ort}
    module = tvm.runtime.load_module(str(out_dir / WORKBENCH_LIBRARY))
    if prepared.target.kind.name == "llvm":  # as the timed runner runs it
        install_launcher(out_dir / WORKBENCH_LIBRARY, target_threads(prepared.target))
    ours = tvm_profile(module, prepared.inputs, device_for(prepared.target), config.warmup, config.runs)
    return {WORKBENCH_LABEL: ours.as_dict(config.top), "ort_all": ort}
