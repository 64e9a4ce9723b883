"""A run's result, typed: what `workbench run` measured and checked, written to result.json in one place
(`RunResult.write`) and read back through one reader (`RunResult.read`, or `from_json` for a store row).

The JSON form is the one result.json has always had; fields this version does not know (a newer workbench's)
are kept as they are, and the optional sections are written only where a run has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workbench.atomic import atomic_write_json
from workbench.errors import UserError

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


class RunResult(_Open):
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
    canonicalize: dict[str, Any] | None = None  # shape nodes folded, and those that could not be (with why)
    passes: list[PassEntry] = Field(default_factory=list)
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    accuracy: dict[str, Accuracy] = Field(default_factory=dict)
    kernels: dict[str, int | None] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    # the sections a run has only where they apply
    cuda: dict[str, Any] | None = None  # label -> static CUDA kernel report
    tuning: dict[str, Any] | None = None  # the database applied: match, note, covered/fallback kernels
    tuning_trials: list[dict[str, Any]] | None = None  # per task, when the run tuned first
    tuning_time: dict[str, Any] | None = None  # minutes used, the budget, why tuning stopped (run tuned first)
    kernels_fell_back: list[str] | None = None  # kernels whose schedule failed to lower: built with plain loops
    profile: dict[str, Any] | None = None  # label -> per-kernel profile
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
        try:
            return cls.model_validate(data)
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
