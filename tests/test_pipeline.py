"""The instrumented pipeline: real IR changes counted per pass, and builds that stay numerically equal."""

import numpy as np
import pytest

from workbench.compile.build import build_lowered, build_tvm_default
from workbench.config.pipeline_spec import parse_text
from workbench.errors import UserError
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.passes.figures import count_ops
from workbench.passes.pipeline import run_pipeline


def inputs_for(model, seed=0):
    rng = np.random.default_rng(seed)
    value = model.graph.input[0]
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    return {value.name: rng.uniform(0, 1, shape).astype(np.float32)}


def test_records_time_and_op_counts_per_pass(zoo_relax, llvm):
    _, mod = zoo_relax("convnet_small")
    optimized, records = run_pipeline(mod, parse_text("fold_constant,fold_batchnorm,fuse,dce"), llvm)
    assert [r.name for r in records] == ["fold_constant", "fold_batchnorm", "fuse", "dce"]
    assert all(r.seconds > 0 for r in records)
    imported_ops = count_ops(mod)
    assert records[0].ops_before == imported_ops and imported_ops["relax.nn.batch_norm"] >= 4
    bn = records[1]
    assert "relax.nn.batch_norm" not in bn.ops_after and bn.ops_after["relax.nn.conv2d"] == imported_ops["relax.nn.conv2d"]
    fused = records[2]
    assert set(fused.ops_after) == {"relax.call_tir"} and records[3].ops_after == count_ops(optimized)
    # each pass starts where the previous one ended
    for before, after in zip(records, records[1:]):
        assert before.ops_after == after.ops_before


def test_fuse_reduces_kernels_against_unoptimized_and_keeps_numerics(zoo_relax, llvm):
    model, mod = zoo_relax("convnet_small")
    inputs = inputs_for(model)
    optimized, _ = run_pipeline(mod, parse_text("fold_constant,fuse"), llvm)
    fused, unoptimized, default = build_lowered(optimized, llvm), build_lowered(mod, llvm), build_tvm_default(mod, llvm)
    assert fused.kernels < unoptimized.kernels, (fused.kernels, unoptimized.kernels)
    assert default.kernels < unoptimized.kernels
    reference = ort_runner("ort_none", model, inputs).infer()[0]
    for built in (fused, unoptimized, default):
        out = tvm_runner("t", built, inputs, llvm).infer()[0]
        np.testing.assert_allclose(out, reference, atol=1e-4, rtol=1e-4)


def test_dump_ir_writes_one_file_per_pass(zoo_relax, llvm, tmp_path):
    _, mod = zoo_relax("mobilenet_block")
    run_pipeline(mod, parse_text("fold_constant,fuse"), llvm, dump_dir=tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["00_imported.py", "01_fold_constant.py", "02_fuse.py"]
    assert "R.nn.conv2d" in (tmp_path / "00_imported.py").read_text()
    assert "R.nn.conv2d" not in (tmp_path / "02_fuse.py").read_text()


@pytest.mark.parametrize("text, fragment", [("fold_constnt", "did you mean 'fold_constant'"),
                                            ("fuse(opt_level=9)", "bad parameters for pass 'fuse'"),
                                            ("dce(x=1)", "bad parameters for pass 'dce'")])
def test_unknown_pass_and_bad_params_are_user_errors(zoo_relax, llvm, text, fragment):
    _, mod = zoo_relax("convnet_small")
    with pytest.raises(UserError, match="pipeline\\[0\\]") as info:
        run_pipeline(mod, parse_text(text), llvm)
    assert fragment in str(info.value)
