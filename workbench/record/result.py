"""A run's result, typed: what `workbench run` measured and checked, written to result.json in one place
(`RunResult.write`) and read back through one reader (`RunResult.read`, or `from_json` for a store row).

The JSON form is the one result.json has always had; fields this version does not know (a newer workbench's)
are kept as they are, and the optional sections are written only where a run has them. Every section the
workbench reads is a model here: the producers hand their dicts (`as_dict()`) and they are validated when the
result is made or a field assigned (`validate_assignment`), so readers use attributes, never `.get()` chains. A
result.json an older workbench wrote is brought to this form by `record/migrate.py: migrate` before it is
validated, so the readers know one shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workbench.atomic import atomic_write_json
from workbench.errors import UserError
from workbench.record.migrate import migrate

RESULT_FILE = "result.json"


class _Open(BaseModel):
    """A section of result.json: typed where the workbench reads it, other keys kept as written."""

    model_config = ConfigDict(extra="allow")


class Measurement(_Open):
    """One label's latency (ms) over its timed repeats, or why it was not measured (`note`, no median)."""

    median_ms: float | None = None
    p90_ms: float | None = None
    repeats: int = 0
    note: str | None = None


class Accuracy(_Open):
    """One label's outputs against the reference (models/accuracy.py `compare`)."""

    ok: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    cosine: float | None = None
    top1_agreement: float | None = None
    note: str | None = None


class PassEntry(_Open):
    """One pipeline step: its wall time, Relax op counts before and after, and what it reported."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    seconds: float | None = None
    ops_before: dict[str, int] = Field(default_factory=dict)
    ops_after: dict[str, int] = Field(default_factory=dict)
    analysis: dict[str, Any] = Field(default_factory=dict)


class TuningSource(_Open):
    """One database a build read and the kernels it supplied (compile/schedule_sources.py `SourceCount.as_dict`)."""

    name: str  # how the run names it: its root folder (`quickstart`), or `parent/name` for a database given directly
    match: Literal["exact", "shared", "closest"]
    path: str
    tuned_for: str | None = None  # its target key (None: not recorded)
    kernels: list[str] = Field(default_factory=list)


class TuningSummary(_Open):
    """result.json's `tuning`: the own database's choice, coverage and the kernels per source
    (compile/schedule_sources.py `ScheduleSources.record`). `covered`, `fallback` and `sources` are None where no
    database was applied (the note says why)."""

    root: str | None = None  # the configured root (one folder per target key under it)
    path: str | None = None  # the own database applied; None: none fits this target
    tuned_for: str | None = None  # the own database's target key; None: not recorded
    match: Literal["exact", "closest", "none"]
    note: str | None = None  # why the own database is another target's, or missing
    layout_rewrite: bool = False  # weights pre-packed by MetaSchedule's layout rewriting
    covered: list[str] | None = None  # kernels a database scheduled
    fallback: list[str] | None = None  # kernels that kept their default schedule
    sources: list[TuningSource] | None = None  # every database the build read, in lookup order


class TuningTask(_Open):
    """One tuning task of a run that tuned first (compile/tasks.py `TaskResult.as_dict`)."""

    name: str
    weight: int = 1  # uses in the model
    budget: int = 0  # trials it may take
    trials_before: int = 0  # found in the database
    trials_run: int = 0  # measured in this run
    exhausted: bool = False  # its search space is used up
    best_us: float | None = None
    rejected: int = 0  # best records dropped for computing wrong outputs (compile/verify.py)
    seeded_from: str | None = None  # the database whose schedule it started from
    profiled_us: float | None = None  # its kernels' time in the build profiled before tuning
    failed: str | None = None  # why its search stopped with an error


class TuningTime(_Open):
    """How long a run tuned first and why it stopped (compile/tuning_clock.py `TuningClock.as_dict`)."""

    minutes_used: float = 0.0
    minutes_budget: float | None = None  # None: no time limit
    stopped: Literal["done", "minutes"] | None = None
    reason: str | None = None


class CudaKernel(_Open):
    """One PTX entry's static figures (compile/cuda_report.py `parse_kernels`); None: ptxas did not say."""

    threads_per_block: int | None = None
    registers: int | None = None
    shared_bytes: int = 0


class CudaReport(_Open):
    """One CUDA build's static kernel report (compile/cuda_report.py `kernel_report`)."""

    arch: str
    kernels: int  # PTX entries
    launches: int  # kernel launches per inference
    intermediate_bytes: int  # tensors one kernel writes for another (graph outputs excluded)
    per_kernel: dict[str, CudaKernel] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)  # cu, ptx: file names under the run's cuda/


class ProfiledKernel(_Open):
    """One kernel (or ONNX Runtime node) of a profile: mean µs and calls per inference, share of the total."""

    name: str
    us: float
    calls: int = 0
    share: float = 0.0


class ProfileRest(_Open):
    """The kernels a profile does not list one by one (past its `top`), summed."""

    kernels: int = 0
    us: float = 0.0
    share: float = 0.0


class Profile(_Open):
    """One label's per-kernel profile (measure/profile.py `Profile.as_dict(top)`): where its inference time goes."""

    label: str
    runs: int
    total_us: float  # the kernels' summed time per inference
    instrument_us: float = 0.0  # per call, already taken off each kernel's figure (0 where none was)
    plain_us: float | None = None  # median latency of uninstrumented runs, where measured
    kernels: list[ProfiledKernel] = Field(default_factory=list)  # the top ones, largest first
    other: ProfileRest = Field(default_factory=ProfileRest)


class UnfoldedNode(_Open):
    """A shape node canonicalization could not fold, and why (models/canonicalize.py `Unfolded`)."""

    node: str
    op: str
    opset: int
    reason: str


class Canonicalization(_Open):
    """What canonicalization did (models/canonicalize.py `FoldReport.as_dict` and the opset it converted from)."""

    folded: int = 0  # shape nodes that became constants
    unfolded: list[UnfoldedNode] = Field(default_factory=list)
    converted_from_opset: int | None = None  # the model's opset where its old op forms were converted


class RunResult(_Open):
    """A run's result, as result.json holds it. Fields are validated when assigned too, so a producer's dict
    (`result.tuning = sources.record(...)`) becomes its model; a key assigned in place in a section's dict
    (`result.cuda[label] = ...`) is not validated: assign the model (`CudaReport.model_validate(...)`) there."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str
    status: Literal["running", "complete", "failed"] = "running"
    created: str | None = None
    model: dict[str, Any] = Field(default_factory=dict)  # source, inputs (name -> shape, dtype), cache_dir
    target: dict[str, Any] | str | None = None  # as configured
    target_resolved: dict[str, Any] | None = None  # key, host CPU, features
    threads: int | None = None  # every runtime's kernels ran on this many threads
    pipeline: list[Any] = Field(default_factory=list)
    pipeline_text: str = ""
    reference: str | None = None
    canonicalize: Canonicalization | None = None  # shape nodes folded, and those that could not be (with why)
    passes: list[PassEntry] = Field(default_factory=list)
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    accuracy: dict[str, Accuracy] = Field(default_factory=dict)
    kernels: dict[str, int | None] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    # the sections a run has only where they apply
    cuda: dict[str, CudaReport] | None = None  # label -> static CUDA kernel report
    tuning: TuningSummary | None = None  # the databases applied: match, note, covered/fallback kernels, sources
    tuning_trials: list[TuningTask] | None = None  # per task, when the run tuned first
    tuning_time: TuningTime | None = None  # minutes used, the budget, why tuning stopped (run tuned first)
    kernels_fell_back: list[str] | None = None  # kernels whose schedule failed to lower: built with plain loops
    profile: dict[str, Profile] | None = None  # label -> per-kernel profile
    error: str | None = None  # why the run failed
    run_id: int | None = None  # its row in the results store, once stored

    def to_json(self) -> dict[str, Any]:
        """The result.json form: the optional sections only where set (the conductor sets the others always)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def write(self, out_dir: Path) -> Path:
        """Write result.json into `out_dir` atomically (a run rewrites it after each label); return its path."""
        return atomic_write_json(Path(out_dir) / RESULT_FILE, self.to_json())

    @classmethod
    def from_json(cls, data: Any, where: str) -> RunResult:
        """A result.json form (a file's, a store row's), an older workbench's brought up to date first (`migrate`);
        a UserError names the first field that is missing or wrong."""
        try:
            return cls.model_validate(migrate(data) if isinstance(data, dict) else data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise UserError(f"{where}: not a workbench result ({'.'.join(map(str, first['loc']))}: "
                            f"{first['msg']})") from exc

    @classmethod
    def read(cls, path: Path) -> RunResult:
        """A run folder's result.json (or the file itself); a UserError names what is missing or wrong."""
        path = Path(path)
        path = path / RESULT_FILE if path.is_dir() else path
        if not path.is_file():
            raise UserError(f"{path}: no {RESULT_FILE} here; give a run folder written by `workbench run`")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not a valid {RESULT_FILE} ({exc})") from exc
        return cls.from_json(data, str(path))
