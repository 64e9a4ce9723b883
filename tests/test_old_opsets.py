"""Shape subgraphs of models exported at old opsets are folded at the model's own op versions.

A CRNN exported at opset 12 stopped before the build: canonicalize evaluated each node as a bare node, which ONNX's
reference evaluator runs at the newest op version (Unsqueeze-13 takes axes as an input), so an opset-12 Unsqueeze
with an `axes` attribute raised, the error was swallowed, the `Shape -> Gather -> Unsqueeze -> Concat -> Reshape`
chain stayed, and the LSTM after it could not be unrolled. Every op whose attribute later became an input is
checked here at its old form, against ONNX Runtime running the model as exported.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.errors import UserError
from workbench.models.canonicalize import InputSpec, canonicalize
from workbench.models.importer import import_to_relax

RNG = np.random.default_rng(0)
C = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def tvm_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(import_to_relax(model), tvm.target.Target("llvm")), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(feeds[value.name]) for value in model.graph.input])
    return [out.numpy()] if hasattr(out, "numpy") else [item.numpy() for item in out]


# (opset, the old-form node computing "o" from the constant "c", extra constants it reads)
OLD_FORMS = [
    (11, helper.make_node("Squeeze", ["c1"], ["o"], axes=[0]), {"c1": C[:1]}),
    (12, helper.make_node("Unsqueeze", ["c"], ["o"], axes=[0, -1]), {}),
    (12, helper.make_node("ReduceSum", ["c"], ["o"], axes=[1], keepdims=0), {}),
    (12, helper.make_node("ReduceMean", ["c"], ["o"], axes=[-1], keepdims=1), {}),
    (12, helper.make_node("ReduceMax", ["c"], ["o"], axes=[0, 2], keepdims=0), {}),
    (12, helper.make_node("Split", ["c"], ["o", "rest"], axis=1, split=[1, 2]), {}),
    (9, helper.make_node("Slice", ["c"], ["o"], axes=[2], starts=[1], ends=[3]), {}),
    (10, helper.make_node("Pad", ["c"], ["o"], pads=[0, 0, 1, 0, 0, 1], mode="constant", value=0.5), {}),
    (10, helper.make_node("Clip", ["c"], ["o"], min=0.5, max=2.0), {}),
    (7, helper.make_node("Upsample", ["c"], ["o"], mode="nearest", scales=[1.0, 2.0, 1.0]), {}),
    (9, helper.make_node("Upsample", ["c", "scales"], ["o"], mode="nearest"),
     {"scales": np.array([1, 1, 2], np.float32)}),
    (10, helper.make_node("Resize", ["c", "scales"], ["o"], mode="nearest"),
     {"scales": np.array([1, 2, 1], np.float32)}),
    (10, helper.make_node("TopK", ["c", "k"], ["o", "indices"], axis=-1), {"k": np.array([2], np.int64)}),
]


def old_form_model(opset: int, node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> onnx.ModelProto:
    """y = x + o, where o = node(c) is a small constant computation at `opset`'s form of the op: folding must give
    o the value ONNX Runtime computes for that version."""
    expected = ort_run(helper.make_model(helper.make_graph(
        [node], "probe", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(C, "c"), *(numpy_helper.from_array(v, k) for k, v in constants.items())]),
        opset_imports=[helper.make_opsetid("", opset)]), {})[0]
    graph = helper.make_graph(
        [node, helper.make_node("Add", ["x", "o"], ["y"])], "old_form",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *expected.shape[1:]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{i}" for i in range(expected.ndim)])],
        [numpy_helper.from_array(C, "c"), *(numpy_helper.from_array(v, k) for k, v in constants.items())])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("opset", "node", "constants"), OLD_FORMS, ids=[f"{n.op_type}-{o}" for o, n, _ in OLD_FORMS])
def test_an_op_in_its_old_attribute_form_is_folded_to_the_value_onnxruntime_computes(opset, node, constants):
    model = old_form_model(opset, node, constants)
    shape = tuple(d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim)
    canonical = canonicalize(model, {"x": InputSpec(shape)})
    assert [n.op_type for n in canonical.model.graph.node] == ["Add"]  # the old-form node is a constant now
    assert canonical.folding.unfolded == () and canonical.folding.folded >= 1
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(ort_run(canonical.model, {"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-6)


def crnn_model() -> onnx.ModelProto:
    """A CRNN's tail at opset 12: conv features [N, C, 1, W] squeezed and transposed to [W, N, C], reshaped by a
    shape computed at run time (`Shape -> Gather -> Unsqueeze(axes=[0]) -> Concat -> Reshape`, the exporter's
    form), then an LSTM over W steps."""
    hidden, channels = 5, 4
    weights = {"W": RNG.standard_normal((1, 4 * hidden, channels)).astype(np.float32) * 0.5,
               "R": RNG.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.5,
               "B": RNG.standard_normal((1, 8 * hidden)).astype(np.float32) * 0.1,
               "zero": np.array(0, np.int64), "rest": np.array([-1, channels], np.int64)}
    nodes = [
        helper.make_node("Squeeze", ["x"], ["squeezed"], axes=[2], name="squeeze"),
        helper.make_node("Transpose", ["squeezed"], ["steps"], perm=[2, 0, 1], name="transpose"),
        helper.make_node("Shape", ["steps"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["length"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["length"], ["length_1d"], axes=[0], name="unsqueeze"),
        helper.make_node("Concat", ["length_1d", "rest"], ["target"], axis=0, name="concat"),
        helper.make_node("Reshape", ["steps", "target"], ["sequence"], name="reshape"),
        helper.make_node("LSTM", ["sequence", "W", "R", "B"], ["y"], hidden_size=hidden, name="LSTM_79"),
    ]
    graph = helper.make_graph(nodes, "crnn_tail",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 1, "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["W", 1, "N", hidden])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


@pytest.mark.slow
def test_an_opset_12_crnn_folds_its_shape_chain_unrolls_its_lstm_and_matches_onnxruntime():
    model = crnn_model()
    canonical = canonicalize(model, {"x": InputSpec((1, 4, 1, 7))})
    names = {node.name for node in canonical.model.graph.node}
    assert not {"shape", "gather", "unsqueeze", "concat", "LSTM_79"} & names  # folded; the LSTM unrolled
    assert canonical.folding.folded >= 4 and canonical.folding.unfolded == ()
    x = RNG.standard_normal((1, 4, 1, 7)).astype(np.float32)
    np.testing.assert_allclose(tvm_run(canonical.model, {"x": x})[0], ort_run(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)


def test_a_node_nothing_can_evaluate_stays_and_says_why():
    """A shape node no evaluator runs (a Gather whose index is out of range) is left in the graph and listed with
    its op, opset and the evaluator's reason; where it feeds an LSTM, the refusal names it too."""
    model = crnn_model()
    zero = next(init for init in model.graph.initializer if init.name == "zero")
    zero.CopyFrom(numpy_helper.from_array(np.array(9, np.int64), "zero"))  # shape has 3 entries
    with pytest.raises(UserError) as refused:
        canonicalize(model, {"x": InputSpec((1, 4, 1, 7))})
    assert "node 'LSTM_79' (LSTM)" in str(refused.value)
    assert "1 shape node(s) could not be folded, the first: gather (Gather, opset 12): " in str(refused.value)
    del model.graph.node[-1]  # without the LSTM the model canonicalizes, the node stays, the report says why
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("sequence", TensorProto.FLOAT, ["W", "N", 4]))
    canonical = canonicalize(model, {"x": InputSpec((1, 4, 1, 7))})
    (unfolded,) = canonical.folding.unfolded
    assert (unfolded.node, unfolded.op, unfolded.opset) == ("gather", "Gather", 12) and unfolded.reason
    assert "Gather" in [node.op_type for node in canonical.model.graph.node]


def test_inspect_lists_the_shape_nodes_that_could_not_be_folded(tmp_path, capsys):
    """`workbench inspect` at frozen shapes says how many shape nodes folded and names each that did not, in its
    table output and in --json."""
    from workbench.cli import main

    model = crnn_model()
    model.graph.initializer[3].CopyFrom(numpy_helper.from_array(np.array(9, np.int64), "zero"))
    del model.graph.node[-1]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("sequence", TensorProto.FLOAT, ["W", "N", 4]))
    path = tmp_path / "crnn.onnx"
    onnx.save(model, path)
    assert main(["inspect", str(path), "--input", "x=1x4x1x7"]) == 0
    shown = capsys.readouterr().out
    assert "shape node(s) folded to constants at these shapes. 1 could not be folded (they stay computed):" in shown
    assert "gather (Gather, opset 12): " in shown
    assert main(["inspect", str(path), "--input", "x=1x4x1x7", "--json"]) == 0
    (unfolded,) = json.loads(capsys.readouterr().out)["folding"]["unfolded"]
    assert unfolded["node"] == "gather" and unfolded["opset"] == 12 and unfolded["reason"]


def test_a_model_that_names_the_default_domain_ai_onnx_folds_scalars_as_scalars():
    """Some exporters import the default domain as "ai.onnx": the shape chain folds all the same, a Gather of a
    scalar index to a scalar (ONNX Runtime's fallback once made it [2], and the Unsqueeze after it [[2]])."""
    model = crnn_model()
    del model.graph.node[-1]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("sequence", TensorProto.FLOAT, ["W", "N", 4]))
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("ai.onnx", 12))
    canonical = canonicalize(model, {"x": InputSpec((1, 4, 1, 7))})
    names = {node.name for node in canonical.model.graph.node}
    assert canonical.folding.unfolded == () and not {"shape", "gather", "unsqueeze", "concat"} & names
    x = RNG.standard_normal((1, 4, 1, 7)).astype(np.float32)
    np.testing.assert_array_equal(ort_run(canonical.model, {"x": x})[0], x[:, :, 0, :].transpose(2, 0, 1))


def test_a_conversion_that_would_change_an_outputs_type_is_refused():
    """Raising an opset-9 model with Slice-9 (an old form) to 13 would turn its Dropout mask output from float to
    bool: refused with the node and what to do, never a model whose outputs changed meaning."""
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x"], ["sliced"], axes=[1], starts=[1], ends=[3], name="slice"),
         helper.make_node("Dropout", ["sliced"], ["y", "mask"], name="dropout")], "old",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(UserError, match=r"node 'slice' \(Slice, opset 9\): TVM's ONNX frontend converts this op "
                                        r"correctly only from opset 10.*export the model at opset 13 or later"):
        canonicalize(model, {"x": InputSpec((2, 4))})
