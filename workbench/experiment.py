"""Run one experiment end to end: model -> canonical ONNX -> Relax -> pipeline -> [tune] -> build -> measure vs
baselines -> result.json, report.md, the store row.

The conductor only composes the stages (stages/__init__.py, stages/tuning.py, stages/measuring.py,
stages/recording.py). Every stage result is kept under the output folder (canonical model, inputs, IR dumps, the
exported library, ORT's optimized model, result.json, report); result.json is rewritten after each step, so a
crash loses at most the step in flight.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from workbench.compile.build import Built
from workbench.compile.build_cache import BuildCache
from workbench.compile.schedule_sources import schedule_sources
from workbench.compile.targets import make_target, target_key
from workbench.config import Experiment
from workbench.record.result import RunResult
from workbench.stages import Optimized, Prepared, build, optimize, prepare, recording
from workbench.stages.measuring import WORKBENCH_LIBRARY, Step, measure, place_for, profiles
from workbench.stages.tuning import tune_optimized


def stepper(console: Console) -> Step:
    """A context manager for a stage: a spinner while it runs, then one line with its duration."""
    @contextmanager
    def step(title: str) -> Iterator[None]:
        started = time.perf_counter()
        with console.status(f"{title}…"):
            yield
        console.print(f"[green]✓[/] {title} [dim]({time.perf_counter() - started:.1f} s)[/]")
    return step


def run_experiment(experiment: Experiment, base_dir: Path, console: Console | None = None,
                   dump_ir: Path | None = None, store: bool = True, builds: BuildCache | None = None,
                   config_path: Path | None = None, prepared: Prepared | None = None,
                   optimized: Optimized | None = None, beside: dict[str, Built] | None = None) -> RunResult:
    """Run the experiment, write its files and (with `store`) its store row; return its RunResult. A baseline that
    cannot run is reported and the run goes on; when it is the accuracy reference, every label is still measured and
    written, then ReferenceFailed (carrying the result) is raised. A sweep passes store=False, one `builds` cache for
    a worker's runs and the `prepared`/`optimized` models it holds, and `beside` other TVM builds of the model to
    time with it under their labels (a study's full pipeline); `config_path` only shows in a tuning hint."""
    console = console or Console(stderr=True)
    step = stepper(console)
    out_dir = recording.writable_output(experiment.output_dir(base_dir))
    target = prepared.target if prepared is not None else make_target(experiment.target)
    place, result = place_for(experiment, target), recording.started(experiment, target)
    tunes, hint = experiment.tuning is not None and experiment.tuning.tune, f"workbench tune {config_path or 'CONFIG'}"
    sources = None if tunes else schedule_sources(experiment, base_dir, target, hint)  # missing: fail before work
    if prepared is None:
        with step(f"Loading {experiment.model.source} and importing it to Relax"):
            prepared = prepare(experiment, base_dir, target)
    recording.note_prepared(result, prepared, out_dir, console)
    if optimized is None:
        with step(f"Running pipeline [bold]{result.pipeline_text or '(empty)'}[/]"):
            optimized = optimize(prepared, experiment.pipeline, dump_ir)
    recording.note_optimized(result, optimized)
    if tunes:
        recording.note_tuned(result, tune_optimized(optimized.module, target, experiment, base_dir, console,
                                                 prepared.inputs), console)
        sources = schedule_sources(experiment, base_dir, target, hint)
    tuned = " with tuned schedules" if sources is not None and sources.databases else ""
    with step(f"Building workbench for {target_key(target)}{tuned}"):
        built = build(optimized, target, sources, experiment.layout_rewrite, builds, out_dir / WORKBENCH_LIBRARY)
    recording.note_built(result, built, sources, experiment.layout_rewrite, console)
    measured = measure(experiment, prepared, built, place, out_dir, builds, step,
                       done=lambda label: recording.note_label(result, label, out_dir), beside=beside)
    if experiment.profile is not None:
        with step(f"Profiling workbench kernels and ort_all nodes ({experiment.profile.runs} runs)"):
            result.profile = profiles(experiment, prepared, place, out_dir)
    recording.note_accuracy(result, measured, experiment)
    return recording.finish(result, experiment, base_dir, out_dir, store, console)
