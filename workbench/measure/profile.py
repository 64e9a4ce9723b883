"""Per-kernel time of the workbench build next to ONNX Runtime's per-node time for the same model and inputs.

TVM 0.27's Relax VM has no profiler, but it calls an instrument before and after every call
instruction: `tvm_profile` times each kernel call there (device synchronized after it). Each interval
also holds the instrument's own cost (leaving Python and coming back, more for calls with more
arguments), which would make a model with many cheap builtin calls (allocation, shape checks) look
dominated by them (tests/test_profile.py). So the kernels are charged their interval less the shortest
one seen (a builtin that does next to nothing), and the builtins row is what is left of the plain,
uninstrumented latency once the kernels are taken off it. ONNX Runtime writes a Chrome-trace
JSON with one event per node run (`SessionOptions.enable_profiling`). Both skip their warm-up runs
and report the mean time per inference of each kernel (or node), largest first, with its share of
the summed total: which kernel to tune next.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import tvm
from tvm import relax

from workbench.measure.timing import time_call
from workbench.runtime.threads import cpu_threads

VM_BUILTINS = "(VM builtins and overhead: the rest of the plain latency)"


@dataclass
class KernelTime:
    name: str
    us: float  # mean per inference
    calls: int  # per inference
    share: float = 0.0


@dataclass
class Profile:
    """Where one build's inference time goes, per kernel; `total_us` is the sum over kernels."""

    label: str
    runs: int
    kernels: list[KernelTime] = field(default_factory=list)
    instrument_us: float = 0.0  # per call, already taken off each kernel's figure (0 where none was)
    plain_us: float | None = None  # median latency of uninstrumented runs, where measured

    @property
    def total_us(self) -> float:
        return sum(kernel.us for kernel in self.kernels)

    def as_dict(self, top: int | None = None) -> dict:
        shown = self.kernels[:top] if top else self.kernels
        rest = self.kernels[len(shown):]
        return {"label": self.label, "runs": self.runs, "total_us": self.total_us, "instrument_us": self.instrument_us,
                "plain_us": self.plain_us,
                "kernels": [asdict(k) for k in shown],
                "other": {"kernels": len(rest), "us": sum(k.us for k in rest),
                          "share": sum(k.share for k in rest)}}


def _profile(label: str, spent: dict[str, float], calls: dict[str, int], runs: int,
             overhead_s: float = 0.0, plain_s: float | None = None) -> Profile:
    """Totals over `runs` inferences -> mean per inference, largest first, with shares. Each call is charged
    less `overhead_s`; with `plain_s` (one uninstrumented inference) the builtins get what the kernels leave of it."""
    kernels = [KernelTime(name, max(seconds - overhead_s * calls[name], 0.0) / runs * 1e6, calls[name] // runs)
               for name, seconds in spent.items()]
    if plain_s is not None:
        kernels = [k for k in kernels if k.name != VM_BUILTINS]
        rest = plain_s * 1e6 - sum(k.us for k in kernels)
        kernels.append(KernelTime(VM_BUILTINS, max(rest, 0.0), calls[VM_BUILTINS] // runs))
    kernels.sort(key=lambda kernel: kernel.us, reverse=True)
    total = sum(kernel.us for kernel in kernels) or 1.0
    for kernel in kernels:
        kernel.share = kernel.us / total
    return Profile(label, runs, kernels, overhead_s * 1e6, None if plain_s is None else plain_s * 1e6)


def tvm_profile(module: tvm.runtime.Module, inputs: dict[str, np.ndarray], device: tvm.runtime.Device,
                warmup: int, runs: int, label: str = "workbench") -> Profile:
    """Time every call the VM makes while `main` runs `runs` times (after `warmup` untimed runs)."""
    vm = relax.VirtualMachine(module, device)
    tensors = [tvm.runtime.tensor(array, device) for array in inputs.values()]
    for _ in range(warmup):
        vm["main"](*tensors)
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    started: list[float] = []
    shortest = [float("inf")]

    def instrument(_func, symbol: str, before: bool, _ret, *_args) -> int:
        if before:
            started.append(time.perf_counter())
        else:
            device.sync()
            seconds = time.perf_counter() - started.pop()
            name = VM_BUILTINS if symbol.startswith("vm.builtin.") else symbol
            spent[name] += seconds
            calls[name] += 1
            shortest[0] = min(shortest[0], seconds)
        return 0  # VMInstrumentReturnKind.NO_OP: run the call

    plain = time_call(lambda: vm["main"](*tensors), 0, runs, device.sync)
    vm.set_instrument(instrument)
    for _ in range(runs):
        vm["main"](*tensors)
    return _profile(label, spent, calls, runs, overhead_s=shortest[0] if calls else 0.0, plain_s=plain.median_ms / 1e3)


def ort_profile(model: onnx.ModelProto, inputs: dict[str, np.ndarray], out_dir: Path, warmup: int, runs: int,
                label: str = "ort_all") -> Profile:
    """ONNX Runtime (all graph optimizations, CPU) per node: the trace's node events after the warm-up runs.
    Nodes are named `<op> <node>` as ORT's optimized graph has them (e.g. `Conv relu12_nchwc`)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = cpu_threads()  # as the measured ort_all session
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.enable_profiling = True
    out_dir.mkdir(parents=True, exist_ok=True)
    options.profile_file_prefix = str(out_dir / f"{label}_profile")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for _ in range(warmup + runs):
        session.run(None, inputs)
    events = json.loads(Path(session.end_profiling()).read_text())
    model_runs = sorted((e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"),
                        key=lambda e: e["ts"])
    timed_from = model_runs[warmup]["ts"] if warmup else 0
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= timed_from:
            name = f"{event['args'].get('op_name', '?')} {event['name'].removesuffix('_kernel_time')}"
            spent[name] += event["dur"] * 1e-6
            calls[name] += 1
    return _profile(label, spent, calls, runs)
