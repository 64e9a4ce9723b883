"""CUDA targets: builds for sm_90 without a GPU (CUDA source, PTX, static kernel report), fusion's fewer
launches counted, dlight leaving scheduled kernels alone, the cuda_graph pass, and runs that say what
was not measured. The GPU-only tests run where `tvm.cuda().exist` (scripts/gpu_check.sh)."""

import gc
import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from tvm import relax

from workbench.compile.build import build_lowered
from workbench.compile.cuda_report import NVCC_ENV, find_nvcc, kernel_report
from workbench.compile.targets import make_target
from workbench.config import TargetConfig, validate
from workbench.config.pipeline_spec import PassSpec
from workbench.errors import UserError
from workbench.experiment import run_experiment
from workbench.kernels.lowering import schedule_passes
from workbench.models.sources import resolve_source
from workbench.passes.pipeline import run_pipeline

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (CUDA toolkit absent)")
needs_gpu = pytest.mark.skipif(not tvm.cuda(0).exist, reason="no CUDA device on this machine")
DET = "pkg:rapidocr-onnxruntime==1.4.4/rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
FUSED = [PassSpec(name="fold_constant"), PassSpec(name="fuse")]


@pytest.fixture(scope="module")
def sm90():
    if find_nvcc() is None:
        pytest.skip("nvcc not found (CUDA toolkit absent)")
    return make_target(TargetConfig(kind="cuda", arch="sm_90"))


def _reports(mod, target, out_dir: Path) -> tuple[dict, dict]:
    """Static kernel reports of the unoptimized build and the fold_constant,fuse build."""
    fused, _ = run_pipeline(mod, FUSED, target, stats=False)
    return (kernel_report("tvm_unoptimized", build_lowered(mod, target), "sm_90", out_dir),
            kernel_report("workbench", build_lowered(fused, target), "sm_90", out_dir))


def _check_files_and_fusion(unoptimized: dict, fused: dict, out_dir: Path) -> None:
    for report in (unoptimized, fused):
        cu, ptx = (out_dir / report["files"][kind] for kind in ("cu", "ptx"))
        assert "__global__" in cu.read_text()
        assert ptx.read_text().count(".entry") == report["kernels"] > 0
        for kernel in report["per_kernel"].values():
            assert 0 < kernel["threads_per_block"] <= 1024 and kernel["registers"] > 0
    assert fused["launches"] < unoptimized["launches"]
    assert fused["kernels"] < unoptimized["kernels"]
    assert fused["intermediate_bytes"] < unoptimized["intermediate_bytes"]


def test_cuda_target_carries_the_gpu_limits(sm90):
    assert sm90.kind.name == "cuda" and str(sm90.attrs["arch"]) == "sm_90"
    assert int(sm90.attrs["max_shared_memory_per_block"]) == 49152
    assert int(sm90.attrs["max_threads_per_block"]) == 1024 and int(sm90.attrs["registers_per_block"]) == 65536
    assert sm90.host.kind.name == "llvm"


@needs_nvcc
@pytest.mark.parametrize("name", ["convnet_small", "mobilenet_block", "transformer_block"])
def test_zoo_builds_for_sm90_and_fusion_launches_fewer_kernels(name, zoo_relax, sm90, tmp_path):
    _, mod = zoo_relax(name)
    unoptimized, fused = _reports(mod, sm90, tmp_path)
    _check_files_and_fusion(unoptimized, fused, tmp_path)


@needs_nvcc
@pytest.mark.slow
def test_rapidocr_det_builds_for_sm90_and_fusion_launches_fewer_kernels(sm90, tmp_path):
    from workbench.models.canonicalize import InputSpec, canonicalize
    from workbench.models.importer import import_to_relax

    model = canonicalize(resolve_source(DET, Path.cwd(), None), {"x": InputSpec((1, 3, 640, 640))}).model
    started = time.perf_counter()
    unoptimized, fused = _reports(import_to_relax(model), sm90, tmp_path)
    _check_files_and_fusion(unoptimized, fused, tmp_path)
    print(f"det: {time.perf_counter() - started:.0f} s; launches {unoptimized['launches']} -> {fused['launches']}")


@needs_nvcc
def test_dlight_leaves_already_scheduled_kernels_alone(zoo_relax, sm90):
    """A kernel scheduled before the lowering tail (e.g. from a tuned database) keeps its schedule."""
    _, mod = zoo_relax("convnet_small")
    with sm90:
        legalized = relax.transform.LegalizeOps()(mod)
    prims = [gv for gv, f in legalized.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    tuned = prims[0]
    with sm90:  # stand-in for a tuned schedule: dlight's fallback rule alone, marked scheduled
        from tvm.s_tir import dlight as dl

        only = tvm.IRModule({tuned: legalized[tuned]})
        scheduled = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(only)[tuned.name_hint]
    legalized[tuned] = scheduled.with_attr("tirx.is_scheduled", True)
    with sm90:
        out = tvm.transform.Sequential(schedule_passes(sm90))(legalized)
    tvm.ir.assert_structural_equal(out[tuned], legalized[tuned])
    assert all(out[gv].attrs["tirx.is_scheduled"] for gv in prims)


@needs_nvcc
def test_cuda_graph_pass_rewrites_the_build_and_is_refused_on_llvm(zoo_relax, sm90, llvm):
    _, mod = zoo_relax("convnet_small")
    graphed, _ = run_pipeline(mod, [*FUSED, PassSpec(name="cuda_graph")], sm90, stats=False)
    lowered = build_lowered(graphed, sm90).lowered
    assert "vm.builtin.cuda_graph.run_or_capture" in lowered["main"].script()
    plain = build_lowered(run_pipeline(mod, FUSED, sm90, stats=False)[0], sm90).lowered
    assert "cuda_graph" not in plain["main"].script()
    with pytest.raises(UserError, match="cuda_graph.*needs a cuda target"):
        run_pipeline(mod, [PassSpec(name="cuda_graph")], llvm, stats=False)


def test_hidden_nvcc_is_a_user_error_that_says_how_to_fix(monkeypatch, tmp_path):
    monkeypatch.setenv(NVCC_ENV, str(tmp_path / "no-nvcc"))
    assert find_nvcc() is None
    with pytest.raises(UserError, match="install the CUDA toolkit, or point WORKBENCH_NVCC or CUDA_HOME at it"):
        make_target(TargetConfig(kind="cuda", arch="sm_90"))


def _experiment(tmp_path: Path, **changes) -> dict:
    return {"name": "cuda_run", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
            "pipeline": "fold_constant,fuse", "baselines": ["ort_none", "tvm_unoptimized"],
            "measure": {"warmup": 1, "repeat": 3}, "output": str(tmp_path / "run"), **changes}


@needs_nvcc
def test_cuda_run_writes_sources_and_report_and_says_what_was_not_measured(tmp_path):
    experiment = validate(_experiment(tmp_path, target={"kind": "cuda", "arch": "sm_90"}), "test")
    result = run_experiment(experiment, tmp_path).to_json()
    out = tmp_path / "run"
    stored = json.loads((out / "result.json").read_text())
    assert (out / "workbench.so").stat().st_size > 0
    for label in ("workbench", "tvm_unoptimized"):
        assert (out / "cuda" / f"{label}.cu").is_file() and (out / "cuda" / f"{label}.ptx").is_file()
    cuda = stored["cuda"]
    assert cuda["workbench"]["launches"] < cuda["tvm_unoptimized"]["launches"]
    assert stored["measurements"]["ort_none"]["median_ms"] > 0
    assert stored["measurements"]["ort_none"]["note"] == "ONNX Runtime on the CPU"
    has_cuda_ep = "CUDAExecutionProvider" in ort.get_available_providers()
    assert ("not available" in (stored["measurements"]["ort_cuda"]["note"] or "")) != has_cuda_ep
    if not tvm.cuda(0).exist:
        for label in ("workbench", "tvm_unoptimized"):
            assert stored["measurements"][label]["median_ms"] is None
            assert stored["measurements"][label]["note"].startswith("not measured: no CUDA device")
    report = (out / "report.md").read_text()
    assert "## CUDA kernels" in report and "launches / inference" in report
    assert result["status"] == "complete"


def test_rpc_measures_an_llvm_build_remotely_and_matches_the_local_run(rpc_tracker, zoo_relax, llvm, tmp_path):
    """The path a GPU host takes: export, upload, load and time on the remote; numerics match the local run."""
    result = run_experiment(validate(_experiment(tmp_path, measure={
        "warmup": 1, "repeat": 3, "rpc": rpc_tracker.model_dump()}), "test"), tmp_path).to_json()
    for label in ("workbench", "tvm_unoptimized"):
        assert result["measurements"][label]["median_ms"] > 0 and result["measurements"][label]["repeats"] == 3
        assert result["accuracy"][label]["ok"], result["accuracy"][label]

    from workbench.measure.runners import tvm_runner
    from workbench.runtime.rpc import connect

    gc.collect()  # the run's RPC session (its server's only slot) is released when its objects are collected
    _, mod = zoo_relax("convnet_small")  # inputs x: [1, 3, 64, 64]
    built = build_lowered(run_pipeline(mod, FUSED, llvm, stats=False)[0], llvm)
    inputs = {"x": np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype("float32")}
    local = tvm_runner("workbench", built, inputs, llvm).infer()
    remote = tvm_runner("workbench", built, inputs, llvm, connect(rpc_tracker), built.export(tmp_path / "w.so")).infer()
    for got, want in zip(remote, local, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@needs_gpu
def test_gpu_run_measures_every_tvm_label_and_matches_ort(tmp_path):
    arch = "sm_" + tvm.cuda(0).compute_version.replace(".", "")
    experiment = validate(_experiment(tmp_path, target={"kind": "cuda", "arch": arch}), "test")
    result = run_experiment(experiment, tmp_path).to_json()
    for label in ("workbench", "tvm_unoptimized"):
        assert result["measurements"][label]["median_ms"] > 0
        assert result["accuracy"][label]["ok"], result["accuracy"][label]
