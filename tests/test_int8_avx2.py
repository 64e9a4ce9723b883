"""The int8 path on x86 CPUs with AVX2 and no VNNI: the packed u8 x s8 kernel tensorized with `vpmaddubsw` +
`vpmaddwd` (kernels/x86_int8.py: `AVX2_DOT_16x4`) and the 7-bit weights it needs.

AVX2 code runs on any AVX2 host, this AVX-512 one included: it is built for znver2 (an AMD AVX2 CPU without VNNI)
and run here; on an Intel host without SSE4a (AMD's `insertq`, which LLVM emits for znver2) the build leaves
SSE4a out. The VNNI form of the same convnet is cross-compiled for rocketlake and its assembly read."""

import platform

import numpy as np
import pytest
import tvm
from test_int8 import primfuncs
from test_int8_codegen import asm, instructions
from test_precision import eval_inputs
from tvm import relax
from tvm.target import codegen

from workbench.compile.build import build_lowered
from workbench.compile.design_spaces import tune_context
from workbench.compile.targets import make_target
from workbench.compile.tasks import extract_tasks, tuning_module
from workbench.config import TargetConfig
from workbench.config.pipeline_spec import parse_text
from workbench.kernels.default_schedule import default_schedule
from workbench.kernels.packed_conv import AVX2_U8S8, VNNI_U8S8, emit_conv2d, emit_matmul, int8_kind
from workbench.kernels.x86_int8 import AVX2_WEIGHT_MAX, AVX2_DOT_16x4
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.models import zoo
from workbench.passes import calibration
from workbench.passes.int8 import lower_int8, weight_qmax
from workbench.passes.pipeline import run_pipeline

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 code")
NHWC_INT8 = "fold_batchnorm,convert_layout(conv2d=NHWC:OHWI),quantize(activations={},execute=int8),fuse"
ROCKETLAKE = tvm.target.Target({"kind": "llvm", "mcpu": "rocketlake"})  # AVX-512 VNNI
GENERIC = tvm.target.Target({"kind": "llvm"})  # no AVX2: relax's int8 ops, and the packed kernels as plain loops


def _znver2() -> tvm.target.Target:
    """znver2 as this host can run it: without SSE4a where the host has none."""
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver2"})
    host = set(codegen.llvm_get_cpu_features(make_target(TargetConfig())))
    if "sse4a" in host:
        return target
    return tvm.target.Target({"kind": "llvm", "mcpu": "znver2", "mattr": ["-sse4a"]})


ZNVER2 = _znver2()
runs_avx2 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not codegen.target_has_features(
    "avx2", make_target(TargetConfig())), reason="running AVX2 code needs an x86 host with AVX2")


def test_avx2_cpus_get_the_avx2_kernel_and_7_bit_weights():
    for mcpu in ("znver2", "haswell", "skylake"):
        target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
        assert int8_kind(target) == AVX2_U8S8 and weight_qmax(target) == 63, mcpu
    assert int8_kind(ROCKETLAKE) == VNNI_U8S8 and weight_qmax(ROCKETLAKE) == 127
    assert int8_kind(GENERIC) is None and weight_qmax(GENERIC) == 127
    # 7 bits: the largest u8 x s8 pair sum vpmaddubsw forms stays within int16
    assert 255 * AVX2_WEIGHT_MAX * 2 <= np.iinfo(np.int16).max < 255 * 128 * 2


def _conv_module(kind, x_shape, w_ohwi, strides, padding, dilation, zero) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "uint8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(emit_conv2d(bb, kind, x, w_ohwi, strides, padding, dilation, zero)))
        bb.emit_func_output(out)
    return bb.get()


def _numpy_conv(x, w_ohwi, strides, padding, dilation, zero) -> np.ndarray:
    """The exact integer NHWC conv: x padded with `zero` ([top, left, bottom, right]), int64 sums."""
    top, left, bottom, right = padding
    xp = np.pad(x.astype(np.int64), [(0, 0), (top, bottom), (left, right), (0, 0)], constant_values=zero)
    o, kh, kw, _ = w_ohwi.shape
    (sh, sw), (dh, dw) = strides, dilation
    out_h, out_w = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1, (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], out_h, out_w, o), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh:i * dh + sh * (out_h - 1) + 1:sh, j * dw:j * dw + sw * (out_w - 1) + 1:sw]
            out += np.einsum("nhwc,oc->nhwo", patch, w_ohwi[:, i, j].astype(np.int64))
    return out


ODD_CONVS = [  # (x NHWC, weight OHWI, strides, padding [top, left, bottom, right], dilation, zero point)
    ((1, 9, 11, 7), (21, 3, 3, 7), (2, 1), (1, 0, 2, 1), (1, 1), 3),  # C, O not multiples of 4 / 16; uneven pads
    ((2, 8, 8, 5), (3, 1, 1, 5), (1, 1), (0, 0, 0, 0), (1, 1), 0),  # 1x1, 3 output channels, batch 2
    ((1, 10, 13, 18), (33, 3, 2, 18), (1, 2), (2, 1, 1, 0), (2, 1), 128),  # dilated, strided, O = 2 x 16 + 1
]


@runs_avx2
@pytest.mark.parametrize("case", ODD_CONVS, ids=["c7_o21_s2_pad", "1x1_o3_n2", "dilated_o33"])
def test_the_avx2_kernel_equals_the_exact_integer_conv(case):
    x_shape, w_shape, strides, padding, dilation, zero = case
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, x_shape).astype(np.uint8)
    w = rng.integers(-AVX2_WEIGHT_MAX, AVX2_WEIGHT_MAX + 1, w_shape).astype(np.int8)
    x.flat[:64], w.flat[:16] = 255, -AVX2_WEIGHT_MAX  # the extremes: pair sums at vpmaddubsw's int16 limit
    w.flat[16:32] = AVX2_WEIGHT_MAX
    built = build_lowered(_conv_module(AVX2_U8S8, x_shape, w, strides, padding, dilation, zero), ZNVER2)
    text = asm(built.executable)
    assert instructions(text, "vpmaddubsw")["vpmaddubsw"] > 0 and instructions(text, "vpmaddwd")["vpmaddwd"] > 0
    got = relax.VirtualMachine(built.executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = _numpy_conv(x, w, strides, padding, dilation, zero)
    assert got.shape == want.shape and np.array_equal(got, want)


@runs_avx2
def test_the_avx2_matmul_equals_the_exact_integer_product():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (5, 37)).astype(np.uint8)  # K = 37: padded to 40 with the zero point
    w = rng.integers(-AVX2_WEIGHT_MAX, AVX2_WEIGHT_MAX + 1, (37, 19)).astype(np.int8)
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "uint8"))
    with bb.function("main", [xv]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(emit_matmul(bb, AVX2_U8S8, xv, w, zero=7)))
        bb.emit_func_output(out)
    built = build_lowered(bb.get(), ZNVER2)
    got = relax.VirtualMachine(built.executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(got, x.astype(np.int64) @ w.astype(np.int64))


def _lowered(zoo_relax, target, activations="asymmetric"):
    module, records = run_pipeline(zoo_relax("convnet_small")[1], parse_text(NHWC_INT8.format(activations)), target)
    return module, records[2].analysis["int8"]


@runs_avx2
@pytest.mark.parametrize("activations", ["symmetric", "asymmetric"])
def test_int8_convnet_built_for_znver2_runs_the_avx2_kernel_close_to_fp32(zoo_relax, activations):
    module, record = _lowered(zoo_relax, ZNVER2, activations)
    assert record["avx2"] == 7 and record["vnni"] == 0 and record["kept_fp32"] == []  # the 6 convs and the matmul
    kernels = primfuncs(module)
    assert len([name for name in kernels if AVX2_U8S8.name in name]) == 7
    weights = [c for c in _constants(module) if c.dtype == np.int8]
    assert len(weights) == 7 and all(np.abs(w).max() <= 63 for w in weights)  # reduced range: 7-bit weights
    assert max(np.abs(w).max() for w in weights) == 63
    built = build_lowered(module, ZNVER2)
    tensorized = [name for name, f in primfuncs(built.lowered).items() if "llvm.x86.avx2.pmadd.ub.sw" in f.script()]
    assert len(tensorized) == 7 and all(AVX2_U8S8.name in name for name in tensorized)  # the default schedule
    inputs = eval_inputs(zoo.default_inputs("convnet_small"))
    got = tvm_runner("avx2", built, inputs, ZNVER2).infer()
    # the tensorized kernels against the same kernels as plain loops (a generic x86-64 build): integer sums are
    # exact, the fp32 epilogue may round by an ulp with FMAs
    plain = tvm_runner("plain", build_lowered(module, GENERIC), inputs, GENERIC).infer()
    for a, b in zip(got, plain):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    # against ONNX Runtime fp32: the int8 tests' tolerance (tests/test_ort_int8.py)
    reference = ort_runner("ort_none", zoo_relax("convnet_small")[0], inputs).infer()
    err = calibration.quantization_error(reference, got)
    assert err["cosine"] >= 0.99 and 0 < err["max_abs_err"] < 0.1 * float(np.abs(reference[0]).max()), err


def _constants(module: tvm.IRModule) -> list[np.ndarray]:
    """The tensor constants `main` passes its kernels (the packed weights among them)."""
    found = []
    relax.analysis.post_order_visit(module["main"], lambda e: found.append(e.value.numpy()) if isinstance(
        e, tvm.ir.expr.Constant) and isinstance(getattr(e, "value", None), tvm.runtime.Tensor) else None)
    return found


def test_wider_weights_keep_relax_int8_ops_on_avx2(zoo_relax):
    """Weights quantized to 8 bits elsewhere (here: fake quantization, then the int8 lowering) would saturate
    vpmaddubsw: on an AVX2 CPU they keep relax's exact int8 ops."""
    pipeline = "fold_batchnorm,convert_layout(conv2d=NHWC:OHWI),quantize"
    fake, _ = run_pipeline(zoo_relax("convnet_small")[1], parse_text(pipeline), ZNVER2)
    with ZNVER2:
        lowered, record = lower_int8(fake)
    assert record["avx2"] == 0 and record["lowered"] == {"relax.nn.conv2d": 6, "relax.matmul": 1}
    assert not [name for name in primfuncs(lowered) if AVX2_U8S8.name in name]


@x86
def test_znver2_assembly_has_vpmaddubsw_and_rocketlake_vpdpbusd(zoo_relax):
    avx2, _ = _lowered(zoo_relax, ZNVER2)
    vnni, _ = _lowered(zoo_relax, ROCKETLAKE)
    znver2 = tvm.target.Target({"kind": "llvm", "mcpu": "znver2"})  # the real CPU's code, compiled only
    avx2_counts = instructions(asm(build_lowered(avx2, znver2).executable), "vpmaddubsw", "vpmaddwd", "vpdpbusd")
    vnni_counts = instructions(asm(build_lowered(vnni, ROCKETLAKE).executable), "vpmaddubsw", "vpdpbusd")
    # a pair per 8 output channels x 4 input channels x pixel: every kernel tensorized, none left to VNNI
    assert avx2_counts["vpmaddubsw"] >= 14 and avx2_counts["vpmaddwd"] >= avx2_counts["vpmaddubsw"], avx2_counts
    assert avx2_counts["vpdpbusd"] == 0
    assert vnni_counts["vpdpbusd"] >= 7 and vnni_counts["vpmaddubsw"] == 0, vnni_counts


@x86
def test_the_avx2_search_space_tensorizes_and_its_schedules_are_exact(zoo_relax):
    """Every design space MetaSchedule draws for an AVX2 kernel, post-processed as tuning does, tensorizes with the
    AVX2 dot product; each runs here (where it can) with the outputs of the kernel's plain loops."""
    module, _ = _lowered(zoo_relax, ZNVER2)
    tasks = [t for t in extract_tasks(tuning_module(module, ZNVER2), ZNVER2) if AVX2_U8S8.name in t.task_name]
    assert tasks
    task = tasks[0]
    context = tune_context(task, num_cores=1, search_strategy="replay-trace", rand_state=0)
    spaces = context.generate_design_space()
    assert spaces
    func = task.dispatched[0]["main"]
    args = _random_args(func)
    want = _run(tvm.compile(tvm.IRModule({"main": func}), GENERIC), args)
    for schedule in [*spaces, default_schedule(func, ZNVER2)]:
        assert all(postproc.apply(schedule) for postproc in context.space_generator.postprocs)
        assert AVX2_DOT_16x4 in str(schedule.trace)
        lib = tvm.compile(schedule.mod, ZNVER2)
        assert instructions(lib.mod.inspect_source("asm"), "vpmaddubsw")["vpmaddubsw"] > 0
        if codegen.target_has_features("avx2", make_target(TargetConfig())):
            np.testing.assert_allclose(_run(lib, args), want, rtol=1e-6, atol=1e-6)


def _random_args(func: tvm.tirx.PrimFunc) -> list[np.ndarray]:
    """Random inputs in each buffer's range (u8 data, 7-bit weights, small floats) and a zeroed output."""
    rng = np.random.default_rng(0)
    args = []
    for param in func.params:  # TIR params are the buffers themselves in 0.27
        shape, dtype = [int(v) for v in param.shape], str(param.dtype)
        if dtype == "uint8":
            args.append(rng.integers(0, 256, shape).astype(dtype))
        elif dtype == "int8":
            args.append(rng.integers(-AVX2_WEIGHT_MAX, AVX2_WEIGHT_MAX + 1, shape).astype(dtype))
        elif dtype == "int32":
            args.append(rng.integers(-1000, 1000, shape).astype(dtype))
        else:
            args.append(rng.uniform(-1, 1, shape).astype(dtype))
    return args


def _run(lib, args: list[np.ndarray]) -> np.ndarray:
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()
