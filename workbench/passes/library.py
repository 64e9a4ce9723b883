"""Imports every pass module so their registrations run (the registry loads this lazily)."""

from workbench.passes import cleanup, folding, fusion  # noqa: F401
