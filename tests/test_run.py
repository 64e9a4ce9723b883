"""A full `workbench run` through the CLI: files written and read back, table printed, store row, exit codes."""

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from workbench.cli import main
from workbench.config.named_pipelines import NAMED_PIPELINES
from workbench.config.pipeline_spec import parse_text


def write_config(tmp_path: Path, **changes) -> Path:
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config.update(output=str(tmp_path / "runs" / "quick"), measure={"warmup": 1, "repeat": 5})
    config.update(changes)
    path = tmp_path / "quick.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_full_run_writes_result_report_and_store(tmp_path, capsys):
    config = write_config(tmp_path)
    assert main(["run", str(config), "--dump-ir", str(tmp_path / "ir")]) == 0
    out_dir = tmp_path / "runs" / "quick"
    result = json.loads((out_dir / "result.json").read_text())
    assert result["status"] == "complete" and result["name"] == "quickstart"
    assert result["pipeline_text"] == NAMED_PIPELINES["default"].by_target["llvm"]  # quickstart: `pipeline: default`
    labels = {"workbench", "ort_all", "ort_none", "tvm_default", "tvm_unoptimized"}
    assert set(result["measurements"]) == labels
    for label, figures in result["measurements"].items():
        assert figures["median_ms"] > 0 and figures["p90_ms"] >= figures["median_ms"] and figures["repeats"] == 5
    assert set(result["accuracy"]) == labels - {"ort_none"} and all(a["ok"] for a in result["accuracy"].values())
    assert result["kernels"]["workbench"] < result["kernels"]["tvm_unoptimized"]
    assert [p["name"] for p in result["passes"]] == [
        spec.name for spec in parse_text(NAMED_PIPELINES["default"].by_target["llvm"])]
    # the committed database for this CPU (or the closest one, said so) schedules the convs
    assert result["target_resolved"]["key"] == f"llvm-{result['target_resolved']['host_cpu']}"
    tuning = result["tuning"]
    assert tuning["match"] in ("exact", "closest") and (tuning["match"] == "exact") == (tuning["note"] is None)
    assert sum(name.startswith("fused_conv2d") for name in tuning["covered"]) == 6
    assert result["model"]["inputs"] == {"x": {"shape": [1, 3, 64, 64], "dtype": "float32"}}
    assert result["provenance"]["tvm"] == "0.27.0.post1" and len(result["provenance"]["config_hash"]) == 16
    for name in ("report.md", "latency.png", "model.canonical.onnx", "inputs.npz", "workbench.so",
                 "ort_all.optimized.onnx"):
        assert (out_dir / name).stat().st_size > 0, name
    assert len(list((tmp_path / "ir").glob("*.py"))) == 1 + len(result["passes"])  # the imported module, one per pass
    with sqlite3.connect(tmp_path / "runs" / "results.sqlite") as db:
        assert db.execute("select count(*) from runs where name='quickstart'").fetchone()[0] == 1
        assert db.execute("select count(*) from measurements").fetchone()[0] == len(labels)
    printed = capsys.readouterr().out
    assert "tvm_unoptimized" in printed and "×" in printed


def test_pipeline_flag_overrides_config_and_empty_pipeline_equals_unoptimized(tmp_path):
    config = write_config(tmp_path, baselines=["ort_none", "tvm_unoptimized"])
    assert main(["run", str(config), "--pipeline", ""]) == 0
    result = json.loads((tmp_path / "runs" / "quick" / "result.json").read_text())
    assert result["passes"] == [] and result["kernels"]["workbench"] == result["kernels"]["tvm_unoptimized"]


@pytest.mark.parametrize("args, fragment", [
    (["--set", "model.source=zoo:nope"], "zoo"),
    (["--set", "mesure.repeat=2"], "did you mean 'measure'"),
    (["--pipeline", "fold_constant,fusee"], "unknown pass 'fusee'"),
    (["--set", "model.source=missing.onnx"], "does not exist"),
    (["--set", "bad"], "expected dotted.key=value"),
])
def test_user_errors_exit_2_with_one_message(tmp_path, capsys, args, fragment):
    assert main(["run", str(write_config(tmp_path)), *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


@pytest.mark.parametrize("config", sorted(Path("configs").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_validates_with_known_passes(config):
    from workbench.config import load_experiment
    from workbench.passes.pipeline import build_passes

    experiment = load_experiment(config)
    assert build_passes(experiment.pipeline)
