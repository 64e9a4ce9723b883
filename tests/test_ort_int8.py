"""The `ort_int8` baseline: ONNX Runtime's static QDQ quantization on the workbench's calibration inputs."""

import json
from pathlib import Path

import numpy as np
import onnx
import yaml
from test_precision import eval_inputs

from workbench.cli import main
from workbench.measure.ort_quant import quantized_model
from workbench.measure.runners import ort_runner
from workbench.passes import calibration


def test_ort_int8_is_quantized_close_and_cached(zoo_relax, tmp_path):
    model = zoo_relax("convnet_small")[0]
    sigs = [calibration.InputSig("x", (1, 3, 64, 64), "float32")]
    samples = calibration.random_inputs(sigs, 4, 0)
    path = tmp_path / "ort_int8.onnx"
    quantized = quantized_model(model, samples, "minmax", path)

    on_disk = onnx.load(str(path))  # the file really holds the QDQ graph
    ops = [node.op_type for node in on_disk.graph.node]
    assert ops.count("QuantizeLinear") >= 7 and ops.count("DequantizeLinear") >= 14  # activations + weights
    assert sum(op == "Conv" for op in ops) == 6
    int8_weights = [i for i in on_disk.graph.initializer if i.data_type == onnx.TensorProto.INT8]
    assert len(int8_weights) >= 7

    inputs = eval_inputs({"x": [1, 3, 64, 64]})
    ref = ort_runner("ort_none", model, inputs).infer()
    got = ort_runner("ort_int8", quantized, inputs).infer()
    err = calibration.quantization_error(ref, got)
    # measured: cosine 0.9996, max error 0.06 of 2.48 (uint8 activations, 7-bit weights on a non-VNNI CPU)
    assert err["cosine"] >= 0.99 and 0 < err["max_abs_err"] < 0.1 * float(np.abs(ref[0]).max()), err

    stamp = path.stat().st_mtime_ns
    quantized_model(model, samples, "minmax", path)
    assert path.stat().st_mtime_ns == stamp  # same model and samples: the cached file is reused
    quantized_model(model, samples[:2], "minmax", path)
    assert path.stat().st_mtime_ns != stamp  # other calibration data: quantized again


def test_int8_run_measures_ort_int8_in_the_same_run(tmp_path):
    config = yaml.safe_load(Path("configs/convnet_small_int8.yaml").read_text())
    config.update(output=str(tmp_path / "runs" / "int8"), measure={"warmup": 1, "repeat": 3})
    (tmp_path / "int8.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", str(tmp_path / "int8.yaml")]) == 0
    out_dir = tmp_path / "runs" / "int8"
    result = json.loads((out_dir / "result.json").read_text())
    assert set(result["measurements"]) == {"workbench", "ort_all", "ort_none", "ort_int8"}
    assert all(m["median_ms"] > 0 for m in result["measurements"].values())
    quantize = next(p for p in result["passes"] if p["name"] == "quantize")
    assert quantize["analysis"]["int8"]["lowered"] == {"relax.nn.conv2d": 6, "relax.matmul": 1}
    for label in ("workbench", "ort_int8"):  # both quantized, both close to the fp32 reference
        figures = result["accuracy"][label]
        assert figures["cosine"] >= 0.99 and figures["max_abs_err"] > 1e-4, (label, figures)
    assert "QuantizeLinear" in {node.op_type for node in onnx.load(str(out_dir / "ort_int8.onnx")).graph.node}
