"""Expand ONNX `LSTM` and `GRU` nodes into plain ops, unrolled over the static sequence length.

TVM's Relax ONNX frontend has no converter for LSTM or GRU. Once the input shapes are frozen the
sequence length is a constant, so each recurrent node can be rewritten, on the ONNX side, into the
ops it is defined by (MatMul, Add, Mul, Split, Gather, Concat, Reshape and the gate activations),
one copy of the cell per time step. The input projection of all time steps is one MatMul; only
the recurrent MatMul and the gate arithmetic are repeated per step.

Semantics follow the ONNX spec and, where the spec leaves room, ONNX Runtime (the runtime the
workbench checks against):
- `activation_alpha`/`activation_beta` are consumed in order, only by the activations that take
  the parameter; missing values take ONNX Runtime's defaults (LeakyRelu 0.01, HardSigmoid 0.2/0.5,
  Elu 1.0, otherwise 0).
- `clip` bounds the inputs of the gate activations (f and g), not the cell state fed to h.

Rewritten only when the result is exactly the original: `sequence_lens` must be absent or a
constant equal to the full sequence length; anything else raises a UserError naming the node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.errors import UserError
from workbench.models.graph_walk import all_nodes

RECURRENT_OPS = frozenset({"LSTM", "GRU"})
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh")}
DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


@dataclass(frozen=True)
class _ActivationKind:
    """How one RNN activation name maps onto ONNX: its op spelling and parameters with defaults."""

    name: str
    alpha: float | None = None  # None: takes no alpha
    beta: float | None = None  # None: takes no beta


# Lower-cased name -> kind; the defaults are ONNX Runtime's (rnn_helpers.cc).
ACTIVATIONS = {
    kind.name.lower(): kind
    for kind in (
        _ActivationKind("Sigmoid"),
        _ActivationKind("Tanh"),
        _ActivationKind("Relu"),
        _ActivationKind("Softsign"),
        _ActivationKind("Softplus"),
        _ActivationKind("HardSigmoid", 0.2, 0.5),
        _ActivationKind("LeakyRelu", 0.01),
        _ActivationKind("ThresholdedRelu", 0.0),
        _ActivationKind("Elu", 1.0),
        _ActivationKind("Affine", 0.0, 0.0),
        _ActivationKind("ScaledTanh", 0.0, 0.0),
    )
}


@dataclass(frozen=True)
class _Activation:
    """One activation with its parameters resolved."""

    name: str
    alpha: float | None = None
    beta: float | None = None


@dataclass(frozen=True)
class _Cell:
    """Everything about one recurrent node that shapes its expansion, checked and with defaults filled in."""

    op_type: str
    hidden: int
    seq_len: int
    batch: int
    reverse: tuple[bool, ...]  # one entry per direction, in the order of W's first axis
    activations: tuple[tuple[_Activation, ...], ...]  # per direction: (f, g) or (f, g, h)
    clip: float | None
    layout: int
    input_forget: bool
    linear_before_reset: bool
    dtype: np.dtype
    opset: int


@dataclass(frozen=True)
class _Inputs:
    """The node's input names; "" for an omitted optional input."""

    x: str
    w: str
    r: str
    b: str = ""
    sequence_lens: str = ""
    initial_h: str = ""
    initial_c: str = ""
    p: str = ""


@dataclass
class _Scope:
    """What is known where a graph's nodes run, outer graphs included: static shapes, element types, constants."""

    shapes: dict[str, tuple[int, ...]]
    elem_types: dict[str, int]
    constants: dict[str, np.ndarray]

    def nested(self, graph: onnx.GraphProto) -> _Scope:
        shapes, elem_types = _value_types(graph)
        return _Scope(
            {**self.shapes, **shapes}, {**self.elem_types, **elem_types}, {**self.constants, **_constants(graph)}
        )


def expand_recurrent(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace every LSTM and GRU node by its unrolled expansion; outputs keep their names.

    `model` must have static input shapes. Returns `model` itself when it has no such node, else a
    new model with fresh shape information; `model` is never modified. Nodes inside subgraphs
    (If branches) are expanded when their input shapes are known there and left as they are
    otherwise. Raises UserError for a node in the main graph that cannot be expanded exactly.
    """
    if not any(node.op_type in RECURRENT_OPS and node.domain in ("", "ai.onnx") for node in all_nodes(model.graph)):
        return model
    out = onnx.shape_inference.infer_shapes(model, data_prop=True)  # a copy, with every intermediate's shape
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 1)
    names = _Names(_all_names(out.graph))
    _expand_graph(out.graph, _Scope({}, {}, {}).nested(out.graph), opset, names, main=True)
    del out.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(out, data_prop=True)


# --- walking graphs --------------------------------------------------------------------------


def _expand_graph(graph: onnx.GraphProto, scope: _Scope, opset: int, names: _Names, main: bool) -> None:
    """Rewrite the recurrent nodes of `graph` in place, then those of the subgraphs of its nodes."""
    rewritten: list[onnx.NodeProto] = []
    for node in graph.node:
        for attr in node.attribute:
            for subgraph in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _expand_graph(subgraph, scope.nested(subgraph), opset, names, main=False)
        if node.op_type not in RECURRENT_OPS or node.domain not in ("", "ai.onnx"):
            rewritten.append(node)
            continue
        try:
            rewritten.extend(_expand_node(node, scope, opset, names))
        except UserError:
            if main:
                raise
            rewritten.append(node)  # inside a subgraph: left for the importer to report
    del graph.node[:]
    graph.node.extend(rewritten)


def _expand_node(node: onnx.NodeProto, scope: _Scope, opset: int, names: _Names) -> list[onnx.NodeProto]:
    """The nodes that compute exactly what `node` computes, writing its output names."""
    inputs = _Inputs(*node.input)
    cell = _describe(node, inputs, scope, opset)
    emit = _Emitter(names, _prefix(node), cell)
    step = _lstm_direction if cell.op_type == "LSTM" else _gru_direction
    results = [step(emit, cell, inputs, index) for index in range(len(cell.reverse))]
    _emit_outputs(emit, cell, results, list(node.output))
    return emit.nodes



def _all_names(graph: onnx.GraphProto) -> set[str]:
    """Every value and node name in `graph` and its subgraphs: new names must not collide with any."""
    names = {value.name for value in [*graph.input, *graph.output, *graph.value_info]}
    names.update(init.name for init in graph.initializer)
    for node in all_nodes(graph):
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
        for attr in node.attribute:
            for subgraph in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                names.update(_all_names(subgraph))
    return names


def _value_types(graph: onnx.GraphProto) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """(name -> dims for every value of `graph` whose shape is fully known, name -> element type)."""
    shapes = {init.name: tuple(init.dims) for init in graph.initializer}
    elem_types = {init.name: init.data_type for init in graph.initializer}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type:
            elem_types[value.name] = tensor_type.elem_type
        dims = tensor_type.shape.dim
        if tensor_type.HasField("shape") and all(d.HasField("dim_value") and d.dim_value >= 0 for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    return shapes, elem_types


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Values fixed in `graph` itself: initializers and the outputs of Constant nodes with a tensor value."""
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer if init.data_type != 0}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _prefix(node: onnx.NodeProto) -> str:
    """New names start with the node's name, so an expanded cell is recognizable in the graph."""
    return node.name or f"{node.op_type}_{next(name for name in node.output if name)}"


# --- reading the node ------------------------------------------------------------------------


def _describe(node: onnx.NodeProto, inputs: _Inputs, scope: _Scope, opset: int) -> _Cell:
    """Check that `node` can be unrolled exactly and gather what the expansion needs."""
    where = f"node {node.name!r} ({node.op_type})"
    attrs = {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        raise UserError(f"{where}: attribute 'layout' is {layout}; ONNX allows 0 and 1")
    direction = attrs.get("direction", b"forward").decode()
    if direction not in DIRECTIONS:
        raise UserError(f"{where}: attribute 'direction' is {direction!r}; expected one of {list(DIRECTIONS)}")
    reverse = DIRECTIONS[direction]
    x_shape = scope.shapes.get(inputs.x)
    if x_shape is None or len(x_shape) != 3 or min(x_shape) <= 0:
        raise UserError(f"{where}: the shape of input X ({inputs.x!r}) is not static, so it cannot be unrolled")
    seq_len, batch = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
    _check_sequence_lens(where, inputs.sequence_lens, seq_len, scope)
    clip = attrs.get("clip")
    if clip is not None and not clip > 0:
        raise UserError(f"{where}: attribute 'clip' is {clip}; it must be a positive threshold")
    return _Cell(
        op_type=node.op_type,
        hidden=_hidden_size(where, attrs, inputs, scope),
        seq_len=seq_len,
        batch=batch,
        reverse=reverse,
        activations=_activations(where, node.op_type, attrs, len(reverse)),
        clip=clip,
        layout=layout,
        input_forget=bool(attrs.get("input_forget", 0)),
        linear_before_reset=bool(attrs.get("linear_before_reset", 0)),
        dtype=_elem_dtype(where, inputs.x, scope),
        opset=opset,
    )


def _check_sequence_lens(where: str, name: str, seq_len: int, scope: _Scope) -> None:
    """Unrolling runs every sequence to the end: only lengths that say exactly that are accepted."""
    if not name:
        return
    if name not in scope.constants:
        raise UserError(
            f"{where}: input 'sequence_lens' ({name!r}) is not a constant; only sequences of the full length "
            f"{seq_len} can be unrolled (omit sequence_lens or make it a constant)"
        )
    lengths = scope.constants[name]
    if not np.all(lengths == seq_len):
        raise UserError(
            f"{where}: input 'sequence_lens' is {lengths.tolist()}; only sequences of the full length {seq_len} "
            "can be unrolled"
        )


def _hidden_size(where: str, attrs: dict, inputs: _Inputs, scope: _Scope) -> int:
    """The `hidden_size` attribute, or else the last dim of R ([num_directions, gates*H, H])."""
    if "hidden_size" in attrs:
        return attrs["hidden_size"]
    r_shape = scope.shapes.get(inputs.r)
    if r_shape is None or len(r_shape) != 3:
        raise UserError(f"{where}: no attribute 'hidden_size' and the shape of R is unknown")
    return r_shape[2]


def _elem_dtype(where: str, name: str, scope: _Scope) -> np.dtype:
    """The numpy dtype of X, for the constants the expansion adds (zero states, clip bounds)."""
    elem_type = scope.elem_types.get(name)
    if elem_type is None:
        raise UserError(f"{where}: the element type of input X ({name!r}) is unknown")
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _activations(where: str, op_type: str, attrs: dict, directions: int) -> tuple[tuple[_Activation, ...], ...]:
    """Per direction, the resolved activations (f, g[, h]), alphas and betas consumed as ONNX Runtime does."""
    per_direction = len(DEFAULT_ACTIVATIONS[op_type])
    names = [name.decode() for name in attrs.get("activations", [])] or [*DEFAULT_ACTIVATIONS[op_type]] * directions
    if len(names) != per_direction * directions:
        raise UserError(
            f"{where}: attribute 'activations' has {len(names)} entries; expected {per_direction} per direction "
            f"({per_direction * directions})"
        )
    alphas = iter(attrs.get("activation_alpha", []))
    betas = iter(attrs.get("activation_beta", []))
    resolved = []
    for name in names:
        kind = ACTIVATIONS.get(name.lower())
        if kind is None:
            raise UserError(
                f"{where}: activation {name!r} in attribute 'activations' is not supported; "
                f"supported: {', '.join(k.name for k in ACTIVATIONS.values())}"
            )
        alpha = next(alphas, kind.alpha) if kind.alpha is not None else None
        beta = next(betas, kind.beta) if kind.beta is not None else None
        resolved.append(_Activation(kind.name, alpha, beta))
    return tuple(tuple(resolved[d * per_direction:(d + 1) * per_direction]) for d in range(directions))


# --- emitting nodes --------------------------------------------------------------------------


class _Names:
    """Hands out value and node names unused anywhere in the model."""

    def __init__(self, taken: set[str]) -> None:
        self._taken = set(taken)

    def fresh(self, wanted: str) -> str:
        name, count = wanted, 1
        while name in self._taken:
            count += 1
            name = f"{wanted}_{count}"
        self._taken.add(name)
        return name


class _Emitter:
    """Builds the replacement nodes of one recurrent node, all named `<node name>/...`.

    Constants become Constant nodes next to the ops that use them, so an expansion inside a
    subgraph is self-contained. The few ops whose form changed between opsets (Split, Clip) are
    written for the model's opset.
    """

    def __init__(self, names: _Names, prefix: str, cell: _Cell) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self._names = names
        self._prefix = prefix
        self._cell = cell
        self._constants: dict[tuple, str] = {}

    def op(self, op_type: str, inputs: list[str], hint: str = "", outputs: int = 1, **attrs) -> str | list[str]:
        """Add one node; its output name (a list of names when `outputs` > 1)."""
        hint = hint or op_type.lower()
        names = [self._names.fresh(f"{self._prefix}/{hint}") for _ in range(outputs)]
        node_name = self._names.fresh(f"{self._prefix}/{op_type}")
        self.nodes.append(helper.make_node(op_type, inputs, names, name=node_name, **attrs))
        return names if outputs > 1 else names[0]

    def const(self, value: np.ndarray | float, hint: str = "const") -> str:
        """A Constant node holding `value` (a float becomes a scalar of the cell's dtype); reused when repeated."""
        array = np.asarray(value, dtype=self._cell.dtype if isinstance(value, float) else None)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            name = self._names.fresh(f"{self._prefix}/{hint}")
            node_name = self._names.fresh(f"{self._prefix}/Constant")
            tensor = numpy_helper.from_array(array, name)
            self.nodes.append(helper.make_node("Constant", [], [name], name=node_name, value=tensor))
            self._constants[key] = name
        return self._constants[key]

    def take(self, data: str, index: int, axis: int = 0, hint: str = "") -> str:
        """data[index] along `axis`, that axis dropped (Gather with a scalar index)."""
        return self.op("Gather", [data, self.const(np.array(index, np.int64), f"index{index}")], hint, axis=axis)

    def split(self, data: str, parts: int, axis: int, hint: str = "") -> list[str]:
        """`parts` equal slices along `axis`. Opset 18 requires the count as `num_outputs`."""
        attrs = {"num_outputs": parts} if self._cell.opset >= 18 else {}
        return self.op("Split", [data], hint, outputs=parts, axis=axis, **attrs)

    def reshape(self, data: str, shape: tuple[int, ...], hint: str = "") -> str:
        return self.op("Reshape", [data, self.const(np.array(shape, np.int64), "shape")], hint)

    def activate(self, activation: _Activation, x: str, hint: str = "", clipped: bool = True) -> str:
        """activation(clip(x)) if `clipped` and the cell has a clip, else activation(x)."""
        if clipped and self._cell.clip is not None:
            x = self._clip(x, self._cell.clip)
        name, alpha, beta = activation.name, activation.alpha, activation.beta
        if name == "Affine":  # alpha * x + beta
            return self.op("Add", [self.op("Mul", [x, self.const(alpha)]), self.const(beta)], hint)
        if name == "ScaledTanh":  # alpha * tanh(beta * x)
            return self.op("Mul", [self.op("Tanh", [self.op("Mul", [x, self.const(beta)])]), self.const(alpha)], hint)
        attrs = {key: value for key, value in (("alpha", alpha), ("beta", beta)) if value is not None}
        return self.op(name, [x], hint, **attrs)

    def _clip(self, x: str, bound: float) -> str:
        """Clip to [-bound, bound]; the bounds are inputs from opset 11, attributes before."""
        if self._cell.opset >= 11:
            return self.op("Clip", [x, self.const(-bound), self.const(bound)])
        return self.op("Clip", [x], min=-bound, max=bound)

    def rename_last(self, value: str, name: str) -> None:
        """Make the value just produced carry a name the graph already uses (Y, Y_h, Y_c)."""
        node = self.nodes[-1]
        assert list(node.output) == [value], "only a fresh single-output node can take an output name"
        node.output[0] = name


# --- the cells -------------------------------------------------------------------------------


@dataclass
class _Direction:
    """What one direction produced: H of every time step (in time order) and the final states."""

    steps: list[str]
    last_h: str
    last_c: str | None = None


def _direction_weights(emit: _Emitter, inputs: _Inputs, d: int) -> tuple[str, str]:
    """W and R of direction `d`, transposed to [in, gates*H] so each projection is a plain MatMul.

    For constant weights TVM's importer evaluates the Gather and Transpose itself, so they cost
    nothing at run time.
    """
    w = emit.op("Transpose", [emit.take(inputs.w, d)], f"d{d}/w_t", perm=[1, 0])
    r = emit.op("Transpose", [emit.take(inputs.r, d)], f"d{d}/r_t", perm=[1, 0])
    return w, r


def _initial_state(emit: _Emitter, cell: _Cell, name: str, d: int) -> str:
    """Direction `d`'s initial state [batch, H]: from the input ([D, B, H], or [B, D, H] with layout 1), or zeros."""
    if name:
        return emit.take(name, d, axis=cell.layout)
    return emit.const(np.zeros((cell.batch, cell.hidden), cell.dtype), "zeros")


def _time_steps(cell: _Cell, d: int) -> range:
    """Time indices in the order direction `d` visits them."""
    return range(cell.seq_len - 1, -1, -1) if cell.reverse[d] else range(cell.seq_len)


def _lstm_direction(emit: _Emitter, cell: _Cell, inputs: _Inputs, d: int) -> _Direction:
    """One direction of an LSTM (gates iofc, optional peepholes P[iof], optional coupled input/forget gates)."""
    f, g, h = cell.activations[d]
    w, r = _direction_weights(emit, inputs, d)
    projected = emit.op("MatMul", [inputs.x, w], f"d{d}/xw")  # [S, B, 4H] (layout 1: [B, S, 4H])
    if inputs.b:
        w_bias, r_bias = emit.split(emit.take(inputs.b, d), 2, axis=0)
        projected = emit.op("Add", [projected, emit.op("Add", [w_bias, r_bias])], f"d{d}/xw_b")
    peep_i = peep_o = peep_f = None
    if inputs.p:
        peep_i, peep_o, peep_f = emit.split(emit.take(inputs.p, d), 3, axis=0)
    hidden = _initial_state(emit, cell, inputs.initial_h, d)
    state = _initial_state(emit, cell, inputs.initial_c, d)
    outputs = [""] * cell.seq_len
    for t in _time_steps(cell, d):
        at = f"d{d}/t{t}"
        x_t = emit.take(projected, t, axis=cell.layout)
        gates = emit.op("Add", [x_t, emit.op("MatMul", [hidden, r])], f"{at}/gates")
        i_in, o_in, f_in, c_in = emit.split(gates, 4, axis=1)
        if peep_i:
            i_in = emit.op("Add", [i_in, emit.op("Mul", [peep_i, state])])
            f_in = emit.op("Add", [f_in, emit.op("Mul", [peep_f, state])])
        i_gate = emit.activate(f, i_in, f"{at}/i")
        if cell.input_forget:
            f_gate = emit.op("Sub", [emit.const(1.0), i_gate], f"{at}/f")
        else:
            f_gate = emit.activate(f, f_in, f"{at}/f")
        candidate = emit.activate(g, c_in, f"{at}/c_cand")
        state = emit.op(
            "Add", [emit.op("Mul", [f_gate, state]), emit.op("Mul", [i_gate, candidate])], f"{at}/c"
        )
        if peep_o:
            o_in = emit.op("Add", [o_in, emit.op("Mul", [peep_o, state])])
        o_gate = emit.activate(f, o_in, f"{at}/o")
        # ONNX Runtime applies `clip` to the gate activations only, not to h's input, the cell state.
        hidden = emit.op("Mul", [o_gate, emit.activate(h, state, clipped=False)], f"{at}/h")
        outputs[t] = hidden
    return _Direction(outputs, hidden, state)


def _gru_direction(emit: _Emitter, cell: _Cell, inputs: _Inputs, d: int) -> _Direction:
    """One direction of a GRU (gates zrh).

    With linear_before_reset the reset gate scales (H R_h^T + Rb_h), so H is multiplied by all of
    R in one MatMul per step and R's bias stays on that side. Without it the reset gate scales H
    before its product with R_h, so z and r take one MatMul and h another, and every bias can be
    added to the input projection once for all steps.
    """
    f, g = cell.activations[d]
    w, r = _direction_weights(emit, inputs, d)
    projected = emit.op("MatMul", [inputs.x, w], f"d{d}/xw")  # [S, B, 3H] (layout 1: [B, S, 3H])
    w_bias = r_bias = None
    if inputs.b:
        w_bias, r_bias = emit.split(emit.take(inputs.b, d), 2, axis=0)
    if not cell.linear_before_reset:
        r_z, r_r, r_h = emit.split(r, 3, axis=1)
        r = emit.op("Concat", [r_z, r_r], f"d{d}/r_zr_t", axis=1)
        if r_bias:
            w_bias, r_bias = emit.op("Add", [w_bias, r_bias], f"d{d}/bias"), None
    if w_bias:
        projected = emit.op("Add", [projected, w_bias], f"d{d}/xw_b")
    hidden = _initial_state(emit, cell, inputs.initial_h, d)
    outputs = [""] * cell.seq_len
    for t in _time_steps(cell, d):
        at = f"d{d}/t{t}"
        x_z, x_r, x_h = emit.split(emit.take(projected, t, axis=cell.layout), 3, axis=1)
        recurrent = emit.op("MatMul", [hidden, r], f"{at}/hr")
        if r_bias:
            recurrent = emit.op("Add", [recurrent, r_bias], f"{at}/hr_b")
        if cell.linear_before_reset:
            h_z, h_r, h_h = emit.split(recurrent, 3, axis=1)
        else:
            h_z, h_r = emit.split(recurrent, 2, axis=1)
        z_gate = emit.activate(f, emit.op("Add", [x_z, h_z]), f"{at}/z")
        r_gate = emit.activate(f, emit.op("Add", [x_r, h_r]), f"{at}/r")
        if cell.linear_before_reset:
            reset = emit.op("Mul", [r_gate, h_h])
        else:
            reset = emit.op("MatMul", [emit.op("Mul", [r_gate, hidden]), r_h])
        candidate = emit.activate(g, emit.op("Add", [x_h, reset]), f"{at}/h_cand")
        # (1 - z) * candidate + z * H, written as candidate + z * (H - candidate): no constant 1 needed.
        blend = emit.op("Mul", [z_gate, emit.op("Sub", [hidden, candidate])])
        hidden = emit.op("Add", [candidate, blend], f"{at}/h")
        outputs[t] = hidden
    return _Direction(outputs, hidden)


# --- outputs ---------------------------------------------------------------------------------


def _emit_outputs(emit: _Emitter, cell: _Cell, results: list[_Direction], names: list[str]) -> None:
    """Write the outputs the node names (Y, Y_h, Y_c; an empty or missing name is an unused output).

    Y is [S, D, B, H] and the states [D, B, H], or [B, S, D, H] and [B, D, H] with layout 1.
    Each is one Concat of [B, H] pieces in memory order, one Reshape and, for layout 1, a Transpose.
    """
    names = names + [""] * (3 - len(names))
    y, y_h, y_c = names
    directions, batch, hidden = len(results), cell.batch, cell.hidden
    if y:
        steps = [result.steps[t] for t in range(cell.seq_len) for result in results]
        _write(emit, steps, (cell.seq_len, directions, batch, hidden), [2, 0, 1, 3] if cell.layout else None, y)
    if y_h:
        _write(emit, [r.last_h for r in results], (directions, batch, hidden), [1, 0, 2] if cell.layout else None, y_h)
    if y_c and cell.op_type == "LSTM":
        _write(emit, [r.last_c for r in results], (directions, batch, hidden), [1, 0, 2] if cell.layout else None, y_c)


def _write(emit: _Emitter, pieces: list[str], shape: tuple[int, ...], perm: list[int] | None, name: str) -> None:
    """Stack [B, H] `pieces` along axis 0, reshape to `shape`, transpose by `perm`; the result is `name`."""
    stacked = emit.op("Concat", pieces, axis=0) if len(pieces) > 1 else pieces[0]
    value = emit.reshape(stacked, shape)
    if perm:
        value = emit.op("Transpose", [value], perm=perm)
    emit.rename_last(value, name)
