"""Import a canonicalized (static, shape-folded) ONNX model into a Relax IRModule.

A thin wrapper over TVM's `relax.frontend.onnx.from_onnx` that turns its failures into
UserErrors naming the node: unsupported op types are found up front from the frontend's own
converter table, and an exception raised while converting a node is traced back to that node.
"""

from __future__ import annotations

import contextlib
import io
import types
import warnings

import onnx
import tvm
from tvm.relax.frontend.onnx import from_onnx, onnx_frontend

from workbench.errors import UserError
from workbench.models.canonicalize import model_opset
from workbench.models.graph_walk import all_nodes

# Ops the frontend converts in `_construct_nodes` itself rather than through its converter map.
DIRECTLY_HANDLED_OPS = frozenset({"If", "Constant"})


def import_to_relax(model: onnx.ModelProto) -> tvm.IRModule:
    """Import a canonicalized ONNX model to Relax (weights bound as constants)."""
    _check_supported(model.graph)
    weights = {init.name for init in model.graph.initializer}
    shape_dict = {
        value.name: [dim.dim_value for dim in value.type.tensor_type.shape.dim]
        for value in model.graph.input
        if value.name not in weights
    }
    try:
        # The frontend warns about input renaming and checker details and prints the inputs of a
        # failing op to stdout; the UserError below says what matters.
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            return from_onnx(model, shape_dict=shape_dict, keep_params_in_input=False)
    except Exception as exc:  # noqa: BLE001 - every frontend failure is a model the user must change
        raise UserError(_describe_failure(exc, model_opset(model))) from exc


def unsupported_ops(graph: onnx.GraphProto) -> dict[str, str]:
    """Op type -> its first node's name, for every op type the frontend cannot convert (empty: all convert).
    Public so `workbench inspect` can name them without importing the model."""
    supported = set(onnx_frontend._get_convert_map()) | DIRECTLY_HANDLED_OPS  # noqa: SLF001
    first_node: dict[str, str] = {}
    for node in all_nodes(graph):
        if node.op_type not in supported:
            first_node.setdefault(node.op_type, node.name or f"<unnamed, output {node.output[0]!r}>")
    return first_node


def _check_supported(graph: onnx.GraphProto) -> None:
    """Raise one UserError listing every op type the frontend cannot convert, with its first node."""
    first_node = unsupported_ops(graph)
    if first_node:
        listed = ", ".join(f"{op} (first at node {name!r})" for op, name in first_node.items())
        raise UserError(f"TVM's Relax ONNX frontend does not support these op types: {listed}")



def _describe_failure(exc: Exception, opset: int) -> str:
    """'node X (OpType, opset N): message' if the node being converted can be found in the traceback."""
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    node = _failing_node(exc.__traceback__)
    if node is None:
        return f"could not import the model to Relax: {first_line}"
    return f"could not import the model to Relax: node {node.name!r} ({node.op_type}, opset {opset}): {first_line}"


def _failing_node(tb: types.TracebackType | None) -> onnx.NodeProto | None:
    """The `node` local of the innermost frontend frame converting one (`_construct_nodes` and kin)."""
    found = None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("node")
        if tb.tb_frame.f_code.co_filename == onnx_frontend.__file__ and isinstance(candidate, onnx.NodeProto):
            found = candidate
        tb = tb.tb_next
    return found
