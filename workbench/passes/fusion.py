"""Fusion passes: merge operators into fewer, larger kernels."""

from __future__ import annotations

import tvm
from pydantic import BaseModel, ConfigDict, Field
from tvm import relax

from workbench.passes.registry import register


class FuseParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opt_level: int = Field(default=2, ge=0, le=4, description="FuseOps fuse_opt_level: 0 fuses nothing, 2 is TVM's default")


@register("fuse", "fusion", FuseParams)
def fuse(params: FuseParams) -> tvm.transform.Pass:
    """Automatic fusion: legalize ops to TIR, then FuseOps + FuseTIR (graph passes after it see TIR calls only)."""
    return tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps(fuse_opt_level=params.opt_level),
            relax.transform.FuseTIR(),
        ],
        name="fuse",
    )
