"""Every pass of the workbench, registered: importing this module runs each pass module's `register` decorators.
Use `all_passes` and `lookup` from here, so the list is complete (a plugin's passes add themselves the same way)."""

from workbench.passes import (  # noqa: F401 - imported for their registrations
    analysis,
    bf16,
    cleanup,
    conv1d,
    conv_transpose,
    cuda_graph,
    fast_math,
    folding,
    fusion,
    layout,
    packing,
    patterns,
    precision,
)
from workbench.passes.registry import all_passes, lookup

__all__ = ["all_passes", "lookup"]
