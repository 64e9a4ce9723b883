"""Experiment config: validation messages name the file and the key path; overrides; hashing."""

from pathlib import Path

import pytest
import yaml

from workbench.config import apply_override, load_experiment, validate
from workbench.config.pipeline_spec import parse_text
from workbench.errors import UserError

BASE = {"name": "t", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}}}


def write(tmp_path: Path, data, name="exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def error_of(data) -> str:
    with pytest.raises(UserError) as info:
        validate(data, "exp.yaml")
    return str(info.value)


def test_short_and_long_input_forms_and_defaults():
    exp = validate({**BASE, "model": {"source": "zoo:x", "inputs": {
        "x": [1, 3, 8, 8], "ids": {"shape": [1, 16], "dtype": "int32", "range": [0, 100]}}}}, "f")
    assert exp.model.inputs["x"].shape == [1, 3, 8, 8] and exp.model.inputs["x"].dtype == "float32"
    assert exp.model.inputs["ids"].dtype == "int32" and exp.model.inputs["ids"].range == (0, 100)
    assert exp.target.kind == "llvm" and exp.baselines == ["ort_all", "ort_none", "tvm_default", "tvm_unoptimized"]
    assert exp.accuracy.reference == "ort_none" and exp.measure.repeat == 50


def test_unknown_key_suggests_the_right_one():
    message = error_of({**BASE, "mesure": {"repeat": 3}})
    assert "exp.yaml" in message and "mesure: unknown key" in message and "did you mean 'measure'" in message
    nested = error_of({**BASE, "measure": {"repeats": 3}})
    assert "measure.repeats: unknown key" in nested and "'repeat'" in nested


def test_wrong_types_and_values_name_the_key_path():
    assert "model.inputs.x.shape.2" in error_of({**BASE, "model": {"source": "zoo:a", "inputs": {"x": [1, 3, 0]}}})
    assert "measure.repeat" in error_of({**BASE, "measure": {"repeat": "many"}})
    assert "baselines.0" in error_of({**BASE, "baselines": ["ort_al"]})
    assert "model: required key is missing" in error_of({"name": "t"})
    assert "range" in error_of({**BASE, "model": {"source": "zoo:a", "inputs": {"x": {"shape": [1], "range": [5, 1]}}}})
    assert "not measured in this run" in error_of({**BASE, "baselines": [], "accuracy": {"reference": "ort_none"}})


def test_pipeline_forms_and_errors():
    exp = validate({**BASE, "pipeline": ["fold_constant", {"fuse": {"opt_level": 1}}, {"dce": None}]}, "f")
    assert [(s.name, s.params) for s in exp.pipeline] == [("fold_constant", {}), ("fuse", {"opt_level": 1}), ("dce", {})]
    text = validate({**BASE, "pipeline": "fold_constant,fuse(opt_level=1),dce"}, "f")
    assert text.pipeline == exp.pipeline
    assert "entry 1" in error_of({**BASE, "pipeline": ["fuse", 3]})
    assert "never closed" in error_of({**BASE, "pipeline": "fuse(opt_level=1"})


def test_load_file_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_experiment(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match=r"malformed YAML at line 3, column 1"):
        load_experiment(write(tmp_path, "name: t\nmodel: [unclosed\n"))
    with pytest.raises(UserError, match="empty"):
        load_experiment(write(tmp_path, ""))
    with pytest.raises(UserError, match="expected a mapping"):
        load_experiment(write(tmp_path, "- a\n- b\n"))
    # PyYAML's int constructor raises a bare ValueError on these literals, in a file, a --set and pipeline text
    with pytest.raises(UserError, match="malformed YAML: invalid literal"):
        load_experiment(write(tmp_path, "0b_\n"))
    with pytest.raises(UserError, match="value is not valid YAML"):
        load_experiment(write(tmp_path, "name: t\n"), ["measure.repeat=0x_"])
    with pytest.raises(UserError, match="value of fuse.opt_level is not valid"):
        parse_text("fuse(opt_level=0b_)")


def test_set_overrides_any_dotted_key(tmp_path):
    path = write(tmp_path, BASE)
    exp = load_experiment(path, ["model.source=zoo:mobilenet_block", "measure.repeat=7",
                                 "model.inputs.x=[1, 16, 8, 8]", "pipeline=fold_constant,dce"])
    assert exp.model.source == "zoo:mobilenet_block" and exp.measure.repeat == 7
    assert exp.model.inputs["x"].shape == [1, 16, 8, 8] and [s.name for s in exp.pipeline] == ["fold_constant", "dce"]
    llvm = write(tmp_path, {**BASE, "target": "llvm"}, "llvm.yaml")
    assert load_experiment(llvm, ["target.mcpu=generic"]).target.mcpu == "generic"  # `target: llvm` expands
    with pytest.raises(UserError, match="expected dotted.key=value"):
        load_experiment(path, ["measure.repeat"])
    with pytest.raises(UserError, match="name is not a mapping"):
        apply_override(dict(BASE), "name.inner=1")
    with pytest.raises(UserError, match="measure.repeat"):
        load_experiment(path, ["measure.repeat=-1"])


def test_config_hash_is_stable_and_sensitive():
    a, b = validate(dict(BASE), "f"), validate(dict(BASE), "f")
    assert a.config_hash() == b.config_hash()
    assert validate({**BASE, "seed": 1}, "f").config_hash() != a.config_hash()


def test_one_measuring_round_keeps_the_hash_runs_had_before_rounds_existed():
    """Sweep variant ids and store groupings come from the hash: `measure.rounds: 1` and no `round_seconds`, the
    protocol before those keys existed, hash as a config without them did; setting either hashes differently."""
    import hashlib
    import json

    a = validate(dict(BASE), "f")
    before = a.model_dump(mode="json", exclude={"record"})
    del before["measure"]["rounds"], before["measure"]["round_seconds"]
    assert a.config_hash() == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    assert validate({**BASE, "measure": {"rounds": 3}}, "f").config_hash() != a.config_hash()
    assert validate({**BASE, "measure": {"round_seconds": 2}}, "f").config_hash() != a.config_hash()


def test_output_and_store_paths(tmp_path):
    exp = validate(dict(BASE), "f")
    assert exp.output_dir(tmp_path) == tmp_path / "runs" / "t"
    assert exp.results_path(tmp_path) == tmp_path / "runs" / "results.sqlite"
    assert validate({**BASE, "results": "db/r.sqlite"}, "f").results_path(tmp_path) == tmp_path / "db" / "r.sqlite"
