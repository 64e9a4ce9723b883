"""MLflow as an optional sink (`record: {mlflow: URI}`): each run becomes an MLflow run with its settings as
parameters, each label's latency, ratio and accuracy as metrics, and result.json, report.md and the PNGs as
artifacts. A sweep logs one parent run and each measured variant as its child. The SQLite store stays the
default and is written either way; mlflow (`pip install -e '.[mlflow]'`, mlflow-skinny) is imported only here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from workbench.config.baselines import WORKBENCH_LABEL
from workbench.errors import UserError
from workbench.record.result import RESULT_FILE, RunResult
from workbench.record.tuning_notes import schedules_line

ARTIFACTS = (RESULT_FILE, "report.md")  # and every *.png of the run folder
PARAM_LIMIT = 6000  # MLflow rejects longer parameter values (a long pipeline's text)


def resolve_uri(uri: str, base_dir: Path) -> str:
    """`record.mlflow` as a tracking URI: a URI as it is, a plain folder taken from `base_dir` as a file: URI."""
    if "://" in uri or ":" in uri.split("/")[0]:
        return uri
    return (Path(base_dir) / Path(uri).expanduser()).resolve().as_uri()


def _client(uri: str):
    """An MlflowClient on `uri`; a plain folder or file: URI is MLflow's file store, which MLflow 3 refuses
    unless MLFLOW_ALLOW_FILE_STORE is set (it is in maintenance mode, still fine for local records)."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise UserError("record.mlflow needs MLflow: pip install -e '.[mlflow]' (mlflow-skinny)") from exc
    if "://" not in uri:  # a folder: MLflow wants an absolute file: URI
        uri = Path(uri).expanduser().resolve().as_uri()
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=uri)


def _experiment_id(client, name: str) -> str:
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name)


def run_params(result: RunResult) -> dict[str, str]:
    """What the run was: pipeline, target key, threads, reference, model source, the database applied."""
    tuning = result.tuning
    params: dict[str, Any] = {
        "pipeline_text": result.pipeline_text,
        "target_key": (result.target_resolved or {}).get("key"),
        "threads": result.threads,
        "reference": result.reference,
        "model_source": result.model.get("source"),
        "database": (tuning.path if tuning else None) or "untuned",
        "database_match": tuning.match if tuning else None,
        "schedules": schedules_line(tuning) if tuning else None,  # kernels per database, shared ones included
        "config_hash": result.provenance.get("config_hash"),
    }
    if result.tuning_trials:
        params["tuning.trials_run"] = sum(task.trials_run for task in result.tuning_trials)
    return {key: str(value)[:PARAM_LIMIT] for key, value in params.items() if value is not None}


def run_metrics(result: RunResult) -> dict[str, float]:
    """Per label: median and p90 (ms), ratio to the workbench median, accuracy ok (1/0) and its max abs error."""
    metrics: dict[str, float] = {}
    ours = result.measurements.get(WORKBENCH_LABEL)
    ours_ms = ours.median_ms if ours is not None else None
    for label, figures in result.measurements.items():
        if figures.median_ms is not None:
            metrics[f"{label}.median_ms"] = figures.median_ms
            if ours_ms:
                metrics[f"{label}.ratio"] = figures.median_ms / ours_ms
        if figures.p90_ms is not None:
            metrics[f"{label}.p90_ms"] = figures.p90_ms
    for label, accuracy in result.accuracy.items():
        if accuracy.ok is not None:
            metrics[f"{label}.accuracy_ok"] = 1.0 if accuracy.ok else 0.0
        if accuracy.max_abs_err is not None:
            metrics[f"{label}.max_abs_err"] = float(accuracy.max_abs_err)
    return metrics


def start_parent(uri: str, experiment_name: str, run_name: str, params: dict[str, Any] | None = None) -> str:
    """Open a parent run (a sweep's) that children name in `parent_run_id`; return its id."""
    client = _client(uri)
    run = client.create_run(_experiment_id(client, experiment_name), run_name=run_name,
                            tags={"workbench.kind": "sweep"})
    for key, value in (params or {}).items():
        client.log_param(run.info.run_id, key, str(value)[:PARAM_LIMIT])
    return run.info.run_id


def end_parent(uri: str, run_id: str, failed: bool = False) -> None:
    _client(uri).set_terminated(run_id, "FAILED" if failed else "FINISHED")


def log_run(result: RunResult, out_dir: Path, uri: str, experiment_name: str,
            parent_run_id: str | None = None, params: dict[str, Any] | None = None) -> str:
    """Log one run (params, metrics, tags, artifacts from `out_dir`) into MLflow at `uri`; return its run id.
    `params` adds settings the result does not carry (the tuning budget)."""
    client = _client(uri)
    from mlflow.entities import Metric, Param

    tags = {"status": result.status, "workbench.name": result.name}
    if result.error:
        tags["error"] = result.error[:5000]
    if result.run_id is not None:
        tags["workbench.store_id"] = str(result.run_id)
    if parent_run_id is not None:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(_experiment_id(client, experiment_name), run_name=result.name, tags=tags)
    run_id = run.info.run_id
    now = int(time.time() * 1000)
    try:
        every = {**run_params(result), **{k: str(v)[:PARAM_LIMIT] for k, v in (params or {}).items() if v is not None}}
        client.log_batch(run_id, params=[Param(k, v) for k, v in every.items()],
                         metrics=[Metric(k, v, now, 0) for k, v in run_metrics(result).items()])
        out_dir = Path(out_dir)
        for path in [*(out_dir / name for name in ARTIFACTS), *sorted(out_dir.glob("*.png"))]:
            if path.is_file():
                client.log_artifact(run_id, str(path))
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED" if result.status == "complete" else "FAILED")
    return run_id
