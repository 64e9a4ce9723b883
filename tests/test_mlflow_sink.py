"""MLflow as an optional sink (`record: {mlflow: URI}`): a real `workbench run` logged into a local file store,
read back with MLflow's own client; the SQLite store is written as before."""

import json
from pathlib import Path

import pytest
import yaml

from workbench.cli import main
from workbench.record.tuning_notes import schedules_line

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


def write_config(tmp_path: Path, **changes) -> Path:
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config.pop("tuning")
    config.update(output=str(tmp_path / "runs" / "quick"), measure={"warmup": 1, "repeat": 3},
                  baselines=["ort_all", "ort_none"])
    config.update(changes)
    path = tmp_path / "quick.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def file_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store without it
    return (tmp_path / "mlruns").as_uri()


@pytest.mark.slow
def test_run_is_logged_with_params_metrics_and_artifacts(tmp_path, file_store):
    config = write_config(tmp_path, record={"mlflow": file_store, "mlflow_experiment": "wb-test"})
    assert main(["run", str(config)]) == 0
    out_dir = tmp_path / "runs" / "quick"
    result = json.loads((out_dir / "result.json").read_text())
    assert (tmp_path / "runs" / "results.sqlite").is_file()  # the SQLite store stays the default

    client = MlflowClient(tracking_uri=file_store)
    experiment = client.get_experiment_by_name("wb-test")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "complete"
    assert run.data.tags["workbench.store_id"] == "1"  # its row in the SQLite store
    params = run.data.params
    assert params["pipeline_text"] == result["pipeline_text"]
    assert params["target_key"] == result["target_resolved"]["key"]
    # no tuning: section, but the config is named quickstart: its default root schedules/quickstart is read
    assert params["database"] == result["tuning"]["path"] and "schedules/quickstart/" in params["database"]
    assert params["schedules"].startswith("schedules: ") and params["schedules"] == schedules_line(result["tuning"])
    assert params["reference"] == "ort_none"
    assert params["model_source"] == "zoo:convnet_small" and params["threads"] == str(result["threads"])
    metrics = run.data.metrics
    for label in ("workbench", "ort_all", "ort_none"):
        assert metrics[f"{label}.median_ms"] == result["measurements"][label]["median_ms"]
        assert metrics[f"{label}.p90_ms"] == result["measurements"][label]["p90_ms"]
    assert metrics["workbench.ratio"] == 1.0
    assert metrics["ort_all.ratio"] == pytest.approx(result["measurements"]["ort_all"]["median_ms"]
                                                     / result["measurements"]["workbench"]["median_ms"])
    assert metrics["workbench.accuracy_ok"] == 1.0 and "workbench.max_abs_err" in metrics
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"result.json", "report.md", "latency.png"} <= artifacts


def test_record_section_is_validated(tmp_path, capsys):
    assert main(["run", str(write_config(tmp_path, record={"mlflow": 3}))]) == 2
    assert "record.mlflow" in capsys.readouterr().err
    assert main(["run", str(write_config(tmp_path, record={"mlfow": "x"}))]) == 2
    assert "record.mlfow: unknown key" in capsys.readouterr().err


@pytest.mark.slow
def test_sweep_logs_a_parent_with_a_child_per_variant(tmp_path, file_store):
    base = {"name": "sw", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}},
            "baselines": ["ort_none"], "measure": {"warmup": 1, "repeat": 3}, "record": {"mlflow": file_store}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"base": base, "sweep": {"orderings": ["fold_constant,dce", "fuse"], "workers": 1},
                                    "output": str(tmp_path / "s")}))
    assert main(["sweep", str(path)]) == 0

    client = MlflowClient(tracking_uri=file_store)
    runs = client.search_runs([client.get_experiment_by_name("sw").experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("workbench.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 3 and len(children) == 2 and parent.info.status == "FINISHED"
    assert {c.data.params["variant_pipeline"] for c in children} == {"fold_constant,dce", "fuse"}
    assert all(c.data.metrics["workbench.median_ms"] > 0 and c.info.status == "FINISHED" for c in children)
    assert all("result.json" in {a.path for a in client.list_artifacts(c.info.run_id)} for c in children)
