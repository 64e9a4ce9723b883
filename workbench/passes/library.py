"""Imports every pass module so their registrations run (the registry loads this lazily)."""

from workbench.passes import (analysis, cleanup, conv_transpose, cuda_graph, fast_math, folding, fusion, layout,  # noqa: F401
                              packing, patterns, precision)
