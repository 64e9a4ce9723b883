"""`workbench runs` and `workbench compare` on a real store: two short runs of the quickstart (pipelines core and
default) written by `workbench run`, then listed, filtered, exported and set side by side; bad inputs exit 2."""

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from workbench.cli import main


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    """tmp/runs with results.sqlite (run 1: core, run 2: default) and their folders core/ and default/."""
    tmp = tmp_path_factory.mktemp("runs_compare")
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config.pop("tuning")
    config.update(measure={"warmup": 1, "repeat": 3}, baselines=["ort_all", "ort_none"])
    path = tmp / "quick.yaml"
    path.write_text(yaml.safe_dump(config))
    for pipeline in ("core", "default"):
        assert main(["run", str(path), "--pipeline", pipeline, "--set", f"output={tmp / 'runs' / pipeline}"]) == 0
    return tmp / "runs"


def _runs(runs_dir: Path, capsys, *args: str) -> str:
    capsys.readouterr()
    assert main(["runs", "--store", str(runs_dir / "results.sqlite"), *args]) == 0
    return capsys.readouterr().out


def test_runs_lists_newest_first_and_filters(runs_dir, capsys):
    rows = json.loads(_runs(runs_dir, capsys, "--json"))
    assert [row["id"] for row in rows] == [2, 1] and {row["name"] for row in rows} == {"quickstart"}
    assert rows[1]["pipeline"] == "fold_constant,fold_batchnorm,fuse,dce" and "pack_conv2d" in rows[0]["pipeline"]
    assert all(row["status"] == "complete" and row["workbench_ms"] > 0 and row["ort_all_ratio"] > 0 for row in rows)
    assert rows[0]["target"].startswith("llvm-") and rows[0]["model"] == "zoo:convnet_small"
    assert [row["id"] for row in json.loads(_runs(runs_dir, capsys, "--json", "--limit", "1"))] == [2]
    assert json.loads(_runs(runs_dir, capsys, "--json", "--name", "other")) == []
    assert len(json.loads(_runs(runs_dir, capsys, "--json", "--model", "convnet", "--target", "llvm"))) == 2
    assert json.loads(_runs(runs_dir, capsys, "--json", "--since", "2999-01-01")) == []
    table = _runs(runs_dir, capsys)
    assert "quickstart" in table and "fold_batchnorm" in table and "2 runs, newest first" in table
    assert table.index("│  2 │") < table.index("│  1 │")
    exported = list(csv.DictReader(io.StringIO(_runs(runs_dir, capsys, "--csv"))))
    assert [row["id"] for row in exported] == ["2", "1"] and "ort_all_ratio" in exported[0]


def test_compare_by_id_shows_the_difference_and_writes_a_png(runs_dir, tmp_path, capsys):
    png = tmp_path / "compare.png"
    capsys.readouterr()
    assert main(["compare", "1", "2", "--store", str(runs_dir / "results.sqlite"), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "what differs" in out and "pipeline" in out and "pack_conv2d" in out
    assert "same in every run: model zoo:convnet_small" in out
    medians = [json.loads((runs_dir / name / "result.json").read_text())["measurements"]["workbench"]["median_ms"]
               for name in ("core", "default")]
    assert all(f"{median:.3f}" in out for median in medians) and "÷ run 1" in out
    assert "ops after each pass" in out and "pack_conv2d → " in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_by_folder_needs_no_store(runs_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default store does not exist here
    capsys.readouterr()
    assert main(["compare", str(runs_dir / "core"), str(runs_dir / "default" / "result.json")]) == 0
    out = capsys.readouterr().out
    assert "core" in out and "result.json" in out and "pipeline" in out


@pytest.mark.parametrize("argv, fragment", [
    (["compare", "1", "99"], "no run 99"),
    (["compare", "1"], "two or more runs"),
    (["compare", "1", "NOT_A_FOLDER"], "no result.json here"),
    (["runs", "--store", "TEXT_FILE"], "not a workbench results store"),
    (["compare", "1", "2", "--store", "TEXT_FILE"], "not a workbench results store"),
    (["runs", "--store", "MISSING"], "no results store here"),
])
def test_bad_inputs_exit_2_with_one_message(runs_dir, tmp_path, capsys, argv, fragment):
    (tmp_path / "TEXT_FILE").write_text("not a database\n" * 200)
    (tmp_path / "NOT_A_FOLDER").mkdir()
    paths = {"TEXT_FILE": tmp_path / "TEXT_FILE", "NOT_A_FOLDER": tmp_path / "NOT_A_FOLDER",
             "MISSING": tmp_path / "missing.sqlite"}
    argv = [str(paths.get(arg, arg)) for arg in argv]
    if "--store" not in argv:
        argv += ["--store", str(runs_dir / "results.sqlite")]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err and len(err.strip().splitlines()) <= 3


@pytest.mark.parametrize("verb", ["runs", "compare"])
def test_help_has_an_example(verb, capsys):
    with pytest.raises(SystemExit):
        main([verb, "--help"])
    assert f"workbench {verb} " in capsys.readouterr().out
