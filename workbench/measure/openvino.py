"""OpenVINO as a baseline: the CPU runtime many deployment engineers pick on x86.

The canonical ONNX model is read by OpenVINO and compiled for its CPU plugin with every setting that changes its
speed stated, never left to the plugin: the inference precision (on a CPU with AVX512_BF16 or AMX the plugin runs
bf16 unless told f32, which would compare a lower precision against the fp32 labels), the latency hint (one
request at a time, as every other label runs) and the thread count every runtime uses. The inputs are set on the
infer request once, so a timed call is the inference only, as for the other labels. Compiled models are cached by
OpenVINO in the user's cache folder (keyed by model and settings), so a rerun skips the compile.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
import platformdirs

from workbench.errors import BaselineUnavailable
from workbench.measure.runners import Runner

PRECISIONS = {"openvino": "f32", "openvino_bf16": "bf16"}  # label -> INFERENCE_PRECISION_HINT


def _require_openvino():
    try:
        import openvino
    except ImportError as exc:
        raise BaselineUnavailable("openvino is not installed (pip install -e '.[openvino]')") from exc
    return openvino


def openvino_version() -> str | None:
    """The installed OpenVINO version (for provenance), None without the extra."""
    try:
        return metadata.version("openvino")
    except metadata.PackageNotFoundError:
        return None


def has_bf16() -> bool:
    """Whether OpenVINO's CPU plugin runs bf16 natively here (AVX512_BF16 or AMX)."""
    return "BF16" in _require_openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def cache_dir() -> Path:
    """Where OpenVINO keeps compiled models (its own keys: the model and the settings)."""
    return Path(platformdirs.user_cache_dir("workbench")) / "openvino"


def openvino_runner(label: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray], threads: int) -> Runner:
    """The model compiled by OpenVINO's CPU plugin at the label's precision, its inputs set once."""
    ov = _require_openvino()
    precision = PRECISIONS[label]
    if precision == "bf16" and not has_bf16():
        raise BaselineUnavailable("this CPU has no native bf16 (AVX512_BF16 or AMX): OpenVINO would emulate it")
    core = ov.Core()
    try:
        compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU", {
            "INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": threads, "CACHE_DIR": str(cache_dir())})
    except RuntimeError as exc:  # OpenVINO reports a model it cannot read or compile as RuntimeError
        raise BaselineUnavailable(f"OpenVINO {openvino_version()}: {str(exc).strip().splitlines()[0]}") from exc
    request = compiled.create_infer_request()
    for name, array in inputs.items():
        request.set_tensor(name, ov.Tensor(np.ascontiguousarray(array)))
    count = len(compiled.outputs)

    def outputs(_: object) -> list[np.ndarray]:
        return [np.array(request.get_output_tensor(i).data) for i in range(count)]

    return Runner(label, lambda: request.infer(share_outputs=True), outputs)  # no copy of the outputs per call
