"""A model seen before it is run: `workbench inspect` (inputs, op histogram, unsupported ops, what each pass of a
pipeline would change, without building) and the experiment `workbench run --model` makes from a bare model.
Both start from a model source, not a config, so a user's own model gets its first look and run with no YAML.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.markup import escape
from rich.table import Table

from workbench.atomic import atomic_write_text
from workbench.config import Experiment, apply_override, load_experiment, validate
from workbench.errors import UserError
from workbench.models.canonicalize import FoldReport
from workbench.models.importer import unsupported_ops
from workbench.models.recurrent import RECURRENT_OPS
from workbench.models.sources import PKG_PREFIX, ZOO_PREFIX, parse_pkg_source, resolve_source
from workbench.models.summary import (
    InputInfo,
    OpRow,
    dynamic_message,
    fixed_shapes,
    frozen,
    inputs_snippet,
    model_inputs,
    op_histogram,
)
from workbench.record.rows import changed_ops
from workbench.stages import optimize, prepare

# `run --model` measures against ONNX Runtime only: the two TVM baselines build the model twice more, which a
# first look does not need (add them in the saved config's `baselines:`)
MODEL_BASELINES = ("ort_all", "ort_none")


@dataclass(frozen=True)
class PassChange:
    """One pass of the pipeline: Relax op counts before and after it."""

    name: str
    params: dict[str, Any]
    ops_before: int
    ops_after: int
    changed: dict[str, int]  # op name -> count after minus count before, for the ops whose count moved


@dataclass
class Inspection:
    """Everything `workbench inspect` shows (and prints as one JSON object with --json)."""

    source: str
    inputs: list[InputInfo]
    shapes: dict[str, list[int] | None]
    snippet: str
    ops: list[OpRow]
    unsupported: dict[str, str]
    pipeline: str
    passes: list[PassChange] | None = None
    passes_skipped: str | None = None
    dynamic: str | None = None  # the message naming the inputs still dynamic and the flag that fixes them
    folding: FoldReport | None = None  # shape nodes folded at the frozen shapes, and those that could not be

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["inputs"] = [{"name": info.name, "dtype": info.dtype, "shape": list(info.dims),
                           "dynamic_dims": list(info.dynamic)} for info in self.inputs]
        return data


def inspect_target(target: str, base_dir: Path, given: dict[str, list[int]], pipeline: str | None) -> Inspection:
    """Inspect a model source, or an experiment YAML's model with its inputs, target and pipeline (`given` and
    `pipeline` win, as --set would)."""
    if not target.endswith((".yaml", ".yml")):
        return inspect_model(target, base_dir, given, pipeline if pipeline is not None else "default")
    overrides = [f"model.inputs.{name}={json.dumps(shape)}" for name, shape in given.items()]
    experiment = load_experiment(Path(target), overrides + ([f"pipeline={json.dumps(pipeline)}"] if pipeline else []))
    shapes = {name: spec.shape for name, spec in experiment.model.inputs.items() if spec.shape}
    return inspect_model(experiment.model.source, base_dir, shapes,
                         ",".join(spec.to_text() for spec in experiment.pipeline), experiment)


def inspect_model(source: str, base_dir: Path, given: dict[str, list[int]], pipeline: str,
                  experiment: Experiment | None = None) -> Inspection:
    """The ONNX-level summary of `source`, then the pipeline's per-pass op counts when every input is static
    (run as `experiment` says when one is given: its target, input files and cache)."""
    model = resolve_source(source, base_dir, experiment.model.cache_dir if experiment is not None else None)
    inputs = model_inputs(model)
    shapes = fixed_shapes(inputs, given)
    unsupported = {op: node for op, node in unsupported_ops(model.graph).items()
                   if op not in RECURRENT_OPS}  # canonicalize unrolls these
    canonical = frozen(model, shapes)
    inspection = Inspection(source, inputs, shapes, inputs_snippet(inputs, shapes),
                            op_histogram(model, canonical.model if canonical else None), unsupported, pipeline,
                            dynamic=dynamic_message(inputs, shapes), folding=canonical.folding if canonical else None)
    if inspection.dynamic:
        inspection.passes_skipped = "dynamic input dims: give them with --input to see what each pass changes"
    elif unsupported:
        inspection.passes_skipped = f"the import cannot handle {', '.join(unsupported)}"
    else:
        experiment = experiment or validate(_experiment_data(source, inputs, shapes, pipeline), source)
        try:
            inspection.passes = _pass_changes(experiment, base_dir)
        except UserError as exc:  # what was found so far is still worth showing, with why the passes are not
            inspection.passes_skipped = str(exc)
    return inspection


def _pass_changes(experiment: Experiment, base_dir: Path) -> list[PassChange]:
    """Prepare the model and run the pipeline without per-pass figures or a build: ops before and after each pass."""
    optimized = optimize(prepare(experiment, base_dir), experiment.pipeline, stats=False)
    return [PassChange(r.name, r.params, sum(r.ops_before.values()), sum(r.ops_after.values()),
                       {op: now - was for op, (was, now) in changed_ops(r.ops_before, r.ops_after).items()})
            for r in optimized.records]


def model_experiment_data(source: str, base_dir: Path, given: dict[str, list[int]],
                          overrides: list[str]) -> dict[str, Any]:
    """The experiment `workbench run --model` runs, as the plain mapping a YAML file would hold: the default
    pipeline, ONNX Runtime baselines, inputs from the model (`given` fixes dynamic dims; any still open is a
    UserError naming them and the flag), `--set` overrides applied. Validate it with `config.validate`."""
    inputs = model_inputs(resolve_source(source, base_dir))
    shapes = fixed_shapes(inputs, given)
    message = dynamic_message(inputs, shapes)
    if message:
        raise UserError(message)
    data = _experiment_data(source, inputs, shapes, "default")
    for assignment in overrides:
        apply_override(data, assignment)
    return data


def _experiment_data(source: str, inputs: list[InputInfo], shapes: dict[str, list[int]],
                     pipeline: str) -> dict[str, Any]:
    """The plain mapping of a bare model's experiment: what a saved config holds, so it reads like a hand-written one."""
    return {"name": model_name(source),
            "model": {"source": source,
                      "inputs": {info.name: {"shape": shapes[info.name], "dtype": info.dtype} for info in inputs}},
            "pipeline": pipeline, "baselines": list(MODEL_BASELINES)}


def model_name(source: str) -> str:
    """The experiment name (and runs/<name> folder) for a bare model: its file stem, or the zoo name."""
    if source.startswith(ZOO_PREFIX):
        stem = source[len(ZOO_PREFIX):]
    elif source.startswith(PKG_PREFIX):
        stem = Path(parse_pkg_source(source)[2]).stem
    else:
        stem = Path(source).stem
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem) or "model"


def save_experiment(data: dict[str, Any], path: Path) -> Experiment:
    """Validate and write the experiment as YAML (the user's next step is editing that file)."""
    experiment = validate(data, str(path))
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    return experiment


def inspection_tables(inspection: Inspection) -> list[Table | str]:
    """What `workbench inspect` prints, in order: inputs, the snippet, op histogram, unsupported ops, passes."""
    inputs = Table(title=f"{inspection.source}: inputs")
    for column in ("name", "dtype", "shape", "dynamic dims", "used"):
        inputs.add_column(column)
    for info in inspection.inputs:
        used = inspection.shapes[info.name]
        inputs.add_row(info.name, info.dtype, _dims_text(info.dims),
                       ", ".join(str(info.dims[i]) for i in info.dynamic) or "—",
                       _dims_text(used) if used else "[red]dynamic[/]")
    ops = Table(title="ONNX ops (FLOPs: 2 per multiply-add; params: initializer elements the nodes read)")
    for column in ("op type", "nodes", "FLOPs", "params"):
        ops.add_column(column, justify="left" if column == "op type" else "right")
    for row in inspection.ops:
        ops.add_row(row.op, str(row.count), "—" if row.flops is None else f"{row.flops:,}", f"{row.params:,}")
    ops.add_row("total", str(sum(r.count for r in inspection.ops)), _total_flops(inspection.ops),
                f"{sum(r.params for r in inspection.ops):,}", style="bold")
    shown: list[Table | str] = [inputs, "Paste into the experiment's YAML:", escape(inspection.snippet), ops]
    if inspection.dynamic:
        shown.insert(1, f"[yellow]{escape(inspection.dynamic)}[/]")
    if inspection.unsupported:
        shown.append("[red]Ops the Relax import cannot handle:[/] " + escape(", ".join(
            f"{op} (first at node {node!r})" for op, node in inspection.unsupported.items())))
    else:
        shown.append("Every op type is supported by the Relax import.")
    if inspection.folding is not None:
        shown.append(_folding_text(inspection.folding))
    shown.append(_passes_table(inspection) if inspection.passes is not None
                 else f"Pipeline {inspection.pipeline!r} skipped: {escape(inspection.passes_skipped or '')}")
    return shown


def _folding_text(folding: FoldReport) -> str:
    """How many shape nodes became constants at the frozen shapes, and each that could not (it stays computed,
    and an import or unroll that needs the value constant will say so)."""
    folded = f"{folding.folded} shape node(s) folded to constants at these shapes."
    if not folding.unfolded:
        return folded
    return (f"{folded} [yellow]{len(folding.unfolded)} could not be folded (they stay computed):[/]\n"
            + "\n".join(f"  {escape(str(node))}" for node in folding.unfolded))


def _passes_table(inspection: Inspection) -> Table:
    table = Table(title=f"Pipeline {inspection.pipeline!r}: Relax ops per pass (nothing built)")
    for column in ("#", "pass", "ops before", "ops after", "what changed"):
        table.add_column(column)
    for i, change in enumerate(inspection.passes or [], 1):
        params = f"({', '.join(f'{k}={v}' for k, v in change.params.items())})" if change.params else ""
        changed = ", ".join(f"{op.removeprefix('relax.')} {delta:+d}" for op, delta in change.changed.items())
        table.add_row(str(i), change.name + params, str(change.ops_before), str(change.ops_after), changed or "—")
    return table


def _dims_text(dims: tuple | list) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


def _total_flops(rows: list[OpRow]) -> str:
    counted = [row.flops for row in rows if row.flops is not None]
    return f"{sum(counted):,}" if counted else "—"
