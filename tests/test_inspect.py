"""`workbench inspect` on real files: the inputs and their dynamic dims, the `model.inputs:` snippet (which
validates once filled), the op histogram (Conv FLOPs against a hand count), unsupported ops, and what each pass
of a pipeline changes, as tables and as --json."""

import json
from pathlib import Path

import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from workbench.cli import main
from workbench.config import ModelConfig
from workbench.models import zoo


@pytest.fixture
def convnet(tmp_path: Path) -> Path:
    """The zoo's convnet_small as a file, its N, H, W dims left symbolic."""
    path = tmp_path / "convnet.onnx"
    onnx.save(zoo.build("convnet_small"), path)
    return path


def inspect_json(capsys, *args: str) -> dict:
    assert main(["inspect", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_dynamic_dims_are_named_and_the_snippet_validates_once_filled(convnet, capsys):
    found = inspect_json(capsys, str(convnet))
    assert found["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["N", 3, "H", "W"],
                                "dynamic_dims": [0, 2, 3]}]
    assert "--input x=Nx3xHxW" in found["dynamic"]
    assert found["passes"] is None and "--input" in found["passes_skipped"]
    snippet = found["snippet"]
    assert "<N>" in snippet and "fill in the dynamic dims N, H, W" in snippet
    filled = yaml.safe_load(snippet.replace("<N>", "1").replace("<H>", "32").replace("<W>", "32"))
    assert ModelConfig(source=str(convnet), **filled["model"]).inputs["x"].shape == [1, 3, 32, 32]
    assert all(row["flops"] is None for row in found["ops"])  # no static shapes, no FLOPs


def test_op_histogram_counts_flops_and_parameters(convnet, capsys):
    found = inspect_json(capsys, str(convnet), "--input", "x=1x3x64x64")
    ops = {row["op"]: row for row in found["ops"]}
    assert ops["Conv"]["count"] == 6 and ops["BatchNormalization"]["count"] == 6
    # by hand, 2 FLOPs per multiply-add, Cout x Hout x Wout outputs x Cin x 3 x 3 each: the stem conv, two in the
    # first residual block, the strided one, two in the second block (after the MaxPool)
    assert ops["Conv"]["flops"] == 2 * (16 * 64 * 64 * 27 + 2 * 16 * 64 * 64 * 144 + 32 * 32 * 32 * 144
                                        + 2 * 32 * 16 * 16 * 288)
    weights = {init.name: init for init in zoo.build("convnet_small").graph.initializer}
    conv_params = sum(onnx.numpy_helper.to_array(weights[n.input[1]]).size
                      for n in zoo.build("convnet_small").graph.node if n.op_type == "Conv")
    assert ops["Conv"]["params"] == conv_params
    assert ops["BatchNormalization"]["params"] == 4 * (3 * 16 + 3 * 32)  # scale, bias, mean, var per channel
    assert ops["Gemm"]["flops"] == 2 * 10 * 32 and ops["Relu"]["flops"] is None
    assert yaml.safe_load(found["snippet"])["model"]["inputs"]["x"]["shape"] == [1, 3, 64, 64]
    assert found["unsupported"] == {}


def test_conv_flops_equal_a_hand_count_for_one_conv(tmp_path, capsys):
    """One strided, padded, grouped Conv: the FLOPs are exactly 2 x N x Cout x Hout x Wout x Cin/group x kH x kW."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 2, 3, 3], [0.1] * 8 * 2 * 9)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                            group=2)
    graph = helper.make_graph([node], "one_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 ["N", 4, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 5, 5])], [weight])
    path = tmp_path / "one_conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    found = inspect_json(capsys, str(path), "--input", "x=2x4x10x10", "--pipeline", "fold_constant")
    assert found["ops"] == [{"op": "Conv", "count": 1, "params": 144, "flops": 2 * 2 * 8 * 5 * 5 * 2 * 3 * 3}]


def test_pass_records_show_what_each_pass_changes(convnet, capsys):
    found = inspect_json(capsys, str(convnet), "--input", "x=1x3x32x32")
    assert found["pipeline"] == "default"
    passes = {p["name"]: p for p in found["passes"]}
    assert passes["fold_batchnorm"]["changed"]["relax.nn.batch_norm"] == -6
    assert passes["fuse"]["ops_after"] < passes["fuse"]["ops_before"]
    assert found["passes"][-1]["name"] == "dce"


def test_config_gives_model_inputs_and_pipeline(tmp_path, convnet, capsys):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({"name": "exp", "model": {"source": str(convnet), "inputs": {"x": [1, 3, 32, 32]}},
                                      "pipeline": "core"}))
    found = inspect_json(capsys, str(config))
    assert found["shapes"] == {"x": [1, 3, 32, 32]}
    assert [p["name"] for p in found["passes"]] == ["fold_constant", "fold_batchnorm", "fuse", "dce"]


def test_tables_name_unsupported_ops(tmp_path, capsys):
    node = helper.make_node("Celu", ["x"], ["y"], name="the_celu")
    graph = helper.make_graph([node], "celu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "celu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    assert main(["inspect", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "cannot handle: Celu (first at node 'the_celu')" in printed
    assert "skipped: the import cannot handle Celu" in printed


def test_tables_show_inputs_snippet_ops_and_passes(convnet, capsys):
    assert main(["inspect", str(convnet), "--input", "x=1x3x32x32", "--pipeline", "core"]) == 0
    printed = capsys.readouterr().out
    for expected in ("[N, 3, H, W]", "N, H, W", "x: {shape: [1, 3, 32, 32], dtype: float32}", "Conv",
                     "Pipeline 'core'", "fold_batchnorm", "nn.batch_norm -6"):
        assert expected in printed, expected


@pytest.mark.parametrize("args, message", [
    (["{model}", "--input", "y=1x3x8x8"], "has no input 'y'"),
    (["{model}", "--input", "x=1x3x8"], "3 dims given"),
    (["{model}", "--input", "x=1x3x0x8"], "expected NAME=SHAPE"),
    (["{missing}"], "does not exist"),
])
def test_bad_arguments_exit_2_with_one_message(convnet, tmp_path, capsys, args, message):
    filled = [a.format(model=convnet, missing=tmp_path / "missing.onnx") for a in args]
    assert main(["inspect", *filled]) == 2
    assert message in capsys.readouterr().err


def test_an_lstm_is_not_reported_unsupported_the_workbench_unrolls_it(tmp_path, capsys):
    """LSTM/GRU are not in TVM's frontend, but canonicalize unrolls them: inspect must not turn the user away."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)
               for name, shape in (("W", (1, 16, 4)), ("R", (1, 16, 4)))]
    graph = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4)], "lstm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1, 1, 4])], weights)
    path = tmp_path / "lstm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    found = inspect_json(capsys, str(path), "--pipeline", "core")
    assert found["unsupported"] == {} and found["passes"]
