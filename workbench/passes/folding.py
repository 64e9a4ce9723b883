"""Folding passes: evaluate at compile time what does not depend on the inputs."""

from __future__ import annotations

import tvm
from tvm import relax

from workbench.passes.registry import register


@register("fold_constant", "folding")
def fold_constant(_params) -> tvm.transform.Pass:
    """Evaluate every expression whose inputs are all constants (TVM's FoldConstant)."""
    return relax.transform.FoldConstant()


@register("fold_batchnorm", "folding")
def fold_batchnorm(_params) -> tvm.transform.Pass:
    """Fold batch_norm into the preceding conv2d's weights and bias (FoldBatchnormToConv2D, then FoldConstant)."""
    return tvm.transform.Sequential(
        [relax.transform.FoldBatchnormToConv2D(), relax.transform.FoldConstant()], name="fold_batchnorm"
    )


@register("decompose_for_inference", "folding")
def decompose_for_inference(_params) -> tvm.transform.Pass:
    """Rewrite training-style ops (batch_norm, layer_norm...) into inference arithmetic."""
    return relax.transform.DecomposeOpsForInference()
