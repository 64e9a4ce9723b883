"""ONNX Runtime's own static INT8 quantization: the `ort_int8` baseline's model.

The canonical model goes through `onnxruntime.quantization.quantize_static` in QDQ format with the
calibration inputs the workbench's `quantize` pass uses (so both see the same data), per-channel int8
weights and uint8 activations — ORT's guidance for x86 CPUs, with `reduce_range` (7-bit weights) on a
CPU without VNNI, where u8 x s8 products could saturate ORT's 16-bit intermediate sums.

The quantized model is cached in the run folder next to a key (hash of model, inputs and settings),
so a rerun with the same model and calibration reuses it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

from workbench.atomic import atomic_write_bytes, atomic_write_text
from workbench.config import Experiment
from workbench.passes.calibration import InputSig, file_inputs, random_inputs
from workbench.passes.precision import QuantizeParams

METHODS = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
           "percentile": CalibrationMethod.Percentile}


class _Samples(CalibrationDataReader):
    """Hands ORT's calibrator the given input sets, one per call."""

    def __init__(self, samples: list[dict[str, np.ndarray]]):
        self._left = iter(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._left, None)


def host_has_vnni() -> bool:
    """Whether this (Linux) CPU has AVX-512 VNNI or AVX-VNNI; False where /proc/cpuinfo cannot be read."""
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return False
    return bool({"avx512_vnni", "avx_vnni"} & set(flags.split()))


def _key(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], settings: dict) -> str:
    digest = hashlib.sha256(model.SerializeToString())
    for sample in samples:
        for name in sorted(sample):
            digest.update(name.encode() + np.ascontiguousarray(sample[name]).tobytes())
    digest.update(repr(sorted(settings.items())).encode())
    return digest.hexdigest()[:16]


def quantized_model(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], method: str, path: Path,
                    percentile: float = 99.99) -> onnx.ModelProto:
    """`model` statically quantized (QDQ) by ONNX Runtime on `samples`, written to (or reused from) `path`."""
    settings = {"method": method, "percentile": percentile, "reduce_range": not host_has_vnni()}
    key = _key(model, samples, settings)
    key_path = path.with_name(path.name + ".key")
    if path.is_file() and key_path.is_file() and key_path.read_text() == key:
        return onnx.load(str(path))
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "model.onnx", Path(tmp) / "quantized.onnx"
        onnx.save(model, str(source))
        with contextlib.redirect_stdout(io.StringIO()):  # the percentile calibrator prints its range
            quantize_static(str(source), str(target), _Samples(samples), quant_format=QuantFormat.QDQ, per_channel=True,
                            reduce_range=settings["reduce_range"], activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, calibrate_method=METHODS[method],
                            extra_options={"CalibPercentile": percentile})
        atomic_write_bytes(path, target.read_bytes())
    atomic_write_text(key_path, key)
    return onnx.load(str(path))


def _quantize_params(experiment: Experiment) -> QuantizeParams:
    """The pipeline's `quantize` step parameters (its defaults without one)."""
    return QuantizeParams.model_validate(next((s.params for s in experiment.pipeline if s.name == "quantize"), {}))


def calibration_samples(experiment: Experiment, canonical: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
    """The input sets the pipeline's `quantize` step calibrates on, by ONNX input name."""
    params = _quantize_params(experiment)
    inits = {init.name for init in canonical.graph.initializer}
    sigs = [InputSig(value.name, tuple(d.dim_value for d in value.type.tensor_type.shape.dim),
                     onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name)
            for value in canonical.graph.input if value.name not in inits]
    return file_inputs(sigs, params.files) if params.files else random_inputs(sigs, params.samples, params.seed)


def ort_int8_model(experiment: Experiment, canonical: onnx.ModelProto, out_dir: Path) -> onnx.ModelProto:
    """The canonical model quantized by ONNX Runtime on the `quantize` step's calibration inputs and method,
    cached as ort_int8.onnx in the run folder."""
    params = _quantize_params(experiment)
    return quantized_model(canonical, calibration_samples(experiment, canonical), params.calibration,
                           out_dir / "ort_int8.onnx", params.percentile)
