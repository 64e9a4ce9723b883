"""The SQLite store and atomic writes: round trips, whole-or-nothing results, concurrent writers."""

import copy
import csv
import multiprocessing
import sqlite3

import pytest

from workbench.atomic import atomic_write_json, atomic_write_text
from workbench.results import ResultsStore


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


def test_round_trip_runs_rows_and_csv(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as store:
        first, second = store.add(sample_result("a")), store.add(sample_result("b", 3.0))
        assert store.get(first) == sample_result("a") and store.get(second)["measurements"]["workbench"]["median_ms"] == 3.0
        assert [r["name"] for r in store.runs()] == ["a", "b"] and len(store.runs("b")) == 1
        rows = store.measurement_rows([first])
        assert [r["label"] for r in rows] == ["workbench", "ort_all", "tvm_default"]
        assert rows[0]["kernels"] == 4 and rows[0]["accuracy_ok"] == 1 and rows[2]["note"] == "not available: x"
        store.export_csv(tmp_path / "rows.csv")
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with open(tmp_path / "rows.csv") as handle:
        read = list(csv.DictReader(handle))
    assert len(read) == 6 and read[3]["name"] == "b" and float(read[3]["median_ms"]) == 3.0


def test_a_failing_result_leaves_nothing_behind(tmp_path):
    broken = copy.deepcopy(sample_result())
    broken["measurements"]["bad"] = {"median_ms": object()}  # sqlite cannot bind it: fails after the runs insert
    with ResultsStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(sqlite3.Error):
            store.add(broken)
        assert store.runs() == [] and store.measurement_rows() == []


def _writer(path, worker):
    with ResultsStore(path) as store:
        for i in range(20):
            store.add(sample_result(f"w{worker}-{i}"))


def test_two_processes_write_one_store_without_losing_rows(tmp_path):
    path = tmp_path / "shared.sqlite"
    ResultsStore(path).close()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(path, w)) for w in range(2)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0
    with ResultsStore(path) as store:
        assert len({r["name"] for r in store.runs()}) == 40 and len(store.measurement_rows()) == 120


def test_atomic_writes_replace_whole_files_and_leave_no_temp(tmp_path):
    target = tmp_path / "sub" / "result.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_text(target, '{"a": 2}')
    assert target.read_text() == '{"a": 2}' and [p.name for p in target.parent.iterdir()] == ["result.json"]
