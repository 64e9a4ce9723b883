"""`workbench run --model`: a bare model run end to end with --input (no YAML), its --save-config file run again
by `workbench run`, and the user's mistakes (missing file, dynamic dims left open, both a config and --model)
answered with exit 2 and one message."""

import json
from pathlib import Path

import onnx
import pytest
import yaml

from workbench.cli import main
from workbench.models import zoo

QUICK = ["--set", "measure.repeat=2", "--set", "measure.warmup=0"]


@pytest.fixture
def convnet(tmp_path: Path, monkeypatch) -> Path:
    """The zoo's convnet_small as a file (N, H, W symbolic), the working directory a tmp folder (runs/ goes there)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "my_net.onnx"
    onnx.save(zoo.build("convnet_small"), path)
    return path


def test_run_model_with_input_writes_result_and_a_config_that_runs(convnet, tmp_path, capsys):
    saved = tmp_path / "my_net.yaml"
    assert main(["run", "--model", str(convnet), "--input", "x=1x3x32x32", *QUICK, "--save-config", str(saved)]) == 0
    result = json.loads((tmp_path / "runs" / "my_net" / "result.json").read_text())
    assert result["status"] == "complete" and result["name"] == "my_net"
    assert set(result["measurements"]) == {"workbench", "ort_all", "ort_none"}
    assert result["model"]["inputs"] == {"x": {"shape": [1, 3, 32, 32], "dtype": "float32"}}
    assert [p["name"] for p in result["passes"]][-2:] == ["fuse", "dce"]  # the default pipeline
    assert "Wrote my_net.yaml" in capsys.readouterr().out
    config = yaml.safe_load(saved.read_text())
    assert config["pipeline"] == "default" and config["measure"] == {"repeat": 2, "warmup": 0}
    assert main(["run", str(saved), "--set", f"output={tmp_path / 'again'}"]) == 0
    assert json.loads((tmp_path / "again" / "result.json").read_text())["status"] == "complete"


def test_dynamic_dims_without_input_exit_2_naming_them_and_the_flag(convnet, capsys):
    assert main(["run", "--model", str(convnet)]) == 2
    err = capsys.readouterr().err
    assert "dynamic dims: x [N, 3, H, W]" in err and "--input x=Nx3xHxW" in err
    assert err.count("error:") == 1


@pytest.mark.parametrize("args, message", [
    (["--model", "missing.onnx"], "does not exist"),
    (["quickstart.yaml", "--model", "{model}"], "exactly one of them"),
    ([], "exactly one of them"),
    (["configs/quickstart.yaml", "--input", "x=1x3x8x8"], "--input and --save-config go with --model"),
    (["--model", "{model}", "--input", "y=1x3x8x8"], "has no input 'y'"),
])
def test_bad_arguments_exit_2_with_one_message(convnet, capsys, args, message):
    assert main(["run", *[a.format(model=convnet) for a in args]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("error:") == 1
