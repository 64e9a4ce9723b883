"""The int8 path's VNNI conv kernel (kernels/packed_conv.py): chosen for NHWC convs when the target CPU has AVX-512
VNNI, exact against the relax conv2d int8 path, and tensorized with `vpdpbusd`: by MetaSchedule's search space
and by the default schedule of untuned builds (compiled for cascadelake, on any x86 host), and in tuned and
untuned builds that run (only on a VNNI host, where the candidates can be measured)."""

import logging
import platform

import numpy as np
import pytest
import tvm
from test_int8 import param_dtypes, primfuncs
from test_int8_codegen import asm, instructions
from test_precision import eval_inputs, infer
from tvm.s_tir import meta_schedule as ms

from workbench.compile.build import build_lowered
from workbench.compile.design_spaces import tune_context
from workbench.compile.targets import make_target
from workbench.compile.tasks import extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.config import TargetConfig, TuningConfig
from workbench.config.pipeline_spec import parse_text
from workbench.kernels.packed_conv import VNNI_U8S8, pack_weight, vnni_target
from workbench.kernels.x86_int8 import VNNI_DOT_16x4
from workbench.measure.runners import tvm_runner
from workbench.models import zoo
from workbench.passes.pipeline import run_pipeline

CASCADELAKE = tvm.target.Target({"kind": "llvm", "mcpu": "cascadelake"})  # AVX-512 VNNI
HASWELL = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})  # AVX2, no VNNI: the AVX2 kernel (test_int8_avx2.py)
GENERIC = tvm.target.Target({"kind": "llvm"})  # baseline x86-64, no AVX2: relax's int8 ops
HOST = make_target(TargetConfig())
NHWC_INT8 = "fold_batchnorm,convert_layout(conv2d=NHWC:OHWI),quantize(activations={},execute=int8),fuse"
VNNI_INTRINSIC = "llvm.x86.avx512.vpdpbusd.512"
x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")


def lowered(zoo_relax, target: tvm.target.Target, activations: str = "asymmetric"):
    """convnet_small through the NHWC int8 pipeline, lowered for `target`: (module, the quantize step's record)."""
    module, records = run_pipeline(zoo_relax("convnet_small")[1], parse_text(NHWC_INT8.format(activations)), target)
    return module, records[2].analysis["int8"]


def test_weights_are_packed_16_output_by_4_input_channels_with_zero_padding():
    w = np.random.default_rng(0).integers(-128, 128, (24, 3, 3, 5), dtype=np.int8)  # OHWI, O and C not multiples
    packed = pack_weight(w, 4)
    assert packed.shape == (2, 3, 3, 2, 16, 4)
    o, kh, kw, c = np.meshgrid(*map(np.arange, w.shape), indexing="ij")
    assert np.array_equal(packed[o // 16, kh, kw, c // 4, o % 16, c % 4], w)
    assert np.count_nonzero(packed) == np.count_nonzero(w)  # the padding holds zero weights only


@pytest.mark.parametrize("activations", ["asymmetric", "symmetric"])
def test_vnni_cpus_get_the_vnni_kernel_and_the_same_outputs(zoo_relax, llvm, activations):
    vnni, record = lowered(zoo_relax, CASCADELAKE, activations)
    plain, plain_record = lowered(zoo_relax, GENERIC, activations)
    assert record["vnni"] == 7 and record["avx2"] == 0  # the 6 convs and the matmul
    assert plain_record["vnni"] == plain_record["avx2"] == 0
    assert record["lowered"] == plain_record["lowered"] == {"relax.nn.conv2d": 6, "relax.matmul": 1}
    kernels = primfuncs(vnni)
    on_vnni = {name: f for name, f in kernels.items() if VNNI_U8S8.name in name}
    assert len(on_vnni) == 7 and not [name for name in kernels if ("conv2d" in name or "matmul" in name)
                                      and VNNI_U8S8.name not in name]
    for func in on_vnni.values():  # u8 data x the packed s8 weight
        assert param_dtypes(func)[:2] == ["uint8", "int8"]
    # the convs' epilogues are fused (nothing dequantized); the matmul's follows its reshape back to [rows, N]
    assert sum("_cast" in name and "dequantize" not in name for name in on_vnni) == 6
    assert not [name for name in primfuncs(plain) if VNNI_U8S8.name in name]
    # integer sums are exact and the epilogue is the same, so the outputs are equal bit for bit (symmetric int8
    # activations are shifted to uint8 and 128 x sum(w) taken off); untuned, the kernel runs on any x86 CPU
    inputs = eval_inputs(zoo.default_inputs("convnet_small"))
    for got, want in zip(infer(vnni, inputs, llvm), infer(plain, inputs, llvm)):
        assert np.array_equal(got, want)


def test_nchw_convs_on_a_vnni_cpu_keep_relax_conv2d_and_say_how_to_reach_vnni(zoo_relax, caplog):
    with caplog.at_level(logging.WARNING, logger="workbench.int8"):
        _, records = run_pipeline(zoo_relax("convnet_small")[1], parse_text("fold_batchnorm,quantize(execute=int8)"),
                                  CASCADELAKE)
    assert records[1].analysis["int8"]["vnni"] == 1  # the matmul only
    assert "6 NCHW conv2d" in caplog.text and "convert_layout(conv2d=NHWC) before quantize" in caplog.text


@x86
def test_the_vnni_search_space_tensorizes_with_vpdpbusd(zoo_relax):
    """Every design space MetaSchedule draws for the kernel, post-processed as tuning does, compiles to VNNI code."""
    module, _ = lowered(zoo_relax, CASCADELAKE)
    task = next(t for t in extract_tasks(tuning_module(module, CASCADELAKE), CASCADELAKE) if VNNI_U8S8.name in t.task_name)
    context = tune_context(task, num_cores=1, search_strategy="replay-trace", rand_state=0)
    spaces = context.generate_design_space()
    assert spaces
    for schedule in spaces:
        assert all(postproc.apply(schedule) for postproc in context.space_generator.postprocs)
        assert "tensorize" in str(schedule.trace)
        assert instructions(tvm.compile(schedule.mod, CASCADELAKE).mod.inspect_source("asm"), "vpdpbusd")["vpdpbusd"]


@x86
def test_untuned_builds_for_a_vnni_cpu_tensorize_every_vnni_kernel(zoo_relax):
    module, _ = lowered(zoo_relax, CASCADELAKE)
    built = build_lowered(module, CASCADELAKE)  # compiled only: this host may lack VNNI
    kernels = [f for name, f in primfuncs(built.lowered).items() if VNNI_U8S8.name in name]
    assert len(kernels) == 7 and all(VNNI_INTRINSIC in f.script() for f in kernels)
    assert instructions(asm(built.executable), "vpdpbusd")["vpdpbusd"] >= 7
    assert instructions(asm(build_lowered(module, HASWELL).executable), "vpdpbusd")["vpdpbusd"] == 0


@pytest.mark.skipif(not vnni_target(HOST), reason=f"measuring VNNI candidates needs an AVX-512 VNNI CPU; this host is "
                                                  f"{HOST.attrs.get('mcpu', 'generic')}")
def test_tuned_and_default_vnni_schedules_run_here_and_match_plain_loops(zoo_relax, llvm, tmp_path):
    module, _ = lowered(zoo_relax, HOST)
    tasks = [t for t in extract_tasks(tuning_module(module, HOST), HOST) if VNNI_U8S8.name in t.task_name][:1]
    config = TuningConfig(trials=4, trials_per_task=4, trials_per_iter=4, cost_model="random")
    (result,) = tune_tasks(tasks, HOST, config, tmp_path / "db", tmp_path / "logs")
    assert result.trials_run == 4 and result.best_us is not None
    database = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    (best,) = database.get_top_k(database.commit_workload(tasks[0].dispatched[0]), 1)
    assert f'tensor_intrin="{VNNI_DOT_16x4}"' in str(best.trace)  # the tuned schedule is MetaSchedule's, tensorized
    tuned = build_lowered(module, HOST, database)
    assert tasks[0].task_name in tuned.tuning["covered"]
    builds = {"tuned": tuned, "default schedule": build_lowered(module, HOST), "plain loops": build_lowered(module, llvm)}
    inputs = eval_inputs(zoo.default_inputs("convnet_small"))
    outputs = {label: tvm_runner(label, built, inputs, HOST).infer() for label, built in builds.items()}
    # a schedule changes the order of integer sums only (exact); the fp32 epilogue may round differently with this
    # CPU's FMAs than the generic build's multiply-adds (1 ulp), while one quantization step off would move ~1e-2
    for label in ("tuned", "default schedule"):
        for got, want in zip(outputs[label], outputs["plain loops"]):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=label)
