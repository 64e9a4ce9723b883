"""`workbench bench ops`: each heavy op class alone, at shapes real models use, untuned workbench vs ONNX Runtime and
OpenVINO.

Every op is a one-node ONNX model (seeded random weights) run through the workbench's `default` pipeline with
default schedules, through ort_all and through OpenVINO, in this one process, timed in interleaved rounds, the
workbench's outputs checked against ONNX Runtime without graph optimizations (stages/side_by_side.py). Each gets
GB/s (input, weights and output moved once: the yardstick of weight-bound ops, a fully connected layer at batch 1)
and convs and matmuls GFLOP/s (2 per multiply-add, from the model's shapes) and the share of this CPU's fp32 peak:

    peak = physical cores used x 2 FMA units x fp32 lanes per vector x 2 FLOPs x clock (/proc/cpuinfo's MHz)

an estimate: /proc/cpuinfo gives the nominal clock, and turbo runs above it, while some CPUs have one FMA unit for
512-bit vectors; hence the page also gives the fastest peer's share of the same figure, the fairer yardstick. A
one-element op (`call_overhead`) shows each runtime's cost of a call. Writes ops_<cpu>.md.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tvm.target.codegen import target_has_features

from workbench.bench.output import RESULTS, flushed
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment, TargetConfig, validate
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.errors import UserError
from workbench.measure.contention import contention_since, thread_contention
from workbench.measure.profile import VM_BUILTINS
from workbench.models.summary import frozen, op_histogram
from workbench.record.results_page import Machine, load_line, load_suffix, write_results_page
from workbench.record.rows import number_text
from workbench.runtime.threads import target_threads
from workbench.stages.side_by_side import bench


@dataclass(frozen=True)
class OpCase:
    """One op at one shape: the node, its input shape, its constant inputs (name -> shape) and where it comes from."""

    name: str
    op: str
    x: tuple[int, ...]
    weights: dict[str, tuple[int, ...]]
    attrs: dict
    seen_in: str

    def model(self) -> onnx.ModelProto:
        rng = np.random.default_rng(0)
        inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype("float32"), name)
                 for name, shape in self.weights.items()]
        node = helper.make_node(self.op, ["x", *self.weights], ["y"], **self.attrs)
        graph = helper.make_graph([node], self.name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.x)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(self.x))], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv(name: str, x, out_channels: int, kernel, seen_in: str, groups: int = 1, **attrs) -> OpCase:
    w = (out_channels, x[1] // groups, *kernel)
    return OpCase(name, "Conv", x, {"w": w, "b": (out_channels,)}, {"kernel_shape": list(kernel), "group": groups,
                                                                    **attrs}, seen_in)


CASES = [
    _conv("conv3x3", (1, 48, 80, 80), 48, (3, 3), "PP-OCR det backbone", pads=[1, 1, 1, 1]),
    _conv("conv1x1", (1, 96, 40, 40), 192, (1, 1), "MobileNet pointwise"),
    _conv("conv3x3_stride2", (1, 32, 160, 160), 64, (3, 3), "YOLO downsampling", strides=[2, 2], pads=[1, 1, 1, 1]),
    _conv("conv3x3_dilated", (1, 64, 40, 40), 64, (3, 3), "dilated context conv", dilations=[2, 2],
          pads=[2, 2, 2, 2]),
    _conv("depthwise3x3", (1, 96, 80, 80), 96, (3, 3), "MobileNet depthwise", groups=96, pads=[1, 1, 1, 1]),
    _conv("grouped3x3", (1, 64, 40, 40), 64, (3, 3), "grouped conv (4 groups)", groups=4, pads=[1, 1, 1, 1]),
    _conv("conv1d", (1, 128, 512), 128, (5,), "byte classifier Conv1d", pads=[2, 2]),
    _conv("conv5x1_one_column", (1, 256, 512, 1), 512, (5, 1), "Magika's conv"),
    OpCase("matmul", "MatMul", (1, 64, 256), {"w": (256, 768)}, {}, "transformer MLP / SVTR"),
    OpCase("gemm_classifier", "MatMul", (1, 40, 120), {"w": (120, 6625)}, {}, "PP-OCR rec classifier head"),
    OpCase("softmax_rows", "Softmax", (1, 4, 512, 512), {}, {"axis": -1}, "attention scores"),
    OpCase("softmax_classes", "Softmax", (1, 40, 18385), {}, {"axis": -1}, "PP-OCRv5 rec over 18385 classes"),
    OpCase("layer_norm", "LayerNormalization", (1, 256, 384), {"g": (384,), "beta": (384,)}, {"axis": -1},
           "transformer layer norm"),
    OpCase("maxpool3x3_s2", "MaxPool", (1, 64, 160, 160), {}, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                              "pads": [1, 1, 1, 1]}, "ResNet stem"),
    OpCase("global_avgpool", "GlobalAveragePool", (1, 576, 20, 20), {}, {}, "classifier head"),
    OpCase("transpose_nchw_nhwc", "Transpose", (1, 96, 80, 80), {}, {"perm": [0, 2, 3, 1]}, "layout change"),
    OpCase("fc_batch1", "Gemm", (1, 9216), {"w": (4096, 9216), "b": (4096,)}, {"transB": 1},
           "AlexNet/VGG fully connected layer at batch 1 (weight-bound: GB/s)"),
    _conv("conv11x11_stride4", (1, 3, 224, 224), 64, (11, 11), "AlexNet stem", strides=[4, 4], pads=[2, 2, 2, 2]),
    _conv("conv7x7_stride2", (1, 3, 224, 224), 64, (7, 7), "ResNet stem", strides=[2, 2], pads=[3, 3, 3, 3]),
    _conv("conv3x3_224", (1, 64, 224, 224), 64, (3, 3), "VGG block at 224²", pads=[1, 1, 1, 1]),
    OpCase("lrn", "LRN", (1, 64, 55, 55), {}, {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 2.0},
           "AlexNet local response normalization"),
    OpCase("call_overhead", "Relu", (1, 1), {}, {}, "one element: each runtime's cost of a call"),
]


def peak_gflops(threads: int, target) -> float | None:
    """The fp32 peak of `threads` cores (see the module), or None where /proc/cpuinfo gives no clock."""
    try:
        mhz = next(float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("cpu MHz"))
    except (OSError, StopIteration):
        return None
    lanes = 16 if target_has_features("avx512f", target) else 8 if target_has_features("avx2", target) else 4
    return threads * 2 * lanes * 2 * mhz / 1000


def rate_and_share(flops: int, ms: float | None, peak: float | None) -> tuple[str, str]:
    """GFLOP/s and the share of `peak`, as table cells ("—" where there is no figure)."""
    if not flops or not ms:
        return "—", "—"
    rate = flops / ms / 1e6
    return f"{rate:.1f}", f"{100 * rate / peak:.0f}%" if peak else "—"


def experiment(case: OpCase, path: Path) -> Experiment:
    onnx.save(case.model(), path)
    return validate({"name": case.name, "model": {"source": str(path), "inputs": {"x": list(case.x)}},
                     "pipeline": "default", "baselines": ["ort_all", "ort_none"]}, case.name)


PEERS = ("ort_all", "openvino")  # the CPU runtimes each op is timed against


def bytes_moved(model: onnx.ModelProto, x: tuple[int, ...]) -> int:
    """The bytes an op must read and write at least: its input, weights and output (fp32)."""
    frozen_model = frozen(model, {"x": list(x)}).model
    weights = sum(int(np.prod(init.dims)) for init in frozen_model.graph.initializer)
    output = frozen_model.graph.output[0].type.tensor_type.shape
    return 4 * (int(np.prod(x)) + weights + int(np.prod([d.dim_value for d in output.dim])))


def _cells(flops: int, moved: int, ms: float | None, peak: float | None) -> list[str]:
    """GFLOP/s with its share of the peak (ops with multiply-adds) and GB/s (all)."""
    return [*rate_and_share(flops, ms, peak), f"{moved / ms / 1e6:.1f}" if ms else "—"]


PROFILE_RUNS = 20  # inferences over which each case's kernels are timed one by one
SHOWN_KERNELS = 3  # the workbench kernels named per case, largest first
_KEPT_NUMBERS = re.compile(r"(b?f|b?float|u?int|[ui]|avx|sse)\d+|u8s8|\d+")  # name tokens whose digits are not TVM's


def kernel_text(shares: list[tuple[str, float]]) -> str:
    """The workbench's largest kernels with their share of its time, named by their ops (`fused_` and the numbers
    TVM appends dropped): where an op trails, whether its own kernel or the layout changes and pads around it (which
    a one-node NCHW model pays per op, a real model once per layout change) hold the time."""
    return ", ".join(f"{_op_names(name)[:40]} {100 * share:.0f}%" for name, share in shares[:SHOWN_KERNELS]) or "—"


# op names that make a kernel the op's own work (a grouped conv's concatenation of its groups included)
_OP_WORK = re.compile(r"conv|pool|matmul|dense|softmax|norm|mean|sum|max|concatenate")


def layout_share(shares: list[tuple[str, float]]) -> float:
    """The share of the workbench's time in kernels that only change the layout (a transpose, fused with a pad or
    reshape, and no compute op): what a one-node NCHW model pays around the op, a real model once per layout change."""
    ops = [(_op_names(name), share) for name, share in shares]
    return sum(share for names, share in ops if "transpose" in names and not _OP_WORK.search(names))


def without_layout_text(fastest: float | None, ours: float | None, shares: list[tuple[str, float]]) -> str:
    """The fastest peer's time over the workbench's with its layout changes taken out ("—" where it has none)."""
    share = layout_share(shares)
    if not fastest or not ours or share <= 0 or share >= 1:
        return "—"
    return f"{fastest / (ours * (1 - share)):.2f} ({100 * share:.0f}% layout)"


def _op_names(kernel: str) -> str:
    """A kernel's name without `fused_` and the numbers TVM appends to each op (`add18`); dtypes and instruction sets
    kept (`f32`, `u8s8`, `avx2`)."""
    if kernel == VM_BUILTINS:
        return "VM builtins"
    tokens = kernel.removeprefix("fused_").split("_")
    return "_".join(t if _KEPT_NUMBERS.fullmatch(t) else re.sub(r"\d+$", "", t) for t in tokens)


def run_ops(only: list[str] | None = None, repeat: int = 20, rounds: int = 3, out: Path = RESULTS,
            log: Callable[[str], None] = flushed, load: int = 0) -> Path:
    """Every op case (or those named in `only`) beside ONNX Runtime and OpenVINO, timed beside `load` busy processes
    (the caller starts them: bench/load.py); return the page written."""
    unknown = sorted(set(only or []) - {case.name for case in CASES})
    if unknown:
        raise UserError(f"--only: {', '.join(unknown)} unknown; choose from {', '.join(c.name for c in CASES)}")
    cases = [c for c in CASES if not only or c.name in only]
    rows: list[list[str]] = []
    target = make_target(TargetConfig())
    threads = target_threads(target)
    peak = peak_gflops(threads, target)
    contended = thread_contention(threads)
    with tempfile.TemporaryDirectory(prefix="bench_ops_") as work:
        for case in cases:
            row = bench(experiment(case, Path(work) / f"{case.name}.onnx"), list(PEERS), Path(work), repeat, rounds,
                        log, profile_runs=PROFILE_RUNS)
            model = case.model()
            flops = sum(r.flops or 0 for r in op_histogram(model, frozen(model, {"x": list(case.x)}).model))
            moved = bytes_moved(model, case.x)
            ours = row.medians_ms.get(WORKBENCH_LABEL)
            peers = {label: row.medians_ms.get(label) for label in PEERS}
            fastest = min((ms for ms in peers.values() if ms), default=None)
            rows.append([case.name, case.seen_in, "×".join(map(str, case.x)), number_text(ours, ".3f"),
                         *(number_text(ms, ".3f") for ms in peers.values()),
                         f"{fastest / ours:.2f}" if ours and fastest else "—", *_cells(flops, moved, ours, peak),
                         *_cells(flops, moved, fastest, peak), kernel_text(row.kernel_shares),
                         without_layout_text(fastest, ours, row.kernel_shares),
                         row.status + (f": {row.reason}" if row.reason else "")])
            log(" | ".join(rows[-1]))
    machine = Machine(target_key(target), threads,
                      contention=contention_since(threads, contended))
    protocol = ("- each op alone as a one-node ONNX model; workbench: pipeline `default`, untuned (default schedules); "
                "ort_all: ONNX Runtime with every graph optimization; openvino: its CPU plugin at f32\n"
                f"- timing: median of {rounds} interleaved rounds of {repeat} runs per label, in one process\n"
                f"{load_line(load)}"
                "- *fastest peer*: the faster of ort_all and openvino; its GFLOP/s and GB/s beside the workbench's; "
                "GB/s counts the input, weights and output once (a weight-bound op's yardstick: memory bandwidth)\n"
                f"- *workbench's time by kernel*: its {SHOWN_KERNELS} largest kernels, each timed alone over "
                f"{PROFILE_RUNS} inferences after the timing (`workbench profile`'s instrument), with their share; a "
                "one-node NCHW model pays the changes to NHWC and back around the op (`transpose`) and its pad on "
                "every call, where a real model changes layout once\n"
                "- *without layout changes*: the fastest peer's time over the workbench's with the share of its "
                "layout-only kernels (a transpose, fused with a pad or reshape, no compute op) taken out: where it "
                "is ≥ 1 and the plain ratio is not, the layout changes a one-node model pays hold the gap; where it "
                "stays < 1, the op's own kernels do")
    if peak:
        protocol += (f"\n- peak: {peak:.0f} GFLOP/s fp32 (cores × 2 FMA units × vector lanes × 2 × /proc/cpuinfo's "
                     "nominal clock): an estimate that turbo exceeds")
    header = ("op", "seen in", "input", "workbench ms", *(f"{label} ms" for label in PEERS),
              "fastest peer/workbench", "workbench GFLOP/s", "% of peak", "workbench GB/s", "peer GFLOP/s",
              "peer % of peak", "peer GB/s", "workbench's time by kernel", "peer/workbench without layout changes",
              "status")
    path = write_results_page(out, f"ops_{host_cpu()}{load_suffix(load)}", "Op classes, untuned", machine, protocol,
                              header, rows)
    log(f"wrote {path}")
    return path
