"""The sweep file: its schema, and its expansion into validated variants (orderings × grid × repeats).

A sweep file names a base experiment and what to vary:

    base: ../quickstart.yaml            # path relative to the sweep file, or an inline experiment mapping
    plugins: [my_passes]                # modules the workers import first (custom passes register themselves)
    sweep:
      orderings: {permutations: [fold_constant, fold_batchnorm, fuse], suffix: [dce], sample: 4, seed: 0}
      #  or orderings: ["fold_constant,fuse,dce", [fuse, dce]]
      grid: {model.inputs.x: [[1, 3, 32, 32], [1, 3, 64, 64]]}
      repeats: 1
      timeout_s: 300
      workers: 2
    output: runs/sweeps/orderings
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError

from workbench.config import Strict, _describe, apply_override, read_yaml, validate
from workbench.errors import UserError
from workbench.passes import pipeline_spec
from workbench.passes.pipeline_spec import PassSpec

SWEEP_MARKER = "sweep.json"
STORE_NAME = "results.sqlite"



class Permutations(Strict):
    """All orderings of `permutations`, each wrapped in `prefix` ... `suffix`; optionally a seeded sample."""

    permutations: list[Any] = Field(description="passes to permute (names or {name: {params}})")
    prefix: list[Any] | str = Field(default_factory=list)
    suffix: list[Any] | str = Field(default_factory=list)
    sample: PositiveInt | None = Field(default=None, description="keep N orderings drawn with `seed`")
    seed: int = 0


class SweepSection(Strict):
    orderings: list[Any] | Permutations | None = Field(
        default=None, description="pipeline texts / YAML lists, or {permutations: ...}; default: the base pipeline")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted.key: [values]")
    repeats: PositiveInt = 1
    timeout_s: PositiveFloat = 300
    workers: PositiveInt = 2
    executor: Literal["local", "ray"] = Field(
        default="local", description="local: a pool of worker processes; ray: one Ray task per task (extra `ray`)")
    ray_address: str | None = Field(default=None, description="Ray cluster to join (default: start a local one)")


class SweepFile(Strict):
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    base: str | dict[str, Any]
    plugins: list[str] = Field(default_factory=list, description="modules workers import before running")
    sweep: SweepSection = Field(default_factory=SweepSection)
    output: Path | None = None


@dataclass
class Variant:
    id: str
    position: int
    repeat: int
    pipeline_text: str
    grid: dict[str, Any]
    config: dict  # the validated experiment, JSON mode, with its output and results set

    @property
    def ir_key(self) -> str:
        return _ir_key(self.config)

    @property
    def setting_key(self) -> str:
        """Everything except the pipeline and where files go: two variants with equal IR and equal
        setting_key measure the same thing."""
        return _digest({k: v for k, v in self.config.items() if k not in ("pipeline", "output", "results")})


@dataclass
class Sweep:
    path: Path
    name: str
    output: Path
    plugins: list[str]
    section: SweepSection
    permuted: list[str]
    variants: list[Variant] = field(default_factory=list)

    @property
    def store_path(self) -> Path:
        return self.output / STORE_NAME


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _ir_key(config: dict) -> str:
    """Everything that determines the optimized IR (model, inputs, target, pipeline)."""
    return _digest({k: config[k] for k in ("model", "target", "pipeline")})


def _specs(value: Any, where: str) -> list[PassSpec]:
    try:
        return pipeline_spec.from_yaml(value)
    except (ValueError, UserError) as exc:
        raise UserError(f"{where}: {exc}") from exc


def expand_orderings(section: SweepSection, base_pipeline: Any, origin: str) -> list[list[PassSpec]]:
    """The list of pipelines the sweep tries, in a stable order."""
    orderings = section.orderings
    if orderings is None:
        return [_specs(base_pipeline or [], f"{origin}: base.pipeline")]
    if isinstance(orderings, list):
        return [_specs(entry, f"{origin}: sweep.orderings[{i}]") for i, entry in enumerate(orderings)]
    passes = _specs(orderings.permutations, f"{origin}: sweep.orderings.permutations")
    prefix = _specs(orderings.prefix, f"{origin}: sweep.orderings.prefix")
    suffix = _specs(orderings.suffix, f"{origin}: sweep.orderings.suffix")
    perms = [list(p) for p in itertools.permutations(passes)]
    if orderings.sample is not None and orderings.sample < len(perms):
        keep = sorted(random.Random(orderings.seed).sample(range(len(perms)), orderings.sample))
        perms = [perms[i] for i in keep]
    return [prefix + p + suffix for p in perms]


def _load_base(raw: SweepFile, path: Path) -> tuple[dict, str]:
    if isinstance(raw.base, dict):
        return copy.deepcopy(raw.base), f"{path}: base"
    base_path = Path(raw.base) if Path(raw.base).is_absolute() else path.parent / raw.base
    data = read_yaml(base_path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: base: {base_path} does not hold an experiment mapping")
    return data, str(base_path)


def load_sweep(path: Path, base_dir: Path | None = None) -> Sweep:
    """Read and validate a sweep file and expand it into validated variants (nothing runs)."""
    path = Path(path)
    base_dir = base_dir or Path.cwd()
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a sweep mapping (base, sweep, output), got {type(data).__name__}")
    try:
        raw = SweepFile.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(e, SweepFile) for e in exc.errors()]
        raise UserError(f"{path}: invalid sweep:\n  " + "\n  ".join(lines)) from exc
    base, base_origin = _load_base(raw, path)
    name = raw.name or path.stem
    output = raw.output or Path("runs") / "sweeps" / name
    output = (output if output.is_absolute() else base_dir / output).resolve()
    orderings = expand_orderings(raw.sweep, base.get("pipeline"), str(path))
    grid_keys = list(raw.sweep.grid)
    for key, values in raw.sweep.grid.items():
        if not values:
            raise UserError(f"the sweep expands to zero variants: {path}: sweep.grid.{key} is an empty list")
    if not orderings:
        raise UserError(f"the sweep expands to zero variants: {path}: sweep.orderings is empty"
                        + (" (sample/permutations gave nothing)" if isinstance(raw.sweep.orderings, Permutations) else ""))
    permuted = ([s.name for s in _specs(raw.sweep.orderings.permutations, str(path))]
                if isinstance(raw.sweep.orderings, Permutations) else [])
    sweep = Sweep(path, name, output, raw.plugins, raw.sweep, permuted)
    seen: set[str] = set()
    combos = list(itertools.product(*(raw.sweep.grid[k] for k in grid_keys)))
    for specs in orderings:
        text = pipeline_spec.to_text(specs)
        for combo in combos:
            grid = dict(zip(grid_keys, combo))
            variant_data = copy.deepcopy(base)
            variant_data["pipeline"] = [s.to_yaml() for s in specs]
            for key, value in grid.items():
                apply_override(variant_data, f"{key}={json.dumps(value)}")
            variant_data.pop("output", None)
            variant_data.pop("results", None)
            where = f"{path}: variant pipeline={text!r}" + (f" grid={grid}" if grid else "") + f" (base {base_origin})"
            experiment = validate(variant_data, where)
            digest = experiment.config_hash()
            for repeat in range(raw.sweep.repeats):
                vid = f"{digest[:12]}-r{repeat}"
                if vid in seen:
                    continue
                seen.add(vid)
                config = experiment.model_dump(mode="json")
                config["pipeline"] = [s.to_yaml() for s in experiment.pipeline]  # the form validate() reads
                config["output"] = str(output / "variants" / vid)
                config["results"] = str(output / STORE_NAME)
                sweep.variants.append(Variant(vid, len(sweep.variants), repeat,
                                              pipeline_spec.to_text(experiment.pipeline), grid, config))
    if not sweep.variants:
        raise UserError(f"the sweep expands to zero variants: {path}")
    return sweep


