"""Resolve a model source string to an ONNX model.

Three kinds of source:
- a file path (`models/foo.onnx`),
- `zoo:NAME` (a synthetic model built in `workbench.models.zoo`),
- `pkg:DIST==VERSION/path/inside/wheel.onnx`: a wheel fetched from the package registry with
  `pip download --no-deps` into a cache folder, the file read out of it (a wheel is a zip), with the weights
  files its tensors name beside it.
A model's weights may live in files beside it (`model.onnx.data`): models/external_data.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import onnx
import platformdirs

from workbench.errors import UserError
from workbench.models.external_data import data_files, load_external_data, safe_location

ZOO_PREFIX = "zoo:"
PKG_PREFIX = "pkg:"


def default_cache_dir() -> Path:
    """Where fetched wheels live unless the config or WORKBENCH_CACHE says otherwise."""
    env = os.environ.get("WORKBENCH_CACHE")
    return Path(env) if env else Path(platformdirs.user_cache_dir("workbench")) / "wheels"


def parse_pkg_source(source: str) -> tuple[str, str, str]:
    """Split `pkg:DIST==VERSION/path/in/wheel` into (dist, version, member path)."""
    body = source[len(PKG_PREFIX):]
    requirement, _, member = body.partition("/")
    dist, sep, version = requirement.partition("==")
    if not sep or not dist or not version or not member:
        raise UserError(
            f"model.source {source!r}: expected pkg:DIST==VERSION/path/inside/wheel.onnx, "
            "e.g. pkg:rapidocr-onnxruntime==1.4.4/rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
        )
    return dist, version, member


def _find_wheel(folder: Path, dist: str, version: str) -> Path | None:
    """A wheel in `folder` for dist==version (wheel names normalise '-' to '_')."""
    stem = dist.replace("-", "_").lower()
    for wheel in folder.glob("*.whl"):
        name, _, rest = wheel.name.partition("-")
        if name.lower() == stem and rest.startswith(f"{version}-"):
            return wheel
    return None


def fetch_pkg_file(source: str, cache_dir: Path | None = None) -> Path:
    """Download (once) the wheel named by a `pkg:` source and extract the member file; return its path."""
    dist, version, member = parse_pkg_source(source)
    folder = (cache_dir or default_cache_dir()) / f"{dist}-{version}"
    extracted = folder / "files" / member
    if extracted.exists() and all((extracted.parent / location).exists()
                                  for location in data_files(_load_graph(extracted, f"model.source {source!r}"))):
        return extracted
    folder.mkdir(parents=True, exist_ok=True)
    wheel = _find_wheel(folder, dist, version)
    if wheel is None:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", f"{dist}=={version}", "-d", str(folder)],
            capture_output=True, text=True,
        )
        wheel = _find_wheel(folder, dist, version)
        if proc.returncode != 0 or wheel is None:
            last = (proc.stderr.strip().splitlines() or ["no wheel was downloaded"])[-1]
            raise UserError(f"model.source {source!r}: could not fetch wheel {dist}=={version}: {last}")
    with zipfile.ZipFile(wheel) as archive:
        if member not in archive.namelist():
            onnx_files = [n for n in archive.namelist() if n.endswith(".onnx")]
            raise UserError(
                f"model.source {source!r}: {member!r} is not in {wheel.name}; ONNX files in it: {onnx_files}"
            )
        _extract(archive, member, extracted)
        _extract_data_files(archive, member, extracted, f"model.source {source!r}")
    return extracted


def _extract(archive: zipfile.ZipFile, member: str, to: Path) -> None:
    """One member of the wheel written to `to` whole or not at all (a kill leaves no half file)."""
    to.parent.mkdir(parents=True, exist_ok=True)
    tmp = to.with_suffix(to.suffix + ".part")
    tmp.write_bytes(archive.read(member))
    tmp.replace(to)


def _extract_data_files(archive: zipfile.ZipFile, member: str, extracted: Path, what: str) -> None:
    """The files the model's external tensors name, from the wheel, beside the extracted model (same layout)."""
    model = _load_graph(extracted, what)
    for location in data_files(model):
        relative = safe_location(location, what)
        name = str(PurePosixPath(member).parent / relative)
        if name not in archive.namelist():
            raise UserError(f"{what}: the model's weights file {name!r} is not in {Path(archive.filename).name}")
        _extract(archive, name, extracted.parent / relative)


def _load_graph(path: Path, what: str) -> onnx.ModelProto:
    """An ONNX file without its external data, turning the usual failures into one readable UserError."""
    if not path.exists():
        raise UserError(f"{what}: file {str(path)!r} does not exist")
    if path.stat().st_size == 0:
        raise UserError(f"{what}: file {str(path)!r} is empty")
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeError or others
        raise UserError(f"{what}: file {str(path)!r} is not a readable ONNX model ({exc.__class__.__name__}: {exc})") from exc


def load_onnx_file(path: Path, what: str = "model.source") -> onnx.ModelProto:
    """Read an ONNX file with the weights files beside it (models/external_data.py), turning the usual failures
    into one readable UserError."""
    model = _load_graph(path, what)
    load_external_data(model, path.parent, what)
    return model


def resolve_source(source: str, base_dir: Path, cache_dir: Path | None = None) -> onnx.ModelProto:
    """Turn any model source string into an ONNX ModelProto (paths are relative to `base_dir`)."""
    if source.startswith(ZOO_PREFIX):
        from workbench.models import zoo

        return zoo.build(source[len(ZOO_PREFIX):])
    if source.startswith(PKG_PREFIX):
        return load_onnx_file(fetch_pkg_file(source, cache_dir))
    path = Path(source)
    return load_onnx_file(path if path.is_absolute() else base_dir / path)
