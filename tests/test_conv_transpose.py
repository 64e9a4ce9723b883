"""conv_transpose_as_conv: kernel == stride transposed convs become a 1x1 conv + pixel shuffle, same numbers."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from workbench.compile.build import build_lowered
from workbench.config.pipeline_spec import parse_text
from workbench.measure.runners import tvm_runner
from workbench.models.importer import import_to_relax
from workbench.passes.figures import count_ops
from workbench.passes.pipeline import run_pipeline


def upsampler(kernel: int, stride: int) -> onnx.ModelProto:
    """x [1, 8, 6, 7] -> ConvTranspose(8 -> 5, kernel, stride, bias) -> Relu, then a second one kernel == stride."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 5, kernel, kernel)).astype("float32")
    w2 = rng.standard_normal((5, 3, 2, 2)).astype("float32")
    bias = rng.standard_normal(5).astype("float32")
    nodes = [helper.make_node("ConvTranspose", ["x", "w1", "b1"], ["t"], strides=[stride, stride],
                              kernel_shape=[kernel, kernel]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("ConvTranspose", ["r", "w2"], ["y"], strides=[2, 2], kernel_shape=[2, 2])]
    graph = helper.make_graph(nodes, "upsampler", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                               numpy_helper.from_array(bias, "b1")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def rewritten(model: onnx.ModelProto, llvm):
    mod, records = run_pipeline(import_to_relax(model), parse_text("conv_transpose_as_conv"), llvm)
    return mod, records[0].analysis


def onnx_runtime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_kernel_equal_to_stride_becomes_a_1x1_conv_with_onnx_runtimes_numbers(llvm):
    model = upsampler(kernel=2, stride=2)
    mod, analysis = rewritten(model, llvm)
    counts = count_ops(mod)
    assert "relax.nn.conv2d_transpose" not in counts and counts["relax.nn.conv2d"] == 2
    assert counts["relax.permute_dims"] == 2  # one pixel shuffle per rewritten layer
    assert analysis["conv_transpose_rewritten"] == 2 and analysis["conv_transpose_kept"] == []
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 7)).astype("float32")
    fused, _ = run_pipeline(mod, parse_text("fuse"), llvm, stats=False)
    got = tvm_runner("rewritten", build_lowered(fused, llvm), {"x": x}, llvm).infer()[0]
    expected = onnx_runtime(model, x)
    assert got.shape == expected.shape == (1, 3, 24, 28)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_overlapping_kernels_are_kept_and_said_why(llvm):
    mod, analysis = rewritten(upsampler(kernel=3, stride=2), llvm)
    counts = count_ops(mod)
    assert counts["relax.nn.conv2d_transpose"] == 1 and counts["relax.nn.conv2d"] == 1
    assert analysis["conv_transpose_rewritten"] == 1
    assert len(analysis["conv_transpose_kept"]) == 1 and "kernel == strides" in analysis["conv_transpose_kept"][0]
