"""The SQLite store and atomic writes: round trips, whole-or-nothing results, concurrent writers."""

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from workbench.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from workbench.errors import UserError
from workbench.record.result import RunResult
from workbench.record.store import ROW_COLUMNS, SCHEMA_VERSION, ResultsStore


def sample_result(name="exp", workbench_ms=2.0):
    return {
        "name": name, "created": "2026-12-02T19:30:00+00:00",
        "model": {"source": "zoo:convnet_small", "inputs": {"x": {"shape": [1, 3, 8, 8], "dtype": "float32"}}},
        "target": "llvm", "pipeline": ["fold_constant", {"fuse": {"opt_level": 2}}], "pipeline_text": "fold_constant,fuse",
        "passes": [{"name": "fuse", "seconds": 0.1, "ops_before": {"relax.add": 3}, "ops_after": {"relax.call_tir": 1}}],
        "measurements": {"workbench": {"median_ms": workbench_ms, "p90_ms": 2.5, "repeats": 10, "note": None},
                         "ort_all": {"median_ms": 1.0, "p90_ms": 1.1, "repeats": 10, "note": None},
                         "tvm_default": {"median_ms": None, "p90_ms": None, "repeats": 0, "note": "not available: x"}},
        "accuracy": {"workbench": {"max_abs_err": 1e-6, "max_rel_err": 1e-5, "ok": True}},
        "reference": "ort_none", "kernels": {"workbench": 4, "ort_all": None, "tvm_default": None},
        "provenance": {"config_hash": "abc", "seed": 0},
    }


def typed(result: dict) -> RunResult:
    return RunResult.from_json(result, "test")


def test_round_trip_runs_rows_and_csv(tmp_path):
    second_result = sample_result("b", 3.0)
    second_result["target"] = {"kind": "cuda", "arch": "sm_90"}
    with ResultsStore(tmp_path / "r.sqlite") as store:
        first, second = store.add(typed(sample_result("a"))), store.add(typed(second_result))
        assert store.get(first).to_json() == sample_result("a") and store.get(second).to_json() == second_result
        runs = store.runs()
        assert [r["name"] for r in runs] == ["a", "b"] and [r["id"] for r in store.runs("b")] == [second]
        assert runs[0]["config_hash"] == "abc" and runs[0]["model_source"] == "zoo:convnet_small"
        assert json.loads(runs[1]["target"]) == {"kind": "cuda", "arch": "sm_90"} and runs[0]["target"] == "llvm"
        rows = store.measurement_rows([first])
        assert [r["label"] for r in rows] == ["workbench", "ort_all", "tvm_default"]
        assert rows[0]["kernels"] == 4 and rows[0]["accuracy_ok"] == 1 and rows[0]["max_rel_err"] == 1e-5
        assert rows[2]["median_ms"] is None and rows[2]["note"] == "not available: x"
        assert len(store.measurement_rows()) == 6 and store.measurement_rows([]) == []
        assert store.export_csv(tmp_path / "rows.csv") == tmp_path / "rows.csv"
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        with pytest.raises(KeyError):
            store.get(999)
    with open(tmp_path / "rows.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        read = list(reader)
    assert tuple(reader.fieldnames) == ROW_COLUMNS and len(read) == 6
    assert [(r["name"], r["label"]) for r in read[3:]] == [("b", "workbench"), ("b", "ort_all"), ("b", "tvm_default")]
    assert float(read[3]["median_ms"]) == 3.0 and read[3]["kernels"] == "4" and read[3]["pipeline_text"] == "fold_constant,fuse"
    assert read[5]["median_ms"] == "" and read[5]["note"] == "not available: x"


def test_reopening_keeps_runs(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        run_id = store.add(typed(sample_result("kept")))
    with ResultsStore(tmp_path / "r.sqlite") as store:
        assert store.get(run_id).name == "kept" and len(store.runs()) == 1


def test_a_failing_result_leaves_nothing_behind(tmp_path):
    """A failure inside the transaction, after the runs row and the measurement rows went in (as a sweep's
    `then` records its variants there), rolls all of it back."""
    def fail(_run_id):
        raise sqlite3.OperationalError("the variants' insert failed")

    with ResultsStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(sqlite3.OperationalError):
            store.add(typed(sample_result()), then=fail)
        assert store.runs() == [] and store.measurement_rows() == []
        assert store.db.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        assert store.add(typed(sample_result("after"))) and [r["name"] for r in store.runs()] == ["after"]
    with ResultsStore(tmp_path / "r.sqlite") as store:  # and nothing half-written surfaces on reopening
        assert [r["name"] for r in store.runs()] == ["after"] and len(store.measurement_rows()) == 3


def test_a_store_from_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "r.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(UserError, match="schema version"):
        ResultsStore(path)


def _writer(path, worker, start):
    start.wait(60)
    with ResultsStore(path) as store:
        for i in range(20):
            store.add(typed(sample_result(f"w{worker}-{i}")))


def test_two_processes_write_one_store_without_losing_rows(tmp_path, run_two_writers):
    path = tmp_path / "shared.sqlite"  # not created beforehand: both processes also race to make the schema
    run_two_writers(_writer, path)
    with ResultsStore(path) as store:
        names = [r["name"] for r in store.runs()]
        assert len(names) == 40 and set(names) == {f"w{w}-{i}" for w in range(2) for i in range(20)}
        assert len(store.measurement_rows()) == 120


def test_atomic_writes_replace_whole_files_and_leave_no_temp(tmp_path):
    target = tmp_path / "sub" / "result.json"
    assert atomic_write_json(target, {"a": 1, "path": Path("/x")}) == target
    assert json.loads(target.read_text()) == {"a": 1, "path": "/x"}
    atomic_write_text(target, '{"a": 2}')
    assert target.read_text() == '{"a": 2}' and [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_a_failed_atomic_write_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "result.json"
    atomic_write_text(target, "old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # fails inside the write, after the temp file was made
    with pytest.raises(TypeError):
        atomic_write_json(target, {("tuple", "key"): 1})  # json rejects tuple keys
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["result.json"]
