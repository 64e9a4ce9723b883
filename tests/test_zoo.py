"""The synthetic zoo: valid opset-17 ONNX, deterministic, the intended ops, and TVM agrees with ORT."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from tvm.relax.frontend.onnx import from_onnx

from workbench.errors import UserError
from workbench.models import zoo

REQUIRED_OPS = {
    "convnet_small": {"Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm"},
    "mobilenet_block": {"Conv", "BatchNormalization", "HardSwish", "Clip", "Add", "GlobalAveragePool", "Gemm"},
    "transformer_block": {"LayerNormalization", "MatMul", "Transpose", "Softmax", "Erf", "Div", "Mul", "Add"},
    "byte_classifier": {"Gather", "Conv", "Relu", "ReduceMean", "Max", "Sqrt", "MatMul", "Softmax", "Gemm"},
    "yolo_block": {"Slice", "Conv", "Sigmoid", "Mul", "Split", "Concat", "MaxPool", "Resize"},
    "alexnet_small": {"Conv", "Relu", "LRN", "MaxPool", "Flatten", "Gemm", "Dropout"},
}
OUTPUT_SHAPES = {"convnet_small": (1, 10), "mobilenet_block": (1, 10), "transformer_block": (1, 32, 64),
                 "byte_classifier": (1, 2), "yolo_block": (1, 21, 26, 26), "alexnet_small": (1, 100)}
INPUT_DIMS = {"convnet_small": ["N", 3, "H", "W"], "mobilenet_block": ["N", 16, "H", "W"],
              "transformer_block": ["N", "S", 64], "byte_classifier": ["N", "L"], "yolo_block": ["N", 3, "H", "W"],
              "alexnet_small": ["N", 3, 127, 127]}


def _input(name: str) -> np.ndarray:
    rng, shape = np.random.default_rng(0), zoo.default_inputs(name)["x"]
    if name == "byte_classifier":  # byte ids
        return rng.integers(0, 256, shape).astype(np.int32)
    return rng.standard_normal(shape, dtype=np.float32)


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_names_and_default_inputs():
    assert zoo.NAMES == ("convnet_small", "mobilenet_block", "transformer_block", "byte_classifier", "yolo_block",
                         "alexnet_small")
    assert zoo.default_inputs("convnet_small") == {"x": [1, 3, 64, 64]}
    assert zoo.default_inputs("transformer_block") == {"x": [1, 32, 64]}


@pytest.mark.parametrize("name", zoo.NAMES)
def test_valid_deterministic_and_exercises_its_ops(name):
    model = zoo.build(name)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    typed = {v.name for v in inferred.graph.value_info} | {o.name for o in inferred.graph.output}
    assert all(out in typed for node in model.graph.node for out in node.output)
    assert model.opset_import[0].version == 17
    assert zoo.build(name).SerializeToString() == model.SerializeToString()
    assert REQUIRED_OPS[name] <= {node.op_type for node in model.graph.node}
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == INPUT_DIMS[name]
    default = zoo.default_inputs(name)["x"]
    assert len(default) == len(dims) and all(d == v for d, v in zip(dims, default) if isinstance(d, int))


def test_mobilenet_has_depthwise_conv_and_clip_bounds_as_inputs():
    nodes = zoo.build("mobilenet_block").graph.node
    groups = [a.i for n in nodes if n.op_type == "Conv" for a in n.attribute if a.name == "group"]
    assert max(groups) == 64 and groups.count(64) == 2
    assert all(len(n.input) == 3 for n in nodes if n.op_type == "Clip")


@pytest.mark.parametrize("name", ["convnet_small", "mobilenet_block"])
def test_batchnorm_params_are_nontrivial(name):
    model = zoo.build(name)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) >= 5
    for bn in bns:
        gamma, beta, mean, var = (inits[i] for i in bn.input[1:])
        assert (var > 0).all() and not np.allclose(var, 1) and not np.allclose(mean, 0)
        assert not np.allclose(gamma, 1) and not np.allclose(beta, 0)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_ort_runs_and_tvm_import_matches(name):
    model, x = zoo.build(name), _input(name)
    expected = _ort(model, x)
    assert expected.shape == OUTPUT_SHAPES[name]
    assert np.isfinite(expected).all() and expected.std() > 0.1 and np.abs(expected).max() < 100

    mod = from_onnx(model, shape_dict=zoo.default_inputs(name))
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, tvm.target.Target("llvm")), tvm.cpu())
    actual = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)


def test_unknown_name_suggests_and_lists():
    with pytest.raises(UserError, match="did you mean 'convnet_small'") as info:
        zoo.build("convnet_smal")
    assert all(n in str(info.value) for n in zoo.NAMES)
    with pytest.raises(UserError, match="transformer_block"):
        zoo.default_inputs("transformer")
    with pytest.raises(UserError) as info:
        zoo.build("zzz")
    assert "did you mean" not in str(info.value) and "convnet_small" in str(info.value)
