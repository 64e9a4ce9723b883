"""The op-conformance cases: one small ONNX model per op of TVM's Relax ONNX frontend, at each opset where the op's
signature changed, with the attribute values that matter.

The ops are the frontend's own converter map (so a new TVM brings its new ops in); the opsets are each op's ONNX
schema versions (where an attribute became an input, a new attribute appeared) from 7 (the oldest ONNX Runtime
runs) to the newest supported here. A case with no recipe is built from the op's schema: every required input a
graph input of shape (2, 3, 4) in the first of float32 / int64 / int32 / bool its type constraint allows, optional
inputs left out, required attributes from ATTRIBUTE_DEFAULTS. RECIPES give the ops that need other inputs (a conv's
image and weight, a reshape's target) their cases, and the variants that matter (axes negative or omitted,
keepdims 0/1, broadcasting, int types, omitted optional inputs). Data inputs stay graph inputs, so nothing is folded
away before the import; what an op needs constant (a shape, axes, pads) is an initializer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from workbench.models.canonicalize import supported_opset

OLDEST_OPSET = 7  # ONNX Runtime runs models from opset 7
SHAPE = (2, 3, 4)
IMAGE = (1, 2, 6, 6)
PREFERRED_TYPES = ("tensor(float)", "tensor(int64)", "tensor(int32)", "tensor(bool)")
ATTRIBUTE_DEFAULTS = {"to": TensorProto.FLOAT, "kernel_shape": [2, 2], "alpha": 0.5, "beta": 0.5,
                      "hidden_size": 3, "blocksize": 2, "num_outputs": 3}


@dataclass(frozen=True)
class In:
    """One input of a case: a graph input drawn at random in `range`, or a constant (an initializer) `value`."""

    shape: tuple[int, ...] = SHAPE
    dtype: str = "float32"
    value: object = None  # array-like: the input is this constant
    range: tuple[float, float] | None = None

    @property
    def constant(self) -> bool:
        return self.value is not None


SKIP = None  # an optional input left out (its name is "")


@dataclass(frozen=True)
class Recipe:
    """A case of one op: its inputs (SKIP for an omitted optional one), attributes, and from which opset it
    applies (and up to which, for forms later versions dropped)."""

    inputs: tuple[In | None, ...]
    attrs: dict = field(default_factory=dict)
    variant: str = ""
    since: int = OLDEST_OPSET
    until: int = 10_000
    outputs: int = 1


@dataclass(frozen=True)
class OpCase:
    """One conformance case: the op, the opset the model imports, the variant, the model, its inputs' ranges."""

    op: str
    opset: int
    variant: str
    model: onnx.ModelProto
    ranges: dict[str, tuple[float, float]]

    @property
    def name(self) -> str:
        return f"{self.op}-{self.opset}" + (f" {self.variant}" if self.variant else "")


def _f(*shape: int) -> In:
    return In(tuple(shape))


def _const(values, dtype: str = "int64") -> In:
    array = np.array(values, dtype=dtype)
    return In(array.shape, dtype, array)


def _ints(*shape: int, low: int = 0, high: int = 2) -> In:
    return In(tuple(shape), "int64", range=(low, high))


REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
# the opset from which a reduction takes axes as an input rather than an attribute
AXES_AS_INPUT = {**{op: 18 for op in REDUCTIONS}, "ReduceSum": 13}


def _reduction_recipes(op: str) -> list[Recipe]:
    positive = In(SHAPE, range=(0.5, 1.5))  # logs of sums stay defined
    since = AXES_AS_INPUT[op]
    return [Recipe((positive,), {"axes": [1], "keepdims": 1}, "axes=[1]", until=since - 1),
            Recipe((positive,), {"axes": [-1], "keepdims": 0}, "axes=[-1] keepdims=0", until=since - 1),
            Recipe((positive,), {"keepdims": 0}, "axes omitted keepdims=0"),
            Recipe((positive, _const([1])), {"keepdims": 1}, "axes=[1] input", since=since),
            Recipe((positive, _const([-1, 0])), {"keepdims": 0}, "axes=[-1,0] input keepdims=0", since=since)]


BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Equal", "Greater", "Less", "GreaterOrEqual",
          "LessOrEqual", "PRelu", "Mod")
RECIPES: dict[str, list[Recipe]] = {
    **{op: _reduction_recipes(op) for op in REDUCTIONS},
    **{op: [Recipe((In(SHAPE, range=(0.5, 2)), In((4,), range=(0.5, 2))), variant="broadcast [4]"),
            Recipe((In(SHAPE, range=(0.5, 2)), In((2, 1, 4), range=(0.5, 2))), variant="broadcast [2,1,4]")]
       for op in BINARY if op not in ("Mod",)},
    "Mod": [Recipe((_ints(2, 3, 4, low=-9, high=9), _ints(2, 3, 4, low=1, high=4)), variant="int64"),
            Recipe((_f(2, 3, 4), In(SHAPE, range=(0.5, 2))), {"fmod": 1}, "fmod=1 float")],
    "Squeeze": [Recipe((_f(2, 1, 4),), {"axes": [1]}, "axes=[1]", until=12),
                Recipe((_f(2, 1, 4),), {"axes": [-2]}, "axes=[-2]", until=12),
                Recipe((_f(2, 1, 4),), variant="axes omitted"),
                Recipe((_f(2, 1, 4), _const([-2])), variant="axes=[-2] input", since=13)],
    "Unsqueeze": [Recipe((_f(2, 3),), {"axes": [0, -1]}, "axes=[0,-1]", until=12),
                  Recipe((_f(2, 3), _const([0, -1])), variant="axes=[0,-1] input", since=13)],
    "Reshape": [Recipe((_f(2, 3, 4), _const([4, -1])), variant="[4,-1]"),
                Recipe((_f(2, 3, 4), _const([0, 12])), variant="[0,12] (0 copies)")],
    "Expand": [Recipe((_f(3, 1), _const([2, 3, 4])), variant="[3,1] to [2,3,4]")],
    "Tile": [Recipe((_f(2, 3), _const([2, 1])), variant="repeats [2,1]")],
    "Transpose": [Recipe((_f(2, 3, 4),), variant="perm omitted"),
                  Recipe((_f(2, 3, 4),), {"perm": [1, 2, 0]}, "perm=[1,2,0]")],
    "Concat": [Recipe((_f(2, 3, 4), _f(2, 3, 2)), {"axis": -1}, "axis=-1")],
    "Split": [Recipe((_f(2, 6, 4),), {"axis": 1}, "equal", outputs=2, until=17),
              Recipe((_f(2, 6, 4),), {"axis": 1, "split": [2, 4]}, "split=[2,4] attribute", outputs=2, until=12),
              Recipe((_f(2, 6, 4), _const([2, 4])), {"axis": -2}, "split=[2,4] input axis=-2", outputs=2,
                     since=13),
              Recipe((_f(2, 6, 4),), {"axis": 1, "num_outputs": 3}, "num_outputs=3", outputs=3, since=18)],
    "Slice": [Recipe((_f(4, 6),), {"starts": [1, -4], "ends": [3, 100], "axes": [0, 1]}, "attributes", until=9),
              Recipe((_f(4, 6), _const([1, -4]), _const([3, 100]), _const([0, 1])), variant="negative start",
                     since=10),
              Recipe((_f(4, 6), _const([-1]), _const([-100]), _const([1]), _const([-2])), variant="negative step",
                     since=10)],
    "Pad": [Recipe((_f(1, 2, 3, 3),), {"pads": [0, 0, 1, 2, 0, 0, 2, 1]}, "constant pads attribute", until=10),
            Recipe((_f(1, 2, 3, 3), _const([0, 0, 1, 2, 0, 0, 2, 1])), {"mode": "reflect"}, "reflect", since=11),
            Recipe((_f(1, 2, 3, 3), _const([0, 0, 1, 1, 0, 0, 1, 1]), _const(0.5, "float32")), {"mode": "constant"},
                   "constant 0.5", since=11),
            Recipe((_f(1, 2, 3, 3), _const([0, 0, 1, 1, 0, 0, 1, 1])), {"mode": "edge"}, "edge", since=11)],
    "Clip": [Recipe((In(SHAPE, range=(-2, 2)),), {"min": -0.5, "max": 0.5}, "min/max attributes", until=10),
             Recipe((In(SHAPE, range=(-2, 2)), _const(-0.5, "float32")), variant="min only", since=11),
             Recipe((In(SHAPE, range=(-2, 2)), SKIP, _const(0.5, "float32")), variant="max only", since=11)],
    "Gather": [Recipe((_f(3, 4), _ints(2, 2, high=3)), {"axis": 0}, "axis=0"),
               Recipe((_f(3, 4), _const([[-1, 0]])), {"axis": 1}, "axis=1 negative index")],
    "GatherElements": [Recipe((_f(3, 4), _ints(3, 2, high=4)), {"axis": 1}, "axis=1")],
    "GatherND": [Recipe((_f(3, 4), _ints(2, 1, high=3)), variant="index rows")],
    "ScatterElements": [Recipe((_f(3, 4), _const([[1, 0], [2, 3], [0, 1]]), _f(3, 2)), {"axis": 1}, "axis=1")],
    "ScatterND": [Recipe((_f(3, 4), _const([[1], [2]]), _f(2, 4)), variant="rows")],
    "Scatter": [Recipe((_f(3, 4), _const([[1, 0], [2, 3], [0, 1]]), _f(3, 2)), {"axis": 1}, "axis=1")],
    "Where": [Recipe((In((3, 1), "bool", range=(0, 2)), _f(3, 4), _f(4)), variant="broadcast")],
    "MatMul": [Recipe((_f(2, 3, 4), _f(4, 5)), variant="batched x 2-D"),
               Recipe((_f(4), _f(2, 4, 3)), variant="vector x batched")],
    "Gemm": [Recipe((_f(3, 4), _f(5, 4), _f(5)), {"transB": 1, "alpha": 0.5}, "transB alpha"),
             Recipe((_f(4, 3), _f(4, 5), SKIP), {"transA": 1}, "transA, no C", since=11)],
    "Einsum": [Recipe((_f(2, 3, 4), _f(2, 4, 5)), {"equation": "bij,bjk->bik"}, "batched matmul")],
    "Conv": [Recipe((_f(*IMAGE), _f(3, 2, 3, 3)), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "pads strides"),
             Recipe((_f(*IMAGE), _f(4, 1, 3, 3), _f(4)), {"group": 2, "dilations": [2, 2]}, "group dilations bias"),
             Recipe((_f(1, 2, 8), _f(3, 2, 3)), {"auto_pad": "SAME_UPPER"}, "1-D same_upper")],
    "ConvTranspose": [Recipe((_f(*IMAGE), _f(2, 3, 3, 3)), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "strides"),
                      Recipe((_f(*IMAGE), _f(2, 3, 2, 2)), {"strides": [2, 2]}, "kernel == stride")],
    "MaxPool": [Recipe((_f(*IMAGE),), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, "pads"),
                Recipe((_f(*IMAGE),), {"kernel_shape": [3, 3], "ceil_mode": 1, "strides": [2, 2]}, "ceil_mode",
                       since=10)],
    "AveragePool": [Recipe((_f(*IMAGE),), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
                           "count_include_pad"),
                    Recipe((_f(*IMAGE),), {"kernel_shape": [2, 2], "strides": [2, 2]}, "stride 2")],
    "LpPool": [Recipe((_f(*IMAGE),), {"kernel_shape": [2, 2], "p": 2}, "p=2")],
    "GlobalAveragePool": [Recipe((_f(*IMAGE),))], "GlobalMaxPool": [Recipe((_f(*IMAGE),))],
    "GlobalLpPool": [Recipe((_f(*IMAGE),), {"p": 2})],
    "BatchNormalization": [Recipe((_f(*IMAGE), _f(2), _f(2), _f(2), In((2,), range=(0.5, 1.5))))],
    "InstanceNormalization": [Recipe((_f(*IMAGE), _f(2), _f(2)))],
    "LayerNormalization": [Recipe((_f(2, 3, 4), _f(4), _f(4)), {"axis": -1}, "axis=-1"),
                           Recipe((_f(2, 3, 4), _f(3, 4)), {"axis": 1}, "axis=1, no bias")],
    "GroupNormalization": [Recipe((_f(1, 4, 3, 3), _f(4), _f(4)), {"num_groups": 2}, since=21),
                           Recipe((_f(1, 4, 3, 3), _f(2), _f(2)), {"num_groups": 2}, "per-group scale", until=20)],
    "RMSNormalization": [Recipe((_f(2, 3, 4), _f(4)), {"axis": -1})],
    "LRN": [Recipe((_f(*IMAGE),), {"size": 3})],
    "MeanVarianceNormalization": [Recipe((_f(*IMAGE),))],
    "Softmax": [Recipe((_f(2, 3, 4),), {"axis": 1}, "axis=1"), Recipe((_f(2, 3, 4),), {"axis": -1}, "axis=-1")],
    "LogSoftmax": [Recipe((_f(2, 3, 4),), {"axis": 1}, "axis=1"), Recipe((_f(2, 3, 4),), {"axis": -1}, "axis=-1")],
    "Hardmax": [Recipe((_f(2, 3, 4),), {"axis": -1}, "axis=-1")],
    "Flatten": [Recipe((_f(2, 3, 4),), {"axis": 0}, "axis=0"), Recipe((_f(2, 3, 4),), {"axis": 2}, "axis=2")],
    "ArgMax": [Recipe((_f(2, 3, 4),), {"axis": 1, "keepdims": 0}, "axis=1 keepdims=0"),
               Recipe((_f(2, 3, 4),), {"axis": -1, "select_last_index": 1}, "select_last_index", since=12)],
    "ArgMin": [Recipe((_f(2, 3, 4),), {"axis": -1, "keepdims": 1}, "axis=-1")],
    "TopK": [Recipe((_f(3, 5),), {"k": 2}, "k attribute", outputs=2, until=9),
             Recipe((_f(3, 5), _const([2])), {"axis": -1}, "k input", outputs=2, since=10),
             Recipe((_f(3, 5), _const([2])), {"largest": 0}, "smallest", outputs=2, since=11)],
    "CumSum": [Recipe((_f(2, 3, 4), _const(1)), {"exclusive": 1, "reverse": 1}, "exclusive reverse")],
    "Cast": [Recipe((In(SHAPE, range=(-5, 5)),), {"to": TensorProto.INT32}, "float to int32"),
             Recipe((_ints(2, 3, 4, high=9),), {"to": TensorProto.FLOAT}, "int64 to float")],
    "CastLike": [Recipe((_ints(2, 3, 4, high=9), _f(1)), variant="int64 like float")],
    "OneHot": [Recipe((_ints(3, high=4), _const(4), _const([0.0, 1.0], "float32")), {"axis": -1})],
    "Range": [Recipe((_const(1.0, "float32"), _const(7.0, "float32"), _const(1.5, "float32")), variant="float")],
    "ConstantOfShape": [Recipe((_const([2, 3]),), {"value": numpy_helper.from_array(np.array([0.5], np.float32))})],
    "EyeLike": [Recipe((_f(3, 4),), {"k": 1})],
    "Trilu": [Recipe((_f(3, 4), _const(1)), {"upper": 0}, "lower k=1")],
    "DepthToSpace": [Recipe((_f(1, 8, 2, 3),), {"blocksize": 2, "mode": "CRD"}, "CRD", since=11),
                     Recipe((_f(1, 8, 2, 3),), {"blocksize": 2}, "DCR")],
    "SpaceToDepth": [Recipe((_f(1, 2, 4, 6),), {"blocksize": 2})],
    "Resize": [Recipe((_f(*IMAGE), _const([1, 1, 2, 2], "float32")), {"mode": "nearest"}, "nearest scales",
                      until=10),
               Recipe((_f(*IMAGE), _const([], "float32"), _const([1, 1, 2, 2], "float32")), {"mode": "linear"},
                      "linear scales, empty roi", since=11, until=12),
               Recipe((_f(*IMAGE), SKIP, _const([1, 1, 2, 2], "float32")), {"mode": "linear"}, "linear scales",
                      since=13),
               Recipe((_f(*IMAGE), SKIP, SKIP, _const([1, 2, 9, 9])),
                      {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
                      "nearest sizes asymmetric", since=13)],
    "Upsample": [Recipe((_f(*IMAGE),), {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 2.0]}, "scales attribute",
                        until=8),
                 Recipe((_f(*IMAGE), _const([1, 1, 2, 2], "float32")), {"mode": "nearest"}, "scales input",
                        since=9)],
    "Shape": [Recipe((_f(2, 3, 4),)), Recipe((_f(2, 3, 4),), {"start": 1, "end": -1}, "start end", since=15)],
    "Size": [Recipe((_f(2, 3, 4),))],
    "NonZero": [Recipe((In((3, 4), "float32", range=(-1, 1)),))],
    "Compress": [Recipe((_f(3, 4), _const([True, False, True], "bool")), {"axis": 0})],
    "Dropout": [Recipe((_f(2, 3, 4),), variant="inference")],
    "Elu": [Recipe((In(SHAPE, range=(-2, 2)),), {"alpha": 0.7})],
    "LeakyRelu": [Recipe((In(SHAPE, range=(-2, 2)),), {"alpha": 0.1})],
    "Selu": [Recipe((In(SHAPE, range=(-2, 2)),))],
    "ThresholdedRelu": [Recipe((In(SHAPE, range=(-2, 2)),), {"alpha": 0.3})],
    "HardSigmoid": [Recipe((In(SHAPE, range=(-4, 4)),), {"alpha": 0.3, "beta": 0.4})],
    "Shrink": [Recipe((In(SHAPE, range=(-2, 2)),), {"lambd": 0.5, "bias": 0.2})],
    "Gelu": [Recipe((In(SHAPE, range=(-3, 3)),), {"approximate": "tanh"}, "tanh")],
    "Log": [Recipe((In(SHAPE, range=(0.1, 3)),))], "Sqrt": [Recipe((In(SHAPE, range=(0.1, 3)),))],
    "Reciprocal": [Recipe((In(SHAPE, range=(0.5, 3)),))],
    "Acosh": [Recipe((In(SHAPE, range=(1.1, 3)),))], "Atanh": [Recipe((In(SHAPE, range=(-0.9, 0.9)),))],
    "Acos": [Recipe((In(SHAPE, range=(-0.9, 0.9)),))], "Asin": [Recipe((In(SHAPE, range=(-0.9, 0.9)),))],
    "BitShift": [Recipe((In(SHAPE, "uint8", range=(0, 16)), In(SHAPE, "uint8", range=(0, 4))),
                        {"direction": "LEFT"})],
    "MaxRoiPool": [Recipe((_f(*IMAGE), _const([[0, 0, 0, 4, 4]], "float32")), {"pooled_shape": [2, 2]})],
}


def opsets(op: str, newest: int) -> list[int]:
    """The opsets at which `op`'s standard signature changed (since_version of each schema version), each at least
    OLDEST_OPSET, at most `newest`."""
    versions = {schema.since_version for schema in onnx.defs.get_all_schemas_with_history()
                if schema.name == op and schema.domain == ""}
    return sorted({max(OLDEST_OPSET, v) for v in versions if v <= newest})


def _generic(schema: onnx.defs.OpSchema) -> Recipe | None:
    """A case from the schema alone (see the module doc); None where a required attribute has no default."""
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    inputs: list[In | None] = []
    for formal in schema.inputs:
        if formal.option == onnx.defs.OpSchema.FormalParameterOption.Optional:
            inputs.append(SKIP)
            continue
        types = allowed.get(formal.type_str, [formal.type_str])
        chosen = next((t for t in PREFERRED_TYPES if t in types), types[0])
        dtype = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(int32)": "int32",
                 "tensor(bool)": "bool"}.get(chosen)
        if dtype is None:
            return None
        inputs.append(In(SHAPE, dtype, range=(0, 2) if dtype == "bool" else (-1, 1) if "float" in dtype else (0, 3)))
    while inputs and inputs[-1] is SKIP:
        inputs.pop()
    attrs = {}
    for name, attribute in schema.attributes.items():
        if attribute.required:
            if name not in ATTRIBUTE_DEFAULTS:
                return None
            attrs[name] = ATTRIBUTE_DEFAULTS[name]
    outputs = sum(1 for out in schema.outputs if out.option != onnx.defs.OpSchema.FormalParameterOption.Optional)
    return Recipe(tuple(inputs), attrs, outputs=max(1, outputs))


def _model(op: str, opset: int, recipe: Recipe) -> tuple[onnx.ModelProto, dict[str, tuple[float, float]]]:
    """The one-node model of a recipe at `opset`: graph inputs and initializers, outputs typed by inference."""
    names, graph_inputs, initializers, ranges = [], [], [], {}
    for index, spec in enumerate(recipe.inputs):
        if spec is None:
            names.append("")
            continue
        name = f"in{index}"
        names.append(name)
        if spec.constant:
            initializers.append(numpy_helper.from_array(np.array(spec.value, dtype=spec.dtype), name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype))
            graph_inputs.append(helper.make_tensor_value_info(name, elem, list(spec.shape)))
            ranges[name] = spec.range or ((-1.0, 1.0) if "float" in spec.dtype else (0, 3))
    outputs = [f"out{i}" for i in range(recipe.outputs)]
    node = helper.make_node(op, names, outputs, **recipe.attrs)
    graph = helper.make_graph([node], f"{op}_{opset}", graph_inputs,
                              [helper.make_empty_tensor_value_info(name) for name in outputs], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)  # every ONNX Runtime here reads IR 8
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    onnx.checker.check_model(model)  # a recipe not valid at this opset (an attribute value it does not allow yet)
    return model, ranges


def op_cases(ops: list[str], newest: int | None = None) -> Iterator[OpCase | tuple[str, int, str]]:
    """Every case of `ops`: an OpCase, or (op, opset, why no case could be made) where neither a recipe nor the
    schema gives one."""
    newest = newest or supported_opset()
    for op in ops:
        for opset in opsets(op, newest):
            schema = onnx.defs.get_schema(op, opset, "")
            recipes = [r for r in RECIPES.get(op, []) if r.since <= opset <= r.until] or [_generic(schema)]
            for recipe in recipes:
                if recipe is None:
                    yield op, opset, "no recipe: a required attribute has no default"
                    continue
                try:
                    model, ranges = _model(op, opset, recipe)
                except Exception as exc:  # noqa: BLE001 - ONNX's inference rejects a recipe at this version
                    yield op, opset, f"no valid model at this opset ({type(exc).__name__})"
                    continue
                yield OpCase(op, opset, recipe.variant, model, ranges)
