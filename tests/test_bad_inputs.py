"""The bad-input corpus: every user mistake in tests/bad_inputs/ exits 2 with one readable message.

Each corpus file says what the message must contain (`# expect: ...`) and, if needed, extra CLI
arguments (`# args: ...`), environment variables (`# env: NAME=VALUE ...`) and the verb when it is not `run`
(`# verb: sweep`). Binary fixtures (broken model files, a .npy) are made here, so the corpus
stays readable text.
"""

import shlex
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from workbench.cli import main

CORPUS = Path(__file__).parent / "bad_inputs"
CASES = sorted(CORPUS.glob("*.yaml"))


def _directives(path: Path) -> tuple[str, list[str], dict[str, str]]:
    lines = path.read_text().splitlines()
    expect = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("# expect:"))
    args = next((shlex.split(line.split(":", 1)[1]) for line in lines if line.startswith("# args:")), [])
    env = next((shlex.split(line.split(":", 1)[1]) for line in lines if line.startswith("# env:")), [])
    return expect, args, dict(item.split("=", 1) for item in env)


def _verb(path: Path) -> str:
    return next((line.split(":", 1)[1].strip() for line in path.read_text().splitlines()
                 if line.startswith("# verb:")), "run")


def _rnn_model() -> onnx.ModelProto:
    """An RNN node: the Relax frontend lacks it and canonicalize does not expand it (unlike LSTM and GRU)."""
    rng = np.random.default_rng(0)
    weights = [helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).ravel().tolist())
               for name, shape in (("W", [1, 8, 4]), ("R", [1, 8, 8]))]
    node = helper.make_node("RNN", ["x", "W", "R"], ["y"], name="encoder_rnn", hidden_size=8)
    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1, 1, 8])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _checker_failing_model() -> onnx.ModelProto:
    node = helper.make_node("Relu", ["undefined_tensor"], ["y"], name="relu_of_nothing")
    graph = helper.make_graph([node], "broken", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _opset_99_model() -> onnx.ModelProto:
    """One Relu stamped opset 99: the checker and TVM take it, ONNX Runtime (the reference) refuses it."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "future",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)], ir_version=9)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bad_inputs")
    for case in CASES:
        shutil.copy(case, folder)
    (folder / "empty.onnx").write_bytes(b"")
    from workbench.models import zoo
    (folder / "truncated.onnx").write_bytes(zoo.build("convnet_small").SerializeToString()[:700])
    (folder / "not_onnx.onnx").write_text("this is a text file, not a protobuf\n" * 3)
    onnx.save(_checker_failing_model(), folder / "fails_checker.onnx")
    onnx.save(_rnn_model(), folder / "rnn.onnx")
    onnx.save(_opset_99_model(), folder / "opset_99.onnx")
    np.save(folder / "x_1x3x8x8.npy", np.zeros((1, 3, 8, 8), np.float32))
    return folder


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_bad_input_exits_2_with_a_readable_message(case, corpus_dir, monkeypatch, capsys):
    expect, args, env = _directives(case)
    monkeypatch.chdir(corpus_dir)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if _verb(case) != "run":
        code = main([_verb(case), case.name, *args])
    else:
        code = main(["run", case.name, "--set", f"output={corpus_dir / 'runs' / case.stem}", *args]
                    if case.stem != "output_unwritable" else ["run", case.name, *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expect in " ".join(err.split()), err
    assert "Traceback" not in err
    assert err.count("error:") == 1
