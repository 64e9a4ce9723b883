"""What a model nobody here prepared meets: passes that apply where they are valid and builds that never end in
TVM's internal errors. Each case reproduces a failure seen on a real model (Magika's classifier, a YOLO-style
detector, rapidocr det) on a small synthetic one, and fails without its fix."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from workbench.compile.build import build_lowered
from workbench.compile.targets import make_target
from workbench.compile.tasks import extract_tasks, tuning_module
from workbench.config import TargetConfig, validate
from workbench.config.pipeline_spec import parse_text
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.models import zoo
from workbench.passes.figures import count_ops
from workbench.passes.pipeline import run_pipeline

NHWC_PACKED = "fold_constant,fold_batchnorm,convert_layout(conv2d=NHWC),fold_constant,pack_conv2d,fuse,dce"


def seeded_inputs(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == 6:  # int32 byte ids
            arrays[value.name] = rng.integers(0, 256, shape).astype(np.int32)
        else:
            arrays[value.name] = rng.uniform(0, 1, shape).astype(np.float32)
    return arrays


def assert_builds_and_matches_ort(model, optimized, target):
    inputs = seeded_inputs(model)
    built = build_lowered(optimized, target)
    want = ort_runner("ort_none", model, inputs).infer()
    for got, expected in zip(tvm_runner("workbench", built, inputs, target).infer(), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    return built


def test_a_jax_layer_norm_converts_to_nhwc_and_matches_ort(zoo_relax, llvm):
    """Magika's layer norm (a two-input Max, which the frontend stacks) stopped TVM's ConvertLayout ("Invalid
    SLayout: can't find S in source layout ABCD") whatever was converted; stacks are now concats."""
    model, mod = zoo_relax("byte_classifier")
    assert count_ops(mod).get("relax.stack", 0) == 1
    optimized, records = run_pipeline(mod, parse_text(NHWC_PACKED), llvm)
    layout = records[2]
    assert "kept_layout" not in layout.analysis and layout.analysis["layout_ops_after"] > 0
    assert count_ops(optimized).get("relax.stack", 0) == 0
    assert_builds_and_matches_ort(model, optimized, llvm)


@pytest.mark.parametrize("mcpu", [None, "haswell"], ids=["host", "avx2"])
def test_a_yolo_block_with_a_one_channel_conv_at_a_prime_width_builds(zoo_relax, mcpu):
    """The objectness conv (1 output channel, 13 pixels wide) had its pixel-step loop vectorized around vectorized
    ones by the packed schedule: TVM failed with "VectorizeLoop before LiftStorageAlloc"."""
    model, mod = zoo_relax("yolo_block")
    target = make_target(TargetConfig(mcpu=mcpu))
    optimized, records = run_pipeline(mod, parse_text(NHWC_PACKED), target)
    assert records[4].analysis["conv2d_packed"] == 8
    built = assert_builds_and_matches_ort(model, optimized, target)
    assert built.fell_back == []


def test_convert_layout_keeps_convs_nchw_where_a_conv_transpose_would_follow(llvm):
    """rapidocr det's conv2d_transpose follows its input into NHWC, which TVM 0.27 cannot lower: the run used to
    stop; now the convs feeding it keep NCHW, the others convert, and the analysis says how many and why."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 8, 9, 9], "float32"))
    rng = np.random.default_rng(0)
    weight = lambda *shape: relax.const(rng.normal(0, 0.3, shape).astype("float32"))  # noqa: E731
    with bb.function("main", [x]):
        with bb.dataflow():
            head = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, weight(8, 8, 3, 3), padding=1))))
            up = bb.emit(relax.op.nn.conv2d_transpose(head, weight(8, 4, 2, 2), strides=2))
            side = bb.emit(relax.op.nn.conv2d(x, weight(4, 8, 1, 1)))
            out = bb.emit_output(relax.op.add(bb.emit(relax.op.nn.max_pool2d(up, 2, 2)), side))
        bb.emit_func_output(out)
    mod = bb.get()
    converted, (record,) = run_pipeline(mod, parse_text("convert_layout(conv2d=NHWC)"), llvm)
    assert record.analysis["converted"] == 1
    (reason,) = record.analysis["kept_layout"]
    assert "conv2d_transpose" in reason and record.analysis["kept_layout"][reason] == 1
    layouts = []
    relax.analysis.post_order_visit(converted["main"].body, lambda e: layouts.append(str(e.attrs.data_layout))
                                    if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)
                                    and e.op.name.startswith("relax.nn.conv2d") else None)
    assert sorted(layouts) == ["NCHW", "NCHW", "NHWC"]
    data = np.random.default_rng(1).uniform(0, 1, (1, 8, 9, 9)).astype("float32")
    outputs = []
    for module in (mod, converted):
        vm = relax.VirtualMachine(tvm.compile(module, target=llvm), tvm.cpu())
        outputs.append(vm["main"](tvm.runtime.tensor(data)).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-5)


def test_a_tuned_schedule_that_fails_to_lower_falls_back_to_plain_loops(zoo_relax, llvm, tmp_path):
    """A database record whose schedule TVM cannot lower (a vectorized loop around a vectorized one: what the
    packed conv's schedule did on the detector) is built with plain loops, and the build names the kernel."""
    model, mod = zoo_relax("convnet_small")
    optimized, _ = run_pipeline(mod, parse_text("fold_constant,fold_batchnorm,fuse,dce"), llvm, stats=False)
    task = next(t for t in extract_tasks(tuning_module(optimized, llvm), llvm) if t.task_name == "max_pool2d")
    func = task.dispatched[0]["main"]
    sch = tvm.s_tir.Schedule(task.dispatched[0])
    _n, _c, row, col, *_window = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[-1])
    sch.vectorize(col)
    sch.vectorize(row)
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, database.commit_workload(task.dispatched[0]), [1e-6], llvm, ms.arg_info.ArgInfo.from_prim_func(func)))
    inputs = seeded_inputs(model)
    built = build_lowered(optimized, llvm, database)
    assert built.fell_back == ["max_pool2d"]
    np.testing.assert_allclose(tvm_runner("workbench", built, inputs, llvm).infer()[0],
                               ort_runner("ort_none", model, inputs).infer()[0], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.NAMES)
def test_every_zoo_model_builds_with_the_default_pipeline_and_matches_ort(zoo_relax, name):
    model, mod = zoo_relax(name)
    target = make_target(TargetConfig())
    specs = validate({"name": "t", "model": {"source": f"zoo:{name}", "inputs": {}}, "pipeline": "default"}, "t").pipeline
    optimized, _ = run_pipeline(mod, specs, target, stats=False)
    assert assert_builds_and_matches_ort(model, optimized, target).fell_back == []
