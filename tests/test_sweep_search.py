"""Ordering search: sequences grow step by step, equivalent IR is measured once, the budget counts distinct IRs,
and a resumed (or extended) search measures nothing twice. Real pipelines, builds and measurements, tiny model."""

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from workbench.cli import main
from workbench.errors import UserError
from workbench.sweep.search import MIN_GAIN
from workbench.sweep.spec import load_sweep

BASE = {
    "name": "search",
    "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}},
    "baselines": [],
    "accuracy": {"reference": "workbench"},
    "measure": {"warmup": 1, "repeat": 2},
}
PASSES = ["fold_constant", "fold_batchnorm", "fuse"]
PNG = b"\x89PNG\r\n\x1a\n"


def write_search(tmp_path: Path, name: str = "s", **search) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "output": str(tmp_path / name), "sweep": {
        "orderings": {"passes": PASSES, **search}, "workers": 2}}))
    return path


def outcome(out: Path) -> tuple[dict, dict, int]:
    with sqlite3.connect(out / "results.sqlite") as db:
        rows = {text: (status, run_id, h) for text, status, run_id, h in
                db.execute("select pipeline_text, status, run_id, structural_hash from sweep_variants")}
        runs = db.execute("select count(*) from runs").fetchone()[0]
    return json.loads((out / "search.json").read_text()), rows, runs


def test_greedy_grows_the_best_sequence_measures_equal_ir_once_and_resumes(tmp_path):
    # after `fuse` (the prefix) the graph-level passes find little: fuse,dce is the reference's IR and
    # fuse,fold_batchnorm that of fuse,fold_constant, whatever the timings
    path = write_search(tmp_path, search="greedy", budget=2, prefix=["fuse"], passes=["fold_constant",
                                                                                      "fold_batchnorm", "dce"])
    assert main(["sweep", str(path)]) == 0
    search, rows, runs = outcome(tmp_path / "s")
    assert search["measured"] == runs == 2  # the budget: distinct IRs measured, then it stops
    first_runs = {text: run_id for text, (_s, run_id, _h) in rows.items()}

    # more budget on the same output: the finished steps are replayed from the store, the search carries on
    assert main(["sweep", str(path), "--resume", "--set", "sweep.orderings.budget=5"]) == 0
    search, rows, runs = outcome(tmp_path / "s")
    assert all(rows[text][1] == run_id for text, run_id in first_runs.items())  # nothing measured again
    trajectory = search["trajectory"]
    assert trajectory[0]["step"] == "reference" and trajectory[0]["pipeline"] == "fuse"
    by_step: dict[str, list[str]] = {}
    for point in trajectory:
        by_step.setdefault(point["step"], []).append(point["pipeline"])
    passes = ["fold_constant", "fold_batchnorm", "dce"]
    assert sorted(by_step["length 1"]) == sorted(f"fuse,{p}" for p in passes)  # every one-pass sequence ...
    one = {p["pipeline"]: p["median_ms"] for p in trajectory if p["step"] == "length 1"}
    winner = min(one, key=one.get)
    if "length 2" in by_step:  # ... then the best one extended by each other pass
        assert sorted(by_step["length 2"]) == sorted(f"{winner},{p}" for p in passes if p not in winner.split(","))
    new = {p["pipeline"]: p["new"] for p in trajectory}
    assert not new["fuse,dce"] and new["fuse,fold_constant"] != new["fuse,fold_batchnorm"]
    # equivalent IR: measured once, every equivalent candidate recorded with that class's run
    hashes = {h for _s, _r, h in rows.values()}
    assert runs == len(hashes) == search["measured"] <= 5
    for point in trajectory:
        status, run_id, h = rows[point["pipeline"]]
        assert status == "done" and run_id is not None
    bests = [p["best_ms"] for p in trajectory]
    assert bests == sorted(bests, reverse=True) and search["best"]["median_ms"] == bests[-1]
    assert [p["measured"] for p in trajectory] == sorted(p["measured"] for p in trajectory)

    # resumed once more: the same search, nothing new
    assert main(["sweep", str(path), "--resume", "--set", "sweep.orderings.budget=5"]) == 0
    again, _rows, runs_again = outcome(tmp_path / "s")
    assert runs_again == runs and again["trajectory"] == trajectory
    report = (tmp_path / "s" / "report.md").read_text()
    assert "## Ordering search" in report and f"`{search['best']['pipeline']}`" in report
    assert (tmp_path / "s" / "search.png").read_bytes()[:8] == PNG


@pytest.mark.parametrize("strategy", ["beam", "random"])
def test_beam_and_random_respect_the_budget_and_the_pass_set(tmp_path, strategy):
    path = write_search(tmp_path, search=strategy, budget=3, max_length=2, beam_width=2, seed=1)
    assert main(["sweep", str(path)]) == 0
    search, rows, runs = outcome(tmp_path / "s")
    assert runs == search["measured"] <= 3
    for point in search["trajectory"][1:]:
        passes = point["pipeline"].split(",")
        assert 1 <= len(passes) <= 2 and len(set(passes)) == len(passes) and set(passes) <= set(PASSES)
    texts = [p["pipeline"] for p in search["trajectory"]]
    assert len(texts) == len(set(texts))  # no sequence tried twice


def test_search_file_errors_name_the_key(tmp_path):
    with pytest.raises(UserError, match=r"sweep\.orderings\.budgt: unknown key — did you mean 'budget'"):
        load_sweep(write_search(tmp_path, search="greedy", budgt=3), tmp_path)
    with pytest.raises(UserError, match=r"sweep\.orderings\.search"):
        load_sweep(write_search(tmp_path, search="annealing"), tmp_path)
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "sweep": {"orderings": {"search": "greedy", "passes": PASSES},
                                                            "grid": {"seed": [0, 1]}}}))
    with pytest.raises(UserError, match="sweep.grid"):
        load_sweep(path, tmp_path)


def test_local_search_starts_from_the_pipeline_tries_every_swap_and_drop_and_keeps_to_its_minutes(tmp_path):
    """`local` from fold_constant,fold_batchnorm,fuse,dce: the start measured first, then its 3 adjacent swaps and 4
    drops (equivalent IR measured once); with `minutes` spent after the start, nothing more is measured."""
    start = "fold_constant,fold_batchnorm,fuse,dce"
    path = write_search(tmp_path, search="local", budget=6)
    data = yaml.safe_load(path.read_text())
    data["sweep"]["orderings"]["passes"] = start
    path.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(path)]) == 0
    search, rows, runs = outcome(tmp_path / "s")
    trajectory = search["trajectory"]
    assert trajectory[0]["step"] == "start" and trajectory[0]["pipeline"] == start
    assert search["start"]["pipeline"] == start and search["start"]["median_ms"] > 0
    passes = start.split(",")
    swaps = {",".join(passes[:i] + [passes[i + 1], passes[i]] + passes[i + 2:]) for i in range(3)}
    drops = {",".join(passes[:i] + passes[i + 1:]) for i in range(4)}
    move = {p["pipeline"] for p in trajectory if p["step"] == "move 1"}
    assert move <= swaps | drops and len(move) + 1 == len(trajectory[: 1 + len(move)])
    assert runs == search["measured"] <= 6 and runs == len({h for _s, _r, h in rows.values()})
    assert "the start `fold_constant,fold_batchnorm,fuse,dce`" in (tmp_path / "s" / "report.md").read_text()
    # each new neighbour was timed beside the start in its own run: a paired ratio with a real interval
    versus = next(step["versus"] for step in search["steps"] if step.get("versus"))
    paired = {text: v["ratio"] for text, v in versus.items() if v["paired"]}
    assert paired and set(paired) <= move
    assert all(low <= ratio <= high and low < high for ratio, low, high in paired.values())
    assert search["end"] == (search["moves"][-1]["to"] if search["moves"] else start)
    for m in search["moves"]:  # a move only where the whole paired interval is more than MIN_GAIN faster
        assert m["ratio"][2] < 1 - MIN_GAIN
    assert main(["sweep", str(path), "--resume"]) == 0  # replayed from the store: the same moves, nothing measured
    again, _rows, runs_again = outcome(tmp_path / "s")
    assert runs_again == runs and (again["moves"], again["end"]) == (search["moves"], search["end"])
    assert next(step["versus"] for step in again["steps"] if step.get("versus")) == versus

    timed = write_search(tmp_path, name="t", search="local", budget=6, minutes=0.001)
    data = yaml.safe_load(timed.read_text())
    data["sweep"]["orderings"]["passes"] = start
    timed.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(timed)]) == 0
    search, _rows, runs = outcome(tmp_path / "t")
    assert runs == search["measured"] == 1 and search["elapsed_min"] >= 0.001  # the start, then the minutes ran out


@pytest.mark.slow
def test_a_tuned_local_search_pairs_tuned_builds_and_tunes_each_kernel_once(tmp_path):
    """With `tuning`, every candidate is built untuned and tuned; the search ranks and moves on the tuned builds,
    each timed beside the tuned build of the pipeline it would replace, and a kernel shared by several candidates
    is tuned once (its trials stop at the per-task cap however many candidates hold it)."""
    start = "fold_constant,fold_batchnorm,fuse"
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "output": str(tmp_path / "tuned"), "sweep": {
        "orderings": {"passes": start, "search": "local", "budget": 4},
        "tuning": {"trials_per_task": 2, "trials_per_iter": 2}, "workers": 1}}))
    assert main(["sweep", str(path)]) == 0
    search, rows, _runs = outcome(tmp_path / "tuned")
    assert search["tuned"] and search["start"]["pipeline"] == start
    with sqlite3.connect(tmp_path / "tuned" / "results.sqlite") as db:
        done = db.execute("select pipeline_text, tuned, median_ms from sweep_variants where status = 'done' "
                          "and median_ms is not null").fetchall()
    tuned = {text: median for text, is_tuned, median in done if is_tuned}
    untuned = {text for text, is_tuned, _median in done if not is_tuned}
    assert start in tuned and start in untuned and set(tuned) == untuned  # both builds of every candidate measured
    assert search["start"]["median_ms"] == tuned[start]  # the search scores a candidate by its tuned build
    versus = next(step["versus"] for step in search["steps"] if step.get("versus"))
    assert any(v["paired"] for v in versus.values())  # timed beside the start's tuned build in the same run
    summary = json.loads((tmp_path / "tuned" / "tuning.json").read_text())
    assert summary["tasks"] and all(0 < task["trials_before"] + task["trials_run"] <= 2
                                    for task in summary["tasks"].values())
