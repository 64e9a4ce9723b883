"""Cleanup passes: remove what nothing uses, merge what is computed twice, normalise bindings."""

from __future__ import annotations

import tvm
from tvm import relax

from workbench.passes.registry import register


@register("dce", "cleanup")
def dce(_params) -> tvm.transform.Pass:
    """Dead code elimination: drop bindings and functions that no output depends on."""
    return relax.transform.DeadCodeElimination()


@register("cse", "cleanup")
def cse(_params) -> tvm.transform.Pass:
    """Common subexpression elimination inside dataflow blocks."""
    return relax.transform.EliminateCommonSubexpr()


@register("canonicalize", "cleanup")
def canonicalize(_params) -> tvm.transform.Pass:
    """Canonicalize bindings: remove trivial var-to-var bindings and simplify tuple accesses."""
    return relax.transform.CanonicalizeBindings()
