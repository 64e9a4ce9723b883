"""One factory for every label's runner: a TVM build, ONNX Runtime at a label's level, IREE or OpenVINO.

Whatever measures (`workbench run`, the side-by-side benchmarks, the conformance suite, the scripts) gets its
runners here, so every label of a comparison runs the same inputs on the same thread count, with the same files
kept (ONNX Runtime's optimized model, IREE's module, a library exported for an RPC server).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import tvm
from tvm import rpc

from workbench.compile.build import Built
from workbench.compile.targets import GENERIC_CPU
from workbench.config.baselines import runtime_of
from workbench.measure.iree import iree_runner
from workbench.measure.openvino import openvino_runner
from workbench.measure.runners import Runner, ort_runner, tvm_runner
from workbench.runtime.threads import target_threads


@dataclass(frozen=True)
class Bench:
    """What every label of one comparison runs on: the model's ONNX and inputs, the target, where TVM builds run
    (here, or the device of an RPC `session`), the folder for the files runners keep, and the thread count
    (default: the target's, runtime/threads.py)."""

    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    target: tvm.target.Target
    work_dir: Path
    session: rpc.RPCSession | None = None
    threads: int | None = None

    @property
    def thread_count(self) -> int:
        return self.threads or target_threads(self.target)


def _file_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def runner_for(label: str, bench: Bench, built: Built | None = None, library: Path | None = None,
               model: onnx.ModelProto | None = None) -> Runner:
    """The runner of `label`: with `built`, that TVM build (loaded from its exported `library` where given, exported
    into the work folder when it must travel to an RPC server or run on this CPU, where the library's parallel loops
    get the workbench's launcher: under a name of its own, removed once loaded); otherwise the label's baseline runtime, ONNX Runtime at its level, IREE compiled
    for the target or OpenVINO at its precision, on `model` (default: the bench's; ort_int8 passes its own)."""
    if built is not None:
        if library is not None or (bench.session is None and bench.target.kind.name != "llvm"):
            return tvm_runner(label, built, bench.inputs, bench.target, bench.session, library)
        # a name of its own: a second library loaded from a path already loaded would be the first one again
        bench.work_dir.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f"{_file_name(label)}.", suffix=".so", dir=bench.work_dir)
        os.close(handle)
        library = built.export(Path(name))
        try:
            return tvm_runner(label, built, bench.inputs, bench.target, bench.session, library)
        finally:  # loaded (or uploaded) by now: the file is not needed again
            library.unlink()
    model = model if model is not None else bench.model
    runtime = runtime_of(label)
    if runtime == "iree":
        return iree_runner(model, bench.inputs, bench.work_dir, bench.target.kind.name,
                           arch=bench.target.attrs.get("arch"), cpu=str(bench.target.attrs.get("mcpu", GENERIC_CPU)),
                           threads=bench.thread_count)
    if runtime == "openvino":
        return openvino_runner(label, model, bench.inputs, bench.thread_count)
    if runtime == "onnxruntime":
        optimized = bench.work_dir / "ort_all.optimized.onnx" if label == "ort_all" else None
        return ort_runner(label, model, bench.inputs, optimized_path=optimized, threads=bench.thread_count)
    raise ValueError(f"{label!r}: no runtime runs it; a TVM label needs its build")
