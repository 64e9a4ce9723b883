"""Runners: one inference on prepared inputs, for TVM builds and ONNX Runtime sessions alike.

A runner owns its inputs already placed on its device, so timing covers the inference only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import tvm
from tvm import relax

from workbench.build import Built
from workbench.targets import device_for


@dataclass
class Runner:
    label: str
    run_once: Callable[[], object]
    outputs: Callable[[object], list[np.ndarray]]
    kernels: int | None = None
    sync: Callable[[], None] = field(default=lambda: None)

    def infer(self) -> list[np.ndarray]:
        result = self.run_once()
        self.sync()
        return self.outputs(result)


def _flatten_tvm(value: object) -> list[np.ndarray]:
    """VM results are a tensor or a (nested) tuple of tensors; flatten to numpy arrays in order."""
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [array for item in value for array in _flatten_tvm(item)]


def tvm_runner(label: str, built: Built, inputs: dict[str, np.ndarray], target: tvm.target.Target,
               library: Path | None = None) -> Runner:
    """Run `main` of a built module in the Relax VM on inputs given in graph-input order.

    With `library` (the build's exported .so) the VM loads it instead of JIT-compiling the executable,
    which would emit the machine code a second time (about a second for a small CNN)."""
    device = device_for(target)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)) if library else built.executable, device)
    tensors = [tvm.runtime.tensor(array, device) for array in inputs.values()]
    return Runner(label, lambda: vm["main"](*tensors), _flatten_tvm, built.kernels, sync=device.sync)


ORT_LEVELS = {
    "ort_all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "ort_none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


def ort_runner(label: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray],
               optimized_path: Path | None = None) -> Runner:
    """An ONNX Runtime CPU session at the label's optimization level; optionally keeps ORT's optimized model."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ORT_LEVELS[label]
    options.log_severity_level = 3
    if optimized_path is not None:
        optimized_path.parent.mkdir(parents=True, exist_ok=True)
        options.optimized_model_filepath = str(optimized_path)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return Runner(label, lambda: session.run(None, inputs), lambda result: [np.asarray(a) for a in result])
