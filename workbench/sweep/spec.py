"""The sweep file: its schema, and its expansion into validated variants (orderings × grid × repeats).

A sweep file names a base experiment and what to vary:

    base: ../quickstart.yaml            # path relative to the sweep file, or an inline experiment mapping
    plugins: [my_passes]                # modules the workers import first (custom passes register themselves)
    sweep:
      orderings: {permutations: [fold_constant, fold_batchnorm, fuse], suffix: [dce], sample: 4, seed: 0}
      #  or orderings: ["fold_constant,fuse,dce", [fuse, dce]]
      #  or orderings: {search: greedy, passes: [fold_constant, fuse, ...], max_length: 3, budget: 12}
      grid: {model.inputs.x: [[1, 3, 32, 32], [1, 3, 64, 64]]}
      repeats: 1
      timeout_s: 300
      workers: 2
      tuning: {trials_per_task: 16}     # tune the union of every class's kernels once; measure tuned and untuned
    output: runs/sweeps/orderings

A tuned sweep has two variants per (pipeline, grid, repeat): one built untuned, one with the sweep's database.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, PositiveFloat, PositiveInt, Tag, ValidationError

from workbench.config import (
    RESULTS_STORE,
    Strict,
    TuningConfig,
    apply_override,
    describe_error,
    pipeline_spec,
    read_yaml,
    validate,
)
from workbench.config.pipeline_spec import PassSpec
from workbench.errors import UserError
from workbench.sweep.study import FULL, Ablation, ModelCase, ModelsField, ablation_pipelines, model_cases

SWEEP_MARKER = "sweep.json"
DATABASE_DEFAULT = "schedules"  # a tuned sweep's database root inside its output folder, unless configured


class Permutations(Strict):
    """All orderings of `permutations`, each wrapped in `prefix` ... `suffix`; optionally a seeded sample."""

    permutations: list[Any] = Field(description="passes to permute (names or {name: {params}})")
    prefix: list[Any] | str = Field(default_factory=list)
    suffix: list[Any] | str = Field(default_factory=list)
    sample: PositiveInt | None = Field(default=None, description="keep N orderings drawn with `seed`")
    seed: int = 0


class Search(Strict):
    """Build pass sequences step by step from `passes` (each used at most once), measuring each new candidate."""

    search: Literal["greedy", "beam", "random", "local"] = Field(
        description="greedy: extend the best sequence by one pass while that helps; beam: keep the best "
                    "`beam_width` sequences per step; random: seeded random sequences; local: start from `passes` "
                    "in their order and move to the fastest neighbour (two adjacent passes swapped, or one dropped) "
                    "while it is faster")
    passes: list[Any] | str = Field(description="the passes a sequence is built from (names or {name: {params}}; "
                                                "a named pipeline stands for its passes); `local` starts from them")
    max_length: PositiveInt | None = Field(default=None, description="longest sequence (default: all passes)")
    budget: PositiveInt = Field(default=16, description="distinct optimized IRs measured, at most")
    minutes: PositiveFloat | None = Field(default=None, description="wall-clock budget of the whole search: no new "
                                                                    "IR is measured once it is spent")
    beam_width: PositiveInt = 3
    prefix: list[Any] | str = Field(default_factory=list)
    suffix: list[Any] | str = Field(default_factory=list)
    seed: int = 0


def _orderings_kind(value: Any) -> str | None:
    """Which form `orderings` has: validating it reads YAML data, serializing it the model itself."""
    if isinstance(value, (list, str)):
        return "list"
    if isinstance(value, dict):
        return "search" if "search" in value else "permutations"
    return {Permutations: "permutations", Search: "search"}.get(type(value))


Orderings = Annotated[Annotated[list[Any], Tag("list")] | Annotated[Permutations, Tag("permutations")]
                      | Annotated[Search, Tag("search")],
                      Discriminator(_orderings_kind, custom_error_type="orderings_form",
                                    custom_error_message="expected a list of pipelines, {permutations: [...]} or "
                                                         "{search: greedy|beam|random, passes: [...]}")]
_ORDERING_TAGS = ("list", "permutations", "search")


class SweepSection(Strict):
    orderings: Orderings | None = Field(
        default=None, description="pipeline texts / YAML lists, {permutations: ...} or {search: ...}; "
                                  "default: the base pipeline")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted.key: [values]")
    models: ModelsField | None = Field(
        default=None, description="a study over models: `corpus`, corpus entry names, or {name, source, inputs} "
                                  "mappings; each replaces the base's model (sweep/study.py)")
    ablation: Ablation | None = Field(
        default=None, description="variants of a pipeline (`default` or text): whole, each step dropped, each step "
                                  "at its parameter alternatives; instead of `orderings`")
    repeats: PositiveInt = 1
    timeout_s: PositiveFloat = 300
    workers: PositiveInt = 2
    executor: Literal["local", "ray"] = Field(
        default="local", description="local: a pool of worker processes; ray: one Ray task per task (extra `ray`)")
    ray_address: str | None = Field(default=None, description="Ray cluster to join (default: start a local one)")
    tuning: TuningConfig | None = Field(
        default=None, description="tune the classes' kernels (deduplicated) into one database before measuring; "
                                  "default: the base experiment's tuning section, if any")


class SweepFile(Strict):
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    base: str | dict[str, Any]
    plugins: list[str] = Field(default_factory=list, description="modules workers import before running")
    sweep: SweepSection = Field(default_factory=SweepSection)
    output: Path | None = None


@dataclass
class Variant:
    id: str
    position: int  # -1 until the variant is added to its sweep (search candidates are made before)
    repeat: int
    pipeline_text: str
    grid: dict[str, Any]
    config: dict  # the validated experiment, JSON mode, with its output and results set
    tuned: bool = False
    ablation: str | None = None  # its label in an ablation (sweep/study.py): `full`, `-fuse`, `fuse(opt_level=1)`
    reference: dict | None = None  # an ablation variant's full pipeline (same model, grid, tuning, repeat): its
    # config, built and timed beside the variant in one process so their ratio is free of process-to-process noise

    @property
    def ir_key(self) -> str:
        return ir_key(self.config)

    @property
    def setting_key(self) -> str:
        """Everything except the pipeline and where files go: two variants with equal IR and equal
        setting_key measure the same thing (a tuned and an untuned variant differ in `tuning`)."""
        return short_digest({k: v for k, v in self.config.items() if k not in ("pipeline", "output", "results")})


@dataclass
class Sweep:
    path: Path
    name: str
    output: Path
    plugins: list[str]
    section: SweepSection
    permuted: list[str]
    base: dict = field(default_factory=dict)
    base_origin: str = ""
    tuning: TuningConfig | None = None
    database_root: Path | None = None  # where the tuned variants' database lives (one folder per target inside)
    models: list[ModelCase] = field(default_factory=list)  # a study's models (sweep.models), in order
    variants: list[Variant] = field(default_factory=list)

    @property
    def store_path(self) -> Path:
        return self.output / RESULTS_STORE

    @property
    def search(self) -> Search | None:
        return self.section.orderings if isinstance(self.section.orderings, Search) else None

    def make_variants(self, specs: list[PassSpec], ablation: str | None = None,
                      case: ModelCase | None = None) -> list[Variant]:
        """The variants of one pipeline (of one study model, `case`): grid × repeats (× untuned, tuned);
        validated, not yet added. A study's model is part of each variant's grid (`model: NAME`), as the setting it
        was measured in."""
        grid_keys = list(self.section.grid)
        made = []
        text = pipeline_spec.to_text(specs)
        for combo in itertools.product(*(self.section.grid[k] for k in grid_keys)):
            grid = ({"model": case.name} if case else {}) | dict(zip(grid_keys, combo))
            for tuned in ((False, True) if self.tuning is not None else (False,)):
                data = case.apply(copy.deepcopy(self.base)) if case else copy.deepcopy(self.base)
                data["pipeline"] = [s.to_yaml() for s in specs]
                for key in grid_keys:
                    apply_override(data, f"{key}={json.dumps(grid[key])}")
                data.pop("output", None)
                data.pop("results", None)
                data.pop("tuning", None)
                if tuned:
                    data["tuning"] = {"database": str(self.database_root), "layout_rewrite": self.tuning.layout_rewrite}
                where = (f"{self.path}: variant pipeline={text!r}" + (f" grid={grid}" if grid else "")
                         + f" (base {self.base_origin})")
                experiment = validate(data, where)
                digest = experiment.config_hash()
                for repeat in range(self.section.repeats):
                    vid = f"{digest[:12]}-r{repeat}"
                    config = experiment.model_dump(mode="json")
                    config["pipeline"] = [s.to_yaml() for s in experiment.pipeline]  # the form validate() reads
                    config["output"] = str(self.output / "variants" / vid)
                    config["results"] = str(self.store_path)
                    made.append(Variant(vid, -1, repeat, pipeline_spec.to_text(experiment.pipeline), grid, config,
                                        tuned, ablation))
        return made

    def add(self, variants: list[Variant]) -> list[Variant]:
        """Add variants not in the sweep yet (by id), numbering them; return the sweep's variants for all of them."""
        known = {v.id: v for v in self.variants}
        for v in variants:
            if v.id not in known:
                v.position = len(self.variants)
                self.variants.append(v)
                known[v.id] = v
        return [known[v.id] for v in variants]


def _paired_with_full(variants: list[Variant]) -> list[Variant]:
    """Each ablation variant given its full pipeline's config as its `reference` (the `full` variant of the same
    grid, tuning state and repeat); the full variants, and variants outside an ablation, have none."""
    def setting(v: Variant) -> tuple:
        return json.dumps(v.grid, sort_keys=True), v.tuned, v.repeat

    full = {setting(v): v for v in variants if v.ablation == FULL}
    for v in variants:
        if v.ablation not in (None, FULL) and setting(v) in full:
            v.reference = full[setting(v)].config
    return variants


def short_digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ir_key(config: dict) -> str:
    """Everything that determines the optimized IR (model, inputs, target, pipeline)."""
    return short_digest({k: config[k] for k in ("model", "target", "pipeline")})


def pass_specs(value: Any, where: str) -> list[PassSpec]:
    try:
        return pipeline_spec.from_yaml(value)
    except (ValueError, UserError) as exc:
        raise UserError(f"{where}: {exc}") from exc


def target_kind(base: dict) -> str:
    """The base experiment's target kind (llvm unless it says cuda), for expanding named pipelines."""
    target = base.get("target") or "llvm"
    return target if isinstance(target, str) else target.get("kind", "llvm")


def expand_orderings(section: SweepSection, base: dict, origin: str) -> list[tuple[str | None, list[PassSpec]]]:
    """The pipelines the sweep tries, each with its ablation label (None outside an ablation), in a stable order
    (none up front for a search)."""
    if section.ablation is not None:
        return ablation_pipelines(section.ablation, target_kind(base))
    return [(None, specs) for specs in _orderings(section, base.get("pipeline"), origin)]


def _orderings(section: SweepSection, base_pipeline: Any, origin: str) -> list[list[PassSpec]]:
    orderings = section.orderings
    if orderings is None:
        return [pass_specs(base_pipeline or [], f"{origin}: base.pipeline")]
    if isinstance(orderings, Search):
        return []
    if isinstance(orderings, list):
        return [pass_specs(entry, f"{origin}: sweep.orderings[{i}]") for i, entry in enumerate(orderings)]
    passes = pass_specs(orderings.permutations, f"{origin}: sweep.orderings.permutations")
    prefix = pass_specs(orderings.prefix, f"{origin}: sweep.orderings.prefix")
    suffix = pass_specs(orderings.suffix, f"{origin}: sweep.orderings.suffix")
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


def _validated(data: dict, path: Path) -> SweepFile:
    try:
        return SweepFile.model_validate(data)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():  # an error inside `orderings`: described from its form, without the union's tag
            loc = list(error["loc"])
            at = loc.index("orderings") + 1 if "orderings" in loc[:-1] else None
            form = {"permutations": Permutations, "search": Search}.get(loc[at]) if at is not None else None
            if form is not None:
                inner = describe_error({**error, "loc": tuple(loc[at + 1:])}, form)
                lines.append(".".join(map(str, loc[:at])) + "." + inner)
            else:
                if at is not None and loc[at] in _ORDERING_TAGS:
                    del loc[at]
                lines.append(describe_error({**error, "loc": tuple(loc)}, SweepFile))
        raise UserError(f"{path}: invalid sweep:\n  " + "\n  ".join(lines)) from exc


def _tuning(raw: SweepFile, base: dict, path: Path) -> TuningConfig | None:
    """The sweep's tuning section, else the base experiment's (a tuned base makes a tuned sweep; a study's base
    has no model of its own, so only its tuning section is read)."""
    if raw.sweep.tuning is not None or not base.get("tuning"):
        return raw.sweep.tuning
    if raw.sweep.models:
        try:
            return TuningConfig.model_validate(base["tuning"])
        except ValidationError as exc:
            raise UserError(f"{path}: base.tuning: {describe_error(exc.errors()[0], TuningConfig)}") from exc
    return validate(base, f"{path}: base").tuning


def load_sweep(path: Path, base_dir: Path | None = None, overrides: list[str] = ()) -> Sweep:
    """Read and validate a sweep file, apply `--set` overrides (`base.…` ones to the base experiment) and expand
    it into validated variants (nothing runs; a search makes its variants as it goes)."""
    path = Path(path)
    base_dir = base_dir or Path.cwd()
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a sweep mapping (base, sweep, output), got {type(data).__name__}")
    base_overrides = [o.removeprefix("base.") for o in overrides if o.startswith("base.")]
    for assignment in overrides:
        if not assignment.startswith("base."):
            apply_override(data, assignment)
    raw = _validated(data, path)
    base, base_origin = _load_base(raw, path)
    for assignment in base_overrides:
        apply_override(base, assignment)
    name = raw.name or path.stem
    output = raw.output or Path("runs") / "sweeps" / name
    output = (output if output.is_absolute() else base_dir / output).resolve()
    if raw.sweep.ablation is not None and raw.sweep.orderings is not None:
        raise UserError(f"{path}: sweep.ablation makes the pipelines itself; remove sweep.orderings")
    orderings = expand_orderings(raw.sweep, base, str(path))
    for key, values in raw.sweep.grid.items():
        if not values:
            raise UserError(f"the sweep expands to zero variants: {path}: sweep.grid.{key} is an empty list")
    search = raw.sweep.orderings if isinstance(raw.sweep.orderings, Search) else None
    if search is not None:
        pass_specs(search.passes, f"{path}: sweep.orderings.passes")
        if raw.sweep.grid or raw.sweep.models:
            raise UserError(f"{path}: sweep.grid/models: a search (sweep.orderings.search) ranks pipelines on one "
                            "setting; remove them or run one search per setting (or model)")
    elif not orderings:
        raise UserError(f"the sweep expands to zero variants: {path}: sweep.orderings is empty"
                        + (" (sample/permutations gave nothing)" if isinstance(raw.sweep.orderings, Permutations) else ""))
    permuted = ([s.name for s in pass_specs(raw.sweep.orderings.permutations, str(path))]
                if isinstance(raw.sweep.orderings, Permutations) else
                [s.name for s in pass_specs(search.passes, str(path))] if search is not None else [])
    tuning = _tuning(raw, base, path)
    database_root = None
    if tuning is not None:
        database_root = tuning.database or output / DATABASE_DEFAULT
        database_root = (database_root if database_root.is_absolute() else base_dir / database_root).resolve()
    models = model_cases(raw.sweep.models) if raw.sweep.models else []
    sweep = Sweep(path, name, output, raw.plugins, raw.sweep, permuted, base, base_origin, tuning, database_root,
                  models)
    for case in models or [None]:  # a study's variants model by model: a partial run has whole models
        sweep.add(_paired_with_full([v for label, specs in orderings for v in sweep.make_variants(specs, label, case)]))
    if not sweep.variants and search is None:
        raise UserError(f"the sweep expands to zero variants: {path}")
    return sweep
