"""Model sources: file paths, zoo names and pkg: wheels from the package registry."""

import onnx
import pytest

from workbench.errors import UserError
from workbench.models.sources import fetch_pkg_file, parse_pkg_source, resolve_source

CLS = "pkg:rapidocr-onnxruntime==1.4.4/rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"


def test_file_source_relative_to_base_dir(tmp_path):
    model = resolve_source("zoo:convnet_small", tmp_path)
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "net.onnx")
    loaded = resolve_source("m/net.onnx", tmp_path)
    assert loaded.SerializeToString() == model.SerializeToString()


@pytest.mark.parametrize("content, fragment", [(None, "does not exist"), (b"", "is empty"),
                                               (b"\x08\x07 this is not protobuf \xff\xff", "not a readable ONNX")])
def test_bad_files_are_user_errors(tmp_path, content, fragment):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError, match=fragment):
        resolve_source(str(path), tmp_path)


def test_zoo_source_and_unknown_zoo_name(tmp_path):
    assert any(n.op_type == "Conv" for n in resolve_source("zoo:convnet_small", tmp_path).graph.node)
    with pytest.raises(UserError, match="convnet_small"):
        resolve_source("zoo:convnet_smal", tmp_path)


def test_pkg_source_parsing():
    assert parse_pkg_source(CLS) == ("rapidocr-onnxruntime", "1.4.4",
                                     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
    for bad in ("pkg:rapidocr/models/x.onnx", "pkg:rapidocr==1.4.4", "pkg:==1/x.onnx"):
        with pytest.raises(UserError, match="expected pkg:DIST==VERSION/path"):
            parse_pkg_source(bad)


def test_pkg_source_fetches_wheel_once_and_reads_member(tmp_path):
    path = fetch_pkg_file(CLS, tmp_path)
    model = onnx.load(path)
    assert model.graph.input[0].name == "x" and len(model.graph.node) > 50
    wheels = list(tmp_path.rglob("*.whl"))
    assert len(wheels) == 1
    stamp = wheels[0].stat().st_mtime_ns
    assert fetch_pkg_file(CLS, tmp_path) == path and wheels[0].stat().st_mtime_ns == stamp
    with pytest.raises(UserError, match="is not in rapidocr_onnxruntime-1.4.4"):
        fetch_pkg_file("pkg:rapidocr-onnxruntime==1.4.4/rapidocr_onnxruntime/models/missing.onnx", tmp_path)


def test_pkg_source_missing_distribution_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="could not fetch wheel"):
        fetch_pkg_file("pkg:rapidocr-onnxruntime==0.0.0.999/x.onnx", tmp_path)
