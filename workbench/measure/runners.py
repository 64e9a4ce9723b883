"""Runners: one inference on prepared inputs, for TVM builds and ONNX Runtime sessions alike.

A runner owns its inputs already placed on its device, so timing covers the inference only.
A TVM build runs here or, given an RPC session, on the remote device: the exported library is
uploaded and loaded there, and timed there by TVM's time_evaluator (one inference per sample, so
the RPC round trip is not in the figures).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import tvm
import tvm_ffi
from tvm import relax, rpc

from workbench.compile.build import Built
from workbench.compile.targets import device_for
from workbench.errors import BaselineUnavailable
from workbench.measure.timing import Timing, sample_call, summarize
from workbench.runtime.cpu_load import ThreadGovernor
from workbench.runtime.launcher import install as install_launcher
from workbench.runtime.threads import cpu_threads, target_threads


@dataclass
class Runner:
    label: str
    run_once: Callable[[], object]
    outputs: Callable[[object], list[np.ndarray]]
    kernels: int | None = None
    sync: Callable[[], None] = field(default=lambda: None)
    sampler: Callable[[int, int], np.ndarray] | None = None  # (warmup, repeat) -> ms, where not sample_call's loop

    def infer(self) -> list[np.ndarray]:
        result = self.run_once()
        self.sync()
        return self.outputs(result)

    def samples(self, warmup: int, repeat: int) -> np.ndarray:
        """`repeat` latencies (ms) with the shared protocol: warm-up, then timed inferences."""
        if self.sampler is not None:
            return self.sampler(warmup, repeat)
        return sample_call(self.run_once, warmup, repeat, self.sync)

    def measure(self, warmup: int, repeat: int) -> Timing:
        """Latency with the shared protocol (warm-up, then `repeat` timed inferences)."""
        return summarize(self.samples(warmup, repeat))


def _flatten_tvm(value: object) -> list[np.ndarray]:
    """VM results are a tensor, a shape (a model that outputs an input's `Shape`: int64, as ONNX has it) or a
    (nested) tuple of them; flatten to numpy arrays in order."""
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, tvm_ffi.Shape):
        return [np.array(list(value), dtype="int64")]
    return [array for item in value for array in _flatten_tvm(item)]


def tvm_runner(label: str, built: Built, inputs: dict[str, np.ndarray], target: tvm.target.Target,
               session: rpc.RPCSession | None = None, library: Path | None = None) -> Runner:
    """Run `main` of a built module in the Relax VM on inputs given in graph-input order.

    With `library` (the build's exported .so) the VM loads it instead of JIT-compiling the executable,
    which would emit the machine code a second time. With an RPC
    `session`, the library is uploaded and run on the remote device. On this machine's CPU the library's parallel
    loops run on the workbench's launcher (runtime/launcher.py), in which a busy core does not stall every kernel,
    and each call on the thread count the ThreadGovernor chose for the load other processes put on the machine
    (runtime/cpu_load.py)."""
    device = device_for(target, session)
    if session is not None:
        session.upload(str(library))
        module = session.load_module(library.name)
    else:
        module = tvm.runtime.load_module(str(library)) if library else built.executable
        if library and target.kind.name == "llvm":
            install_launcher(library, target_threads(target))
    vm = relax.VirtualMachine(module, device)
    tensors = [tvm.runtime.tensor(array, device) for array in inputs.values()]

    def remote_samples(warmup: int, repeat: int) -> np.ndarray:
        for _ in range(warmup):
            vm["main"](*tensors)
        device.sync()
        return np.asarray(vm.time_evaluator("main", device, number=1, repeat=repeat)(*tensors).results) * 1e3

    if session is not None or target.kind.name != "llvm":
        return Runner(label, lambda: vm["main"](*tensors), _flatten_tvm, built.kernels, sync=device.sync,
                      sampler=remote_samples if session is not None else None)
    governor = ThreadGovernor(target_threads(target))
    return Runner(label, lambda: governor.run(lambda: vm["main"](*tensors)), _flatten_tvm, built.kernels,
                  sync=device.sync)


ORT_LEVELS = {
    "ort_all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "ort_none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "ort_cuda": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "ort_int8": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,  # on ORT's own statically quantized model
}
ORT_PROVIDERS = {"ort_cuda": "CUDAExecutionProvider"}  # every other ORT label runs on the CPU


def ort_runner(label: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray],
               optimized_path: Path | None = None, threads: int | None = None) -> Runner:
    """An ONNX Runtime session at the label's optimization level, on the CPU or (ort_cuda) the CUDA EP, its
    intra-op pool `threads` wide (default: runtime/threads.py's count, the one TVM's kernels run on);
    optionally keeps ORT's optimized model."""
    provider = ORT_PROVIDERS.get(label, "CPUExecutionProvider")
    if provider not in ort.get_available_providers():
        raise BaselineUnavailable(f"onnxruntime {ort.__version__} has no {provider} (install onnxruntime-gpu "
                                  "with a CUDA device present)")
    options = ort.SessionOptions()
    options.graph_optimization_level = ORT_LEVELS[label]
    options.log_severity_level = 3
    options.intra_op_num_threads = threads or cpu_threads()
    if optimized_path is not None:
        optimized_path.parent.mkdir(parents=True, exist_ok=True)
        options.optimized_model_filepath = str(optimized_path)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=[provider])
    if any(array.dtype.kind in "OSU" for array in inputs.values()):  # OrtValues hold no strings: plain calls
        return Runner(label, lambda: session.run(None, inputs), lambda result: [np.asarray(a) for a in result])
    # I/O binding: the inputs placed on the provider's device once and the outputs bound there, so a timed call is
    # the inference only (session.run would convert every input and output on each call)
    device = "cuda" if provider == "CUDAExecutionProvider" else "cpu"
    binding = session.io_binding()
    placed = {name: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), device)
              for name, array in inputs.items()}
    for name, value in placed.items():
        binding.bind_ortvalue_input(name, value)
    for output in session.get_outputs():
        binding.bind_output(output.name, device)

    def run_once() -> dict:
        session.run_with_iobinding(binding)
        return placed  # held by the runner: the bound inputs live as long as it does

    return Runner(label, run_once, lambda _: [np.asarray(a) for a in binding.copy_outputs_to_cpu()])
