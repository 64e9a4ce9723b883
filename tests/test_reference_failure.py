"""A run whose accuracy reference cannot run is a failed run: exit 1 with the reason, everything measured kept.

The failure is real, not mocked: ONNX Runtime has no CPU kernel for Max on int16 (session creation says
NOT_IMPLEMENTED), while TVM builds and runs the same model.
"""

import json
import sqlite3
from pathlib import Path

import onnx
import yaml
from onnx import TensorProto, helper

from workbench.cli import main

ORT_REFUSAL = "Could not find an implementation for Max(13) node with name 'max_int16'"


def _int16_max_model() -> onnx.ModelProto:
    """float32 -> int16 -> Max -> float32: valid ONNX that TVM runs and ONNX Runtime cannot (no int16 Max)."""
    nodes = [helper.make_node("Cast", ["x"], ["x16"], name="to_int16", to=TensorProto.INT16),
             helper.make_node("Max", ["x16", "x16"], ["m16"], name="max_int16"),
             helper.make_node("Cast", ["m16"], ["y"], name="to_float", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "int16_max", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _base(tmp_path: Path) -> dict:
    onnx.save(_int16_max_model(), tmp_path / "int16_max.onnx")
    return {"name": "int16_max", "model": {"source": str(tmp_path / "int16_max.onnx")}, "pipeline": [],
            "baselines": ["ort_none", "tvm_unoptimized"], "measure": {"warmup": 1, "repeat": 3}}


def test_a_reference_that_cannot_run_fails_the_run_and_keeps_the_measurements(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**_base(tmp_path), "output": str(tmp_path / "run")}))
    assert main(["run", str(config)]) == 1
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert "error: accuracy reference ort_none did not run, no output was checked: NotImplemented: " in err, err
    assert ORT_REFUSAL in err and err.count("error:") == 1 and "Traceback" not in err
    assert "tvm_unoptimized" in captured.out  # the table of what was measured is still printed

    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "failed" and ORT_REFUSAL in result["error"]
    assert result["error"].startswith("accuracy reference ort_none did not run")
    for label in ("workbench", "tvm_unoptimized"):
        assert result["measurements"][label]["median_ms"] > 0 and result["measurements"][label]["repeats"] == 3
        assert result["accuracy"][label] == {"ok": None, "note": "reference ort_none did not run"}
    assert result["measurements"]["ort_none"]["median_ms"] is None
    assert ORT_REFUSAL in result["measurements"]["ort_none"]["note"]
    assert f"**run failed**: {result['error']}" in (tmp_path / "run" / "report.md").read_text()
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        (stored,) = db.execute("select result_json from runs").fetchone()
        assert json.loads(stored)["status"] == "failed"
        assert db.execute("select count(*) from measurements where median_ms > 0").fetchone()[0] == 2


def test_a_sweep_records_the_variant_whose_reference_cannot_run_as_failed_and_goes_on(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": _base(tmp_path), "output": str(tmp_path / "sweep"), "sweep": {
        "orderings": ["fold_constant"], "grid": {"accuracy.reference": ["ort_none", "tvm_unoptimized"]}}}))
    assert main(["sweep", str(path), "--workers", "1"]) == 0
    with sqlite3.connect(tmp_path / "sweep" / "results.sqlite") as db:
        rows = db.execute("select grid_json, status, error from sweep_variants").fetchall()
    by_reference = {json.loads(grid)["accuracy.reference"]: (status, error) for grid, status, error in rows}
    assert by_reference["tvm_unoptimized"] == ("done", None)
    status, error = by_reference["ort_none"]
    assert status == "failed" and "accuracy reference ort_none did not run" in error and ORT_REFUSAL in error
