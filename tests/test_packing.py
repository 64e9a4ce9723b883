"""pack_conv2d: fp32 NHWC convs as the packed CPU kernel (passes/packing.py, kernels/packed_conv.py) — which convs
it takes and why it keeps the others, outputs against ONNX Runtime, the fixed schedule an untuned build gives
the kernel (kernels/packed_schedule.py), and tuning measuring that schedule first."""

import numpy as np
import pytest
import tvm
from test_int8 import primfuncs
from test_precision import calls, eval_inputs, infer
from tvm.s_tir import meta_schedule as ms

from workbench.compile.build import build_lowered
from workbench.compile.targets import cpu_features, make_target
from workbench.compile.tasks import extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.config import TargetConfig, TuningConfig
from workbench.config.pipeline_spec import parse_text
from workbench.kernels.default_schedule import default_schedule
from workbench.kernels.packed_conv import DEPTHWISE_FP32, FP32
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.models import zoo
from workbench.passes.pipeline import run_pipeline

PACKED = "fold_batchnorm,convert_layout(conv2d=NHWC:OHWI),fold_constant,pack_conv2d"


@pytest.mark.parametrize("model, dense, depthwise", [("convnet_small", 6, 0), ("mobilenet_block", 4, 2)])
def test_packed_convs_match_onnx_runtime(zoo_relax, llvm, model, dense, depthwise):
    onnx_model, mod = zoo_relax(model)
    graph, records = run_pipeline(mod, parse_text(PACKED), llvm)
    assert records[3].analysis["conv2d_packed"] == dense + depthwise and records[3].analysis["conv2d_kept"] == []
    assert not calls(graph, "relax.nn.conv2d")
    fused, _ = run_pipeline(graph, parse_text("fuse"), llvm)
    kernels = [call.args[0].name_hint for call in calls(fused, "relax.call_tir")]
    assert sum(name.startswith(f"fused_{FP32.name}") for name in kernels) == dense
    assert sum(name.startswith(f"fused_{DEPTHWISE_FP32.name}") for name in kernels) == depthwise
    inputs = eval_inputs(zoo.default_inputs(model))
    for got, want in zip(infer(fused, inputs, llvm), ort_runner("ort_none", onnx_model, inputs).infer()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_nchw_convs_run_packed_between_transposes_and_are_counted(zoo_relax, llvm):
    """Without convert_layout (TVM's fails on some models) each NCHW conv is packed between two transposes, and the
    analysis says how many, with ONNX Runtime's numbers."""
    onnx_model, mod = zoo_relax("convnet_small")
    graph, records = run_pipeline(mod, parse_text("fold_batchnorm,pack_conv2d"), llvm)
    assert records[1].analysis["conv2d_packed"] == records[1].analysis["conv2d_packed_in_nchw"] == 6
    assert not calls(graph, "relax.nn.conv2d") and len(calls(graph, "relax.permute_dims")) == 12
    fused, _ = run_pipeline(graph, parse_text("fuse"), llvm)
    inputs = eval_inputs(zoo.default_inputs("convnet_small"))
    for got, want in zip(infer(fused, inputs, llvm), ort_runner("ort_none", onnx_model, inputs).infer()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_untuned_builds_give_packed_kernels_the_fixed_parallel_schedule(zoo_relax, llvm):
    graph, _ = run_pipeline(zoo_relax("convnet_small")[1], parse_text(PACKED + ",fuse"), llvm)
    kernels = {name: f for name, f in primfuncs(build_lowered(graph, llvm).lowered).items() if FP32.name in name}
    assert len(kernels) == 6
    for name, func in kernels.items():  # rows x channel blocks in parallel, the epilogue fused per 8 pixels
        assert func.attrs["tirx.is_scheduled"] and "T.parallel" in func.script(), name


HASWELL = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})  # AVX2: 8 fp32 lanes per ymm register
SKYLAKE_AVX512 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})


def test_without_avx512_the_16_channels_are_two_explicit_vectors(zoo_relax):
    """On AVX2 the 16 output channels of a block are split into 2 vectors of 8 (left to LLVM, half the block was
    rebuilt with shuffles every step); with AVX-512 they stay one 16-lane block. The AVX2 build runs on any x86
    host with AVX2 and matches ONNX Runtime."""
    onnx_model, mod = zoo_relax("convnet_small")
    graph, _ = run_pipeline(mod, parse_text(PACKED + ",fuse"), HASWELL)
    for target, split in ((HASWELL, True), (SKYLAKE_AVX512, False)):
        kernels = [f.script() for name, f in primfuncs(build_lowered(graph, target).lowered).items()
                   if FP32.name in name]
        assert len(kernels) == 6
        for text in kernels:
            assert ("T.vectorized(T.int64(8))" in text and "T.unroll(T.int64(2))" in text) == split
    if "avx2" not in cpu_features(make_target(TargetConfig())):
        pytest.skip("this CPU has no AVX2 to run the haswell build")
    inputs = eval_inputs(zoo.default_inputs("convnet_small"))
    built = build_lowered(graph, HASWELL)
    for got, want in zip(tvm_runner("avx2", built, inputs, HASWELL).infer(),
                         ort_runner("ort_none", onnx_model, inputs).infer()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_tuning_a_packed_kernel_measures_the_fixed_schedule_first(zoo_relax, llvm, tmp_path):
    graph, _ = run_pipeline(zoo_relax("convnet_small")[1], parse_text(PACKED + ",fuse"), llvm)
    tasks = [t for t in extract_tasks(tuning_module(graph, llvm), llvm) if FP32.name in t.task_name][:1]
    config = TuningConfig(trials=1, trials_per_task=1, trials_per_iter=1, cost_model="random")
    (result,) = tune_tasks(tasks, llvm, config, tmp_path / "db", tmp_path / "logs")
    assert result.trials_run == 1 and result.best_us is not None  # one trial: the fixed schedule, measured
    database = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    (record,) = database.get_all_tuning_records()
    replayed = tvm.s_tir.Schedule(tasks[0].dispatched[0])
    record.trace.apply_to_schedule(replayed, remove_postproc=False)
    tvm.ir.assert_structural_equal(replayed.mod, default_schedule(tasks[0].dispatched[0]["main"], llvm).mod)
    tuned = build_lowered(graph, llvm, database)
    assert tasks[0].task_name in tuned.tuning["covered"]
    inputs = eval_inputs(zoo.default_inputs("convnet_small"))
    for got, want in zip(tvm_runner("tuned", tuned, inputs, llvm).infer(), infer(graph, inputs, llvm)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, out_channels, kernel, unrolled", [
    ((1, 19, 19, 64), 64, (3, 3), "T.unroll(T.int64(8))"),  # 17 pixels a row (prime): 8 a step, the last cut short
    ((1, 26, 26, 64), 32, (1, 1), "T.unroll(T.int64(13))"),  # 26: 13 a step, no predicate
    ((1, 38, 38, 64), 32, (1, 1), "T.unroll(T.int64(2))"),  # 38 = 2 x 19: 2 a step (no cut), two channel blocks
    ((1, 1, 512, 64), 32, (1, 5), "T.unroll(T.int64(2))"),  # 508 pixels: 4 a step (no cut), two channel blocks
    ((1, 1, 76, 64), 42, (1, 1), "T.unroll(T.int64(3))"),  # 76 = 4 x 19: 4 a step, all three channel blocks
])
def test_short_pixel_steps_are_avoided(shape, out_channels, kernel, unrolled):
    """The fixed schedule keeps 8 to 14 sums (AVX-512) in flight without a predicate where the row's width has a
    divisor there (a cut-short step over several full ones ran a 1x1 conv at a quarter of the speed); otherwise a
    width with a small divisor takes as many channel blocks a step as fill 14 sums, and only a prime width takes 8
    pixels a step with the last one cut short. The 16 channels are vectorized explicitly: left to LLVM, three
    blocks a step ran scalar (PicoDet's 1x1 head conv 1.9 -> 0.44 ms). A conv with no epilogue accumulates in a buffer of its own (in the output parameter LLVM
    kept the sums in memory: Magika's conv 3x slower); the results stay numpy's."""
    from tvm import relax

    from workbench.kernels.packed_conv import emit_conv2d
    from workbench.kernels.packed_schedule import packed_schedule

    rng = np.random.default_rng(5)
    w = rng.standard_normal((out_channels, *kernel, shape[3])).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(emit_conv2d(bb, FP32, x, w, (1, 1), (0, 0, 0, 0), (1, 1))))
        bb.emit_func_output(out)
    (kernel_func,) = [f for f in bb.get().functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled = packed_schedule(kernel_func, FP32, SKYLAKE_AVX512).mod["main"].script()
    assert unrolled in scheduled
    update = scheduled[scheduled.index("for rh, rw"):scheduled.index('T.sblock("conv_update")')]
    assert "T.vectorized(T.int64(16))" in update
    assert 'T.sblock("conv_global")' in scheduled  # no epilogue: the sums get a write-back block, not the output
    host = make_target(TargetConfig())
    data = rng.standard_normal(shape).astype("float32")
    got = tvm_runner("t", build_lowered(bb.get(), host), {"x": data}, host).infer()[0]
    windows = np.lib.stride_tricks.sliding_window_view(data, kernel, axis=(1, 2))  # [1, OH, OW, C, KH, KW]
    np.testing.assert_allclose(got, np.einsum("nhwcij,oijc->nhwo", windows, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("out_channels, width", [(24, 8), (20, 4), (32, 16)])
def test_an_epilogue_past_the_real_channels_stays_vectorized(llvm, out_channels, width):
    """24 output channels pad to two blocks of 16; the last block's lanes past 24 are cut by a predicate, under which
    LLVM computed the SiLU lane by lane (2.3 of a 12->24 conv's 3.7 ms at 208x208). The epilogue runs in vectors
    of gcd(channels, 16) lanes, whole vectors in or out; the outputs stay ONNX Runtime's."""
    from onnx import TensorProto, helper, numpy_helper

    from workbench.models.canonicalize import InputSpec, canonicalize
    from workbench.models.importer import import_to_relax

    rng = np.random.default_rng(7)
    weight = numpy_helper.from_array((rng.standard_normal((out_channels, 12, 3, 3)) * 0.1).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    graph = helper.make_graph(nodes, "silu_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_channels, 9, 9])], [weight])
    model = canonicalize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                         {"x": InputSpec((1, 12, 9, 9))}).model
    fused, _ = run_pipeline(import_to_relax(model), parse_text(f"{PACKED},fuse"), llvm)
    (kernel,) = [f for gv, f in fused.functions.items() if gv.name_hint.startswith(f"fused_{FP32.name}")]
    scheduled = default_schedule(kernel, SKYLAKE_AVX512).mod["main"].script()
    epilogue = scheduled[scheduled.index('T.sblock("conv_update")'):]
    assert f"T.vectorized(T.int64({width}))" in epilogue
    assert width == 16 or "T.vectorized(T.int64(16))" not in epilogue
    inputs = {"x": rng.uniform(-1, 1, (1, 12, 9, 9)).astype("float32")}
    np.testing.assert_allclose(infer(fused, inputs, llvm)[0], ort_runner("ort_none", model, inputs).infer()[0],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind, shape, out_channels, kernel, strides, padding, tasks", [
    (FP32, (1, 9, 11, 17), 7, (3, 3), (1, 1), (1, 2, 0, 1), 8),  # asymmetric padding, odd everything: 8 rows
    (FP32, (1, 10, 10, 16), 40, (3, 3), (2, 2), (1, 1, 1, 1), 15),  # strided: 5 rows x 3 blocks
    (FP32, (1, 20, 9, 16), 40, (3, 3), (1, 1), (1, 1, 1, 1), 20),  # 20 rows: a task a row, one copy for 3 blocks
    (FP32, (1, 12, 13, 3), 20, (5, 5), (2, 2), (2, 2, 2, 2), 12),  # 3 channels: a pad op before, 6 rows x 2 blocks
    (DEPTHWISE_FP32, (1, 9, 13, 20), 20, (5, 5), (1, 1), (2, 2, 2, 2), 18),  # channels filled up to 32: 9 rows x 2
    (DEPTHWISE_FP32, (1, 24, 13, 40), 40, (3, 3), (1, 1), (1, 1, 1, 1), 18),  # 4 rows a task: 6 x 3 blocks
])
def test_padding_is_a_stage_of_the_kernel(kind, shape, out_channels, kernel, strides, padding, tasks):
    """The conv's padding (and a depthwise conv's channels filled up to 16 lanes) is a stage of the packed kernel,
    computed per parallel task: as a kernel of its own it wrote a whole padded copy of the activation for the conv
    to read back (PP-OCR's classifier 0.41 -> 0.34 ms without). A depthwise task computes up to 4 output rows, so
    the rows it copies serve several, where that leaves 16 tasks. Data of fewer channels than a vector (the first
    conv, on pixels) is padded by a pad op before the kernel: inside, each task would copy it channel by channel.
    The outputs stay numpy's."""
    from tvm import relax

    from workbench.kernels.packed_conv import emit_conv2d
    from workbench.kernels.packed_schedule import packed_schedule

    rng = np.random.default_rng(3)
    channels = shape[3]
    w = rng.standard_normal((out_channels, *kernel, 1 if kind.depthwise else channels)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(emit_conv2d(bb, kind, x, w, strides, padding, (1, 1))))
        bb.emit_func_output(out)
    inside = kind.depthwise or shape[3] >= 16
    assert len(calls(bb.get(), "relax.nn.pad")) == (0 if inside else 1)
    (kernel_func,) = [f for f in bb.get().functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    host = make_target(TargetConfig())
    scheduled = packed_schedule(kernel_func, kind, host).mod["main"].script()
    if inside:
        assert scheduled.index("T.parallel") < scheduled.index('T.sblock("pad")') < scheduled.index('T.sblock("conv')
    else:
        assert 'T.sblock("pad")' not in scheduled
    assert f"T.parallel(T.int64({tasks})" in scheduled
    data = rng.standard_normal(shape).astype("float32")
    got = tvm_runner("t", build_lowered(bb.get(), host), {"x": data}, host).infer()[0]
    top, left, bottom, right = padding
    padded = np.pad(data, [(0, 0), (top, bottom), (left, right), (0, 0)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=(1, 2))[:, ::strides[0], ::strides[1]]
    want = (np.einsum("nhwcij,cij->nhwc", windows, w[..., 0]) if kind.depthwise
            else np.einsum("nhwcij,oijc->nhwo", windows, w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
