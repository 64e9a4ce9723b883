"""One model, side by side on this CPU: the workbench build of an experiment next to ONNX Runtime and IREE, in this
process, checked against ONNX Runtime, with every failure kept as the row's one-line reason.

A benchmark over many models must survive each one: a model that cannot be fetched, imported, optimized or built,
or whose outputs differ from ONNX Runtime's, becomes a row that says at which stage and why, and the next model
runs. A baseline that cannot run (IREE cannot lower an op) leaves its cell empty with its reason. The labels are
timed in interleaved rounds (`interleaved_medians`), so a load change on the machine hits all of them alike.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import tvm

from workbench.compile.build import Built
from workbench.compile.schedule_sources import ScheduleSources
from workbench.compile.targets import device_for
from workbench.config import Experiment
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.errors import one_line
from workbench.measure.factory import Bench, runner_for
from workbench.measure.profile import tvm_profile
from workbench.measure.timing import interleaved_medians
from workbench.models.accuracy import compare, runs_bf16
from workbench.record.corpus_table import Row
from workbench.runtime.launcher import install as install_launcher
from workbench.runtime.threads import target_threads
from workbench.stages import build, optimize, prepare

REFERENCE = "ort_none"


class StageFailed(Exception):
    """A stage failed; the message ("stage: reason") is what the row says."""


@dataclass
class _Stages:
    """Times each stage and logs one line for it (done or failed), so a long run reads well in a plain log."""

    name: str
    log: Callable[[str], None]

    @contextmanager
    def __call__(self, stage: str, detail: str = "") -> Iterator[None]:
        """Run the block as `stage` (the row's reason names it); `detail` only goes into the log line."""
        started = time.perf_counter()
        title = f"{stage}, {detail}" if detail else stage
        try:
            yield
        except Exception as exc:  # any failure of a model (TVM raises many types) is its row's reason
            reason = one_line(exc)
            self.log(f"{self.name}: {title} FAILED after {time.perf_counter() - started:.1f} s: {reason}")
            raise StageFailed(f"{stage}: {reason}") from exc
        self.log(f"{self.name}: {title} ({time.perf_counter() - started:.1f} s)")


def errors_text(accuracy: dict) -> str:
    """A comparison's errors in one line, or why it has none (outputs of another count or shape)."""
    if accuracy.get("note"):
        return accuracy["note"]
    return f"max abs err {accuracy['max_abs_err']:.1e}, max rel err {accuracy['max_rel_err']:.1e}"


def bench(experiment: Experiment, baselines: list[str], work_dir: Path, repeat: int, rounds: int,
          log: Callable[[str], None] = print, sources: ScheduleSources | None = None, profile_runs: int = 0) -> Row:
    """Build the experiment's model with its pipeline (untuned, or with `sources`' schedules), run it next to
    `baselines` (of config/baselines.py's SIDE_BY_SIDE) on the same seeded inputs, check it against ort_none within
    the experiment's tolerance (bf16's for a bf16 pipeline: models/accuracy.py), and time every label that runs.
    With `profile_runs`, the workbench build's kernels are then timed one by one over that many inferences (each
    kernel's share of the time in `row.kernel_shares`). Never raises for a model's failure: the row carries it."""
    tolerance = experiment.accuracy
    bf16 = runs_bf16(WORKBENCH_LABEL, experiment.pipeline)  # held to bf16's tolerance, not the entry's
    row, stage = Row(experiment.name, tolerance.rtol, tolerance.atol), _Stages(experiment.name, log)
    try:
        with stage("load"):  # and import: prepare() does both
            prepared = prepare(experiment, Path.cwd())
            target, model, inputs = prepared.target, prepared.canonical, prepared.inputs
        with stage("pipeline", f"{len(experiment.pipeline)} passes"):
            optimized = optimize(prepared, experiment.pipeline, stats=False)
        with stage("build"):
            built = build(optimized, target, sources)
            row.kernels = built.kernels
        on_cpu = Bench(model, inputs, target, work_dir)
        with stage("run"):
            workbench = runner_for(WORKBENCH_LABEL, on_cpu, built)
            ours = workbench.infer()
        runners = {WORKBENCH_LABEL: workbench}
        with stage(REFERENCE):
            reference = runner_for(REFERENCE, on_cpu).infer()
        row.accuracy = compare(ours, reference, tolerance.rtol, tolerance.atol, bf16)
        errors = errors_text(row.accuracy)
        if not row.accuracy["ok"]:
            row.mismatch = f"accuracy: {errors}, beyond " + (
                "the bf16 tolerance" if bf16 else f"rtol {tolerance.rtol:g} / atol {tolerance.atol:g}")
        log(f"{experiment.name}: vs {REFERENCE}: {'ok' if row.accuracy['ok'] else 'MISMATCH'}, {errors}")
        for label in baselines:
            try:
                with stage(label):
                    runner = runner_for(label, replace(on_cpu, work_dir=work_dir / label))
                    runner.infer()  # a baseline that fails at run time fails here, not in the middle of timing
                runners[label] = runner
            except StageFailed as exc:
                row.unavailable[label] = str(exc).removeprefix(f"{label}: ")
        with stage("timing", f"{len(runners)} labels, {rounds} rounds of {repeat} runs"):
            row.medians_ms = interleaved_medians(runners, repeat, rounds)
        if profile_runs:
            row.kernel_shares = _kernel_shares(built, target, inputs, work_dir, profile_runs, log)
    except StageFailed as exc:
        row.failure = str(exc)
    return row


def _kernel_shares(built: Built, target: tvm.target.Target, inputs: dict[str, np.ndarray], work_dir: Path, runs: int,
                   log: Callable[[str], None]) -> list[tuple[str, float]]:
    """Each kernel of the build and its share of the time, timed one by one over `runs` inferences as the timed
    runner runs them (the exported library, the workbench's launcher); empty, logged, where profiling fails: the
    row's timing stands. The library gets a name of its own: one loaded from a path already loaded in this process
    (an earlier model's) would be that one again."""
    handle, name = tempfile.mkstemp(prefix="profiled.", suffix=".so", dir=work_dir)
    os.close(handle)
    library = built.export(Path(name))
    try:
        module = tvm.runtime.load_module(str(library))
        install_launcher(library, target_threads(target))
        kernels = tvm_profile(module, inputs, device_for(target), 3, runs).kernels
    except Exception as exc:  # noqa: BLE001 - TVM raises many types; the profile is an extra
        log(f"profile: {one_line(exc)}")
        return []
    finally:
        library.unlink()
    return [(kernel.name, kernel.share) for kernel in kernels]
