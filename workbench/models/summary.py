"""What an ONNX model is, before any config exists: its inputs (with the dims left dynamic), a `model.inputs:`
snippet to paste, and an op histogram with FLOPs and parameters per op type. `workbench inspect` shows it and
`workbench run --model` takes its inputs from it, so a user's own model needs no hand-written YAML to start.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import onnx
from onnx import helper

from workbench.errors import UserError
from workbench.models.canonicalize import Canonical, InputSpec, canonicalize
from workbench.models.graph_walk import all_nodes

Dim = int | str  # a static size, or the symbolic name the exporter gave a dynamic one
INPUT_FLAG = re.compile(r"^([^=\s]+)=(\d+(?:x\d+)*)$")


@dataclass(frozen=True)
class InputInfo:
    """One graph input as the model declares it."""

    name: str
    dtype: str
    dims: tuple[Dim, ...]

    @property
    def dynamic(self) -> tuple[int, ...]:
        """Positions of the dims the model leaves open (the user must fix them)."""
        return tuple(i for i, dim in enumerate(self.dims) if isinstance(dim, str))


@dataclass(frozen=True)
class OpRow:
    """One op type of the histogram; `flops` is None where shapes are not static or the op is not counted."""

    op: str
    count: int
    params: int
    flops: int | None


def model_inputs(model: onnx.ModelProto) -> list[InputInfo]:
    """The graph inputs that are not weights, unnamed dynamic dims shown as `?<position>`."""
    weights = {init.name for init in model.graph.initializer}
    infos = []
    for value in model.graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or f"?{i}")
                     for i, d in enumerate(tensor.shape.dim))
        infos.append(InputInfo(value.name, str(helper.tensor_dtype_to_np_dtype(tensor.elem_type)), dims))
    return infos


def parse_input_flags(flags: list[str]) -> dict[str, list[int]]:
    """`--input NAME=1x3x224x224` flags as name -> shape."""
    shapes = {}
    for flag in flags:
        match = INPUT_FLAG.match(flag.strip())
        if match is None or "x0" in f"x{match.group(2)}":
            raise UserError(f"--input {flag!r}: expected NAME=SHAPE with positive sizes, e.g. --input x=1x3x224x224")
        shapes[match.group(1)] = [int(size) for size in match.group(2).split("x")]
    return shapes


def fixed_shapes(inputs: list[InputInfo], given: dict[str, list[int]]) -> dict[str, list[int] | None]:
    """Each input's concrete shape: `given` where named, the model's own where static, None where still dynamic.
    A name or rank that does not fit the model is a UserError (a typo would otherwise surface much later)."""
    by_name = {info.name: info for info in inputs}
    for name, shape in given.items():
        if name not in by_name:
            raise UserError(f"--input {name}=...: the model has no input {name!r}; its inputs: {', '.join(by_name)}")
        if len(shape) != len(by_name[name].dims):
            raise UserError(f"--input {name}=...: {len(shape)} dims given, the model's input has "
                            f"{len(by_name[name].dims)} ({_shape_text(by_name[name].dims)})")
    return {info.name: given.get(info.name) or (None if info.dynamic else list(info.dims)) for info in inputs}


def dynamic_message(inputs: list[InputInfo], shapes: dict[str, list[int] | None]) -> str | None:
    """One sentence naming the inputs still dynamic and the flag that fixes them (None when all are static)."""
    open_inputs = [info for info in inputs if shapes[info.name] is None]
    if not open_inputs:
        return None
    listed = ", ".join(f"{info.name} {_shape_text(info.dims)}" for info in open_inputs)
    example = " ".join(f"--input {info.name}={'x'.join(map(str, info.dims))}" for info in open_inputs)
    return f"the model's inputs have dynamic dims: {listed}; give their sizes: {example} (with numbers for the names)"


def inputs_snippet(inputs: list[InputInfo], shapes: dict[str, list[int] | None]) -> str:
    """A `model:`/`inputs:` YAML block to paste into an experiment; dynamic dims stay `<NAME>` placeholders, with a
    comment saying to fill them."""
    lines = ["model:", "  inputs:"]
    for info in inputs:
        shape = shapes[info.name]
        dims = shape if shape is not None else [dim if isinstance(dim, int) else f"<{dim}>" for dim in info.dims]
        line = f"    {info.name}: {{shape: [{', '.join(map(str, dims))}], dtype: {info.dtype}}}"
        if shape is None:
            line += f"  # fill in the dynamic dims {', '.join(str(info.dims[i]) for i in info.dynamic)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def frozen(model: onnx.ModelProto, shapes: dict[str, list[int] | None]) -> Canonical | None:
    """The model canonicalized at `shapes` (inputs frozen, shape subgraphs folded), or None while any dim is open."""
    if any(shape is None for shape in shapes.values()):
        return None
    dtypes = {info.name: info.dtype for info in model_inputs(model)}
    return canonicalize(model, {name: InputSpec(tuple(shape), dtypes[name]) for name, shape in shapes.items()})


def op_histogram(model: onnx.ModelProto, frozen_model: onnx.ModelProto | None) -> list[OpRow]:
    """Per op type of `model`, most frequent first: node count, initializer elements its nodes consume, and FLOPs
    of the Conv/ConvTranspose/MatMul/Gemm nodes (from shape inference on `frozen_model`, the same model with its
    inputs frozen, `frozen`; None without it)."""
    weights = {init.name: math.prod(init.dims) for init in model.graph.initializer}
    nodes = list(all_nodes(model.graph))
    counts = Counter(node.op_type for node in nodes)
    params: Counter[str] = Counter()
    for node in nodes:
        params[node.op_type] += sum(weights.get(name, 0) for name in set(node.input))
    flops = _flops_by_op(frozen_model) if frozen_model is not None else None
    return [OpRow(op, count, params[op], None if flops is None else flops.get(op))
            for op, count in counts.most_common()]


def _flops_by_op(frozen_model: onnx.ModelProto) -> dict[str, int]:
    """FLOPs (2 per multiply-add) per counted op type, from the inferred shapes of the frozen model."""
    inferred = onnx.shape_inference.infer_shapes(frozen_model)
    known = {init.name: list(init.dims) for init in inferred.graph.initializer}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            known[value.name] = [d.dim_value for d in dims]
    totals: Counter[str] = Counter()
    for node in inferred.graph.node:
        count = _node_flops(node, known)
        if count is not None:
            totals[node.op_type] += count
    return dict(totals)


def _node_flops(node: onnx.NodeProto, known: dict[str, list[int]]) -> int | None:
    """2 x multiply-adds of one Conv, ConvTranspose, MatMul or Gemm node; None for other ops or unknown shapes."""
    if node.op_type not in ("Conv", "ConvTranspose", "MatMul", "Gemm"):
        return None
    a, b = (known.get(name) for name in node.input[:2])
    out = known.get(node.output[0])
    if a is None or b is None or out is None:
        return None
    if node.op_type == "Conv":  # every output element: Cin/group x kernel window multiply-adds
        return 2 * math.prod(out) * math.prod(b[1:])
    if node.op_type == "ConvTranspose":  # every input element scatters into Cout/group x kernel window outputs
        return 2 * math.prod(a) * math.prod(b[1:])
    if node.op_type == "Gemm":
        trans_a = next((attr.i for attr in node.attribute if attr.name == "transA"), 0)
        return 2 * math.prod(out) * (a[0] if trans_a else a[1])
    return 2 * math.prod(out) * a[-1]  # MatMul: the contracted dim is A's last


def _shape_text(dims: tuple[Dim, ...]) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"
