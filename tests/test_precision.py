"""Precision passes: fp16 mixed precision and INT8 calibration + Q/DQ, checked on real numerics."""

from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

from workbench.compile.build import build_lowered
from workbench.config.pipeline_spec import parse_text
from workbench.errors import UserError
from workbench.measure.runners import tvm_runner
from workbench.models import zoo
from workbench.models.canonicalize import InputSpec, canonicalize
from workbench.models.importer import import_to_relax
from workbench.models.sources import resolve_source
from workbench.passes import calibration
from workbench.passes.pipeline import run_pipeline

RAPIDOCR = "pkg:rapidocr-onnxruntime==1.4.4/rapidocr_onnxruntime/models/"
RAPIDOCR_CLS = RAPIDOCR + "ch_ppocr_mobile_v2.0_cls_infer.onnx"
RAPIDOCR_DET = RAPIDOCR + "ch_PP-OCRv4_det_infer.onnx"


def eval_inputs(shapes: dict[str, list[int]], seed: int = 1) -> dict[str, np.ndarray]:
    """Evaluation inputs drawn with another seed than the calibration samples (seed 0)."""
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(0, 1, v).astype("float32") for k, v in shapes.items()}


def infer(mod: tvm.IRModule, inputs, target) -> list[np.ndarray]:
    return tvm_runner("t", build_lowered(mod, target), inputs, target).infer()


def bindings(mod: tvm.IRModule) -> dict:
    """var -> bound value over `main`'s blocks."""
    return {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}


def calls(mod: tvm.IRModule, op_name: str) -> list[relax.Call]:
    return [v for v in bindings(mod).values()
            if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == op_name]


def dtype(expr) -> str:
    return str(expr.ty.dtype)


@pytest.fixture(scope="module")
def fp32_outputs(zoo_relax, llvm):
    """name -> outputs of the plain fp32 build on the evaluation inputs (built once per model)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = infer(zoo_relax(name)[1], eval_inputs(zoo.default_inputs(name)), llvm)
        return cache[name]

    return get


# ------------------------------------------------------------------------------------------------ fp16

@pytest.mark.parametrize("name", ["convnet_small", "transformer_block", "mobilenet_block"])
def test_fp16_runs_in_half_and_stays_close(name, zoo_relax, fp32_outputs, llvm):
    mod = zoo_relax(name)[1]
    out, records = run_pipeline(mod, parse_text("fp16"), llvm)
    assert records[0].ops_after.get("relax.astype", 0) > 0
    assert "relax.astype" not in records[0].ops_before
    heavy = calls(out, "relax.nn.conv2d") + calls(out, "relax.matmul")
    assert heavy and all(dtype(arg) == "float16" for c in heavy for arg in c.args)
    # weights are stored as fp16 constants, not cast at run time
    bound = bindings(out)
    weights = [bound.get(c.args[1], c.args[1]) for c in heavy]
    assert sum(isinstance(w, tvm.ir.expr.Constant) and dtype(w) == "float16" for w in weights) >= 6
    assert not any(isinstance(c.args[0], tvm.ir.expr.Constant) for c in calls(out, "relax.astype"))
    ref = fp32_outputs(name)
    got = infer(out, eval_inputs(zoo.default_inputs(name)), llvm)
    assert got[0].dtype == np.float32  # the graph's interface stays fp32
    err = calibration.quantization_error(ref, got)
    scale = float(np.abs(ref[0]).max())
    # measured: convnet_small 2.4e-3 of 2.48, transformer_block 9.9e-3 of 6.57 (≈1e-3 relative), mobilenet_block
    # (Clip, HardSwish, depthwise convs) 1.4e-3 of 2.53
    assert 0 < err["max_abs_err"] < 1e-2 * scale, err
    assert err["cosine"] > 0.9999


def test_fp16_takes_clip_from_the_onnx_frontend(zoo_relax, llvm):
    """TVM's ONNX frontend lowers Clip to call_tir (TE maximum/minimum), on which ToMixedPrecision fails
    ("Expected TensorType"), or to relax.clip; fp16 turns both into relax.maximum/minimum, which ToMixedPrecision
    handles like any elementwise op."""
    mod = zoo_relax("mobilenet_block")[1]
    assert any(isinstance(v, relax.Call) and v.op.name == "relax.call_tir" for v in bindings(mod).values())
    out, records = run_pipeline(mod, parse_text("fp16"), llvm)
    assert records[0].ops_before["relax.call_tir"] == 4 and "relax.call_tir" not in records[0].ops_after
    assert records[0].ops_before["relax.clip"] == 2 and "relax.clip" not in records[0].ops_after
    assert len(calls(out, "relax.maximum")) == len(calls(out, "relax.minimum")) == 4  # the four Clips
    # (they follow their input: here fp32, after the fp32-accumulated conv + bias; numerics in the test above)


def test_fp16_keep_fp32_keeps_the_named_op(zoo_relax, llvm):
    mod = zoo_relax("convnet_small")[1]
    policy = tvm.ir.Op.get("relax.matmul").get_attr("TMixedPrecisionPolicy")
    default, _ = run_pipeline(mod, parse_text("fp16"), llvm)
    (matmul,) = calls(default, "relax.matmul")
    assert [dtype(a) for a in matmul.args] == ["float16", "float16"]

    kept, _ = run_pipeline(mod, parse_text("fp16(keep_fp32=[matmul, nn.layer_norm])"), llvm)
    (matmul,) = calls(kept, "relax.matmul")
    assert [dtype(a) for a in matmul.args] == ["float32", "float32"] and dtype(matmul) == "float32"
    assert all(dtype(c.args[0]) == "float16" for c in calls(kept, "relax.nn.conv2d"))  # the rest still fp16
    # the override was temporary: TVM's own policy is back
    assert tvm.ir.Op.get("relax.matmul").get_attr("TMixedPrecisionPolicy") == policy

    with pytest.raises(UserError, match="keep_fp32.*nn.softmaxx"):
        run_pipeline(mod, parse_text("fp16(keep_fp32=[nn.softmaxx])"), llvm)


# ------------------------------------------------------------------------------------------------ int8

def check_qdq(out: tvm.IRModule, op_names: list[str]) -> int:
    """Every selected op reads dequantize(quantize(act)) and dequantize(int8 constant); returns their count."""
    bound = bindings(out)
    selected = [c for name in op_names for c in calls(out, name)]
    for call in selected:
        act_dq, w_dq = (bound[a] for a in call.args[:2])
        assert act_dq.op.name == "relax.dequantize" and w_dq.op.name == "relax.dequantize"
        assert bound[act_dq.args[0]].op.name == "relax.quantize"
        assert dtype(act_dq.args[0]) == "int8"
        weight = w_dq.args[0]
        assert isinstance(weight, tvm.ir.expr.Constant) and weight.value.numpy().dtype == np.int8
        assert np.abs(weight.value.numpy()).max() == 127  # per-channel scales use the full range
    return len(selected)


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_quantize_convnet(method, zoo_relax, fp32_outputs, llvm):
    mod = zoo_relax("convnet_small")[1]
    out, records = run_pipeline(mod, parse_text(f"quantize(calibration={method})"), llvm)
    ops = records[0].ops_after
    n = check_qdq(out, ["relax.nn.conv2d", "relax.matmul"])
    assert n == 7  # 6 conv2d + the Gemm head
    assert ops["relax.quantize"] == n and ops["relax.dequantize"] == 2 * n
    got = infer(out, eval_inputs(zoo.default_inputs("convnet_small")), llvm)
    err = calibration.quantization_error(fp32_outputs("convnet_small"), got)
    # measured: minmax 0.99993, percentile 0.99993, entropy 0.99985
    assert err["cosine"] >= 0.99, err
    assert err["max_abs_err"] > 0  # really quantized


def test_quantize_selected_ops_and_calibration_files(zoo_relax, llvm, tmp_path):
    mod = zoo_relax("convnet_small")[1]
    files = []
    for i in range(2):
        path = tmp_path / f"s{i}.npy"
        np.save(path, np.random.default_rng(i).uniform(0, 1, (1, 3, 64, 64)).astype("float32"))
        files.append(str(path))
    out, records = run_pipeline(mod, parse_text(f"quantize(ops=[conv2d], files=[{', '.join(files)}])"), llvm)
    assert check_qdq(out, ["relax.nn.conv2d"]) == 6
    assert records[0].ops_after["relax.quantize"] == 6
    (matmul,) = calls(out, "relax.matmul")  # not selected: its weight is still the float one
    weight = bindings(out).get(matmul.args[1], matmul.args[1])
    assert dtype(weight) == "float32" and getattr(weight, "op", None) is not tvm.ir.Op.get("relax.dequantize")

    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((1, 3, 32, 32), "float32"))
    with pytest.raises(UserError, match=r"bad\.npy.*\[1, 3, 32, 32\].*\[1, 3, 64, 64\]"):
        run_pipeline(mod, parse_text(f"quantize(files=[{bad}])"), llvm)


def test_quantize_bad_params_and_misuse(zoo_relax, llvm):
    mod = zoo_relax("convnet_small")[1]
    with pytest.raises(UserError, match="calibration"):
        run_pipeline(mod, parse_text("quantize(calibration=foo)"), llvm)
    with pytest.raises(UserError, match="ops"):
        run_pipeline(mod, parse_text("quantize(ops=[conv3x3])"), llvm)
    with pytest.raises(UserError, match="not found"):
        run_pipeline(mod, parse_text("quantize(files=[no/such/file.npy])"), llvm)
    with pytest.raises(UserError, match="before `fuse`"):
        run_pipeline(mod, parse_text("fuse,quantize"), llvm)


def test_entropy_threshold_ignores_outliers():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, 200_000), [1000.0, -900.0, 800.0]]).astype(np.float32)
    stats = calibration.ActivationStats()
    stats.add(values, keep=values.size, rng=rng)
    assert calibration.threshold(stats, "minmax") == 1000.0
    entropy = calibration.threshold(stats, "entropy")
    assert 0 < entropy < 0.1 * 1000.0
    percentile = calibration.threshold(stats, "percentile", 99.9)
    assert 2.5 < percentile < 4.5  # |N(0,1)| 99.9th percentile is 3.29
    # without outliers the KL search keeps (close to) the whole range of a uniform distribution
    flat = calibration.entropy_threshold(rng.uniform(0, 1, 100_000))
    assert flat > 0.9


def test_quantization_error_figures():
    ref = [np.array([[1.0, 2.0, 3.0]], np.float32)]
    same = calibration.quantization_error(ref, ref)
    assert same == {"max_abs_err": 0.0, "cosine": pytest.approx(1.0), "top1_agreement": 1.0}
    flipped = calibration.quantization_error(ref, [np.array([[3.0, 2.0, 1.0]], np.float32)])
    assert flipped["max_abs_err"] == 2.0 and flipped["top1_agreement"] == 0.0 and flipped["cosine"] < 0.8


@pytest.mark.slow
def test_quantize_rapidocr_cls(llvm):
    specs = {"x": InputSpec((1, 3, 48, 192))}
    mod = import_to_relax(canonicalize(resolve_source(RAPIDOCR_CLS, Path.cwd()), specs).model)
    inputs = eval_inputs({"x": [1, 3, 48, 192]})
    ref = infer(mod, inputs, llvm)
    out, records = run_pipeline(mod, parse_text("quantize(calibration=percentile)"), llvm)
    assert check_qdq(out, ["relax.nn.conv2d", "relax.matmul"]) == records[0].ops_after["relax.quantize"] == 54
    err = calibration.quantization_error(ref, infer(out, inputs, llvm))
    # measured: cosine minmax 0.9971, percentile 0.9977, entropy 0.9968 (softmax over 2 classes)
    assert err["cosine"] >= 0.99, err


@pytest.mark.slow
def test_fp16_builds_and_runs_on_rapidocr_det():
    """det has Clip (HardSwish-style) ops, which made ToMixedPrecision fail; built for this CPU (F16C) it runs."""
    from workbench.compile.targets import make_target
    from workbench.config import TargetConfig
    from workbench.measure.runners import ort_runner

    shape = (1, 3, 320, 320)  # a smaller frame than the config's 640×640: the same kernels, a quarter of the work
    canonical = canonicalize(resolve_source(RAPIDOCR_DET, Path.cwd()), {"x": InputSpec(shape)}).model
    host = make_target(TargetConfig())
    out, _ = run_pipeline(import_to_relax(canonical), parse_text("fold_constant,fp16,fuse,dce"), host, stats=False)
    page = np.ones(shape, np.float32)  # white, normalized as rapidocr does: on noise det's map is all ~0
    for row in range(40, 300, 50):  # dark "words": bars of strokes
        for col in range(20, 280, 12):
            page[..., row:row + 20, col:col + 4] = -1.0
        page[..., row + 8:row + 11, 20:280:2] = -1.0
    inputs = {"x": page}
    ref = ort_runner("ort_none", canonical, inputs).infer()
    assert (ref[0] > 0.3).mean() > 0.005  # the map marks text, so the comparison is not of zeros
    err = calibration.quantization_error(ref, infer(out, inputs, host))
    # measured: cosine 0.99986, max error 0.14 on the [0, 1] probability map (pixels on a text edge move)
    assert err["cosine"] >= 0.999 and 0 < err["max_abs_err"] < 0.3, err
