"""bf16 (passes/bf16.py, kernels/x86_bf16.py): `vdpbf16ps` in the machine code of builds cross-compiled for CPUs
with AVX512_BF16 (any x86 host), the numerics against numpy's bf16 rounding where this CPU has AVX512_BF16 (skipped
elsewhere, with the reason), and the refusal, exit 2, where the target's CPU lacks it."""

import csv
import platform
import re

import ml_dtypes
import numpy as np
import pytest
import tvm
import yaml
from tvm import relax

from workbench.cli import main
from workbench.compile.build import build_lowered
from workbench.compile.targets import make_target
from workbench.config import TargetConfig
from workbench.config.pipeline_spec import parse_text
from workbench.errors import UserError
from workbench.kernels.packed_conv import BF16
from workbench.kernels.x86_bf16 import BF16_FEATURE, bf16_target
from workbench.passes.pipeline import run_pipeline

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
HOST = make_target(TargetConfig())
needs_bf16 = pytest.mark.skipif(not bf16_target(HOST), reason=f"this CPU ({HOST.attrs.get('mcpu')}) has no "
                                                               f"{BF16_FEATURE}: bf16 builds do not run here")
PIPELINE = "convert_layout(conv2d=NHWC),fold_constant,bf16,pack_conv2d,fuse,dce"
# odd shapes: 3 input channels (padded to the pair), widths that no pixel step divides, 20 and 40 output channels
# (padded to 16 lanes), a stride-2 first conv, a pointwise conv, a classifier matmul of 10 columns
SHAPE = (1, 3, 23, 29)
RNG = np.random.default_rng(7)
W1 = (RNG.standard_normal((20, 3, 3, 3)) * 0.3).astype(np.float32)
W2 = (RNG.standard_normal((40, 20, 3, 3)) * 0.1).astype(np.float32)
W3 = (RNG.standard_normal((24, 40, 1, 1)) * 0.1).astype(np.float32)
FC = (RNG.standard_normal((24, 10)) * 0.2).astype(np.float32)


def _model() -> tvm.IRModule:
    """x -> conv 3x3/2 -> relu -> conv 3x3 -> relu -> conv 1x1 -> mean over H, W -> matmul [24, 10], NCHW."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(SHAPE), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(W1), strides=2, padding=1)))
            y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(y, relax.const(W2), padding=1)))
            y = bb.emit(relax.op.nn.conv2d(y, relax.const(W3)))
            pooled = bb.emit(relax.op.mean(y, axis=[2, 3]))
            out = bb.emit_output(relax.op.matmul(pooled, relax.const(FC)))
        bb.emit_func_output(out)
    return bb.get()


def _conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHW conv in float64."""
    o, _, k, _ = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = (xp.shape[2] - k) // stride + 1, (xp.shape[3] - k) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    return out


def _reference(x: np.ndarray, rounded) -> np.ndarray:
    """The model in float64 with every conv and matmul operand passed through `rounded` first."""
    y = np.maximum(_conv(rounded(x), rounded(W1), 2, 1), 0)
    y = np.maximum(_conv(rounded(y), rounded(W2), 1, 1), 0)
    pooled = _conv(rounded(y), rounded(W3), 1, 0).mean(axis=(2, 3))
    return rounded(pooled) @ rounded(FC).astype(np.float64)


def _bf16_rounded(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def _build(target: tvm.target.Target):
    mod, _ = run_pipeline(_model(), parse_text(PIPELINE), target, stats=False)
    return mod, build_lowered(mod, target)


@x86
@pytest.mark.parametrize("cpu", ["znver4", "sapphirerapids"])
def test_every_bf16_kernel_of_a_cross_compiled_build_runs_vdpbf16ps(cpu):
    target = make_target(TargetConfig(mcpu=cpu))
    mod, built = _build(target)
    kernels = [gv.name_hint for gv, f in built.lowered.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and BF16.name in f.script()]
    assert len(kernels) == 4, kernels  # the three convs and the matmul
    assert not built.fell_back
    for name in kernels:  # each tensorized with the dot product, not left to plain bf16 -> fp32 loops
        assert "workbench_dpbf16ps_16x2" in built.lowered[name].script(), name
    text = "\n".join(m.inspect_source("asm") for m in built.executable.mod.imports if m.kind == "llvm")
    assert text.count("vdpbf16ps") >= len(kernels)
    assert not re.search(r"call\w*\s+workbench_dpbf16ps", text)  # the micro-kernel is inlined: no call left
    # the activation pair's broadcast folded into the instruction's memory operand (a vbroadcastss of its own per
    # step ran the packed conv at 3/4 of its speed)
    assert len(re.findall(r"vdpbf16ps\s+[^\n]*\{1to16\}", text)) >= len(kernels)


@x86
def test_a_one_column_conv_runs_as_one_row_in_bf16_too():
    """Magika's 5x1 conv over [N, C, H, 1] in bf16, as in fp32 (tests/test_conv1d.py): the packed kernel gets one row
    of OH output pixels; at width one each step computed one pixel (Magika's conv 3.9 -> 1.7 ms, znver4)."""
    from test_conv1d import conv_model
    from test_precision import calls

    from workbench.models.importer import import_to_relax

    model = conv_model([1, 24, 53, 1], [32, 24, 5, 1], kernel_shape=[5, 1], pads=[2, 0, 1, 0], strides=[2, 1])
    mod, records = run_pipeline(import_to_relax(model), parse_text(PIPELINE), make_target(TargetConfig(mcpu="znver4")))
    assert records[2].analysis["conv2d_bf16"] == 1
    (kernel,) = [call for call in calls(mod, "relax.call_tir") if BF16.name in call.args[0].name_hint]
    assert [int(d) for d in kernel.ty.shape] == [1, 1, 26, 32]  # one row of (53 + 3 - 5) // 2 + 1 output pixels


@needs_bf16
def test_bf16_build_matches_numpy_bf16_rounding_not_fp32():
    _, built = _build(HOST)
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    vm = relax.VirtualMachine(built.executable, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy().astype(np.float64)
    emulated, fp32 = _reference(x, _bf16_rounded), _reference(x, lambda a: np.asarray(a, np.float64))
    scale = np.abs(emulated).max()
    np.testing.assert_allclose(got, emulated, rtol=0, atol=1e-4 * scale)  # fp32 sums in another order only
    assert np.abs(got - fp32).max() > 10 * np.abs(got - emulated).max()  # it did round to bf16


def test_a_target_without_avx512bf16_is_refused_and_the_run_exits_2(tmp_path, capsys):
    with pytest.raises(UserError, match="avx512bf16"):
        run_pipeline(_model(), parse_text(PIPELINE), make_target(TargetConfig(mcpu="znver2")), stats=False)
    config = tmp_path / "bf16.yaml"
    config.write_text(yaml.safe_dump({
        "name": "bf16_refused", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
        "pipeline": "default_bf16",
        "target": {"kind": "llvm", "mcpu": "znver2"}, "baselines": ["ort_none"], "output": str(tmp_path / "run")}))
    assert main(["run", str(config)]) == 2
    assert "has no avx512bf16" in capsys.readouterr().err


@x86
def test_a_bf16_build_for_a_cpu_this_one_is_not_builds_and_is_not_measured(tmp_path):
    """Cross-compiled (sapphirerapids: AVX512_BF16, AVX512_FP16, AMX), the build is made and kept; it is measured
    only where the CPU has every feature it may use, which this one has not (skipped on such a CPU)."""
    from workbench.compile.targets import runs_here
    from workbench.record.result import RunResult

    target = make_target(TargetConfig(mcpu="sapphirerapids"))
    if runs_here(target):
        pytest.skip(f"this CPU ({HOST.attrs.get('mcpu')}) runs sapphirerapids code")
    config = tmp_path / "spr.yaml"
    config.write_text(yaml.safe_dump({
        "name": "bf16_spr", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
        "pipeline": "default_bf16",
        "target": {"kind": "llvm", "mcpu": "sapphirerapids"}, "baselines": ["ort_none"],
        "measure": {"warmup": 1, "repeat": 3}, "output": str(tmp_path / "run")}))
    assert main(["run", str(config)]) == 0
    result = RunResult.read(tmp_path / "run")
    assert (tmp_path / "run" / "workbench.so").stat().st_size > 0
    assert result.measurements["workbench"].median_ms is None
    assert "not measured: built for sapphirerapids" in result.measurements["workbench"].note
    assert result.measurements["ort_none"].median_ms > 0


def test_the_bf16_tolerance_takes_bf16_rounding_and_refuses_a_wrong_output():
    from workbench.models.accuracy import BF16_RULE, compare

    reference = [RNG.standard_normal((2, 50, 7)).astype(np.float32) + 0.5, RNG.standard_normal((1, 1000))]
    rounded = [_bf16_rounded(r).astype(np.float32) for r in reference]
    assert not compare(rounded, reference, rtol=1e-3, atol=1e-4)["ok"]  # fp32's tolerance refuses bf16 rounding
    figures = compare(rounded, reference, rtol=1e-3, atol=1e-4, bf16=True)
    assert figures["ok"] and figures["note"] == BF16_RULE and figures["cosine"] > 0.9999
    wrong = [rounded[0], rounded[1] * np.where(np.arange(1000) < 100, -1, 1)]  # a tenth of the logits flipped
    assert not compare(wrong, reference, rtol=1e-3, atol=1e-4, bf16=True)["ok"]


@needs_bf16
def test_a_bf16_run_is_checked_against_fp32_with_the_bf16_tolerance_as_openvino_bf16_is(tmp_path):
    pytest.importorskip("openvino")
    from workbench.models.accuracy import BF16_RULE
    from workbench.record.result import RunResult

    config = tmp_path / "bf16.yaml"
    config.write_text(yaml.safe_dump({
        "name": "bf16_run", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
        "pipeline": "default_bf16", "baselines": ["ort_none", "openvino_bf16"],
        "measure": {"warmup": 1, "repeat": 3}, "output": str(tmp_path / "run")}))
    assert main(["run", str(config)]) == 0
    result = RunResult.read(tmp_path / "run")
    for label in ("workbench", "openvino_bf16"):
        assert result.accuracy[label].ok and result.accuracy[label].note == BF16_RULE, label
        assert 0 < result.accuracy[label].max_abs_err  # it rounded: not fp32's outputs
    assert result.passes[[p.name for p in result.passes].index("bf16")].analysis["conv2d_bf16"] > 0


@needs_bf16
def test_the_bf16_corpus_page_sits_beside_the_default_one_and_holds_bf16_to_its_tolerance(tmp_path):
    """`workbench bench corpus --pipeline default_bf16`: a page of its own (corpus_<cpu>_default_bf16), the rows
    checked with the bf16 rule and the cosine in the table; openvino_bf16 beside it."""
    pytest.importorskip("openvino")
    from workbench.models.accuracy import BF16_RULE

    corpus = tmp_path / "corpus.yaml"
    corpus.write_text(yaml.safe_dump({"models": [{
        "name": "convnet_small", "source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]},
        "tolerance": {"rtol": 1e-3, "atol": 1e-4}, "exercises": "a small CNN"}]}))
    out = tmp_path / "results"
    assert main(["bench", "corpus", "--corpus", str(corpus), "--pipeline", "default_bf16", "--baselines",
                 "openvino_bf16", "--repeat", "2", "--rounds", "1", "--out", str(out)]) == 0
    page = next(out.glob("corpus_*_default_bf16.md"))
    text = page.read_text()
    assert BF16_RULE in text and "1 models: 1 ok" in text  # fp32's rtol 1e-3 would refuse bf16's rounding
    assert "× (start) and " in text  # the cores' contention, probed before the first model and after the last
    rows = list(csv.DictReader(page.with_suffix(".csv").open()))
    assert 0.999 <= float(rows[0]["cosine"]) < 1 and float(rows[0]["openvino_bf16_over_workbench"]) > 0



def test_the_bf16_corpus_page_of_a_cpu_without_avx512bf16_says_it_was_not_measured(tmp_path, monkeypatch):
    """On a CPU without AVX512_BF16 `workbench bench corpus --pipeline default_bf16` measures no model: it writes
    the page with the setting and why, and exits 2. (Where this CPU has the feature, the probe is told it has not:
    no such CPU is at hand then.)"""
    import workbench.bench.corpus as corpus_bench

    if bf16_target(HOST):
        monkeypatch.setattr(corpus_bench, "bf16_target", lambda target: False)
    corpus = tmp_path / "corpus.yaml"
    corpus.write_text(yaml.safe_dump({"models": [{
        "name": "convnet_small", "source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]},
        "tolerance": {"rtol": 1e-3, "atol": 1e-4}, "exercises": "a small CNN"}]}))
    out = tmp_path / "results"
    assert main(["bench", "corpus", "--corpus", str(corpus), "--pipeline", "default_bf16", "--out", str(out)]) == 2
    page = next(out.glob("corpus_*_default_bf16.md"))
    assert "Not measured on this CPU" in page.read_text() and BF16_FEATURE in page.read_text()
    assert [path.name for path in out.iterdir()] == [page.name]  # no table, no chart: nothing was timed

@needs_bf16
@pytest.mark.slow
def test_tuning_searches_the_bf16_kernel_tensorized_and_the_tuned_build_holds_the_tolerance(tmp_path):
    """MetaSchedule's candidates for the bf16 packed conv tile it around the vdpbf16ps step and carry the LLVM IR it
    calls (compile/design_spaces.py: dot_space, ImportLLVM); a build from those records runs within bf16's
    tolerance."""
    import json

    from workbench.record.result import RunResult

    database = tmp_path / "db"
    config = {"name": "bf16_tuned", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
              "pipeline": "default_bf16", "baselines": ["ort_none"], "measure": {"warmup": 1, "repeat": 3},
              "tuning": {"database": str(database), "trials": 8, "trials_per_task": 4},
              "output": str(tmp_path / "run")}
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["tune", str(path)]) == 0
    records = [json.loads(line) for line in next(database.glob("*/database_tuning_record.json")).open()]
    searched = [r for r in records if "workbench_dot_16x2_bf16" in json.dumps(r)]
    assert len(searched) >= 4 and all("pragma_import_llvm" in json.dumps(r) for r in searched)
    config["tuning"] = {"database": str(database)}
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path)]) == 0
    result = RunResult.read(tmp_path / "run")
    assert result.accuracy["workbench"].ok and result.tuning.covered


def test_keep_first_conv_and_ops_leave_those_in_fp32():
    """`keep_first_conv` keeps the conv on the raw input fp32 (the pass's analysis says why), `ops: [conv2d]`
    every matmul."""
    target = make_target(TargetConfig(mcpu="znver4"))
    pipeline = PIPELINE.replace("bf16,", "bf16(keep_first_conv=true,ops=[conv2d]),")
    _, records = run_pipeline(_model(), parse_text(pipeline), target)
    analysis = next(r.analysis for r in records if r.name == "bf16")
    assert analysis["conv2d_bf16"] == 2 and analysis["conv2d_kept_fp32"] == ["the first conv (keep_first_conv)"]
    assert "matmul_bf16" not in analysis


def test_narrow_layers_at_high_resolution_stay_fp32():
    """A conv or matmul summing fewer than `fp32_below_products` products per output and writing at least
    `fp32_from_positions` positions stays fp32, the analysis saying why: the model above writes 12 x 15 = 180 pixels
    per conv (3-channel 3x3: 27 products, 20-channel 3x3: 180, 1x1 on 40 channels: 40) and one row from its matmul
    (on 24). On the PP-OCR detectors such layers (their stems) took bf16's cosine on a text page from 0.96-0.99 to
    0.9997-0.9999."""
    target = make_target(TargetConfig(mcpu="znver4"))
    for below, positions, convs_kept, matmul_kept in ((256, 100, 3, 0), (100, 100, 2, 0), (256, 181, 0, 0),
                                                      (256, 1, 3, 1), (0, 1, 0, 0)):
        step = f"bf16(fp32_below_products={below},fp32_from_positions={positions}),"
        _, records = run_pipeline(_model(), parse_text(PIPELINE.replace("bf16,", step)), target)
        analysis = next(r.analysis for r in records if r.name == "bf16")
        reason = f"fewer than {below} products per output at {positions}+ positions (fp32_below_products)"
        assert analysis["conv2d_bf16"] == 3 - convs_kept and analysis["conv2d_kept_fp32"] == [reason] * convs_kept
        assert analysis["matmul_bf16"] == 1 - matmul_kept
        assert analysis["matmul_kept_fp32"] == [reason] * matmul_kept
