"""Builds kept by what decides their code, so a sweep's worker compiles an equal module once.

Equal IR (structural hash), target and `state` (what else a build reads: the databases as they are now, layout
rewriting) compile to the same code; the sweep's workers keep one cache for all their runs (another seed, another
repeat of the same pipeline) and measure each run afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import tvm
import tvm_ffi

from workbench.atomic import atomic_write_bytes
from workbench.compile.build import Built

MAX_BUILDS = 32  # compiled modules held at once: bounds the memory of a long sweep's worker


class BuildCache:
    """Compiled builds (and the library each was exported to) by name, target, IR and state."""

    def __init__(self) -> None:
        self._builds: dict[tuple, Built] = {}
        self._libraries: dict[tuple, Path] = {}

    def __len__(self) -> int:
        return len(self._builds)

    def built(self, name: str, mod: tvm.IRModule, target: tvm.target.Target, make: Callable[[], Built],
              state: tuple = (), library: Path | None = None) -> Built:
        """The build made before for an equal module, target and state under `name`, or `make()`'s; with `library`,
        exported there: a copy of the library exported before for the same key (the machine code is not emitted
        again), else a fresh export."""
        key = (name, str(target), tvm_ffi.structural_hash(mod), *state)
        if key not in self._builds:
            if len(self._builds) >= MAX_BUILDS:
                self._builds.clear()
                self._libraries.clear()
            self._builds[key] = make()
        built = self._builds[key]
        if library is not None:
            exported = self._libraries.get(key)
            if exported is not None and exported.is_file():
                atomic_write_bytes(library, exported.read_bytes())
            else:
                built.export(library)
                self._libraries[key] = library
        return built
