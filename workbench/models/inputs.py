"""The concrete inputs a run uses: shapes for canonicalization, then seeded random arrays or .npy files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from workbench.config import InputConfig, ModelConfig
from workbench.errors import UserError
from workbench.models.canonicalize import Canonical, InputSpec, canonicalize

DEFAULT_RANGES = {"f": (0.0, 1.0), "i": (0, 10), "u": (0, 10), "b": (0, 2)}


def _load_npy(name: str, spec: InputConfig, base_dir: Path) -> np.ndarray:
    path = spec.file if spec.file.is_absolute() else base_dir / spec.file
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UserError(f"model.inputs.{name}.file: cannot read {str(path)!r} as a .npy array ({exc})") from exc
    if spec.shape is not None and list(array.shape) != spec.shape:
        raise UserError(f"model.inputs.{name}.file: {str(path)!r} has shape {list(array.shape)}, "
                        f"but model.inputs.{name}.shape says {spec.shape}")
    return array


def input_specs(model_cfg: ModelConfig, base_dir: Path) -> dict[str, InputSpec]:
    """Shapes and dtypes to freeze the model's inputs to (a .npy file gives its own shape)."""
    specs = {}
    for name, spec in model_cfg.inputs.items():
        if spec.file is not None:
            array = _load_npy(name, spec, base_dir)
            specs[name] = InputSpec(tuple(array.shape), str(array.dtype))
        else:
            specs[name] = InputSpec(tuple(spec.shape), spec.dtype)
    return specs


def make_inputs(model: onnx.ModelProto, model_cfg: ModelConfig, seed: int, base_dir: Path) -> dict[str, np.ndarray]:
    """One array per graph input of the (canonicalized, static) model, seeded and reproducible."""
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    arrays = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        spec = model_cfg.inputs.get(value.name)
        if spec is not None and spec.file is not None:
            arrays[value.name] = _load_npy(value.name, spec, base_dir)
            continue
        tensor_type = value.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        shape = [dim.dim_value for dim in tensor_type.shape.dim]
        low, high = (spec.range if spec and spec.range else DEFAULT_RANGES[dtype.kind])
        if dtype.kind == "f":
            arrays[value.name] = rng.uniform(low, high, size=shape).astype(dtype)
        else:
            arrays[value.name] = rng.integers(int(low), int(high), size=shape).astype(dtype)
    return arrays


def canonical_model(model_cfg: ModelConfig, base_dir: Path) -> Canonical:
    """The config's model source fetched and canonicalized (input shapes frozen): what every label runs."""
    from workbench.models.sources import resolve_source

    return canonicalize(resolve_source(model_cfg.source, base_dir, model_cfg.cache_dir), input_specs(model_cfg, base_dir))
