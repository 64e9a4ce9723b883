"""Row reductions (kernels/row_schedule.py: softmax, layer norm) and reductions that read several inputs
(kernels/loop_schedule.py): the schedule they get, counted in their loops and blocks, and outputs against numpy."""

import numpy as np
import pytest
from test_default_schedule import HOST, kernels, loops_and_blocks, module, run_built
from tvm import relax
from tvm.target.codegen import llvm_get_vector_width

from workbench.config.pipeline_spec import parse_text
from workbench.kernels.default_schedule import default_schedule
from workbench.kernels.loop_schedule import loop_schedule
from workbench.kernels.row_schedule import row_schedule
from workbench.passes.pipeline import run_pipeline


def softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def fast(mod):
    return run_pipeline(mod, parse_text("fast_math"), HOST, stats=False)[0]


@pytest.mark.parametrize("approximate", [False, True])
def test_softmax_rows_run_in_parallel_with_lane_partial_sums(approximate):
    """Both reductions (max, sum) split into one partial per vector lane (rfactor: a `_rf` block each, its lane loop
    vectorized), every block under one parallel row loop; exact exp or fast_math's."""
    mod = module((2, 4, 64, 128), lambda x: relax.op.nn.softmax(x, axis=-1))
    if approximate:
        mod = run_pipeline(fast(mod), parse_text("fuse"), HOST, stats=False)[0]
    (func,) = kernels(mod, HOST)
    sch = row_schedule(func, HOST)
    assert sch is not None and default_schedule(func, HOST) is not None
    kinds, blocks = loops_and_blocks(sch.mod["main"])
    assert kinds[0] == "PARALLEL" and sum(name.endswith("_rf") for name in blocks) == 2
    assert sch.mod["main"].script().count("T.parallel") == 1 and "VECTORIZED" in kinds
    rf = sch.mod["main"].script().split("_rf\"")[0]  # the first partials block's loops are vectorized
    assert "T.vectorized" in rf
    data = np.random.default_rng(0).normal(size=(2, 4, 64, 128)).astype("float32") * 4
    np.testing.assert_allclose(run_built(mod, HOST, data), softmax_ref(data), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("row, partial", [(40, True), (18385, True), (14, False)])
def test_a_row_not_a_multiple_of_the_lanes_takes_partials_by_its_largest_divisor(row, partial):
    """A row of 40 sums in 10 partials (8 with 8 lanes), PP-OCRv5 rec's 18385 classes in 5 (no predicate: TVM 0.27
    summed a cut-short step wrongly); a row of 14 (its divisor 7 leaves under two steps) keeps scalar sums; all
    parallel over rows."""
    lanes = max(llvm_get_vector_width(HOST), 128) // 32
    width = max(f for f in range(1, lanes + 1) if row % f == 0) if partial else None
    rows = 8 if row > 1000 else 2048
    mod = module((rows, row), lambda x: relax.op.nn.softmax(x, axis=-1))
    (func,) = kernels(mod, HOST)
    sch = row_schedule(func, HOST)
    kinds, blocks = loops_and_blocks(sch.mod["main"])
    assert sum(name.endswith("_rf") for name in blocks) == (2 if width else 0) and kinds[0] == "PARALLEL"
    if width:
        assert f"T.vectorized(T.int64({width}))" in sch.mod["main"].script()
    data = np.random.default_rng(1).normal(size=(rows, row)).astype("float32")
    np.testing.assert_allclose(run_built(mod, HOST, data), softmax_ref(data), rtol=1e-5, atol=1e-6)


def test_layer_norm_gets_the_row_schedule():
    rng = np.random.default_rng(2)
    gamma, beta = (rng.normal(size=256).astype("float32") for _ in range(2))
    mod = module((1, 96, 256), lambda x: relax.op.nn.layer_norm(x, relax.const(gamma), relax.const(beta), axes=[-1]))
    (func,) = kernels(mod, HOST)
    _, blocks = loops_and_blocks(row_schedule(func, HOST).mod["main"])
    assert sum(name.endswith("_rf") for name in blocks) >= 1
    data = rng.normal(size=(1, 96, 256)).astype("float32")
    mean, var = data.mean(-1, keepdims=True), data.var(-1, keepdims=True)
    np.testing.assert_allclose(run_built(mod, HOST, data), (data - mean) / np.sqrt(var + 1e-5) * gamma + beta,
                               rtol=1e-4, atol=1e-4)


def test_reductions_across_rows_are_not_row_schedules():
    """An NHWC mean over H and W (the channels are the contiguous axis) is loop_schedule.py's."""
    mod = module((1, 20, 20, 32), lambda x: relax.op.nn.softmax(relax.op.mean(x, axis=[1, 2]), axis=-1))
    for func in kernels(mod, HOST):
        if "mean" in str(func.script()):
            assert row_schedule(func, HOST) is None


def test_a_reduction_reading_its_input_and_a_bias_walks_the_rows_contiguously():
    """Magika's GELU then global max pool, fused: after inlining the reduction reads the conv's output and the
    bias; the channel axis (the contiguous one) is vectorized inside the reduction over rows, not strided."""
    rng = np.random.default_rng(3)
    bias = rng.normal(size=(1, 1, 64)).astype("float32")
    mod = module((1, 120, 64), lambda x: relax.op.max(relax.op.nn.gelu(relax.op.add(x, relax.const(bias))), axis=[1]))
    (func,) = kernels(mod, HOST)
    sch = loop_schedule(func, HOST)
    kinds, blocks = loops_and_blocks(sch.mod["main"])
    assert len(blocks) == 1 and kinds[-1] == "VECTORIZED"
    data = rng.normal(size=(1, 120, 64)).astype("float32")
    z = data + bias
    gelu = 0.5 * z * (1 + np.vectorize(__import__("math").erf)(z / np.sqrt(2)))
    np.testing.assert_allclose(run_built(mod, HOST, data), gelu.max(axis=1), rtol=1e-5, atol=1e-5)
