"""Walking an ONNX graph with the subgraphs inside its nodes (If branches, Loop bodies)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Nodes of `graph` and of the subgraphs inside them, in order."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for subgraph in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield from all_nodes(subgraph)
