"""Pipeline specs: the ordered list of (pass name, params), in YAML form and in one-line text form.

YAML form: a list whose entries are `name` or `{name: {param: value}}`.
Text form, in the style of MLIR/LLVM pass pipelines: `fold_constant,convert_layout(conv2d=NHWC),fuse,dce`.
Parameter values in text are parsed as YAML scalars or flow collections (`percentile=99.9`,
`keep=[softmax,layer_norm]`). Both forms round-trip. No TVM import here: configs load fast.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from workbench.errors import YAML_ERRORS, UserError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class PassSpec(BaseModel):
    """One pipeline step: a registered pass name and its (not yet validated) parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    def to_yaml(self) -> str | dict[str, dict[str, Any]]:
        return {self.name: dict(self.params)} if self.params else self.name

    def to_text(self) -> str:
        if not self.params:
            return self.name
        args = ",".join(f"{k}={_text_value(v)}" for k, v in self.params.items())
        return f"{self.name}({args})"


def _text_value(value: Any) -> str:
    """A parameter value as YAML flow text, so that parse_text reads it back equal."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def _check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{where}: {name!r} is not a pass name (letters, digits, underscores)")
    return name


def from_yaml(entries: Any) -> list[PassSpec]:
    """Parse the YAML form; a ValueError names the entry index."""
    if isinstance(entries, str):
        return parse_text(entries)
    if not isinstance(entries, list):
        raise ValueError("pipeline must be a list of passes (or one-line text such as 'fold_constant,fuse')")
    specs = []
    for i, entry in enumerate(entries):
        where = f"entry {i}"
        if isinstance(entry, PassSpec):
            specs.append(entry)
        elif isinstance(entry, str):
            specs.append(PassSpec(name=_check_name(entry, where)))
        elif isinstance(entry, dict) and len(entry) == 1:
            (name, params), = entry.items()
            if params is not None and not isinstance(params, dict):
                raise ValueError(f"{where}: parameters of {name!r} must be a mapping, got {params!r}")
            specs.append(PassSpec(name=_check_name(name, where), params=params or {}))
        else:
            raise ValueError(f"{where}: expected a pass name or {{name: {{params}}}}, got {entry!r}")
    return specs


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split on `sep` outside (), [] and {} nesting; unbalanced brackets are an error."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                raise UserError(f"pipeline text {text!r}: unbalanced {char!r} at position {i}")
        elif char == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise UserError(f"pipeline text {text!r}: an opening bracket is never closed")
    parts.append(text[start:])
    return parts


def _parse_step(step: str, text: str) -> PassSpec:
    match = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*", step, flags=re.S)
    if not match:
        raise UserError(f"pipeline text {text!r}: cannot read step {step.strip()!r}; expected name or name(key=value,...)")
    name, args = match.groups()
    params: dict[str, Any] = {}
    for arg in _split_top_level(args, ",") if args and args.strip() else []:
        key, sep, raw = arg.partition("=")
        if not sep or not _NAME.match(key.strip()):
            raise UserError(f"pipeline text {text!r}: in {name}(...), {arg.strip()!r} is not key=value")
        try:
            params[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except YAML_ERRORS as exc:
            raise UserError(f"pipeline text {text!r}: value of {name}.{key.strip()} is not valid: {raw!r}") from exc
    return PassSpec(name=name, params=params)


def parse_text(text: str) -> list[PassSpec]:
    """Parse the one-line text form; an empty string is the empty pipeline."""
    if not text.strip():
        return []
    return [_parse_step(step, text) for step in _split_top_level(text, ",")]


def to_text(specs: list[PassSpec]) -> str:
    return ",".join(spec.to_text() for spec in specs)
