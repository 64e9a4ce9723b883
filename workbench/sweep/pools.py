"""The executor a sweep file asks for: worker processes here (workers.LocalPool) or a Ray cluster (ray.RayPool),
both with the same `run`/`close`."""

from __future__ import annotations

from pathlib import Path

from workbench.sweep.ray import RayPool
from workbench.sweep.spec import Sweep
from workbench.sweep.workers import LocalPool


def make_pool(sweep: Sweep, workers: int, base_dir: Path) -> LocalPool | RayPool:
    """A LocalPool, or a RayPool where `sweep.executor: ray` (Ray itself is imported when the pool starts)."""
    return RayPool(sweep, workers, base_dir) if sweep.section.executor == "ray" else LocalPool(sweep, workers, base_dir)
