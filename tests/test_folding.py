"""fold_batchnorm folds its constant arithmetic with numpy: the same IR and the same weight bits as FoldConstant."""

import numpy as np
import pytest
import tvm
from tvm import relax

from workbench.compile.build import build_lowered
from workbench.config.pipeline_spec import parse_text
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.passes.figures import count_ops
from workbench.passes.pipeline import run_pipeline


def constants(mod):
    found = []

    def visit(expr):
        if isinstance(expr, tvm.ir.GenericConst):
            found.append(expr.value.numpy())

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


@pytest.mark.parametrize("zoo", ["convnet_small", "mobilenet_block"])
def test_fold_batchnorm_matches_tvm_fold_constant_bit_for_bit(zoo_relax, llvm, zoo):
    model, mod = zoo_relax(zoo)
    with llvm, tvm.transform.PassContext(opt_level=3):
        expected = tvm.transform.Sequential([relax.transform.FoldBatchnormToConv2D(), relax.transform.FoldConstant()])(mod)
    folded, (record,) = run_pipeline(mod, parse_text("fold_batchnorm"), llvm, stats=False)
    assert "relax.nn.batch_norm" in record.ops_before and "relax.nn.batch_norm" not in record.ops_after
    # only conv2d + bias add + the model's own ops are left: no arithmetic on constants survived
    assert count_ops(folded) == count_ops(expected)
    tvm.ir.assert_structural_equal(folded, expected, map_free_vars=True)
    ours, theirs = constants(folded), constants(expected)
    assert len(ours) == len(theirs) >= 4
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    inputs = {model.graph.input[0].name: np.random.default_rng(0).uniform(0, 1, [
        d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
    reference = ort_runner("ort_none", model, inputs).infer()[0]
    out = tvm_runner("t", build_lowered(folded, llvm), inputs, llvm).infer()[0]
    np.testing.assert_allclose(out, reference, atol=1e-4, rtol=1e-4)
