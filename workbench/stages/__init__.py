"""The stages of one run, each a function from one typed object to the next:

    Experiment ─ prepare() ─► Prepared ─ optimize() ─► Optimized ─ build() ─► Built (compile/build.py)
      ─ measure() ─► Measured (stages/measuring.py) ─ note_*() / finish() ─► RunResult (stages/recording.py)

`workbench run` (experiment.py) composes them; `workbench tune` (stages/tuning.py), the sweep's workers,
the corpus benchmark (stages/side_by_side.py) and the scripts call the same functions, so a model reaches every
one of them the same way: canonicalized, imported, the pipeline run under the target. A caller that already has
a stage's result (the sweep keeps the optimized modules it hashed) passes it on instead of running it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import tvm

from workbench.compile.build import Built, build_lowered
from workbench.compile.build_cache import BuildCache
from workbench.compile.schedule_sources import ScheduleSources
from workbench.compile.targets import make_target
from workbench.config import Experiment
from workbench.config.pipeline_spec import PassSpec
from workbench.models.canonicalize import FoldReport
from workbench.models.importer import import_to_relax
from workbench.models.inputs import canonical_model, make_inputs
from workbench.passes.pipeline import PassRecord, run_pipeline


@dataclass(frozen=True)
class Prepared:
    """An experiment's model, ready for a pipeline: canonical ONNX, seeded inputs, the Relax import. It does not
    hold the pipeline: one prepared model serves every pipeline of a sweep."""

    target: tvm.target.Target
    canonical: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    imported: tvm.IRModule
    folding: FoldReport  # what canonicalization folded, and the shape nodes it could not
    converted_from: int | None = None  # the opset the model was exported at, where canonicalize raised it


@dataclass(frozen=True)
class Optimized:
    """The imported model after the experiment's pipeline, with one record per pass."""

    module: tvm.IRModule
    records: list[PassRecord]


def prepare(experiment: Experiment, base_dir: Path, target: tvm.target.Target | None = None) -> Prepared:
    """Load the model (paths relative to `base_dir`), freeze and fold it, draw its inputs, import it to Relax."""
    target = target if target is not None else make_target(experiment.target)
    canonical = canonical_model(experiment.model, base_dir)
    inputs = make_inputs(canonical.model, experiment.model, experiment.seed, base_dir)
    return Prepared(target, canonical.model, inputs, import_to_relax(canonical.model), canonical.folding,
                    canonical.converted_from)


def optimize(prepared: Prepared, pipeline: list[PassSpec], dump_dir: Path | None = None,
             stats: bool = True) -> Optimized:
    """Run `pipeline` on the imported model (`stats`: kernels and planned bytes after each pass)."""
    module, records = run_pipeline(prepared.imported, pipeline, prepared.target, dump_dir, stats)
    return Optimized(module, records)


def build(optimized: Optimized, target: tvm.target.Target, sources: ScheduleSources | None = None,
          layout_rewrite: bool = False, cache: BuildCache | None = None, library: Path | None = None) -> Built:
    """The workbench build of the optimized module, with the tuned schedules of `sources`' databases where they have
    them (each kernel's source noted), exported to `library` where given. With `cache`, the build of an equal
    module with the databases as they are now (`sources.state()`: tuning may have grown one since) is reused and
    its library copied, not emitted again."""
    database = sources.database if sources is not None else None
    source_of = sources.source_of if sources is not None else None
    state = (sources.state(), layout_rewrite) if sources is not None else ()

    def make() -> Built:
        return build_lowered(optimized.module, target, database, layout_rewrite, source_of)

    if cache is None:
        built = make()
        if library is not None:
            built.export(library)
        return built
    return cache.built("workbench", optimized.module, target, make, state, library)


def optimized_module(experiment: Experiment, base_dir: Path, target: tvm.target.Target) -> tvm.IRModule:
    """The experiment's model as its workbench build sees it (prepared, its pipeline run without per-pass
    figures): what tuning extracts its tasks from."""
    return optimize(prepare(experiment, base_dir, target), experiment.pipeline, stats=False).module
