"""The real-model corpus (corpus.yaml beside this module): typed entries, loaded and validated in one place.

The corpus is data, not code, so adding a model is one entry in the YAML; this loader makes sure that entry can
run before any long work starts: its source is a well-formed `pkg:` or `zoo:` source, every input has a shape,
a tolerance looser than the default says why. Errors name the file, the entry and the key, as config errors do.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator

from workbench.config import (
    AccuracyConfig,
    BaselineName,
    Experiment,
    ModelConfig,
    Strict,
    describe_error,
    read_yaml,
    validate,
)
from workbench.errors import UserError
from workbench.models import zoo
from workbench.models.sources import PKG_PREFIX, ZOO_PREFIX, parse_pkg_source

CORPUS_FILE = Path(__file__).with_name("corpus.yaml")
DEFAULT_TOLERANCE = AccuracyConfig()  # the tolerance every experiment gets unless it says otherwise


class Tolerance(Strict):
    """How close the workbench's outputs must be to ONNX Runtime's (numpy's allclose rule)."""

    rtol: float = Field(default=DEFAULT_TOLERANCE.rtol, ge=0)
    atol: float = Field(default=DEFAULT_TOLERANCE.atol, ge=0)
    why: str | None = Field(default=None, description="why this model needs more than the default tolerance")

    @model_validator(mode="after")
    def _looser_says_why(self) -> Tolerance:
        if (self.rtol > DEFAULT_TOLERANCE.rtol or self.atol > DEFAULT_TOLERANCE.atol) and not self.why:
            raise ValueError(f"a tolerance looser than rtol {DEFAULT_TOLERANCE.rtol:g} / atol "
                             f"{DEFAULT_TOLERANCE.atol:g} needs a `why` (what makes this model's outputs drift)")
        return self


class CorpusEntry(ModelConfig):
    """One corpus model: a model config (source, inputs) with a name, its tolerance and what it exercises."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    tolerance: Tolerance = Field(default_factory=Tolerance)
    exercises: str = Field(min_length=1, description="the op families or failure modes this model covers")

    @field_validator("source")
    @classmethod
    def _pkg_or_zoo(cls, source: str) -> str:
        if source.startswith(ZOO_PREFIX):
            name = source[len(ZOO_PREFIX):]
            if name not in zoo.NAMES:
                close = difflib.get_close_matches(name, zoo.NAMES, n=1)
                raise ValueError(f"unknown zoo model {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                                 + f"; zoo models: {', '.join(zoo.NAMES)}")
            return source
        if not source.startswith(PKG_PREFIX):
            raise ValueError("a corpus source is pkg:DIST==VERSION/path/in/wheel.onnx or zoo:NAME")
        try:
            parse_pkg_source(source)
        except UserError as exc:
            raise ValueError(str(exc).removeprefix(f"model.source {source!r}: ")) from exc
        return source

    @model_validator(mode="after")
    def _shapes_given(self) -> CorpusEntry:
        if not self.inputs:
            raise ValueError("give the model's inputs (name -> shape), so every run freezes the same shapes")
        missing = [name for name, spec in self.inputs.items() if spec.shape is None]
        if missing:
            raise ValueError(f"inputs {missing} need a shape: corpus inputs are seeded random values, not files")
        return self

    def experiment(self, pipeline: str | list, baselines: list[BaselineName]) -> Experiment:
        """The experiment that builds this model with `pipeline` (named pipelines expanded for this machine's CPU)
        and checks it against ONNX Runtime (ort_none) within the entry's tolerance."""
        model = self.model_dump(include=set(ModelConfig.model_fields), exclude_none=True)
        return validate({"name": self.name, "model": model, "pipeline": pipeline,
                         "baselines": ["ort_none", *(b for b in baselines if b != "ort_none")],
                         "accuracy": {"rtol": self.tolerance.rtol, "atol": self.tolerance.atol}},
                        f"corpus entry {self.name!r}")


class Corpus(Strict):
    models: list[CorpusEntry] = Field(min_length=1)

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[CorpusEntry]) -> list[CorpusEntry]:
        names = [entry.name for entry in models]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"entry names must be unique; repeated: {', '.join(repeated)}")
        return models

    def select(self, names: list[str] | None) -> list[CorpusEntry]:
        """The entries named (in the order given), or all of them; an unknown name is a UserError."""
        if not names:
            return list(self.models)
        by_name = {entry.name: entry for entry in self.models}
        unknown = [name for name in names if name not in by_name]
        if unknown:
            hints = [f"{name!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
                name, list(by_name), n=1)) else "") for name in unknown]
            raise UserError(f"not in the corpus: {', '.join(hints)}; entries: {', '.join(by_name)}")
        return [by_name[name] for name in names]


def _error_lines(exc: ValidationError, data: dict) -> list[str]:
    """One line per error; an error inside an entry names the entry (index and name) and is described from
    CorpusEntry, so an unknown key there gets its "did you mean"."""
    lines = []
    for error in exc.errors():
        loc = error["loc"]
        if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int):
            item = data["models"][loc[1]]
            name = item.get("name") if isinstance(item, dict) else None
            where = f"models[{loc[1]}]" + (f" ({name})" if name else "")
            inner = describe_error({**error, "loc": loc[2:]}, CorpusEntry)  # about the whole entry: no key to name
            lines.append(f"{where}: " + inner.removeprefix("(top level): "))
        else:
            lines.append(describe_error(error, Corpus))
    return lines


def load_corpus(path: Path = CORPUS_FILE) -> Corpus:
    """Read and validate a corpus file; every problem in it is reported at once, in one UserError."""
    data = read_yaml(Path(path))
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping with `models:` (a list of entries), got {type(data).__name__}")
    try:
        return Corpus.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{path}: invalid corpus:\n  " + "\n  ".join(_error_lines(exc, data))) from exc
