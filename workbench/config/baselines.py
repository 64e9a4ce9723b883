"""The baselines a run measures beside the workbench build, registered once: the runtime that makes each, what it
is, whether the default `baselines:` list has it, and whether a config may name it. The config schema (`BaselineName`, the
default list), `workbench run --help` and the runner factory derive from here (how each runs: measure/factory.py,
with the TVM recipes in compile/build.py `BASELINE_BUILDS`, ONNX Runtime's levels in measure/runners.py
`ORT_LEVELS`, measure/iree.py, measure/openvino.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WORKBENCH_LABEL = "workbench"  # the workbench build's label in every table, result and store row


@dataclass(frozen=True)
class Baseline:
    name: str
    runtime: Literal["tvm", "onnxruntime", "iree", "openvino"]
    doc: str
    default: bool = False  # in the `baselines:` list a config gets when it names none
    selectable: bool = True  # False: added by the run itself where it applies (ort_cuda on a cuda target)


BASELINES: dict[str, Baseline] = {b.name: b for b in (
    Baseline("ort_all", "onnxruntime", "ONNX Runtime with all graph optimizations (keeps ort_all.optimized.onnx)",
             default=True),
    Baseline("ort_none", "onnxruntime", "ONNX Runtime without graph optimizations: the default accuracy reference",
             default=True),
    Baseline("tvm_default", "tvm", "TVM's own default Relax pipeline for the target", default=True),
    Baseline("tvm_unoptimized", "tvm", "legalize only, then the workbench build's lowering: what the pipeline adds",
             default=True),
    Baseline("iree", "iree", "IREE compiled for the target (needs the iree extra: pip install -e '.[iree]')"),
    Baseline("openvino", "openvino", "OpenVINO's CPU plugin at f32 precision, latency hint (needs the openvino "
             "extra: pip install -e '.[openvino]')"),
    Baseline("openvino_bf16", "openvino", "OpenVINO's CPU plugin at bf16 precision, where the CPU has it natively "
             "(AVX512_BF16 or AMX)"),
    Baseline("ort_int8", "onnxruntime", "ONNX Runtime's static INT8 quantization, calibrated on the quantize step's "
             "inputs (kept as ort_int8.onnx)"),
    Baseline("ort_cuda", "onnxruntime", "ONNX Runtime's CUDA execution provider, measured on every cuda target",
             selectable=False),
)}
DEFAULT_BASELINES = tuple(name for name, b in BASELINES.items() if b.default)
# the CPU peers `workbench bench` can time beside the workbench build, and those it times unless told
SIDE_BY_SIDE = ("ort_all", "openvino", "openvino_bf16", "iree")
SIDE_BY_SIDE_DEFAULT = ("ort_all", "openvino", "iree")
BaselineName = Literal[tuple(name for name, b in BASELINES.items() if b.selectable)]  # type: ignore[valid-type]


def runtime_of(label: str) -> str:
    """The runtime that runs `label` (the workbench build and the TVM baselines: tvm)."""
    return BASELINES[label].runtime if label in BASELINES else "tvm"


def runs_on_tvm(label: str) -> bool:
    """Whether `label` is a TVM build (the workbench's own or a TVM baseline), measured where TVM builds run."""
    return label == WORKBENCH_LABEL or (label in BASELINES and BASELINES[label].runtime == "tvm")


def baselines_help() -> str:
    """One line per selectable baseline, for --help."""
    return "\n".join(f"  {b.name:<16} {b.doc}{' (default)' if b.default else ''}"
                     for b in BASELINES.values() if b.selectable)
