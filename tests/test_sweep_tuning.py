"""Tuned sweeps: the union of the classes' tuning tasks deduplicated by workload, one tuning process, every class
measured tuned and untuned, and SIGKILL during tuning and during measuring losing no finished record.

Budgets are the smallest that exercise the parts: one trial per task on the two heaviest tasks of the union,
random cost model (XGBoost is tested in test_tune.py); the other kernels keep their default schedules.
"""

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml

from workbench.cli import main
from workbench.compile.databases import RECORDS_FILE
from workbench.compile.targets import make_target, target_key
from workbench.config import TargetConfig
from workbench.sweep.report import ranked_rows, tuning_counts
from workbench.sweep.spec import load_sweep
from workbench.sweep.tuning import read_tuning_summary, union_of_tasks
from workbench.sweep.workers import VariantRunner, WorkerSetup

BASE = {
    "name": "tsw",
    "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}},
    "baselines": [],
    "accuracy": {"reference": "workbench"},
    "measure": {"warmup": 1, "repeat": 3},
}
# fold_batchnorm before fuse gives other kernels than after it; the two share their conv2d kernels
ORDERINGS = ["fold_batchnorm,fuse,dce", "fuse,fold_batchnorm,dce"]
TUNING = {"trials_per_task": 1, "trials": 2, "trials_per_iter": 1, "cost_model": "random"}
PNG = b"\x89PNG\r\n\x1a\n"


def write_sweep(tmp_path: Path, **sweep) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "output": str(tmp_path / "t"), "sweep": {
        "orderings": ORDERINGS, "workers": 1, "tuning": TUNING, **sweep}}))
    return path


def test_union_of_tasks_counts_a_shared_kernel_once(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path), tmp_path)
    tuned = [v for v in sweep.variants if v.tuned]
    assert len(sweep.variants) == 4 and len(tuned) == 2  # each ordering built untuned and tuned
    assert all(v.config["tuning"]["database"] == str(tmp_path / "t" / "schedules") for v in tuned)
    assert all(v.config["tuning"] is None for v in sweep.variants if not v.tuned)
    runner = VariantRunner(WorkerSetup((), (), str(tmp_path)))
    union, per_class = union_of_tasks(runner, {v.pipeline_text: v.config for v in tuned}, layout_rewrite=False)
    (key, (_target, tasks)), = union.items()
    assert key == target_key(make_target(TargetConfig()))
    workloads = [w for w, _task in tasks]
    summed = sum(len(keys) for keys in per_class.values())
    shared = set(per_class[ORDERINGS[0]]) & set(per_class[ORDERINGS[1]])
    assert shared and len(workloads) == len(set(workloads)) == summed - len(shared)
    names = [task.task_name for _w, task in tasks]
    assert len(set(names)) == len(names)  # one log file and one result row per task
    by_workload = dict(tasks)
    for full in shared:  # a shared kernel's weight counts its uses in both classes
        assert int(by_workload[full.split("/", 1)[1]].weight) >= 2


def _poll(store: Path, query: str) -> list:
    if not store.exists():
        return []
    try:
        with sqlite3.connect(store, timeout=30) as db:
            return db.execute(query).fetchall()
    except sqlite3.OperationalError:  # table not created yet
        return []


def _kill_when(command: list[str], ready, what: str) -> None:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.2)
        assert proc.poll() is None, f"the sweep ended before {what}"
        assert ready(), f"no {what} before the deadline"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def test_tuned_sweep_survives_sigkill_in_tuning_and_in_measuring(tmp_path):
    path = write_sweep(tmp_path)
    out = tmp_path / "t"
    store = out / "results.sqlite"
    records = out / "schedules" / target_key(make_target(TargetConfig())) / RECORDS_FILE
    lines = lambda: records.read_text().splitlines() if records.is_file() else []  # noqa: E731
    command = [sys.executable, "-m", "workbench.cli", "sweep", str(path)]

    # 1. killed while tuning: the first task's trial is recorded, the second task's not yet
    _kill_when(command, lambda: len(lines()) == 1, "a tuning record")
    after_tuning_kill = lines()
    assert len(after_tuning_kill) == 1
    assert not _poll(store, "select id from sweep_variants where status='done'")  # measuring had not started

    # 2. resumed, killed while measuring: tuning finished first (the recorded trial kept, not measured again)
    done_query = "select id, run_id from sweep_variants where status='done'"
    _kill_when(command + ["--resume"], lambda: bool(_poll(store, done_query)), "a measured variant")
    measured = dict(_poll(store, done_query))
    assert 1 <= len(measured) < 4, "the kill should land mid-measuring"
    assert lines()[:1] == after_tuning_kill and len(lines()) == 2

    # 3. resumed to the end: nothing finished is tuned or measured again
    assert main(["sweep", str(path), "--resume"]) == 0
    assert lines()[:1] == after_tuning_kill and len(lines()) == 2
    rows = {i: (status, run_id) for i, status, run_id in _poll(store, "select id, status, run_id from sweep_variants")}
    assert len(rows) == 4 and all(status == "done" for status, _ in rows.values())
    assert {i: rows[i][1] for i in measured} == measured  # committed rows kept, not re-measured
    assert _poll(store, "select count(*) from runs") == [(4,)]  # two classes, each tuned and untuned

    # the report: ranked by the tuned build, untuned rank beside it, one PNG, union vs sum of the tasks
    ranked, failed, _meta = ranked_rows(out)
    tuned = [r for r in ranked if r["tuned"]]
    assert not failed and len(tuned) == 2 and [r["rank"] for r in tuned] == [1, 2]
    assert all(r["untuned"] is not None and r["untuned"]["structural_hash"] == r["structural_hash"] for r in tuned)
    assert sorted(r["untuned"]["rank"] for r in tuned) == [1, 2]
    assert all(r["covered"] >= 1 for r in tuned)  # the tuned build took the database's schedules
    counts = tuning_counts(read_tuning_summary(out))
    assert counts["classes"] == 2 and counts["union"] < counts["sum"] and counts["trials"] == 2
    assert counts["seconds"] > 0
    report = (out / "report.md").read_text()
    assert counts["tuned"] == 2  # `trials: 2`, one per task: the two heaviest of the union
    assert f"{counts['sum']} tuning tasks between them, {counts['union']} distinct by workload" in report
    assert "untuned rank" in report and (out / "latency.png").read_bytes()[:8] == PNG


def test_a_tuned_base_makes_a_tuned_sweep_and_set_overrides_it(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({"base": {**BASE, "tuning": {"trials": 3, "database": str(tmp_path / "db")}},
                                    "output": str(tmp_path / "b"), "sweep": {"orderings": ORDERINGS[:1]}}))
    sweep = load_sweep(path, tmp_path)
    assert sweep.tuning.trials == 3 and sweep.database_root == tmp_path / "db"
    assert sorted(v.tuned for v in sweep.variants) == [False, True]
    again = load_sweep(path, tmp_path, ["base.tuning.database=other", "sweep.tuning={trials_per_task: 5}"])
    assert again.tuning.trials_per_task == 5 and again.database_root == tmp_path / "b" / "schedules"


def test_a_minutes_budget_tunes_and_measures_every_class(tmp_path):
    """`tuning: {minutes: M}` gives the tasks no trial cap of their own (budget None in their progress): the sweep
    tunes within the minutes and measures every class tuned and untuned."""
    path = write_sweep(tmp_path, orderings=ORDERINGS[:1],
                       tuning={"minutes": 0.1, "trials_per_iter": 1, "cost_model": "random"})
    assert main(["sweep", str(path)]) == 0
    rows, failed, _meta = ranked_rows(tmp_path / "t")
    assert not failed and sorted(r["tuned"] for r in rows) == [False, True]
    counts = tuning_counts(read_tuning_summary(tmp_path / "t"))
    assert counts["trials"] > 0 and counts["seconds"] > 0
