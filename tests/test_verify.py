"""Tuned schedules are checked against the kernel's untuned outputs (compile/verify.py): a best record that
computes wrong outputs is dropped from the database and the next best checked.

The wrong schedule here is the kind MetaSchedule committed as det's best: a packed conv with 24 of its 32
channels sliced off before the epilogue, the epilogue computed at the outer tile of the 16 channels of a block
while the two blocks are the innermost loop (TVM covers the two non-adjacent 8-channel pieces with one range
and computes 8 channels before the conv wrote them).

Inputs are drawn where the kernel's ops are defined: the `mean, add, sqrt, divide` kernel of a layer norm written
out in elementwise ops (as older exporters leave it) takes the sqrt of the mean of its first input, and drawn from
[-1, 1) that input made both schedules compute NaN, so every tuned record of the kernel was dropped."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from workbench.compile.build import legalized
from workbench.compile.databases import RECORDS_FILE
from workbench.compile.targets import make_target
from workbench.compile.tasks import extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.compile.verify import (
    agrees,
    positive_params,
    random_args,
    reject_wrong_best,
    run_kernel,
    untuned_reference,
)
from workbench.config import TargetConfig, TuningConfig
from workbench.config.pipeline_spec import parse_text
from workbench.kernels.default_schedule import default_schedule
from workbench.passes.pipeline import run_pipeline

HOST = make_target(TargetConfig())


@pytest.fixture(scope="module")
def sliced_conv() -> tvm.IRModule:
    """The fused kernel of an NHWC 3x3 conv to 24 channels (packed to 32) + bias + relu, as a tuning task's mod."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 8, 8, 8], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            weight = relax.const(rng.normal(size=(24, 3, 3, 8)).astype("float32"))
            conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI"))
            bias = relax.const(rng.normal(size=(24,)).astype("float32"))
            out = bb.emit_output(relax.op.nn.relu(relax.op.add(conv, bias)))
        bb.emit_func_output(out)
    graph, _ = run_pipeline(bb.get(), parse_text("pack_conv2d,fuse"), HOST, stats=False)
    (func,) = [f for gv, f in legalized(graph, HOST).functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and "strided_slice" in gv.name_hint]
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


@pytest.fixture(scope="module")
def layer_norm_graph() -> tvm.IRModule:
    """A layer norm over the last axis in elementwise ops, fused: (x - mean) / sqrt(mean((x - mean)^2) + eps) *
    scale + bias."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 32, 64], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            centered = bb.emit(relax.op.subtract(x, relax.op.mean(x, axis=[-1], keepdims=True)))
            variance = bb.emit(relax.op.mean(relax.op.power(centered, relax.const(2.0)), axis=[-1], keepdims=True))
            std = bb.emit(relax.op.sqrt(relax.op.add(variance, relax.const(1e-5))))
            scale = relax.const(rng.uniform(0.5, 1.5, 64).astype("float32"))
            bias = relax.const(rng.normal(0.0, 0.1, 64).astype("float32"))
            out = bb.emit_output(relax.op.add(relax.op.multiply(relax.op.divide(centered, std), scale), bias))
        bb.emit_func_output(out)
    graph, _ = run_pipeline(bb.get(), parse_text("fuse"), HOST, stats=False)
    return graph


@pytest.fixture(scope="module")
def layer_norm_sqrt(layer_norm_graph) -> tvm.IRModule:
    """Its kernel that reads the variance's squares, means them, adds eps, takes the sqrt and divides by it."""
    (func,) = [f for gv, f in legalized(layer_norm_graph, HOST).functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and "sqrt_divide" in gv.name_hint]
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def epilogue_inside_the_channel_tile(mod: tvm.IRModule) -> tvm.s_tir.Schedule:
    sch = tvm.s_tir.Schedule(mod)
    conv, *elementwise, last = sch.get_child_blocks(sch.get_sblock("root"))
    for block in elementwise:
        sch.compute_inline(block)
    batch, row, col, blocks, channel, *reduction = sch.get_loops(conv)
    col_tiles = sch.split(col, [2, 4])
    blocks_inner = sch.split(blocks, [1, 2])[1]
    channel_outer, channel_inner = sch.split(channel, [2, 8])
    sch.reorder(batch, row, col_tiles[0], channel_outer, *reduction, col_tiles[1], blocks_inner, channel_inner)
    sch.reverse_compute_at(last, channel_outer)
    return sch


def test_a_wrong_best_record_is_dropped_and_the_next_best_kept(sliced_conv, tmp_path):
    func = sliced_conv["main"]
    wrong, default = epilogue_inside_the_channel_tile(sliced_conv), default_schedule(func, HOST)
    args = random_args(func)
    want = run_kernel(default.mod, HOST, args)
    assert not agrees(run_kernel(wrong.mod, HOST, args), want)  # TVM's bug, still there in 0.27

    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    workload = database.commit_workload(sliced_conv)
    for schedule, seconds in ((default, 1e-3), (wrong, 1e-4)):  # the wrong one measured faster: the best
        database.commit_tuning_record(ms.database.TuningRecord(
            schedule.trace, workload, [seconds], HOST, ms.arg_info.ArgInfo.from_prim_func(func)))
    task = ms.ExtractedTask("sliced_conv", sliced_conv, HOST, [sliced_conv], 1)

    database, dropped = reject_wrong_best(task, HOST, database, tmp_path, untuned_reference(sliced_conv, HOST))
    assert dropped == 1 and len((tmp_path / RECORDS_FILE).read_text().splitlines()) == 1
    (best,) = database.get_top_k(database.commit_workload(sliced_conv), 1)
    assert float(best.run_secs[0]) == pytest.approx(1e-3)
    kept = tvm.s_tir.Schedule(sliced_conv)
    best.trace.apply_to_schedule(kept, remove_postproc=False)
    np.testing.assert_allclose(run_kernel(kept.mod, HOST, args)[-1], want[-1], rtol=1e-5, atol=1e-5)


def uniform_args(func: tvm.tirx.PrimFunc) -> list[np.ndarray]:
    """What `random_args` drew before it knew domains: every float buffer in [-1, 1)."""
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, [int(d) for d in info.shape]).astype(str(info.dtype))
            for info in ms.arg_info.ArgInfo.from_prim_func(func)]


def test_the_layer_norm_sqrt_computes_numbers_on_the_drawn_inputs_but_nan_on_uniform_ones(layer_norm_sqrt):
    func = layer_norm_sqrt["main"]
    squares, centered = 0, 1  # the kernel's inputs: (x - mean)^2, whose mean is the variance, and x - mean
    assert positive_params(func) == {squares}  # the numerator keeps both signs
    default = default_schedule(func, HOST).mod
    before = run_kernel(default, HOST, uniform_args(func))[-1]
    assert np.isnan(before).any()  # a negative mean of the "squares": sqrt of it is NaN
    args = random_args(func)
    assert args[squares].min() > 0 and args[centered].min() < 0
    assert np.isfinite(run_kernel(default, HOST, args)[-1]).all()


def test_nan_and_inf_agree_only_where_the_untuned_kernel_computes_them_too():
    want = np.array([1.0, np.nan, np.inf, -2.0], dtype=np.float32)
    assert agrees([want.copy()], [want])
    assert not agrees([np.array([1.0, 0.0, np.inf, -2.0], dtype=np.float32)], [want])  # a number for its NaN
    assert not agrees([np.array([np.nan, np.nan, np.inf, -2.0], dtype=np.float32)], [want])  # NaN for a number
    assert not agrees([np.array([1.0, np.nan, np.inf, 5.0], dtype=np.float32)], [want])  # inf widens no tolerance


@pytest.mark.slow
def test_tuning_a_layer_norm_sqrt_kernel_keeps_its_records(layer_norm_graph, tmp_path):
    """The issue: each round its best schedule was called wrong and dropped, until the space was used up."""
    tasks = [t for t in extract_tasks(tuning_module(layer_norm_graph, HOST), HOST) if "sqrt_divide" in t.task_name]
    config = TuningConfig(trials=4, trials_per_task=4, trials_per_iter=2, cost_model="random")
    (result,) = tune_tasks(tasks, HOST, config, tmp_path / "db", tmp_path / "logs")
    assert result.trials_run == 4 and result.rejected == 0 and result.best_us is not None
    assert len((tmp_path / "db" / RECORDS_FILE).read_text().splitlines()) == 4
