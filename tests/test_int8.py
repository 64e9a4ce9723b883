"""INT8 execution (`quantize(execute=int8)`): integer kernels in the IR, numerics vs fake quantization,
ops the int8 path cannot run kept in fp32 and reported."""

import logging

import numpy as np
import pytest
import tvm
from test_precision import calls, dtype, eval_inputs, infer
from tvm import relax

from workbench.config.pipeline_spec import parse_text
from workbench.models import zoo
from workbench.passes import calibration
from workbench.passes.pipeline import run_pipeline


def primfuncs(mod: tvm.IRModule) -> dict[str, tvm.tirx.PrimFunc]:
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def param_dtypes(func: tvm.tirx.PrimFunc) -> list[str]:
    return [str(p.dtype) for p in func.params]  # TIR params are the buffers themselves in 0.27


def test_int8_convnet_runs_integer_kernels(zoo_relax, llvm):
    mod = zoo_relax("convnet_small")[1]
    graph, records = run_pipeline(mod, parse_text("fold_batchnorm,quantize(execute=int8)"), llvm)
    assert records[1].analysis["int8"] == {"lowered": {"relax.nn.conv2d": 6, "relax.matmul": 1}, "vnni": 0,
                                         "avx2": 0, "kept_fp32": []}
    heavy = calls(graph, "relax.nn.conv2d") + calls(graph, "relax.matmul")
    assert len(heavy) == 7
    for call in heavy:  # int8 x int8 -> int32, the int8 weight a constant
        assert [dtype(a) for a in call.args] == ["int8", "int8"] and dtype(call) == "int32"
    assert "relax.dequantize" not in records[1].ops_after
    assert records[1].ops_after["relax.quantize"] == 7

    fused, _ = run_pipeline(graph, parse_text("fuse"), llvm)
    kernels = primfuncs(fused)
    assert not [name for name in kernels if "dequantize" in name]
    integer = {name: f for name, f in kernels.items() if "conv2d" in name or "matmul" in name}
    assert len(integer) == 7
    for name, func in integer.items():
        assert param_dtypes(func)[:2] == ["int8", "int8"], name
        assert 'dtype="int32"' in func.script() or '"int32")' in func.script(), name  # int32 accumulator
    # the epilogue is fused: scale, bias, relu and the next op's requantization in the conv's kernel, so two
    # int8 convs in a row exchange int8 tensors with no dequantize between them
    chained = [n for n, f in integer.items() if param_dtypes(f)[-1] == "int8"]
    assert len(chained) >= 3 and all("quantize" in n for n in chained)


def test_int8_matches_fake_quantization(zoo_relax, llvm):
    mod = zoo_relax("convnet_small")[1]
    inputs = eval_inputs(zoo.default_inputs("convnet_small"))
    fake, _ = run_pipeline(mod, parse_text("fold_batchnorm,quantize,fuse"), llvm)
    real, _ = run_pipeline(mod, parse_text("fold_batchnorm,quantize(execute=int8),fuse"), llvm)
    float_out = infer(run_pipeline(mod, parse_text("fold_batchnorm,fuse"), llvm)[0], inputs, llvm)
    fake_out, real_out = infer(fake, inputs, llvm), infer(real, inputs, llvm)
    # same scales, same rounding: only fp32 summation order differs (an activation may flip by 1 LSB)
    err = calibration.quantization_error(fake_out, real_out)
    assert err["cosine"] > 0.99999 and err["max_abs_err"] < 1e-2 * float(np.abs(fake_out[0]).max()), err
    vs_float = calibration.quantization_error(float_out, real_out)
    assert vs_float["cosine"] >= 0.999 and vs_float["max_abs_err"] > 0, vs_float  # quantized, and close


def _conv1d_then_matmul() -> tvm.IRModule:
    """x[1,4,16] -> conv1d (no int8 lowering) -> relu -> matmul (int8-capable)."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv1d(x, relax.const(rng.normal(size=(8, 4, 3)).astype("float32"))))
            y = bb.emit(relax.op.nn.relu(y))
            y = bb.emit(relax.op.matmul(y, relax.const(rng.normal(size=(14, 5)).astype("float32"))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def test_int8_keeps_unsupported_op_in_fp32_and_says_so(llvm, caplog):
    mod = _conv1d_then_matmul()
    with caplog.at_level(logging.WARNING, logger="workbench.int8"):
        out, records = run_pipeline(mod, parse_text("quantize(ops=[conv1d, matmul], execute=int8)"), llvm)
    report = records[0].analysis["int8"]
    assert report["lowered"] == {"relax.matmul": 1}
    assert len(report["kept_fp32"]) == 1 and report["kept_fp32"][0].startswith("relax.nn.conv1d: no int8 lowering")
    assert "relax.nn.conv1d" in caplog.text
    (conv,) = calls(out, "relax.nn.conv1d")
    assert [dtype(a) for a in conv.args] == ["float32", "float32"]  # still fake-quantized, fp32 kernel
    assert records[0].ops_after["relax.dequantize"] == 2  # its activation and weight Q/DQ are kept
    (matmul,) = calls(out, "relax.matmul")
    assert [dtype(a) for a in matmul.args] == ["int8", "int8"]
    inputs = eval_inputs({"x": [1, 4, 16]})
    fake, _ = run_pipeline(mod, parse_text("quantize(ops=[conv1d, matmul])"), llvm)
    err = calibration.quantization_error(infer(fake, inputs, llvm), infer(out, inputs, llvm))
    assert err["cosine"] > 0.9999, err


def _shifted_convs() -> tvm.IRModule:
    """x[1,4,12,12] - 0.5 -> conv2d (padded; its input has negatives) -> relu -> conv2d (padded; input >= 0)."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 12, 12), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.subtract(x, relax.const(np.float32(0.3))))
            y = bb.emit(relax.op.nn.conv2d(y, relax.const(rng.normal(size=(8, 4, 3, 3)).astype("float32")), padding=1))
            y = bb.emit(relax.op.nn.relu(y))
            y = bb.emit(relax.op.nn.conv2d(y, relax.const(rng.normal(size=(6, 8, 3, 3)).astype("float32")), padding=1))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def test_asymmetric_uint8_activations_run_u8_x_s8_with_the_zero_point_taken_off(llvm):
    mod = _shifted_convs()
    inputs = eval_inputs({"x": [1, 4, 12, 12]})
    real, records = run_pipeline(mod, parse_text("quantize(activations=asymmetric, execute=int8)"), llvm)
    assert records[0].analysis["int8"]["lowered"] == {"relax.nn.conv2d": 2}
    convs = calls(real, "relax.nn.conv2d")
    assert [[dtype(a) for a in c.args] for c in convs] == [["uint8", "int8"]] * 2
    # the first conv's input has negatives: a nonzero zero point, so its input is padded with it explicitly
    # and the conv itself pads nothing; the second's input is a ReLU's (zero point 0) and keeps its padding
    assert [list(map(int, c.attrs.padding)) for c in convs] == [[0, 0, 0, 0], [1, 1, 1, 1]]
    (pad,) = calls(real, "relax.nn.pad")
    assert 0 < float(pad.attrs.pad_value) < 255

    fake, _ = run_pipeline(mod, parse_text("quantize(activations=asymmetric)"), llvm)
    real_out, fake_out = infer(real, inputs, llvm), infer(fake, inputs, llvm)
    err = calibration.quantization_error(fake_out, real_out)
    assert err["cosine"] > 0.99999 and err["max_abs_err"] < 1e-2 * float(np.abs(fake_out[0]).max()), err

    float_out = infer(mod, inputs, llvm)
    symmetric = infer(run_pipeline(mod, parse_text("quantize(execute=int8)"), llvm)[0], inputs, llvm)
    asym_err = calibration.quantization_error(float_out, real_out)
    sym_err = calibration.quantization_error(float_out, symmetric)
    # 256 levels on the ReLU output instead of 128: closer to the float model
    assert 1 - asym_err["cosine"] < 1 - sym_err["cosine"], (asym_err, sym_err)


def test_asymmetric_quant_parameters_cover_the_range_and_zero():
    stats = calibration.ActivationStats()
    rng = np.random.default_rng(0)
    stats.add(rng.uniform(-0.5, 1.5, 10_000), keep=10_000, rng=rng)
    quant = calibration.activation_quant(stats, "minmax", asymmetric=True)
    assert quant.dtype == "uint8" and 0 < quant.zero_point < 255
    lo, hi = (0 - quant.zero_point) * quant.scale, (255 - quant.zero_point) * quant.scale
    assert lo == pytest.approx(stats.lo, abs=quant.scale) and hi == pytest.approx(stats.hi, abs=quant.scale)
    relu = calibration.ActivationStats()
    relu.add(np.maximum(rng.normal(size=10_000), 0), keep=10_000, rng=rng)
    quant = calibration.activation_quant(relu, "percentile", 99.9, asymmetric=True)
    assert quant.zero_point == 0 and quant.scale == pytest.approx(np.percentile(relu.signed_values(), 99.9) / 255)
    assert calibration.activation_quant(relu, "minmax").dtype == "int8"
