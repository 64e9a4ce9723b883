"""expand_recurrent: LSTM and GRU unrolled into plain ops, checked against ONNX Runtime and, built, against TVM."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from workbench.errors import UserError
from workbench.models.canonicalize import InputSpec, canonicalize
from workbench.models.importer import import_to_relax
from workbench.models.recurrent import expand_recurrent
from workbench.models.sources import fetch_pkg_file

SEQ, BATCH, FEATURES, HIDDEN = 3, 2, 5, 4
GATES = {"LSTM": 4, "GRU": 3}
SILERO = "pkg:silero-vad==6.2.3/silero_vad/data/silero_vad_openvino_16k.onnx"


# --- building and running models -------------------------------------------------------------


def _recurrent_model(
    op: str,
    *,
    direction: str = "forward",
    layout: int = 0,
    bias: bool = True,
    initial: bool = True,
    peephole: bool = False,
    outputs: tuple[str, ...] | None = None,
    sequence_lens: np.ndarray | str | None = None,
    opset: int = 17,
    seed: int = 0,
    **attrs,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One LSTM/GRU node named `rnn` and its feeds. X and the initial states are graph inputs, the weights initializers.

    The random values depend on `seed` only, never on `layout`: a layout-1 model and its layout-0 twin
    compute the same function on transposed data.
    """
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    state_shape = (dirs, BATCH, HIDDEN)
    x = rng.standard_normal((SEQ, BATCH, FEATURES)).astype(np.float32)
    weights = {
        "W": rng.standard_normal((dirs, gates * HIDDEN, FEATURES)) * 0.5,
        "R": rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)) * 0.5,
        "B": rng.standard_normal((dirs, 2 * gates * HIDDEN)) * 0.5,
        "P": rng.standard_normal((dirs, 3 * HIDDEN)) * 0.5,
    }
    states = {"initial_h": rng.standard_normal(state_shape), "initial_c": rng.standard_normal(state_shape)}
    used = {"B": bias, "P": peephole and op == "LSTM", "initial_h": initial, "initial_c": initial and op == "LSTM"}
    if layout:
        x = x.transpose(1, 0, 2)
        states = {name: value.transpose(1, 0, 2) for name, value in states.items()}
    feeds = {"X": x} | {name: value.astype(np.float32) for name, value in states.items() if used[name]}
    initializers = [numpy_helper.from_array(value.astype(np.float32), name)
                    for name, value in weights.items() if used.get(name, True)]
    lens_name = ""
    if isinstance(sequence_lens, np.ndarray):
        lens_name = "sequence_lens"
        initializers.append(numpy_helper.from_array(sequence_lens, lens_name))
    elif isinstance(sequence_lens, str):
        lens_name = sequence_lens
        feeds[lens_name] = np.full(BATCH, SEQ, np.int32)
    names = ["X", "W", "R", "B" if bias else "", lens_name, "initial_h" if initial else ""]
    names += ["initial_c" if initial else "", "P" if used["P"] else ""] if op == "LSTM" else []
    while not names[-1]:
        names.pop()
    if outputs is None:
        outputs = ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")
    final_state = (BATCH, dirs, HIDDEN) if layout else state_shape
    output_shapes = {"Y": (BATCH, SEQ, dirs, HIDDEN) if layout else (SEQ, dirs, BATCH, HIDDEN),
                     "Y_h": final_state, "Y_c": final_state}
    node = helper.make_node(op, names, list(outputs), name="rnn", hidden_size=HIDDEN, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    graph = helper.make_graph(
        [node], "recurrent",
        [helper.make_tensor_value_info(name, TensorProto.INT32 if name == lens_name else TensorProto.FLOAT,
                                       value.shape) for name, value in feeds.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, output_shapes[name]) for name in outputs if name],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feeds


def _ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _reference(op: str, **kwargs) -> list[np.ndarray]:
    """ONNX Runtime's outputs for `_recurrent_model(op, **kwargs)`.

    ONNX Runtime rejects layout 1, so a layout-1 node is run as its layout-0 twin and the outputs
    transposed: Y [S, D, B, H] -> [B, S, D, H], the states [D, B, H] -> [B, D, H].
    """
    layout = kwargs.pop("layout", 0)
    model, feeds = _recurrent_model(op, **kwargs)
    results = _ort_run(model, feeds)
    if not layout:
        return results
    return [value.transpose(2, 0, 1, 3) if value.ndim == 4 else value.transpose(1, 0, 2) for value in results]


def _tvm_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    executable = tvm.compile(import_to_relax(model), tvm.target.Target("llvm"))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(feeds[value.name]) for value in model.graph.input])
    return [result.numpy()] if isinstance(result, tvm.runtime.Tensor) else [value.numpy() for value in result]


def _check_expansion(op: str, **kwargs) -> onnx.ModelProto:
    """Expand the node, check the result is a plain ONNX graph TVM can import, and compare it with ONNX Runtime."""
    model, feeds = _recurrent_model(op, **kwargs)
    expanded = expand_recurrent(model)
    onnx.checker.check_model(expanded, full_check=True)
    op_types = {node.op_type for node in expanded.graph.node}
    assert not op_types & {"LSTM", "GRU"}
    assert op_types <= set(onnx_frontend._get_convert_map()) | {"Constant"}  # noqa: SLF001
    assert all(node.name.startswith("rnn/") for node in expanded.graph.node)
    expected = _reference(op, **kwargs)
    actual = _ort_run(expanded, feeds)
    assert [value.shape for value in actual] == [value.shape for value in expected]
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    return expanded


# --- attribute combinations against ONNX Runtime ---------------------------------------------

DIRECTIONS = ["forward", "reverse", "bidirectional"]


@pytest.mark.parametrize(
    "direction,initial,bias,peephole,layout",
    list(itertools.product(DIRECTIONS, [False, True], [False, True], [False, True], [0, 1])),
)
def test_lstm_matches_onnxruntime(direction, initial, bias, peephole, layout):
    _check_expansion("LSTM", direction=direction, initial=initial, bias=bias, peephole=peephole, layout=layout)


@pytest.mark.parametrize(
    "direction,initial,bias,layout,linear_before_reset",
    list(itertools.product(DIRECTIONS, [False, True], [False, True], [0, 1], [0, 1])),
)
def test_gru_matches_onnxruntime(direction, initial, bias, layout, linear_before_reset):
    _check_expansion("GRU", direction=direction, initial=initial, bias=bias, layout=layout,
                     linear_before_reset=linear_before_reset)


ACTIVATION_CASES = [
    # (op, direction, activations, activation_alpha, activation_beta, clip)
    ("LSTM", "forward", ["HardSigmoid", "Tanh", "Relu"], [0.3], [0.6], None),
    ("LSTM", "forward", ["HardSigmoid", "Tanh", "Tanh"], None, None, 0.5),  # HardSigmoid's default alpha/beta
    ("LSTM", "bidirectional", ["Sigmoid", "Tanh", "Tanh", "HardSigmoid", "Relu", "Tanh"], [0.25], [0.4], 0.8),
    ("LSTM", "reverse", ["Sigmoid", "ScaledTanh", "Affine"], [1.5, 0.5], [0.7, 0.1], 2.0),
    ("LSTM", "bidirectional", ["LeakyRelu", "Elu", "Softsign", "Sigmoid", "Softplus", "ThresholdedRelu"],
     [0.1, 0.9, 0.05], None, None),
    ("LSTM", "forward", ["Sigmoid", "Tanh", "Tanh"], None, None, 0.3),
    ("GRU", "forward", ["HardSigmoid", "Relu"], [0.3], [0.6], None),
    ("GRU", "bidirectional", ["Sigmoid", "Tanh", "HardSigmoid", "Relu"], None, None, 0.7),
    ("GRU", "reverse", ["Sigmoid", "Tanh"], None, None, 0.3),
    ("GRU", "bidirectional", ["Affine", "Softsign", "Sigmoid", "ScaledTanh"], [0.2, 1.2], [0.5, 0.8], None),
]


@pytest.mark.parametrize(
    "op,direction,activations,alpha,beta,clip,linear_before_reset",
    [(*case, lbr) for case in ACTIVATION_CASES for lbr in ([0, 1] if case[0] == "GRU" else [0])],
)
def test_activations_and_clip_match_onnxruntime(op, direction, activations, alpha, beta, clip, linear_before_reset):
    attrs = {"activations": activations}
    attrs |= {"activation_alpha": alpha} if alpha else {}
    attrs |= {"activation_beta": beta} if beta else {}
    attrs |= {"clip": clip} if clip else {}
    attrs |= {"linear_before_reset": linear_before_reset} if op == "GRU" else {}
    _check_expansion(op, direction=direction, peephole=True, **attrs)


@pytest.mark.parametrize("direction,peephole,layout", [("forward", False, 0), ("bidirectional", True, 1)])
def test_lstm_input_forget_matches_onnxruntime(direction, peephole, layout):
    _check_expansion("LSTM", direction=direction, peephole=peephole, layout=layout, input_forget=1)


@pytest.mark.parametrize(
    "op,outputs", [("LSTM", ("", "Y_h")), ("LSTM", ("Y",)), ("LSTM", ("", "", "Y_c")), ("GRU", ("", "Y_h"))],
)
def test_only_the_named_outputs_are_computed(op, outputs):
    expanded = _check_expansion(op, direction="bidirectional", outputs=outputs)
    assert [value.name for value in expanded.graph.output] == [name for name in outputs if name]


@pytest.mark.parametrize("opset", [10, 14, 18])
def test_opset_dependent_ops_are_written_for_the_models_opset(opset):
    """Split (num_outputs from 18) and Clip (bounds as inputs from 11) change form across opsets."""
    _check_expansion("LSTM", direction="bidirectional", peephole=True, clip=0.5, opset=opset)
    _check_expansion("GRU", direction="bidirectional", clip=0.5, opset=opset)


def test_full_length_constant_sequence_lens_is_accepted():
    _check_expansion("LSTM", sequence_lens=np.full(BATCH, SEQ, np.int32))


def test_partial_sequence_lens_is_rejected():
    model, _ = _recurrent_model("GRU", sequence_lens=np.array([SEQ, SEQ - 1], np.int32))
    with pytest.raises(UserError, match=r"node 'rnn' \(GRU\): input 'sequence_lens' is \[3, 2\]"):
        expand_recurrent(model)


def test_runtime_sequence_lens_is_rejected():
    model, _ = _recurrent_model("LSTM", sequence_lens="lengths")
    with pytest.raises(UserError, match=r"node 'rnn' \(LSTM\): input 'sequence_lens' \('lengths'\) is not a constant"):
        expand_recurrent(model)


def test_unsupported_activation_names_the_attribute():
    model, _ = _recurrent_model("LSTM", activations=["Sigmoid", "Gelu", "Tanh"])
    with pytest.raises(UserError, match=r"node 'rnn' \(LSTM\): activation 'Gelu' in attribute 'activations'"):
        expand_recurrent(model)


def test_wrong_number_of_activations_names_the_attribute():
    model, _ = _recurrent_model("GRU", direction="bidirectional", activations=["Sigmoid", "Tanh"])
    with pytest.raises(UserError, match=r"node 'rnn' \(GRU\): attribute 'activations' has 2 entries"):
        expand_recurrent(model)


def test_a_model_without_recurrent_nodes_is_returned_as_is():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "plain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph)
    assert expand_recurrent(model) is model


def test_lstm_inside_an_if_branch_is_expanded():
    """A branch reading outer-scope values with known shapes is expanded like the main graph."""
    inner, feeds = _recurrent_model("LSTM", outputs=("", "Y_h"))
    branch = helper.make_graph(list(inner.graph.node), "then", [],
                               [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["initial_h"], ["Y_h2"])], "else", [],
                              [helper.make_tensor_value_info("Y_h2", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["cond"], ["out"], name="choose", then_branch=branch, else_branch=other)
    graph = helper.make_graph(
        [node], "with_if",
        [*inner.graph.input, helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], list(inner.graph.initializer),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    expanded = expand_recurrent(model)
    then_branch = next(attr.g for attr in expanded.graph.node[0].attribute if attr.name == "then_branch")
    then_ops = {node.op_type for node in then_branch.node}
    assert "LSTM" not in then_ops and "MatMul" in then_ops
    feeds["cond"] = np.array(True)
    np.testing.assert_allclose(_ort_run(expanded, feeds)[0], _ort_run(model, feeds)[0], atol=1e-5)


def test_canonicalize_expands_recurrent_nodes():
    model, _ = _recurrent_model("GRU")
    ops = {node.op_type for node in canonicalize(model, {}).model.graph.node}
    assert "GRU" not in ops and "MatMul" in ops


# --- built with TVM ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,kwargs",
    [
        ("LSTM", {"direction": "bidirectional", "peephole": True, "clip": 0.9}),
        ("GRU", {"direction": "reverse", "layout": 1, "activations": ["HardSigmoid", "Tanh"],
                 "activation_alpha": [0.3], "activation_beta": [0.6]}),
        ("GRU", {"direction": "bidirectional", "linear_before_reset": 1, "bias": True, "initial": False}),
    ],
    ids=["lstm-bidirectional-peephole-clip", "gru-reverse-layout1-hardsigmoid", "gru-bidirectional-lbr"],
)
def test_tvm_build_matches_onnxruntime(op, kwargs):
    model, feeds = _recurrent_model(op, **kwargs)
    specs = {name: InputSpec(value.shape) for name, value in feeds.items()}
    actual = _tvm_run(canonicalize(model, specs).model, feeds)
    expected = _reference(op, **kwargs)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_silero_vad_builds_with_tvm_and_matches_onnxruntime():
    """silero-vad's decoder is an LSTM (hidden 128, one time step); the rest of the model TVM imports as is."""
    model = onnx.load(str(fetch_pkg_file(SILERO)))
    assert [value.name for value in model.graph.input] == ["input", "state"]
    rng = np.random.default_rng(0)
    feeds = {"input": rng.uniform(-0.5, 0.5, (1, 576)).astype(np.float32),
             "state": rng.uniform(-0.5, 0.5, (2, 1, 128)).astype(np.float32)}
    canonical = canonicalize(model, {name: InputSpec(value.shape) for name, value in feeds.items()}).model
    assert not {node.op_type for node in canonical.graph.node} & {"LSTM", "GRU"}
    actual = _tvm_run(canonical, feeds)
    expected = _ort_run(model, feeds)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
