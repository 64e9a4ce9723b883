"""A study: one sweep over many models, each crossed with the pipeline variants an ablation makes.

`sweep.models` names the models (`corpus`, corpus entry names, or mappings with a name, a source and inputs);
each replaces the base experiment's model, name and tolerance, so a study is the sweep machinery (crash-isolated
workers, equivalence classes by IR hash, one deduplicated tuning, `--resume`) run over models as over a grid.
`sweep.ablation` makes the variants from a pipeline (`default`, or pipeline text): the full pipeline, the
pipeline with each of its steps dropped in turn (a pass used twice is dropped once per position), and each step
with its parameters at the alternatives listed for it. Each variant carries its label (`default`, `-fuse`,
`-fold_constant#2`, `fuse(opt_level=1)`), so the report can say what dropping each step costs on each model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from workbench.config import ModelConfig, Strict
from workbench.config.named_pipelines import expand
from workbench.config.pipeline_spec import PassSpec, parse_text, to_text
from workbench.errors import UserError
from workbench.models.corpus import Tolerance, load_corpus

FULL = "full"  # the label of the whole pipeline
# The parameter alternatives a step is also tried at (beside dropping it), per pass name: what a user of the pass
# would change first. convert_layout's "none" is its removal; fast_math's is too (every op exact).
ALTERNATIVES: dict[str, list[dict[str, Any]]] = {"fuse": [{"opt_level": 1}]}


class StudyModel(ModelConfig):
    """A model of a study given in full (not a corpus entry): its name, source, inputs and tolerance."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    tolerance: Tolerance = Field(default_factory=Tolerance)


class Ablation(Strict):
    """The variants of one pipeline: it whole, each step dropped, each step at its parameter alternatives."""

    pipeline: str = Field(default="default", description="a named pipeline or pipeline text")
    alternatives: dict[str, list[dict[str, Any]]] = Field(
        default_factory=lambda: dict(ALTERNATIVES),
        description="pass name -> parameter sets it is also tried at (beside dropping it)")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return {"pipeline": value} if isinstance(value, str) else value


ModelsField = Literal["corpus"] | list[str | StudyModel]


@dataclass(frozen=True)
class ModelCase:
    """One model of a study: what replaces the base experiment's name, model and accuracy tolerance."""

    name: str
    model: dict[str, Any]
    rtol: float
    atol: float

    def apply(self, experiment: dict) -> dict:
        """The base experiment (a mapping) with this model in it."""
        accuracy = {**experiment.get("accuracy", {}), "rtol": self.rtol, "atol": self.atol}
        return {**experiment, "name": self.name, "model": dict(self.model), "accuracy": accuracy}


def model_cases(models: ModelsField | list[str | dict]) -> list[ModelCase]:
    """The study's models in order: every corpus entry for `corpus`, else each name looked up in the corpus or each
    mapping as given; a name used twice is an error (labels would collide)."""
    corpus = load_corpus()
    chosen = corpus.select(None if models == "corpus" else [m for m in models if isinstance(m, str)])
    by_name = {entry.name: entry for entry in chosen}
    entries = chosen if models == "corpus" else [
        by_name[m] if isinstance(m, str) else StudyModel.model_validate(m) for m in models]
    names = [entry.name for entry in entries]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UserError(f"sweep.models: each model once; repeated: {', '.join(repeated)}")
    return [ModelCase(entry.name, entry.model_dump(include=set(ModelConfig.model_fields), exclude_none=True,
                                                   mode="json"),
                      entry.tolerance.rtol, entry.tolerance.atol) for entry in entries]


def ablation_pipelines(ablation: Ablation, target_kind: str) -> list[tuple[str, list[PassSpec]]]:
    """(label, pipeline) for the whole pipeline, each step dropped, and each step at its alternatives."""
    steps = expand(parse_text(ablation.pipeline), target_kind)
    if not steps:
        raise UserError(f"sweep.ablation: {ablation.pipeline!r} has no passes for target kind {target_kind!r}")
    unknown = sorted(set(ablation.alternatives) - {step.name for step in steps})
    if unknown:
        raise UserError(f"sweep.ablation.alternatives: {', '.join(unknown)} not in the pipeline {to_text(steps)}")
    names = [step.name for step in steps]
    variants = [(FULL, steps)]
    for i, step in enumerate(steps):
        nth = names[:i + 1].count(step.name)
        suffix = f"#{nth}" if names.count(step.name) > 1 else ""
        variants.append((f"-{step.name}{suffix}", steps[:i] + steps[i + 1:]))
        for params in ablation.alternatives.get(step.name, []):
            changed = PassSpec(name=step.name, params={**step.params, **params})
            variants.append((changed.to_text() + suffix, steps[:i] + [changed] + steps[i + 1:]))
    return variants
