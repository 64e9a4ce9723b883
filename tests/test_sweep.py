"""`workbench sweep`: expansion, equivalence classes, crash isolation, kill + resume, the ranked report."""

import csv
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from pause_points import held

from workbench.cli import main
from workbench.errors import UserError
from workbench.sweep.spec import load_sweep

BASE = {
    "name": "sw",
    "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}},
    "baselines": ["tvm_unoptimized"],
    "accuracy": {"reference": "tvm_unoptimized"},
    "measure": {"warmup": 1, "repeat": 3},
}
PNG = b"\x89PNG\r\n\x1a\n"


def write_sweep(tmp_path: Path, sweep: dict, name: str = "s", **top) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "sweep": sweep, "output": str(tmp_path / name), **top}))
    return path


# ---------------------------------------------------------------------------------------------- expansion


def test_permutations_prefix_suffix_and_seeded_sample(tmp_path):
    perms = {"permutations": ["fold_constant", "fold_batchnorm", "fuse"], "prefix": "canonicalize", "suffix": ["dce"]}
    sweep = load_sweep(write_sweep(tmp_path, {"orderings": perms}), tmp_path)
    texts = [v.pipeline_text for v in sweep.variants]
    assert len(texts) == len(set(texts)) == 6
    assert all(t.startswith("canonicalize,") and t.endswith(",dce") for t in texts)
    assert sweep.permuted == ["fold_constant", "fold_batchnorm", "fuse"]
    sampled = [[v.pipeline_text for v in load_sweep(write_sweep(tmp_path, {"orderings": {**perms, "sample": 3,
                                                                                           "seed": seed}}), tmp_path).variants]
               for seed in (1, 1, 2)]
    assert len(sampled[0]) == 3 and set(sampled[0]) <= set(texts)
    assert sampled[0] == sampled[1]  # same seed, same sample
    assert sampled[0] != sampled[2]


def test_grid_times_orderings_ids_and_base_file(tmp_path):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"base": "exp.yaml", "output": str(tmp_path / "g"), "sweep": {
        "orderings": ["fold_constant,dce", ["fuse", {"dce": {}}]],
        "grid": {"seed": [0, 1, 2], "measure.repeat": [3, 4]}, "repeats": 2}}))
    sweep = load_sweep(path, tmp_path)
    assert len(sweep.variants) == 2 * 3 * 2 * 2
    assert len({v.id for v in sweep.variants}) == len(sweep.variants)
    assert {v.pipeline_text for v in sweep.variants} == {"fold_constant,dce", "fuse,dce"}
    v = sweep.variants[-1]
    assert v.config["seed"] == 2 and v.config["measure"]["repeat"] == 4 and v.repeat == 1
    assert v.config["output"] == str(tmp_path / "g" / "variants" / v.id)
    assert load_sweep(path, tmp_path).variants[-1].id == v.id  # stable


@pytest.mark.parametrize("sweep, fragment", [
    ({"orderings": []}, "the sweep expands to zero variants"),
    ({"orderings": ["dce"], "grid": {"seed": []}}, "the sweep expands to zero variants"),
    ({"orderings": ["dce"], "grdi": {}}, "did you mean 'grid'"),
    ({"orderings": ["dce"], "grid": {"mesure.repeat": [2]}}, "mesure"),
    ({"orderings": ["dce("]}, "sweep.orderings[0]"),
])
def test_sweep_file_errors_are_user_errors(tmp_path, sweep, fragment):
    with pytest.raises(UserError, match=None) as info:
        load_sweep(write_sweep(tmp_path, sweep), tmp_path)
    assert fragment in str(info.value) and "s.yaml" in str(info.value)


def test_dry_run_prints_variants_and_writes_nothing(tmp_path, capsys):
    path = write_sweep(tmp_path, {"orderings": ["fold_constant,dce", "fuse"], "grid": {"seed": [0, 1]}})
    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 variants" in out and "fold_constant,dce" in out and "seed=1" in out
    assert not (tmp_path / "s").exists()
    assert main(["sweep", str(tmp_path / "missing.yaml")]) == 2


def test_set_overrides_the_sweep_file_and_its_base(tmp_path, capsys):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(BASE))
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump({"base": "exp.yaml", "output": str(tmp_path / "o"),
                                    "sweep": {"orderings": ["dce", "fuse"]}}))
    sweep = load_sweep(path, tmp_path, [f"output={tmp_path / 'elsewhere'}", "sweep.workers=1",
                                        "base.measure.repeat=7", "base.model.inputs.x=[1, 3, 8, 8]"])
    assert sweep.output == tmp_path / "elsewhere" and sweep.section.workers == 1
    assert all(v.config["measure"]["repeat"] == 7 and v.config["model"]["inputs"]["x"]["shape"] == [1, 3, 8, 8]
               for v in sweep.variants)
    assert yaml.safe_load((tmp_path / "exp.yaml").read_text()) == BASE  # the base file itself is left alone
    with pytest.raises(UserError, match="sweep.wrokers: unknown key — did you mean 'workers'"):
        load_sweep(path, tmp_path, ["sweep.wrokers=1"])
    with pytest.raises(UserError, match="measure.repat"):
        load_sweep(path, tmp_path, ["base.measure.repat=1"])
    assert main(["sweep", str(path), "--dry-run", "--set", "base.seed=5", "--set", "sweep.grid={seed: [1, 2]}"]) == 0
    assert "4 variants" in capsys.readouterr().out


# ------------------------------------------------------------------------- one real sweep, several checks


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """4 orderings: two equivalent ones, one distinct, one whose pass calls os.abort() in the worker."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    path = write_sweep(tmp_path, {"orderings": ["dce,fold_constant", "fold_constant,dce", "fuse",
                                                "fold_constant,abort_now"], "workers": 2, "timeout_s": 240},
                       plugins=["tests.sweep_plugin_abort"])
    started = time.perf_counter()
    code = main(["sweep", str(path)])
    print(f"sweep took {time.perf_counter() - started:.1f} s")
    out = tmp_path / "s"
    with sqlite3.connect(out / "results.sqlite") as db:
        db.row_factory = sqlite3.Row
        rows = {r["pipeline_text"]: dict(r) for r in db.execute("select * from sweep_variants")}
        runs = db.execute("select count(*) from runs").fetchone()[0]
    return code, out, rows, runs, path


def test_crash_in_one_variant_only_fails_that_variant(finished_sweep):
    code, _out, rows, _runs, _path = finished_sweep
    assert code == 0
    assert len(rows) == 4
    crashed = rows["fold_constant,abort_now"]
    assert crashed["status"] == "failed" and "SIGABRT" in crashed["error"] and crashed["run_id"] is None
    assert all(rows[t]["status"] == "done" for t in ("dce,fold_constant", "fold_constant,dce", "fuse"))


def test_equivalent_orderings_are_measured_once(finished_sweep):
    _code, _out, rows, runs, _path = finished_sweep
    a, b, c = rows["dce,fold_constant"], rows["fold_constant,dce"], rows["fuse"]
    assert a["structural_hash"] == b["structural_hash"] != c["structural_hash"]
    assert a["class_id"] == b["class_id"] and a["run_id"] == b["run_id"] != c["run_id"]
    assert runs == 2  # two classes, two runs


def test_two_workers_measure_on_half_the_cores_each(finished_sweep):
    """Two workers measure side by side: each runs its kernels on its share of the cores, not on all of them."""
    _code, out, _rows, _runs, _path = finished_sweep
    results = [json.loads(path.read_text()) for path in out.rglob("result.json")]
    assert len(results) == 2 and {r["threads"] for r in results} == {max(1, psutil.cpu_count(logical=False) // 2)}


def test_report_ranks_plots_and_exports(finished_sweep, capsys):
    _code, out, rows, _runs, _path = finished_sweep
    from workbench.sweep.report import ranked_rows

    ranked, failed, _meta = ranked_rows(out)
    assert [r["rank"] for r in ranked] == [1, 2] and ranked[0]["median_ms"] <= ranked[1]["median_ms"]
    assert ranked[0]["noise"] == "best" and all(r["ci_low"] <= r["median_ms"] <= r["ci_high"] for r in ranked)
    assert all("tvm_unoptimized" in r["speedup"] and r["accuracy_ok"] for r in ranked)
    assert [len(r["equivalent"]) for r in ranked if r["pipeline_text"] != "fuse"] == [1]
    assert [f["pipeline_text"] for f in failed] == ["fold_constant,abort_now"]
    for png in ("latency.png", "attribution.png"):
        assert (out / png).read_bytes()[:8] == PNG and (out / png).stat().st_size > 2000
    with open(out / "variants.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [r["status"] for r in table] == ["done", "done", "failed"]
    assert float(table[0]["median_ms"]) == pytest.approx(ranked[0]["median_ms"])
    with open(out / "all_rows.csv") as handle:
        assert {r["label"] for r in csv.DictReader(handle)} == {"workbench", "tvm_unoptimized"}
    report = (out / "report.md").read_text()
    assert "![latency](latency.png)" in report and "![attribution](attribution.png)" in report
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0  # `workbench report` takes a sweep folder too
    assert (out / "report.md").is_file() and "fuse" in capsys.readouterr().out


def test_rerun_without_resume_refuses_and_resume_skips_done(finished_sweep):
    _code, out, rows, runs, path = finished_sweep
    assert main(["sweep", str(path)]) == 2
    # resume retries only the failed variant (it crashes again); nothing done is re-measured
    assert main(["sweep", str(path), "--resume", "--workers", "1"]) == 0
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("select count(*) from runs").fetchone()[0] == runs
        assert db.execute("select count(*) from sweep_variants").fetchone()[0] == 4


# ----------------------------------------------------------------------------------------- kill + resume


def test_sigkill_then_resume_keeps_every_variant_exactly_once(tmp_path):
    """The sweep is killed while its worker holds at its second run (tests/sweep_plugin_pause.py): exactly the
    first variant is done; the resume measures the other two and keeps that one's row."""
    # three input shapes: three IRs, so three classes and three runs (equivalent variants would share one run)
    shapes = [[1, 3, 16, 16], [1, 3, 20, 20], [1, 3, 24, 24]]
    path = write_sweep(tmp_path, {"orderings": ["dce"], "grid": {"model.inputs.x": shapes}, "workers": 1}, name="k",
                       plugins=["tests.sweep_plugin_pause"])
    store = tmp_path / "k" / "results.sqlite"
    command = [sys.executable, "-m", "workbench.cli", "sweep", str(path)]
    with held(command, tmp_path / "hold") as child:
        child.proc.send_signal(signal.SIGKILL)
        child.proc.wait()
    assert child.proc.returncode == -signal.SIGKILL
    with sqlite3.connect(store) as db:
        before = dict(db.execute("select id, run_id from sweep_variants where status='done'").fetchall())
    variants = load_sweep(path, tmp_path).variants
    assert list(before) == [variants[0].id] and before[variants[0].id] is not None  # the first run, committed
    assert subprocess.run(command + ["--resume"], capture_output=True, timeout=300).returncode == 0
    with sqlite3.connect(store) as db:
        after = db.execute("select id, status, run_id from sweep_variants").fetchall()
        referenced = db.execute("select count(*) from runs where id in (select run_id from sweep_variants)").fetchone()
        orphans = db.execute("select count(*) from runs where id not in (select run_id from sweep_variants"
                             " where run_id is not null)").fetchone()
    ids = [row[0] for row in after]
    assert sorted(ids) == sorted(v.id for v in variants) and len(set(ids)) == 3
    assert all(status == "done" for _, status, _ in after)
    assert {i: r for i, _, r in after if i in before} == before  # committed rows kept, not re-measured
    assert referenced[0] == 3
    assert orphans[0] == 0  # a run and the variants it measured are committed together, or not at all


# ------------------------------------------------------------------------------------ what a worker reuses


def test_worker_runs_reuse_builds_of_equal_ir_and_leave_the_store_to_the_parent(tmp_path):
    from workbench.compile.build_cache import BuildCache
    from workbench.config import validate
    from workbench.experiment import run_experiment

    builds = BuildCache()
    results = []
    for i, pipeline in enumerate(["fold_constant,dce", "fuse", "fuse"]):  # the last: same IR, another seed
        experiment = validate({**BASE, "pipeline": pipeline, "seed": i, "output": str(tmp_path / f"v{i}")}, "test")
        results.append(run_experiment(experiment, tmp_path, store=False, builds=builds).to_json())
    # tvm_unoptimized once for all three, the workbench build once per distinct optimized IR
    assert len(builds) == 3
    for i, result in enumerate(results):
        assert result["measurements"]["tvm_unoptimized"]["median_ms"] > 0 and "run_id" not in result
        assert result["accuracy"]["workbench"]["ok"]
        assert (tmp_path / f"v{i}" / "workbench.so").stat().st_size > 1000
    assert (tmp_path / "v1" / "workbench.so").read_bytes() == (tmp_path / "v2" / "workbench.so").read_bytes()
    assert results[1]["kernels"]["workbench"] == results[2]["kernels"]["workbench"]
    assert not (tmp_path / "results.sqlite").exists()


def test_an_idle_worker_does_not_take_a_second_run_of_the_ir_a_busy_worker_is_building():
    """Stealing a run routed to a busy worker that runs the same IR would compile that IR twice."""
    from collections import deque
    from types import SimpleNamespace

    from workbench.sweep.workers import Task, stealable

    def task(key, pipeline, prefer):
        return Task(key, "run", {"model": BASE["model"], "target": "llvm", "pipeline": pipeline}, prefer)

    busy = SimpleNamespace(task=task("a0", "fuse", 0))
    pool = [busy, SimpleNamespace(task=None)]
    assert stealable(deque([task("a1", "fuse", 0)]), pool) is None  # same IR as worker 0's run: wait for it
    other = task("b0", "fold_constant,fuse", 0)
    assert stealable(deque([task("a1", "fuse", 0), other]), pool) == other  # another IR: take it
    assert stealable(deque([task("h", "fuse", None)]), pool)[0] == "h"  # routed nowhere (a hash task)
    assert stealable(deque([task("c", "fuse", 5)]), pool)[0] == "c"  # routed to a worker that is gone


# ------------------------------------------------------------------------------------ concurrent writers


def _sweep_writer(path, worker, start):
    from test_results import sample_result, typed

    from workbench.sweep.spec import Variant
    from workbench.sweep.store import SweepStore

    start.wait(60)  # both processes are up before either writes: the writes really overlap
    store = SweepStore(path)
    for i in range(15):  # a measured class of two variants (run + both rows in one transaction), then a failure
        members = [Variant(f"w{worker}-{i}-{m}", i, 0, "dce", {}, {}) for m in range(2)]
        store.record(members, "done", result=typed(sample_result(f"w{worker}-{i}")), median_ms=1.0, class_id=f"c{i}")
        store.record([Variant(f"w{worker}-{i}-failed", i, 0, "x", {}, {})], "failed", error="boom")
    store.close()


def test_two_sweeps_write_one_store_without_losing_rows(tmp_path, run_two_writers):
    path = tmp_path / "shared.sqlite"  # not created beforehand: both also race to make the schema
    run_two_writers(_sweep_writer, path)
    with sqlite3.connect(path) as db:
        variants = dict(db.execute("select id, run_id from sweep_variants").fetchall())
        runs = dict(db.execute("select id, name from runs").fetchall())
    assert len(variants) == 2 * 15 * 3 and len(runs) == 2 * 15
    for w in range(2):
        for i in range(15):
            run_id = variants[f"w{w}-{i}-0"]
            assert variants[f"w{w}-{i}-1"] == run_id and runs[run_id] == f"w{w}-{i}"
            assert variants[f"w{w}-{i}-failed"] is None


# ------------------------------------------------------------------------------------------- Ray executor


def test_ray_executor_same_store_crash_and_timeout(tmp_path):
    """executor: ray on a local Ray instance (num_cpus=2): same variant function, same store and report;
    an aborting variant fails alone. A hanging one is cancelled at the timeout, in a sweep of its own with a short
    one: the clock runs from the task's submission (a Ray worker's start and imports included), so a timeout short
    enough for the test would also cut the other variants short on a slow machine."""
    pytest.importorskip("ray", reason="the `ray` extra is not installed (pip install -e '.[ray]')")
    path = write_sweep(tmp_path, {"orderings": ["dce,fold_constant", "fold_constant,dce", "fold_constant,abort_now"],
                                  "executor": "ray", "workers": 2}, plugins=["tests.sweep_plugin_abort"])
    assert main(["sweep", str(path)]) == 0
    hang = write_sweep(tmp_path, {"orderings": ["hang_now"], "executor": "ray", "workers": 1, "timeout_s": 5},
                       name="hang", plugins=["tests.sweep_plugin_abort"])
    assert main(["sweep", str(hang)]) == 0
    rows = {}
    for sweep in ("s", "hang"):
        with sqlite3.connect(tmp_path / sweep / "results.sqlite") as db:
            db.row_factory = sqlite3.Row
            rows.update({r["pipeline_text"]: dict(r) for r in db.execute("select * from sweep_variants")})
            if sweep == "s":
                runs = db.execute("select id, pipeline_text from runs").fetchall()
    assert rows["fold_constant,abort_now"]["status"] == "failed"
    assert "WorkerCrashedError" in rows["fold_constant,abort_now"]["error"]
    assert rows["hang_now"]["status"] == "failed" and "timeout after 5 s" in rows["hang_now"]["error"]
    a, b = rows["dce,fold_constant"], rows["fold_constant,dce"]
    assert a["status"] == b["status"] == "done" and a["class_id"] == b["class_id"] and a["median_ms"] > 0
    assert len(runs) == 1 and runs[0][0] == a["run_id"] == b["run_id"]  # one class, measured once, no orphan
    assert (tmp_path / "s" / "latency.png").read_bytes()[:8] == PNG
