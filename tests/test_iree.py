"""The `iree` baseline: IREE compiles the canonical ONNX, runs it in-process, matches the reference, counts
dispatches."""

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from workbench.config import validate
from workbench.errors import BaselineUnavailable
from workbench.experiment import run_experiment
from workbench.measure.iree import INSTALL_HINT, compile_onnx, iree_runner, short_reason


def _has_iree() -> bool:
    try:
        import iree.compiler  # noqa: F401
        import iree.runtime  # noqa: F401
    except ImportError:
        return False
    return True


iree_installed = pytest.mark.skipif(not _has_iree(), reason=f"IREE is an optional extra: {INSTALL_HINT}")


def _seeded_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _ort_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def _one_node_chain(ops: list[str], path: Path) -> Path:
    """x -> ops[0] -> ops[1] -> ... -> y on a [1, 4, 8, 8] tensor, saved as an ONNX file."""
    nodes, current = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        attrs = {"kernel_shape": [2, 2], "p": 3} if op == "LpPool" else {}
        nodes.append(helper.make_node(op, [current] * (2 if op in ("Add", "Mul") else 1), [out], **attrs))
        current = out
    out_shape = [1, 4, 7, 7] if "LpPool" in ops else [1, 4, 8, 8]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def _run(tmp_path: Path, source: Path, baselines: list[str]) -> dict:
    experiment = validate({"name": "iree_case", "model": {"source": str(source)}, "baselines": baselines,
                           "measure": {"warmup": 1, "repeat": 3}, "output": str(tmp_path / "run")}, "test")
    return run_experiment(experiment, tmp_path).to_json()


@iree_installed
@pytest.mark.slow
@pytest.mark.parametrize("name", ["convnet_small", "transformer_block"])
def test_iree_matches_reference_and_keeps_artifacts(zoo_relax, tmp_path, name):
    model, _ = zoo_relax(name)
    inputs = _seeded_inputs(model)
    runner = iree_runner(model, inputs, tmp_path, "llvm")
    produced, reference = runner.infer(), _ort_reference(model, inputs)
    assert len(produced) == len(reference)
    for got, want in zip(produced, reference):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    assert runner.infer()[0].tobytes() == produced[0].tobytes()  # the runner can be called again (timing loop)
    assert runner.kernels == len(list((tmp_path / "iree_executables").glob("*.mlir"))) > 0
    assert "torch.operator" in (tmp_path / "iree.mlir").read_text()  # IREE's own importer wrote it
    import iree.runtime as rt
    kept = rt.VmModule.copy_buffer(rt.VmInstance(), (tmp_path / "iree.vmfb").read_bytes())  # the file loads back
    assert name in kept.function_names


@iree_installed
def test_dispatch_count_shows_fusion(tmp_path):
    """Three elementwise ops: IREE fuses them into one dispatch; unfused TVM would launch three kernels."""
    model = onnx.load(_one_node_chain(["Relu", "Add", "Mul"], tmp_path / "chain.onnx"))
    assert compile_onnx(model, tmp_path / "fused", "llvm").dispatches == 1
    assert compile_onnx(onnx.load(_one_node_chain(["Relu"], tmp_path / "one.onnx")), tmp_path / "one", "llvm"
                        ).dispatches == 1


@iree_installed
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])  # sm_90: target written into the module; sm_80: IREE's flag
def test_cuda_build_compiles_without_gpu(zoo_relax, tmp_path, arch):
    model, _ = zoo_relax("convnet_small")
    built = compile_onnx(model, tmp_path, "cuda", arch)
    assert built.driver == "cuda" and built.dispatches > 0
    assert f".target {arch}".encode() in built.vmfb  # the embedded PTX is for the configured chip
    sources = "".join(p.read_text() for p in (tmp_path / "iree_executables").glob("*.mlir"))
    assert f'arch = "{arch}"' in sources


@iree_installed
def test_old_opset_model_is_upgraded_for_iree(tmp_path):
    """BatchNormalization-9 (opset 12, as in rapidocr's det model) is refused by IREE unless upgraded first."""
    rng = np.random.default_rng(1)
    stats = [helper.make_tensor(n, TensorProto.FLOAT, [4], rng.uniform(0.5, 1.5, 4).tolist())
             for n in ("scale", "bias", "mean", "var")]
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-5)
    graph = helper.make_graph([node], "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], stats)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=7)
    inputs = _seeded_inputs(model)
    produced = iree_runner(model, inputs, tmp_path, "llvm").infer()
    np.testing.assert_allclose(produced[0], _ort_reference(model, inputs)[0], rtol=1e-3, atol=1e-4)


@iree_installed
def test_cuda_without_arch_is_reported(zoo_relax, tmp_path):
    model, _ = zoo_relax("convnet_small")
    with pytest.raises(BaselineUnavailable, match="needs its arch"):
        compile_onnx(model, tmp_path, "cuda", None)


@iree_installed
@pytest.mark.slow
def test_model_iree_cannot_lower_is_reported_and_run_completes(tmp_path):
    result = _run(tmp_path, _one_node_chain(["LpPool"], tmp_path / "lppool.onnx"), ["ort_none", "iree"])
    assert result["status"] == "complete"
    assert result["measurements"]["iree"]["note"].startswith("not available: IREE cannot lower ONNX op LpPool")
    assert result["kernels"]["iree"] is None and result["accuracy"]["workbench"]["ok"]
    assert result["measurements"]["workbench"]["median_ms"] > 0


@pytest.mark.slow
def test_missing_iree_package_is_reported_and_run_completes(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "iree.runtime", None)  # what an install without the extra looks like
    result = _run(tmp_path, _one_node_chain(["Relu"], tmp_path / "relu.onnx"), ["ort_none", "iree"])
    assert result["status"] == "complete"
    assert result["measurements"]["iree"]["note"] == f"not available: {INSTALL_HINT}"
    assert result["measurements"]["ort_none"]["median_ms"] > 0


@iree_installed
@pytest.mark.slow
def test_iree_in_a_run_is_measured_checked_and_counted(tmp_path):
    result = _run(tmp_path, _one_node_chain(["Relu", "Add", "Mul"], tmp_path / "chain.onnx"),
                  ["ort_none", "tvm_unoptimized", "iree"])
    assert result["measurements"]["iree"]["median_ms"] > 0 and result["measurements"]["iree"]["repeats"] == 3
    assert result["accuracy"]["iree"]["ok"]
    assert result["kernels"]["iree"] == 1 < result["kernels"]["tvm_unoptimized"]
    assert (tmp_path / "run" / "iree.vmfb").is_file() and (tmp_path / "run" / "iree.mlir").is_file()
    assert result["provenance"]["iree"].startswith("3.")


def test_short_reason_is_the_first_error_line():
    diagnostics = ("Error invoking IREE compiler tool iree-compile\nError code: 1\nDiagnostics:\n"
                   "<stdin>:4:10: error: failed to legalize operation 'torch.operator' that was explicitly marked "
                   "illegal: %1 = \"torch.operator\"(%arg0) <{name = \"onnx.LpPool\"}> {...}\n"
                   "<stdin>:2:3: error: other")
    assert short_reason(diagnostics) == ("IREE cannot lower ONNX op LpPool (failed to legalize operation "
                                         "'torch.operator' that was explicitly marked illegal)")
    assert short_reason("Error invoking IREE compiler tool iree-compile\nError code: -11\nDiagnostics:\nStack dump:") \
        == "iree-compile crashed (exit code -11)"
