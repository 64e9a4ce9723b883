"""conv1d_as_conv2d (passes/conv1d.py), pack_conv2d's one-column convs and pack_matmul (passes/packing.py): 1-D
convs, convs over a one-pixel-wide image and matmuls with an odd column count reach the packed kernel, with ONNX
Runtime's numbers."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_precision import calls

from workbench.compile.build import build_lowered
from workbench.config.pipeline_spec import parse_text
from workbench.kernels.packed_conv import DEPTHWISE_FP32, FP32
from workbench.measure.runners import tvm_runner
from workbench.models.importer import import_to_relax
from workbench.passes.figures import count_ops
from workbench.passes.pipeline import run_pipeline

TO_PACKED = "conv1d_as_conv2d,convert_layout(conv2d=NHWC),fold_constant,pack_conv2d"


def conv_model(x_shape: list[int], w_shape: list[int], **attrs) -> onnx.ModelProto:
    """x -> Conv(w, b, **attrs) -> Relu, random weights."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(w_shape).astype("float32")
    b = rng.standard_normal(w_shape[0]).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def built_and_reference(model: onnx.ModelProto, pipeline: str, llvm):
    """(the optimized module, what its build returns, what ONNX Runtime returns) for a seeded input."""
    x = np.random.default_rng(1).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype("float32")
    mod, records = run_pipeline(import_to_relax(model), parse_text(pipeline), llvm)
    fused, _ = run_pipeline(mod, parse_text("fuse"), llvm, stats=False)
    got = tvm_runner("t", build_lowered(fused, llvm), {"x": x}, llvm).infer()[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return mod, records, got, want


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [5], "pads": [2, 2]},
    {"kernel_shape": [3], "strides": [2], "pads": [1, 0], "dilations": [2]},
    {"kernel_shape": [4], "strides": [4]},  # Magika-style: strided patches
])
def test_conv1d_runs_as_a_packed_conv2d_with_onnx_runtimes_numbers(llvm, attrs):
    model = conv_model([1, 12, 67], [20, 12, attrs["kernel_shape"][0]], **attrs)
    mod, records, got, want = built_and_reference(model, TO_PACKED, llvm)
    assert records[0].analysis["conv1d_rewritten"] == 1 and records[0].analysis["conv1d_kept"] == []
    assert "relax.nn.conv1d" not in count_ops(mod) and "relax.nn.conv2d" not in count_ops(mod)
    assert any(FP32.name in call.args[0].name_hint for call in calls(mod, "relax.call_tir"))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grouped_conv1d_keeps_its_groups(llvm):
    """A depthwise Conv1d (groups = channels): the conv2d it becomes takes the depthwise packed kernel."""
    model = conv_model([1, 16, 40], [16, 1, 3], kernel_shape=[3], pads=[1, 1], group=16)
    mod, _, got, want = built_and_reference(model, TO_PACKED, llvm)
    assert any(DEPTHWISE_FP32.name in call.args[0].name_hint for call in calls(mod, "relax.call_tir"))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_grouped_conv_runs_as_one_packed_conv_per_group(llvm):
    """4 groups of 6 input / 5 output channels (not depthwise): four packed kernels on slices, concatenated."""
    model = conv_model([1, 24, 19, 23], [20, 6, 3, 3], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 2], group=4)
    mod, records, got, want = built_and_reference(model, TO_PACKED, llvm)
    assert records[3].analysis["conv2d_packed"] == 1 and "relax.nn.conv2d" not in count_ops(mod)
    assert sum(FP32.name in call.args[0].name_hint for call in calls(mod, "relax.call_tir")) == 4
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_one_column_conv_runs_as_one_row(llvm):
    """Magika's 5x1 conv over [N, C, H, 1]: the packed kernel gets the image as [N, 1, H, C] (its schedule blocks
    output pixels along W), the kernel's output one row of OH pixels; the result is ONNX Runtime's."""
    model = conv_model([1, 24, 53, 1], [32, 24, 5, 1], kernel_shape=[5, 1], pads=[2, 0, 1, 0], strides=[2, 1])
    mod, records, got, want = built_and_reference(model, "convert_layout(conv2d=NHWC),fold_constant,pack_conv2d", llvm)
    assert records[2].analysis["conv2d_packed"] == 1
    (kernel,) = [call for call in calls(mod, "relax.call_tir") if FP32.name in call.args[0].name_hint]
    assert [int(d) for d in kernel.ty.shape] == [1, 1, want.shape[2], 32]  # one row of 26 output pixels
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("columns, packed", [(6625, 1), (768, 0)])
def test_matmuls_whose_columns_are_no_multiple_of_16_take_the_packed_kernel(llvm, columns, packed):
    """pack_matmul: a classifier head's [40, 120] x [120, 6625] (PP-OCR rec) becomes the packed kernel over the rows,
    weight padded to 16 columns, sliced back; 768 columns stay a matmul (the default tile takes them)."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((120, columns)) * 0.1).astype("float32")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 120])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, records, got, want = built_and_reference(model, "pack_matmul", llvm)
    assert records[0].analysis["matmul_packed"] == packed
    assert count_ops(mod).get("relax.matmul", 0) == 1 - packed
    assert got.shape == (1, 40, columns)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
