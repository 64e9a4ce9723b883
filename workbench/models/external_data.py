"""Weights stored beside an ONNX file (`model.onnx` + `model.onnx.data`): found, checked, loaded.

Every model over 2 GB, and many exporters' smaller ones, keep their tensors in files next to the `.onnx` (each
tensor names its file, offset and length). Such a model is read here in two steps: the graph without its data,
then every external tensor's file checked (it exists, it holds the tensor's bytes) before the data is loaded, so a
missing or cut-short file is one readable error naming it, not a protobuf traceback. The workbench checks, folds
and hands a model to ONNX Runtime, IREE and TVM as one in-memory protobuf, which cannot exceed 2 GiB: a model whose
weights are larger is refused up front, saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import onnx
from onnx import external_data_helper, helper

from workbench.errors import UserError
from workbench.models.graph_walk import all_nodes

PROTOBUF_LIMIT = 2**31 - 1  # bytes one serialized protobuf message may hold


@dataclass(frozen=True, eq=False)
class ExternalTensor:
    """One tensor whose bytes live in another file: which file (relative to the model's folder) and where."""

    proto: onnx.TensorProto  # the model's own tensor, filled in place by `load_external_data`
    location: str
    offset: int
    length: int  # bytes (from the tensor's `length`, else its dims x element size)

    @property
    def tensor(self) -> str:
        return self.proto.name


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph holds: initializers and tensor attributes, in subgraphs too."""
    yield from graph.initializer
    for node in all_nodes(graph):
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            yield from attr.tensors
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from attr.g.initializer
            for subgraph in attr.graphs:
                yield from subgraph.initializer


def _nbytes(tensor: onnx.TensorProto) -> int:
    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def external_tensors(model: onnx.ModelProto) -> list[ExternalTensor]:
    """The model's tensors stored outside it (the model loaded without its external data)."""
    found = []
    for tensor in _tensors(model.graph):
        if external_data_helper.uses_external_data(tensor):
            info = external_data_helper.ExternalDataInfo(tensor)
            found.append(ExternalTensor(tensor, info.location, int(info.offset or 0),
                                        int(info.length) if info.length else _nbytes(tensor)))
    return found


def data_files(model: onnx.ModelProto) -> list[str]:
    """The files (relative to the model's folder, as written in the model) its external tensors name."""
    return list(dict.fromkeys(tensor.location for tensor in external_tensors(model)))


def safe_location(location: str, what: str) -> PurePosixPath:
    """A tensor's file location, refused if it would leave the model's folder (an absolute path, `..`)."""
    path = PurePosixPath(location.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise UserError(f"{what}: a tensor's external data location {location!r} is outside the model's folder")
    return path


def load_external_data(model: onnx.ModelProto, folder: Path, what: str) -> None:
    """Check every external tensor's file under `folder` (exists, long enough), refuse weights over the protobuf
    limit, then load the data into `model` (in place)."""
    tensors = external_tensors(model)
    if not tensors:
        return
    sizes: dict[str, int] = {}
    for tensor in tensors:
        path = folder / safe_location(tensor.location, what)
        if tensor.location not in sizes:
            if not path.is_file():
                raise UserError(f"{what}: the weights file {str(path)!r} (tensor {tensor.tensor!r} and others) "
                                "does not exist: it must sit beside the .onnx file, as exported")
            sizes[tensor.location] = path.stat().st_size
        if tensor.offset + tensor.length > sizes[tensor.location]:
            raise UserError(f"{what}: the weights file {str(path)!r} is truncated: tensor {tensor.tensor!r} needs "
                            f"bytes {tensor.offset}..{tensor.offset + tensor.length}, the file has "
                            f"{sizes[tensor.location]}")
    total = model.ByteSize() + sum(tensor.length for tensor in tensors)
    if total > PROTOBUF_LIMIT:
        raise UserError(f"{what}: the model with its weights is {total / 2**30:.1f} GiB, over the 2 GiB one ONNX "
                        "protobuf can hold; the workbench checks, folds and hands a model to ONNX Runtime and TVM "
                        "as one protobuf, so it cannot run this model (export a smaller variant, or one in fp16)")
    for tensor in tensors:  # read here, not by onnx's loader: it refuses a weights file that is a symlink (HF's cache)
        with open(folder / safe_location(tensor.location, what), "rb") as data:
            data.seek(tensor.offset)
            tensor.proto.raw_data = data.read(tensor.length)
        del tensor.proto.external_data[:]
        tensor.proto.data_location = onnx.TensorProto.DEFAULT
