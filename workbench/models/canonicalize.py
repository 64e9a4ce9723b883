"""Turn an exported ONNX model into one the Relax frontend can import: static, checked, shape-folded.

Exporters (paddle2onnx, older torch.onnx) leave batch and spatial dims symbolic and compute
`Reshape` targets at run time (`Shape -> Slice -> Cast -> Concat -> Reshape`). The Relax frontend
wants those targets as constants. Once the input shapes are frozen every such subgraph depends
on static shapes only, so it can be evaluated here, on the ONNX side, with ONNX's own reference
evaluator. Only small tensors (shape arithmetic) are folded; weights and the operators that use
them are left exactly as exported, so the workbench's passes still see the real graph.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter
from onnx.reference import ReferenceEvaluator

from workbench.errors import UserError, one_line
from workbench.models.graph_walk import all_nodes
from workbench.models.recurrent import expand_recurrent

# Larger constant results are weights or activations, not shape arithmetic: never fold them.
MAX_FOLDED_ELEMENTS = 1024
# Ops whose first input only matters through its (static) shape.
SHAPE_OPS = frozenset({"Shape", "Size"})
# Same inputs, different outputs on every run: folding would freeze one random draw.
NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})
# Op forms TVM 0.27's ONNX frontend converts wrongly or not at all (docs/results/conformance.md found them): op -> the
# opset from which it converts it right. A model using one at an older opset is raised to CONVERTED_OPSET by ONNX's
# version converter (Upsample becomes Resize, Slice's attributes inputs, ...) before anything else sees it.
OLD_FORMS = {"Upsample": 10, "Resize": 11, "Slice": 10, "TopK": 11, "ArgMax": 11, "ArgMin": 11}
CONVERTED_OPSET = 13
ONE_NODE_IR = 8  # a folded node's one-node model: an IR version every supported ONNX Runtime reads

Dims = tuple[int, ...]


@dataclass(frozen=True)
class InputSpec:
    """One graph input as the experiment config describes it."""

    shape: tuple[int, ...]
    dtype: str = "float32"  # numpy dtype name


@dataclass(frozen=True)
class Unfolded:
    """A node whose inputs were all known but which the reference evaluator could not run: it stays computed."""

    node: str  # its name (or `<its first output>` where it has none)
    op: str
    opset: int  # the model's opset for the op's domain: the version it was evaluated at
    reason: str

    def __str__(self) -> str:
        return f"{self.node} ({self.op}, opset {self.opset}): {self.reason}"


@dataclass(frozen=True)
class FoldReport:
    """What folding the shape computations did: how many nodes became constants, and which could not."""

    folded: int = 0
    unfolded: tuple[Unfolded, ...] = ()

    def as_dict(self) -> dict:
        return {"folded": self.folded, "unfolded": [asdict(node) for node in self.unfolded]}


@dataclass(frozen=True)
class Canonical:
    """The canonical model (static, checked, shape-folded, recurrences unrolled) and what its folding did."""

    model: onnx.ModelProto
    folding: FoldReport
    converted_from: int | None = None  # the opset the model was exported at, where it was converted (OLD_FORMS)


def canonicalize(model: onnx.ModelProto, inputs: dict[str, InputSpec]) -> Canonical:
    """Check the opset, freeze input shapes, run the ONNX checker, raise a model using an old op form TVM's
    frontend gets wrong to CONVERTED_OPSET, drop inference-mode Dropout, fold shape-computing subgraphs, unroll
    LSTM/GRU nodes.

    Returns a new model; `model` is not modified. Raises UserError for a newer opset than this
    installation runs, for specs that do not fit the model and for models the ONNX checker rejects.
    """
    _check_opset(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _drop_initializer_inputs(out)
    _freeze_inputs(out.graph, inputs)
    try:
        onnx.checker.check_model(out)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"the model fails the ONNX checker: {first}") from exc
    _refuse_non_tensor_outputs(out)
    converted_from = None
    if (converted := _old_forms_converted(out)) is not None:
        converted_from, out = model_opset(out), converted
    _inference_dropout(out.graph)
    folding = _fold_shape_computations(out)
    try:
        out = expand_recurrent(out)
    except UserError as exc:  # a shape left computed is the usual cause: say which nodes could not be folded
        if not folding.unfolded:
            raise
        raise UserError(f"{exc}; {len(folding.unfolded)} shape node(s) could not be folded, the first: "
                        f"{folding.unfolded[0]}") from exc
    return Canonical(out, folding, converted_from)


def _inference_dropout(graph: onnx.GraphProto) -> None:
    """Dropout at inference is its input: each one not in training mode whose mask nobody reads becomes an
    Identity, as ONNX Runtime's graph optimizer does. TVM's frontend keeps `nn.dropout`, whose mask (a tensor of
    ones) fusion would make a second output of the kernel it joins, and a kernel with two outputs gets no matmul
    schedule: a classifier's fully connected layers ran as plain loops (tests/test_canonicalize.py)."""
    constants = {init.name: init for init in graph.initializer}
    read = {name for node in all_nodes(graph) for name in node.input} | {value.name for value in graph.output}
    read |= {value.name for node in all_nodes(graph) for attr in node.attribute  # a subgraph may return an outer
             for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs)  # name as its output
             for value in sub.output}
    for node in graph.node:
        if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx"):
            continue
        training = node.input[2] if len(node.input) > 2 else ""
        if training and (training not in constants or numpy_helper.to_array(constants[training]).any()):
            continue  # training mode, or not known to be off
        if len(node.output) > 1 and node.output[1] and node.output[1] in read:
            continue
        node.CopyFrom(helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))


# --- the opset ------------------------------------------------------------------------------


def _check_opset(model: onnx.ModelProto) -> None:
    """Refuse a default-domain opset newer than `supported_opset()`, before any long work.

    ONNX's checker accepts any opset number and TVM's frontend imports it, but ONNX Runtime (the accuracy
    reference) refuses it: without this check such a run builds, measures, and checks nothing. Other
    domains (ai.onnx.ml, com.microsoft, ...) have their own numbering and are left to the runtimes.
    """
    version = model_opset(model)
    limit = supported_opset()
    if version > limit:
        import onnxruntime

        raise UserError(
            f"the model imports ONNX opset {version}, but the highest supported here is {limit} (onnx "
            f"{onnx.__version__} knows up to {onnx.defs.onnx_opset_version()}, onnxruntime {onnxruntime.__version__} "
            f"runs up to {_onnxruntime_opset()}); export the model at opset {limit} or lower"
        )


def supported_opset() -> int:
    """The newest default-domain opset both the installed onnx (checker, shape inference, folding) and the
    installed ONNX Runtime (the reference and its baselines) support."""
    return min(onnx.defs.onnx_opset_version(), _onnxruntime_opset())


@functools.cache
def _onnxruntime_opset() -> int:
    """The newest default-domain opset the installed ONNX Runtime accepts, found by asking it.

    onnxruntime publishes no constant for it, and a table keyed by its version would go stale with every
    release. So, from onnx's own limit downwards, the first opset for which ONNX Runtime creates a session
    on a graph with no nodes, with its default session options (the ones every ONNX Runtime label uses):
    with no nodes there is no kernel to miss, so only the opset stamp can be refused. The first probe
    usually succeeds; each takes under a millisecond, once per process. If none is accepted (never seen),
    onnx's limit alone applies.
    """
    import onnxruntime

    value = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    graph = helper.make_graph([], "opset_probe", [value], [value])
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the probe's refusals are expected: keep them off the console
    options.intra_op_num_threads = 1  # an empty graph: no thread pool to size (nor to spin beside the measured ones)
    newest = onnx.defs.onnx_opset_version()
    for version in range(newest, 0, -1):
        probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)], ir_version=8)
        try:
            onnxruntime.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - onnxruntime raises its own (non-exported) classes for a refused model
            continue
        return version
    return newest


def model_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset."""
    return max((opset.version for opset in model.opset_import if opset.domain in DEFAULT_DOMAINS), default=0)


# --- old op forms and outputs the workbench cannot run ------------------------------------------


def _old_forms_converted(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model raised to CONVERTED_OPSET where it uses an op in a form TVM's frontend converts wrongly or not at
    all (OLD_FORMS); None where it uses none. A model ONNX's version converter cannot raise is refused, naming the
    node and what would make it run."""
    opset = model_opset(model)
    old = next((node for node in all_nodes(model.graph) if opset < OLD_FORMS.get(node.op_type, 0)), None)
    if old is None:
        return None
    refusal = (f"node {old.name!r} ({old.op_type}, opset {opset}): TVM's ONNX frontend converts this op correctly "
               f"only from opset {OLD_FORMS[old.op_type]}, and ONNX's version converter could not raise the model to "
               f"opset {CONVERTED_OPSET}")
    advice = f"export the model at opset {CONVERTED_OPSET} or later"
    try:
        converted = version_converter.convert_version(model, CONVERTED_OPSET)
        onnx.checker.check_model(converted, full_check=True)
    except Exception as exc:  # noqa: BLE001 - the converter raises many types for the adapters it lacks
        raise UserError(f"{refusal} ({one_line(exc)}); {advice}") from exc
    if _signature(converted) != _signature(model):  # ONNX Runtime's reference runs the converted model too
        raise UserError(f"{refusal} without changing its inputs' or outputs' types; {advice}")
    return converted


def _signature(model: onnx.ModelProto) -> list[tuple[str, int, tuple[int, ...] | None]]:
    """The graph's inputs (name, element type, frozen shape) and outputs (name, element type: their declared dims
    may be symbolic, and conversion may infer them)."""
    inputs = [(v.name, v.type.tensor_type.elem_type, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
              for v in model.graph.input]
    return inputs + [(v.name, v.type.tensor_type.elem_type, None) for v in model.graph.output]


def _refuse_non_tensor_outputs(model: onnx.ModelProto) -> None:
    """Every graph output must be a tensor: the workbench runs and compares tensors (a sequence or optional output
    would come back as something else)."""
    for value in model.graph.output:
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            producer = next((n for n in model.graph.node if value.name in n.output), None)
            made_by = f" (made by node {producer.name!r}, {producer.op_type})" if producer is not None else ""
            raise UserError(f"graph output {value.name!r} is a {kind.removesuffix('_type')}{made_by}, opset "
                            f"{model_opset(model)}: the workbench runs models whose outputs are tensors; end the "
                            "graph with a tensor (ConcatFromSequence, OptionalGetElement)")


# --- freezing inputs -------------------------------------------------------------------------


def _drop_initializer_inputs(model: onnx.ModelProto) -> None:
    """Remove graph inputs that are initializers (IR < 4 exporters list every weight as an input).

    They are weights, not inputs: leaving them would make ONNX Runtime treat them as overridable
    and shape inference treat their values as unknown. IR 4 is the first version that allows
    initializers outside `graph.input`, so the model is raised to it if needed.
    """
    weights = {init.name for init in model.graph.initializer}
    if not any(value.name in weights for value in model.graph.input):
        return
    real = [value for value in model.graph.input if value.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(real)
    model.ir_version = max(model.ir_version, 4)


def _is_static(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """A fixed dim; paddle2onnx also writes dim_value -1 to mean 'dynamic'."""
    return dim.HasField("dim_value") and dim.dim_value >= 0


def _format_shape(value: onnx.ValueInfoProto) -> str:
    """The declared shape with symbolic dims by name, e.g. [batch, 3, ?, ?]."""
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return "unknown rank"
    dims = [str(d.dim_value) if _is_static(d) else (d.dim_param or "?") for d in tensor_type.shape.dim]
    return f"[{', '.join(dims)}]"


def _freeze_inputs(graph: onnx.GraphProto, specs: dict[str, InputSpec]) -> None:
    """Give every input named in `specs` its static shape; every other input must already be static."""
    by_name = {value.name: value for value in graph.input}
    for name, spec in specs.items():
        if name not in by_name:
            raise UserError(_unknown_input_message(name, graph))
        _freeze_input(by_name[name], spec)
    for value in graph.input:
        tensor_type = value.type.tensor_type
        if value.name in specs:
            continue
        if not tensor_type.HasField("shape") or not all(_is_static(d) for d in tensor_type.shape.dim):
            raise UserError(
                f"model input {value.name!r} has shape {_format_shape(value)}, which is not static, and no "
                f"shape is given for it: add model.inputs.{value.name} with a shape"
            )


def _unknown_input_message(name: str, graph: onnx.GraphProto) -> str:
    real = [value.name for value in graph.input]
    message = f"model.inputs.{name}: the model has no input {name!r}; its inputs are {real}"
    if any(init.name == name for init in graph.initializer):
        return message + f" ({name!r} is a weight, not an input)"
    close = difflib.get_close_matches(name, real, n=1)
    return message + (f"; did you mean {close[0]!r}?" if close else "")


def _freeze_input(value: onnx.ValueInfoProto, spec: InputSpec) -> None:
    """Check `spec` against the declared type of `value`, then write the static shape into it."""
    where = f"model.inputs.{value.name}"
    tensor_type = value.type.tensor_type
    declared = _format_shape(value)
    try:
        wanted = np.dtype(spec.dtype)
    except TypeError as exc:
        raise UserError(f"{where}.dtype: {spec.dtype!r} is not a numpy dtype name") from exc
    model_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    if wanted != model_dtype:
        raise UserError(f"{where}.dtype: the model declares {model_dtype.name}, the config says {wanted.name}")
    bad = [d for d in spec.shape if d <= 0]
    if bad:
        raise UserError(f"{where}.shape {list(spec.shape)}: every dim must be positive, got {bad[0]}")
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        if len(dims) != len(spec.shape):
            raise UserError(
                f"{where}.shape {list(spec.shape)} has rank {len(spec.shape)}, "
                f"but the model declares {declared} (rank {len(dims)})"
            )
        for axis, (dim, size) in enumerate(zip(dims, spec.shape)):
            if _is_static(dim) and dim.dim_value != size:
                raise UserError(
                    f"{where}.shape {list(spec.shape)}: dim {axis} is {size}, but the model fixes it "
                    f"to {dim.dim_value} (declared shape {declared})"
                )
    tensor_type.ClearField("shape")
    tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in spec.shape)


# --- folding shape computations --------------------------------------------------------------


def _fold_shape_computations(model: onnx.ModelProto) -> FoldReport:
    """Fold until nothing changes, drop what became dead, and re-infer all shapes; what was folded and what could
    not be (nodes still in the graph whose evaluation failed).

    Shape inference is re-run between passes: a value folded in one pass can make the output
    shape of a later node (say a ConstantOfShape) known, and that size decides the next fold.
    """
    failures: dict[str, Unfolded] = {}
    folded = 0
    while count := _fold_pass(model.graph, _static_shapes(_inferred(model).graph), model.opset_import, failures):
        folded += count
    _remove_dead(model.graph)
    remaining = {_node_name(node) for node in model.graph.node}
    # Inference replaces symbolic output dims but keeps paddle2onnx's -1 (e.g. [-1, 2]): unset those.
    for value in model.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if not _is_static(dim):
                dim.Clear()
    model.CopyFrom(_inferred(model))
    return FoldReport(folded, tuple(failure for name, failure in failures.items() if name in remaining))


def _node_name(node: onnx.NodeProto) -> str:
    """The node's name, or (exporters leave some unnamed) its first output's, which stays the same as nodes fold."""
    return node.name or f"<{node.output[0]}>"


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with fresh value_info; data propagation makes Shape -> ... -> Reshape chains typed."""
    del model.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def _static_shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, Dims]]:
    """name -> (elem_type, dims) for every value whose shape is fully known."""
    shapes = {init.name: (init.data_type, tuple(init.dims)) for init in graph.initializer}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = value.type.tensor_type
        if tensor_type.HasField("shape") and all(_is_static(d) for d in tensor_type.shape.dim):
            shapes[value.name] = (tensor_type.elem_type, tuple(d.dim_value for d in tensor_type.shape.dim))
    return shapes


def _fold_pass(graph: onnx.GraphProto, shapes: dict[str, tuple[int, Dims]], opsets: Iterable[onnx.OperatorSetIdProto],
               failures: dict[str, Unfolded]) -> int:
    """One walk in graph order; nodes folded early feed the nodes after them. How many folded; the nodes that
    could not be evaluated go into `failures` (by name)."""
    known = {
        init.name: numpy_helper.to_array(init)
        for init in graph.initializer
        if int(np.prod(init.dims)) <= MAX_FOLDED_ELEMENTS
    }
    graph_outputs = {value.name for value in graph.output}
    kept, folded = [], []
    for node in graph.node:
        tried = _node_name(node) in failures  # it failed before with the same inputs: it would again
        results = _evaluate(node, known, shapes, opsets) if not tried and _foldable(node, shapes, graph_outputs) else None
        if isinstance(results, Unfolded):
            failures[_node_name(node)] = results
        if not isinstance(results, dict):
            kept.append(node)
            continue
        known.update(results)
        if node.op_type == "Constant":
            kept.append(node)  # already a constant: its value is now known, the node stays until dead
        else:
            folded.extend(numpy_helper.from_array(array, name) for name, array in results.items())
    if not folded:
        return 0
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(folded)
    return len(folded)


def _foldable(node: onnx.NodeProto, shapes: dict[str, tuple[int, Dims]], graph_outputs: set[str]) -> bool:
    """A deterministic standard op, no subgraphs, every output small and of known shape.

    Graph outputs stay computed: folding one would leave a graph that returns a constant.
    """
    return (
        node.domain in DEFAULT_DOMAINS
        and node.op_type not in NONDETERMINISTIC_OPS
        and not any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attr in node.attribute)
        and not any(name in graph_outputs for name in node.output)
        and all(name in shapes and int(np.prod(shapes[name][1])) <= MAX_FOLDED_ELEMENTS for name in node.output)
    )


def _evaluate(
    node: onnx.NodeProto,
    known: dict[str, np.ndarray],
    shapes: dict[str, tuple[int, Dims]],
    opsets: Iterable[onnx.OperatorSetIdProto],
) -> dict[str, np.ndarray] | Unfolded | None:
    """Run `node` with ONNX's reference evaluator if all its inputs are known; output name -> value, None where an
    input is not known, or why the evaluator failed.

    The node runs as a one-node model with the model's own opset imports: the evaluator then takes each op at the
    model's version (an opset-12 Unsqueeze with an `axes` attribute; evaluated as a bare node it would be the
    newest version, which takes axes as an input, and fail). The data input of Shape/Size is a zero-copy stand-in
    of the right shape (np.broadcast_to), so big activations are never materialized.
    """
    feeds = {}
    for position, name in enumerate(node.input):
        if not name:
            continue  # an omitted optional input
        if name in known:
            feeds[name] = known[name]
        elif position == 0 and node.op_type in SHAPE_OPS and name in shapes:
            feeds[name] = np.broadcast_to(np.float32(0), shapes[name][1])
        else:
            return None
    outputs = [name for name in node.output if name]
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
         for name, array in feeds.items()],
        [helper.make_tensor_value_info(name, shapes[name][0], shapes[name][1]) for name in outputs])
    # the node's domain is "" whatever the model calls the default one ("ai.onnx" included)
    imports = [helper.make_opsetid("" if o.domain in DEFAULT_DOMAINS else o.domain, o.version) for o in opsets]
    one_node = helper.make_model(graph, opset_imports=imports, ir_version=ONE_NODE_IR)
    try:
        values = ReferenceEvaluator(one_node).run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - the evaluator lacks some ops and old versions, raises its own types
        values, why_not = _run_with_onnxruntime(one_node, feeds)
        if values is None:
            version = next((o.version for o in imports if o.domain == ""), 0)
            return Unfolded(_node_name(node), node.op_type, version,
                            f"reference evaluator: {one_line(exc)}; ONNX Runtime: {why_not}")
    results = {name: np.asarray(value, dtype=helper.tensor_dtype_to_np_dtype(shapes[name][0]))
               for name, value in zip(outputs, values)}
    if any(results[name].shape != tuple(shapes[name][1]) for name in outputs):  # never a constant of another shape
        return Unfolded(_node_name(node), node.op_type, next((o.version for o in imports if o.domain == ""), 0),
                        "evaluated to another shape than shape inference gives")
    return results


def _run_with_onnxruntime(one_node: onnx.ModelProto,
                          feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray] | None, str]:
    """The one-node model run by ONNX Runtime (every op at every opset it supports: Upsample-7 and Resize-10, which
    ONNX's reference evaluator gets wrong or lacks), or None and why it could not run it either."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # a refusal is expected and reported by the caller
    options.intra_op_num_threads = 1
    try:
        session = onnxruntime.InferenceSession(one_node.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        # np.array copies (a Shape input's zero-copy stand-in becomes real: small, as only small outputs fold) and
        # keeps a 0-d feed 0-d (np.ascontiguousarray made scalars [1])
        return session.run(None, {name: np.array(array) for name, array in feeds.items()}), ""
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own (non-exported) classes
        return None, one_line(exc)


def _remove_dead(graph: onnx.GraphProto) -> None:
    """Drop nodes and initializers nothing reaches from the graph outputs (folded-away chains)."""
    needed = {value.name for value in graph.output}
    live = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            live.append(node)
            needed.update(_inputs_of(node))
    del graph.node[:]
    graph.node.extend(reversed(live))
    initializers = [init for init in graph.initializer if init.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def _inputs_of(node: onnx.NodeProto) -> Iterable[str]:
    """Names a node reads, including outer-scope names read inside its subgraphs (If, Loop, Scan)."""
    yield from (name for name in node.input if name)
    for attr in node.attribute:
        for subgraph in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            for inner in subgraph.node:
                yield from _inputs_of(inner)
