"""Run a pipeline spec on a Relax module, recording per pass its wall time and op counts.

Each configured pass is wrapped in a module pass named `workbench.<name>`; a PassInstrument
times exactly those wrappers (TVM also reports every nested pass, which we ignore) and counts
Relax operator calls before and after, so a user sees what each pass changed.
A pass may also report figures (`report_analysis`) into its record's `analysis`: the analysis
passes do, and after every pass the recorder adds the kernel count and planned bytes of a lowered
copy of the module (see `workbench.passes.analysis.module_stats`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import tvm
import tvm_ffi

from workbench.atomic import atomic_write_text
from workbench.config.pipeline_spec import PassSpec
from workbench.errors import UserError
from workbench.passes.analysis import module_stats
from workbench.passes.figures import ANALYSIS, count_ops
from workbench.passes.library import lookup

# A UserError raised inside any Python pass crosses TVM's FFI (Sequential -> module_pass); registered here,
# where every pass runs, it comes back out of run_pipeline as a UserError instead of a RuntimeError.
tvm_ffi.register_error("UserError", UserError)

WRAPPER_PREFIX = "workbench."

@dataclass
class PassRecord:
    name: str
    params: dict
    seconds: float = 0.0
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    analysis: dict = field(default_factory=dict)


@tvm.instrument.pass_instrument
class PipelineRecorder:
    """Times the `workbench.*` wrapper passes and counts ops around each; optionally dumps IR after each."""

    def __init__(self, records: list[PassRecord], dump_dir: Path | None, stats: bool = True):
        self.records = records
        self.dump_dir = dump_dir
        self.stats = stats
        self._index = 0
        self._started = 0.0
        self._stats_of: tuple[int | None, dict] = (None, {})  # the last module's structural hash and stats

    def _stats(self, mod: tvm.IRModule) -> dict:
        """The module's stats; a pass that left the module as it was (a conv1d rewrite on a model without conv1d)
        gets the stats of the one before, not another lowering of the same module (most of a pipeline's time)."""
        key = tvm_ffi.structural_hash(mod)
        if key != self._stats_of[0]:
            self._stats_of = (key, module_stats(mod, tvm.target.Target.current(allow_none=True)))
        return dict(self._stats_of[1])

    def run_before_pass(self, mod: tvm.IRModule, info: tvm.transform.PassInfo) -> None:
        if info.name.startswith(WRAPPER_PREFIX):
            self.records[self._index].ops_before = count_ops(mod)
            self._started = time.perf_counter()

    def run_after_pass(self, mod: tvm.IRModule, info: tvm.transform.PassInfo) -> None:
        if not info.name.startswith(WRAPPER_PREFIX):
            return
        record = self.records[self._index]
        record.seconds = time.perf_counter() - self._started
        record.ops_after = count_ops(mod)
        if self.stats:
            record.analysis.update(self._stats(mod))
        if self.dump_dir is not None:
            atomic_write_text(self.dump_dir / f"{self._index + 1:02d}_{record.name}.py", mod.script())
        self._index += 1


def _wrap(name: str, inner: tvm.transform.Pass, record: PassRecord) -> tvm.transform.Pass:
    """A module pass named `workbench.<name>` that runs `inner` (so nested passes stay distinguishable)
    with `report_analysis` writing into `record.analysis`."""

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        token = ANALYSIS.set(record.analysis)
        try:
            return inner(mod)
        finally:
            ANALYSIS.reset(token)

    return tvm.transform.module_pass(run, opt_level=0, name=WRAPPER_PREFIX + name)


def build_passes(specs: list[PassSpec]) -> list[tuple[PassRecord, tvm.transform.Pass]]:
    """Validate every step against the registry before anything runs (errors name `pipeline[i]`)."""
    steps = []
    for i, spec in enumerate(specs):
        entry = lookup(spec, f"pipeline[{i}]")
        params, tvm_pass = entry.create(spec.params, f"pipeline[{i}] ({spec.name})")
        record = PassRecord(spec.name, params.model_dump(mode="json"))
        steps.append((record, _wrap(spec.name, tvm_pass, record)))
    return steps


def run_pipeline(mod: tvm.IRModule, specs: list[PassSpec], target: tvm.target.Target,
                 dump_dir: Path | None = None, stats: bool = True) -> tuple[tvm.IRModule, list[PassRecord]]:
    """Apply the pipeline under `target`; return the new module and one record per pass.

    `stats` adds to each record's `analysis` the kernel count and planned bytes after the pass."""
    steps = build_passes(specs)
    records = [record for record, _ in steps]
    if dump_dir is not None:
        atomic_write_text(dump_dir / "00_imported.py", mod.script())
    recorder = PipelineRecorder(records, dump_dir, stats)
    with target, tvm.transform.PassContext(opt_level=3, instruments=[recorder]):
        mod = tvm.transform.Sequential([p for _, p in steps], name="pipeline")(mod)
    return mod, records
