"""Shared fixtures: zoo models imported to Relax once per session (imports cost seconds)."""

import pytest
import tvm

from workbench.models import zoo
from workbench.models.canonicalize import InputSpec, canonicalize
from workbench.models.importer import import_to_relax


@pytest.fixture(scope="session")
def llvm() -> tvm.target.Target:
    return tvm.target.Target({"kind": "llvm"})


@pytest.fixture(scope="session")
def zoo_relax():
    """name -> (canonical ONNX model, imported Relax module), built lazily."""
    cache = {}

    def get(name: str):
        if name not in cache:
            specs = {k: InputSpec(tuple(v)) for k, v in zoo.default_inputs(name).items()}
            model = canonicalize(zoo.build(name), specs)
            cache[name] = (model, import_to_relax(model))
        return cache[name]

    return get
