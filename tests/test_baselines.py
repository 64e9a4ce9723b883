"""The baseline registry (config/baselines.py) is the one list: the config accepts exactly its selectable names,
defaults to its default ones, every runtime it names has a way to run each of them, and --help lists them."""

import typing

import pytest

from workbench.cli import main
from workbench.compile.build import BASELINE_BUILDS
from workbench.config import Experiment, validate
from workbench.config.baselines import BASELINES, DEFAULT_BASELINES, WORKBENCH_LABEL, runs_on_tvm
from workbench.measure.openvino import PRECISIONS
from workbench.measure.runners import ORT_LEVELS

BASE = {"name": "t", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}}}


def test_the_config_takes_the_registrys_selectable_names_and_defaults():
    accepted = set(typing.get_args(Experiment.model_fields["baselines"].annotation.__args__[0]))
    assert accepted == {name for name, b in BASELINES.items() if b.selectable}
    assert validate(BASE, "f").baselines == list(DEFAULT_BASELINES)
    with pytest.raises(Exception, match="ort_cuda"):  # added by a cuda run itself, never listed
        validate({**BASE, "baselines": ["ort_cuda"]}, "f")


def test_every_baseline_has_a_way_to_run():
    for name, baseline in BASELINES.items():
        if baseline.runtime == "tvm":
            assert runs_on_tvm(name) and name in BASELINE_BUILDS
        elif baseline.runtime == "onnxruntime":
            assert name in ORT_LEVELS and not runs_on_tvm(name)
        elif baseline.runtime == "openvino":
            assert name in PRECISIONS and not runs_on_tvm(name)
    assert runs_on_tvm(WORKBENCH_LABEL)


def test_run_help_lists_every_selectable_baseline(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert all(name in out for name, b in BASELINES.items() if b.selectable) and "ort_cuda" not in out
