"""Models whose weights are stored beside them (`model.onnx` + `model.onnx.data`, as `onnx.save(...,
save_as_external_data=True)` and every exporter of a model over 2 GB writes them): read from a file path and from a
wheel, run end to end against ONNX Runtime, and every broken layout refused with exit 2 naming the file."""

import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from workbench.cli import main
from workbench.models import zoo
from workbench.models.external_data import data_files
from workbench.models.sources import resolve_source

QUICK = ["--set", "measure.repeat=2", "--set", "measure.warmup=0"]


def save_external(model: onnx.ModelProto, path: Path, location: str = "net.onnx.data") -> Path:
    """`model` saved with every tensor in one file beside it (a copy: onnx.save moves the given model's data out)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save(copy, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
              size_threshold=0)
    return path


def weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


@pytest.fixture
def convnet() -> onnx.ModelProto:
    return zoo.build("convnet_small")


def test_a_file_path_loads_the_weights_beside_it(convnet, tmp_path):
    path = save_external(convnet, tmp_path / "model" / "net.onnx")
    assert path.stat().st_size < 10_000 and (tmp_path / "model" / "net.onnx.data").stat().st_size > 10_000
    loaded = resolve_source(str(path), tmp_path)
    assert data_files(loaded) == []  # every tensor's bytes are in the model now
    expected = weights(convnet)
    assert {name: array.tobytes() for name, array in weights(loaded).items()} == \
        {name: array.tobytes() for name, array in expected.items()}


@pytest.mark.slow
def test_a_model_with_external_weights_runs_end_to_end_and_matches_onnxruntime(convnet, tmp_path, monkeypatch):
    """`workbench run --model` on it: canonical model, workbench build and ONNX Runtime all see the weights."""
    monkeypatch.chdir(tmp_path)
    path = save_external(convnet, tmp_path / "model" / "net.onnx")
    assert main(["run", "--model", str(path), "--input", "x=1x3x32x32", *QUICK]) == 0
    result = json.loads((tmp_path / "runs" / "net" / "result.json").read_text())
    assert result["status"] == "complete" and result["accuracy"]["workbench"]["ok"]
    canonical = onnx.load(tmp_path / "runs" / "net" / "model.canonical.onnx")  # one file: the weights inside
    assert data_files(onnx.load(tmp_path / "runs" / "net" / "model.canonical.onnx", load_external_data=False)) == []
    assert len(canonical.graph.initializer) > 0


def fake_wheel(cache: Path, files: dict[str, bytes]) -> None:
    """A wheel of fake-dist 1.0 in the workbench's cache (so nothing is downloaded) holding `files`."""
    wheel = cache / "fake-dist-1.0" / "fake_dist-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


def test_a_wheel_member_comes_with_the_weights_files_its_tensors_name(convnet, tmp_path, monkeypatch):
    saved = save_external(convnet, tmp_path / "export" / "net.onnx")
    fake_wheel(tmp_path / "cache", {
        "fake_dist/models/net.onnx": saved.read_bytes(),
        "fake_dist/models/net.onnx.data": (saved.parent / "net.onnx.data").read_bytes(),
        "fake_dist/other.txt": b"not extracted"})
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    loaded = resolve_source("pkg:fake-dist==1.0/fake_dist/models/net.onnx", tmp_path)
    files = tmp_path / "cache" / "fake-dist-1.0" / "files"
    assert sorted(str(p.relative_to(files)) for p in files.rglob("*") if p.is_file()) == [
        "fake_dist/models/net.onnx", "fake_dist/models/net.onnx.data"]
    assert weights(loaded).keys() == weights(convnet).keys()
    (files / "fake_dist/models/net.onnx.data").unlink()  # a cache from before: extracted again
    assert weights(resolve_source("pkg:fake-dist==1.0/fake_dist/models/net.onnx", tmp_path)).keys() == \
        weights(convnet).keys()


def test_a_wheel_without_the_weights_file_exits_2_naming_it(convnet, tmp_path, monkeypatch, capsys):
    saved = save_external(convnet, tmp_path / "export" / "net.onnx")
    fake_wheel(tmp_path / "cache", {"fake_dist/models/net.onnx": saved.read_bytes()})
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    assert main(["inspect", "pkg:fake-dist==1.0/fake_dist/models/net.onnx"]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "the model's weights file 'fake_dist/models/net.onnx.data' is not in fake_dist-1.0" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_truncated_weights_file_exits_2_naming_it(convnet, tmp_path, capsys, damage):
    path = save_external(convnet, tmp_path / "net.onnx")
    data = tmp_path / "net.onnx.data"
    if damage == "missing":
        data.unlink()
    else:
        data.write_bytes(data.read_bytes()[:-100])
    assert main(["run", "--model", str(path), "--input", "x=1x3x32x32", *QUICK]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"the weights file {str(data)!r}" in err and "Traceback" not in err
    assert ("does not exist: it must sit beside the .onnx file" if damage == "missing" else "is truncated: tensor ") \
        in err


def test_a_location_outside_the_models_folder_is_refused(convnet, tmp_path, capsys):
    path = save_external(convnet, tmp_path / "model" / "net.onnx")
    model = onnx.load(path, load_external_data=False)
    for init in model.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                entry.value = "../../etc/passwd"
    onnx.save(model, path)
    assert main(["inspect", str(path)]) == 2
    assert "external data location '../../etc/passwd' is outside the model's folder" in \
        " ".join(capsys.readouterr().err.split())


def test_weights_over_the_protobuf_limit_are_refused_up_front(tmp_path, capsys):
    """A 3 GB tensor in a sparse file (no disk, nothing read): refused before any data is loaded."""
    big = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[750_000_000], raw_data=b"")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["x", "w"], ["y"])], "big",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [750_000_000])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [750_000_000])], [big])
    model = onnx.helper.make_model(graph)
    onnx.external_data_helper.set_external_data(model.graph.initializer[0], "big.data", offset=0,
                                                length=3_000_000_000)
    model.graph.initializer[0].data_location = onnx.TensorProto.EXTERNAL
    onnx.save(model, tmp_path / "big.onnx")
    with open(tmp_path / "big.data", "wb") as sparse:
        sparse.truncate(3_000_000_000)
    assert main(["inspect", str(tmp_path / "big.onnx")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the model with its weights is 2.8 GiB, over the 2 GiB one ONNX protobuf can hold" in err


def test_a_weights_file_that_is_a_symlink_loads(convnet, tmp_path):
    """Hugging Face's cache keeps the files of a snapshot as symlinks into blobs/ (onnx's own loader refuses them)."""
    saved = save_external(convnet, tmp_path / "export" / "net.onnx")
    snapshot = tmp_path / "snapshots" / "x"
    snapshot.mkdir(parents=True)
    (snapshot / "net.onnx").write_bytes(saved.read_bytes())
    blob = tmp_path / "blobs" / "0123abcd"
    blob.parent.mkdir()
    blob.write_bytes((saved.parent / "net.onnx.data").read_bytes())
    (snapshot / "net.onnx.data").symlink_to("../../blobs/0123abcd")
    loaded = resolve_source(str(snapshot / "net.onnx"), tmp_path)
    assert {name: array.tobytes() for name, array in weights(loaded).items()} == \
        {name: array.tobytes() for name, array in weights(convnet).items()}
