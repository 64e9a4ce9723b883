"""canonicalize (freeze, check, fold shape subgraphs) and import_to_relax, on synthetic and real models."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from workbench.errors import UserError
from workbench.models.canonicalize import InputSpec, canonicalize, supported_opset
from workbench.models.importer import import_to_relax
from workbench.models.sources import fetch_pkg_file

OPSET = [helper.make_opsetid("", 17)]
RAPIDOCR = "pkg:rapidocr-onnxruntime==1.4.4/rapidocr_onnxruntime/models/"


def _ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _tvm_run(model: onnx.ModelProto, inputs: list[np.ndarray]) -> np.ndarray:
    executable = tvm.compile(import_to_relax(model), tvm.target.Target("llvm"))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


def _op_counts(model: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in model.graph.node)


def _reshape_chain_model() -> onnx.ModelProto:
    """x[N,3,4,4] -> Reshape to [N, 48] via Shape->Gather->Unsqueeze->Concat, then a MatMul (w is 48x8)."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
        helper.make_node("Gather", ["x_shape", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch_1d"], name="unsqueeze"),
        helper.make_node("Concat", ["batch_1d", "features"], ["new_shape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="matmul"),
    ]
    initializers = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
        numpy_helper.from_array(np.array([48], dtype=np.int64), "features"),
        numpy_helper.from_array(rng.standard_normal((48, 8)).astype(np.float32), "w"),
    ]
    graph = helper.make_graph(
        nodes, "reshape_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=OPSET)


def _relu_model(inputs: list[tuple[str, list]]) -> onnx.ModelProto:
    """Sum of Relu of each input (all inputs of the same shape)."""
    names = [name for name, _ in inputs]
    nodes = [helper.make_node("Sum", names, ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes, "relu",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims) for name, dims in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, inputs[0][1])],
    )
    return helper.make_model(graph, opset_imports=OPSET)


# --- folding ---------------------------------------------------------------------------------


def test_reshape_chain_is_folded_and_matches_ort_and_tvm():
    model = _reshape_chain_model()
    canonical = canonicalize(model, {"x": InputSpec((2, 3, 4, 4))}).model

    assert _op_counts(canonical) == Counter({"Reshape": 1, "MatMul": 1})
    assert _op_counts(model)["Shape"] == 1, "the input model must not be modified"
    reshape = next(node for node in canonical.graph.node if node.op_type == "Reshape")
    shape_init = {init.name: init for init in canonical.graph.initializer}[reshape.input[1]]
    np.testing.assert_array_equal(numpy_helper.to_array(shape_init), [2, 48])
    assert [d.dim_value for d in canonical.graph.input[0].type.tensor_type.shape.dim] == [2, 3, 4, 4]
    assert [d.dim_value for d in canonical.graph.output[0].type.tensor_type.shape.dim] == [2, 8]
    onnx.checker.check_model(canonical, full_check=True)

    x = np.random.default_rng(0).uniform(0, 1, (2, 3, 4, 4)).astype(np.float32)
    expected = _ort_run(model, {"x": x})[0]
    np.testing.assert_array_equal(_ort_run(canonical, {"x": x})[0], expected)
    np.testing.assert_allclose(_tvm_run(canonical, [x]), expected, rtol=1e-5, atol=1e-5)


def test_big_constant_computations_are_left_alone():
    """A Transpose of a 64x64 weight is a weight computation, not shape arithmetic: it stays."""
    weight = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["w"], ["w_t"], name="transpose_w", perm=[1, 0]),
            helper.make_node("Mul", ["two", "three"], ["six"], name="small_mul"),
            helper.make_node("MatMul", ["x", "w_t"], ["xw"], name="matmul"),
            helper.make_node("Mul", ["xw", "six"], ["y"], name="scale"),
        ],
        "big_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(np.array([2.0], dtype=np.float32), "two"),
            numpy_helper.from_array(np.array([3.0], dtype=np.float32), "three"),
        ],
    )
    model = helper.make_model(graph, opset_imports=OPSET)
    canonical = canonicalize(model, {"x": InputSpec((1, 64))}).model

    assert [node.name for node in canonical.graph.node] == ["transpose_w", "matmul", "scale"]
    folded = {init.name: numpy_helper.to_array(init) for init in canonical.graph.initializer}
    np.testing.assert_array_equal(folded["six"], [6.0])
    assert "two" not in folded and "three" not in folded, "initializers only the folded node used are dead"


def test_initializers_listed_as_inputs_are_not_inputs():
    """IR 3 exporters list weights among the graph inputs; they need no spec and are dropped from inputs."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])],
        "old_exporter",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    canonical = canonicalize(model, {"x": InputSpec((3, 4))}).model

    assert [value.name for value in canonical.graph.input] == ["x"]
    x = np.ones((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(_ort_run(canonical, {"x": x})[0], x + np.arange(4, dtype=np.float32))
    with pytest.raises(UserError, match=r"'b' is a weight, not an input"):
        canonicalize(model, {"x": InputSpec((3, 4)), "b": InputSpec((4,))}).model


# --- input spec errors -----------------------------------------------------------------------


def test_unknown_input_lists_inputs_and_suggests():
    model = _relu_model([("images", ["N", 3, 8, 8])])
    with pytest.raises(UserError) as err:
        canonicalize(model, {"image": InputSpec((1, 3, 8, 8))}).model
    message = str(err.value)
    assert "'image'" in message and "['images']" in message and "did you mean 'images'?" in message


def test_rank_mismatch_shows_declared_symbolic_shape():
    model = _relu_model([("x", ["batch", 3, "height", "width"])])
    with pytest.raises(UserError) as err:
        canonicalize(model, {"x": InputSpec((1, 3, 8))}).model
    message = str(err.value)
    assert "model.inputs.x" in message and "rank 3" in message
    assert "[batch, 3, height, width] (rank 4)" in message


def test_non_positive_dim():
    model = _relu_model([("x", ["N", 3, 8, 8])])
    with pytest.raises(UserError, match=r"model\.inputs\.x\.shape \[1, 3, 0, 8\].*positive, got 0"):
        canonicalize(model, {"x": InputSpec((1, 3, 0, 8))}).model


def test_input_without_spec_must_be_static():
    model = _relu_model([("x", ["N", 4]), ("mask", ["M", 4])])
    with pytest.raises(UserError) as err:
        canonicalize(model, {"x": InputSpec((2, 4))}).model
    message = str(err.value)
    assert "'mask'" in message and "[M, 4]" in message and "model.inputs.mask" in message
    # A static input needs no spec.
    static = _relu_model([("x", ["N", 4]), ("mask", [2, 4])])
    assert [d.dim_value for d in canonicalize(static, {"x": InputSpec((2, 4))}).model.graph.input[0].type.tensor_type.shape.dim] == [2, 4]


def test_fixed_dim_conflict():
    model = _relu_model([("x", ["N", 3, 8, 8])])
    with pytest.raises(UserError) as err:
        canonicalize(model, {"x": InputSpec((1, 4, 8, 8))}).model
    message = str(err.value)
    assert "model.inputs.x" in message and "dim 1 is 4" in message and "fixes it to 3" in message


def test_dtype_mismatch():
    model = _relu_model([("x", ["N", 4])])
    with pytest.raises(UserError, match=r"model\.inputs\.x\.dtype: the model declares float32, the config says int64"):
        canonicalize(model, {"x": InputSpec((2, 4), "int64")}).model


def test_checker_failure_is_a_user_error():
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "undefined_tensor"], ["y"], name="add")],
        "broken",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=OPSET)
    with pytest.raises(UserError, match=r"fails the ONNX checker.*undefined_tensor"):
        canonicalize(model, {}).model


def _stamped(opset: int, domain: str = "") -> onnx.ModelProto:
    """One Relu stamped with `opset` for `domain` (the default domain keeps opset 17 if another is stamped)."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    opsets = [helper.make_opsetid(domain, opset)] + ([] if domain in ("", "ai.onnx") else OPSET)
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _ort_accepts(model: onnx.ModelProto) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - onnxruntime's error classes are not exported
        return False
    return True


def test_supported_opset_is_the_newest_both_onnx_and_onnxruntime_take():
    limit = supported_opset()
    assert 17 <= limit <= onnx.defs.onnx_opset_version()
    assert _ort_accepts(_stamped(limit))
    assert limit == onnx.defs.onnx_opset_version() or not _ort_accepts(_stamped(limit + 1))


@pytest.mark.parametrize("domain", ["", "ai.onnx"])
def test_a_newer_opset_than_supported_is_refused_up_front(domain):
    limit = supported_opset()
    assert canonicalize(_stamped(limit, domain), {}).model.graph.node[0].op_type == "Relu"
    with pytest.raises(UserError, match=rf"the model imports ONNX opset 99, but the highest supported here is "
                                        rf"{limit} \(onnx .* knows up to \d+, onnxruntime .* runs up to \d+\); "
                                        rf"export the model at opset {limit} or lower"):
        canonicalize(_stamped(99, domain), {}).model


def test_other_domains_opsets_are_not_checked():
    assert canonicalize(_stamped(99, "com.microsoft"), {}).model.opset_import


# --- import errors ---------------------------------------------------------------------------


def test_unsupported_op_names_op_and_node():
    """RNN: the frontend lacks it and canonicalize does not expand it (unlike LSTM and GRU)."""
    hidden = 4
    graph = helper.make_graph(
        [helper.make_node("RNN", ["x", "w", "r"], ["y"], name="encoder_rnn", hidden_size=hidden)],
        "rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 1, hidden])],
        [numpy_helper.from_array(np.zeros((1, hidden, 3), np.float32), "w"),
         numpy_helper.from_array(np.zeros((1, hidden, hidden), np.float32), "r")],
    )
    model = canonicalize(helper.make_model(graph, opset_imports=OPSET), {}).model
    with pytest.raises(UserError, match=r"does not support these op types: RNN \(first at node 'encoder_rnn'\)"):
        import_to_relax(model)


def test_frontend_failure_names_the_node():
    """A Reshape whose target is a runtime input cannot be imported; the error says which node."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape_by_input")],
        "dynamic_reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("target", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])],
    )
    model = canonicalize(helper.make_model(graph, opset_imports=OPSET), {}).model
    with pytest.raises(UserError, match=r"could not import the model to Relax: node 'reshape_by_input' \(Reshape, opset 17\): "):
        import_to_relax(model)


# --- real models -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("member", "shape"),
    [
        ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640)),
        ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
        ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    ],
)
def test_rapidocr_model_imports_and_matches_ort(member, shape):
    model = onnx.load(fetch_pkg_file(RAPIDOCR + member))
    weights = {init.name for init in model.graph.initializer}
    (input_name,) = [value.name for value in model.graph.input if value.name not in weights]
    canonical = canonicalize(model, {input_name: InputSpec(shape)}).model

    # paddle2onnx computes every Reshape target from Shape; all of them fold once the input is static.
    assert _op_counts(canonical)["Shape"] == 0
    assert _op_counts(canonical)["Conv"] == _op_counts(model)["Conv"], "weights' ops are left as exported"
    onnx.checker.check_model(canonical)

    x = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
    expected = _ort_run(model, {input_name: x})[0]
    np.testing.assert_array_equal(_ort_run(canonical, {input_name: x})[0], expected)
    np.testing.assert_allclose(_tvm_run(canonical, [x]), expected, rtol=1e-3, atol=1e-3)


def _classifier_head(mask_out: bool, training: bool | None = None) -> onnx.ModelProto:
    """x -> Gemm -> Relu -> Dropout -> Gemm -> y, optionally with Dropout's mask a graph output or its
    training_mode an initializer."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(64, 96)).astype("float32"), "w1"),
             numpy_helper.from_array(rng.normal(size=(10, 64)).astype("float32"), "w2")]
    dropout_inputs = ["r"]
    if training is not None:
        inits += [numpy_helper.from_array(np.array(0.5, "float32"), "ratio"),
                  numpy_helper.from_array(np.array(training), "training")]
        dropout_inputs += ["ratio", "training"]
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Dropout", dropout_inputs, ["d", "mask"] if mask_out else ["d"]),
             helper.make_node("Gemm", ["d", "w2"], ["y"], transB=1)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])]
    if mask_out:
        outputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 64]))
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 96])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_inference_dropout_becomes_identity_and_the_layer_gets_one_output():
    """Dropout at inference is its input: canonicalize drops it (its mask, fused into the matmul's kernel, made it
    a two-output kernel that kept plain loops); a Dropout whose mask is read, or in training mode, stays."""
    x = np.random.default_rng(1).normal(size=(1, 96)).astype("float32")
    for model in (_classifier_head(False), _classifier_head(False, training=False)):
        canonical = canonicalize(model, {}).model
        assert _op_counts(canonical)["Dropout"] == 0 and _op_counts(canonical)["Identity"] == 1
        np.testing.assert_allclose(_ort_run(canonical, {"x": x})[0], _ort_run(model, {"x": x})[0], rtol=1e-5)
        kernels = [f for f in relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.LegalizeOps()(
            import_to_relax(canonical)))).functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
        assert kernels and not any("full_like" in f.script() for f in kernels)  # no mask computed beside a layer
    assert _op_counts(canonicalize(_classifier_head(True), {}).model)["Dropout"] == 1
    assert _op_counts(canonicalize(_classifier_head(False, training=True), {}).model)["Dropout"] == 1
