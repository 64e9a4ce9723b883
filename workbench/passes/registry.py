"""The pass registry: one decorator registers a pass's name, family, parameter model and doc.

A registered factory takes its validated parameter model and returns a `tvm.transform.Pass`.
The pipeline wraps it in a module pass named `workbench.<name>` so the instrument can time it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tvm
from pydantic import BaseModel, ConfigDict, ValidationError

from workbench.config.pipeline_spec import PassSpec
from workbench.errors import UserError

FAMILIES = ("fusion", "folding", "cleanup", "layout", "precision", "analysis")


class NoParams(BaseModel):
    """Parameter model of a pass that takes none."""

    model_config = ConfigDict(extra="forbid")


P = TypeVar("P", bound=BaseModel)
Factory = Callable[[Any], tvm.transform.Pass]


@dataclass(frozen=True)
class RegisteredPass:
    name: str
    family: str
    params: type[BaseModel]
    doc: str
    factory: Factory

    def create(self, raw_params: dict[str, Any], where: str) -> tuple[BaseModel, tvm.transform.Pass]:
        """Validate parameters (errors name `where`) and build the TVM pass."""
        try:
            params = self.params.model_validate(raw_params)
        except ValidationError as exc:
            known = ", ".join(f"{k}" for k in self.params.model_fields) or "none"
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            )
            raise UserError(f"{where}: bad parameters for pass {self.name!r}: {problems} (its parameters: {known})") from exc
        return params, self.factory(params)


_REGISTRY: dict[str, RegisteredPass] = {}


def register(name: str, family: str, params: type[BaseModel] = NoParams) -> Callable[[Factory], Factory]:
    """Register `factory(params) -> tvm Pass` under `name`; its docstring's first line is the pass's doc."""
    if family not in FAMILIES:
        raise ValueError(f"unknown pass family {family!r}")

    def decorate(factory: Factory) -> Factory:
        if name in _REGISTRY:
            raise ValueError(f"pass {name!r} registered twice")
        doc = (factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else ""
        _REGISTRY[name] = RegisteredPass(name, family, params, doc, factory)
        return factory

    return decorate


def all_passes() -> list[RegisteredPass]:
    """The passes registered so far (workbench.passes.library registers the workbench's own)."""
    return sorted(_REGISTRY.values(), key=lambda p: (FAMILIES.index(p.family), p.name))


def lookup(spec: PassSpec, where: str) -> RegisteredPass:
    """The registered pass for `spec`; an unknown name suggests the closest ones."""
    if spec.name not in _REGISTRY:
        close = difflib.get_close_matches(spec.name, list(_REGISTRY), n=3)
        hint = f"did you mean {', '.join(map(repr, close))}?" if close else "run `workbench passes` for the list"
        raise UserError(f"{where}: unknown pass {spec.name!r} — {hint}")
    return _REGISTRY[spec.name]
