"""Tuned schedules are checked against the kernel's untuned outputs (compile/verify.py): a best record that
computes wrong outputs is dropped from the database and the next best checked.

The wrong schedule here is the kind MetaSchedule committed as det's best: a packed conv with 24 of its 32
channels sliced off before the epilogue, the epilogue computed at the outer tile of the 16 channels of a block
while the two blocks are the innermost loop (TVM covers the two non-adjacent 8-channel pieces with one range
and computes 8 channels before the conv wrote them)."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from workbench.compile.build import legalized
from workbench.compile.databases import RECORDS_FILE
from workbench.compile.default_schedule import default_schedule
from workbench.compile.targets import make_target
from workbench.compile.verify import agrees, random_args, reject_wrong_best, run_kernel, untuned_reference
from workbench.config import TargetConfig
from workbench.passes.pipeline import run_pipeline
from workbench.passes.pipeline_spec import parse_text

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


def test_nan_and_inf_agree_only_where_the_untuned_kernel_computes_them_too():
    want = np.array([1.0, np.nan, np.inf, -2.0], dtype=np.float32)
    assert agrees([want.copy()], [want])
    assert not agrees([np.array([1.0, 0.0, np.inf, -2.0], dtype=np.float32)], [want])  # a number for its NaN
    assert not agrees([np.array([np.nan, np.nan, np.inf, -2.0], dtype=np.float32)], [want])  # NaN for a number
    assert not agrees([np.array([1.0, np.nan, np.inf, 5.0], dtype=np.float32)], [want])  # inf widens no tolerance
