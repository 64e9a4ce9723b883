"""The default schedule untuned CPU kernels get (kernels/loop_schedule.py): elementwise stages inlined, outer loops
parallel, the contiguous inner loop vectorized; contractions left alone. Loops counted, outputs against numpy."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.target.codegen import target_has_features

from workbench.compile.build import build_lowered, legalized
from workbench.compile.targets import make_target
from workbench.config import TargetConfig
from workbench.config.pipeline_spec import parse_text
from workbench.kernels.default_schedule import default_schedule
from workbench.kernels.loop_schedule import crossing, loop_schedule
from workbench.measure.runners import tvm_runner
from workbench.passes.pipeline import run_pipeline

HOST = make_target(TargetConfig())  # this machine's CPU
ZEN3 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "mtriple": "x86_64-linux-gnu"})  # AMD Zen 1-3's code


def module(shape, body, pipeline="fuse"):
    """A Relax module of one input `x` of `shape` whose output is `body(x)`, fused into kernels (after the rest of
    `pipeline`)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(x))
        bb.emit_func_output(out)
    fused, _ = run_pipeline(bb.get(), parse_text(pipeline), tvm.target.Target({"kind": "llvm"}), stats=False)
    return fused


def kernels(mod, target, named=False):
    """The legalized kernels of `mod` (name -> kernel with `named`)."""
    found = {gv.name_hint: func for gv, func in legalized(mod, target).functions.items()
             if isinstance(func, tvm.tirx.PrimFunc)}
    return found if named else list(found.values())


def loops_and_blocks(func):
    """(the kinds of the loops around each block, the blocks below the root) of a kernel."""
    sch = tvm.s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    kinds = [tvm.tirx.ForKind(int(sch.get(loop).kind)).name for block in blocks for loop in sch.get_loops(block)]
    return kinds, [sch.get(block).name_hint for block in blocks]


def assembly(mod, target) -> str:
    """The assembly of `mod` built for `target` (cross-compiled where it is not this CPU)."""
    return "\n".join(m.inspect_source("asm") for m in build_lowered(mod, target).executable.mod.imports
                     if m.kind == "llvm")


@pytest.fixture(scope="module")
def avx512():
    return tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})


def run_built(mod, target, data):
    """`mod` built for `target` and run here: an AVX-512 target only on a host with AVX-512 (this CPU otherwise,
    whose default schedule is the same loop nest with its own vector width)."""
    if not target_has_features("avx512f", target) or target_has_features("avx512f", HOST):
        built = build_lowered(mod, target)
    else:
        built = build_lowered(mod, HOST)
    return tvm_runner("t", built, {"x": data}, HOST).infer()[0]


def test_fused_elementwise_kernel_becomes_one_parallel_vectorized_loop_nest(avx512):
    mod = module((1, 48, 40, 40), lambda x: relax.op.nn.relu(
        relax.op.add(relax.op.permute_dims(x, [0, 2, 3, 1]), relax.const(0.5, "float32"))))
    (func,) = kernels(mod, avx512)
    assert len(loops_and_blocks(func)[1]) == 3  # transpose, add, relu
    kinds, blocks = loops_and_blocks(loop_schedule(func, avx512).mod["main"])
    assert len(blocks) == 1 and "PARALLEL" in kinds and "VECTORIZED" in kinds
    data = np.random.default_rng(0).normal(size=(1, 48, 40, 40)).astype("float32")
    np.testing.assert_allclose(run_built(mod, avx512, data), np.maximum(data.transpose(0, 2, 3, 1) + 0.5, 0))


def test_nhwc_mean_reads_channels_contiguously_inside_the_reduction(avx512):
    """A mean over H and W of an NHWC tensor: the channel loop moves inside the reduction loops, vectorized, and its
    outer part runs in parallel (as plain loops it strides C apart on every step)."""
    mod = module((1, 80, 80, 96), lambda x: relax.op.mean(x, axis=[1, 2], keepdims=True))
    (func,) = kernels(mod, avx512)
    sch = loop_schedule(func, avx512)
    reduction = next(b for b in sch.get_child_blocks(sch.get_sblock("root")) if "red" in sch.get(b).name_hint)
    loops = [sch.get(loop) for loop in sch.get_loops(reduction)]
    kinds = [tvm.tirx.ForKind(int(loop.kind)) for loop in loops]
    assert kinds[-1] == tvm.tirx.ForKind.VECTORIZED and int(loops[-1].extent) == 16  # 16 fp32 lanes of a zmm
    assert kinds[0] == tvm.tirx.ForKind.PARALLEL and int(loops[0].extent) == 96 // 16
    assert [int(loop.extent) for loop in loops[1:-1]] == [80, 80]  # H, W reduced around the channels
    data = np.random.default_rng(1).normal(size=(1, 80, 80, 96)).astype("float32")
    np.testing.assert_allclose(run_built(mod, avx512, data), data.mean(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, axes", [((1, 576, 20, 20), [2, 3]), ((8, 41, 64), [2])])
def test_a_reduction_along_a_contiguous_row_sums_in_vector_lanes(avx512, shape, axes):
    """An NCHW global average pool (H and W contiguous) or a mean over a row: one partial per lane (rfactor), the
    lanes vectorized innermost and computed under the parallel loop of the sums (as one chain of scalar adds the
    pool ran 0.083 ms against ONNX Runtime's 0.024)."""
    mod = module(shape, lambda x: relax.op.mean(x, axis=axes, keepdims=True))
    (func,) = kernels(mod, avx512)
    sch = loop_schedule(func, avx512)
    partials = next(b for b in sch.get_child_blocks(sch.get_sblock("root")) if sch.get(b).name_hint.endswith("_rf"))
    loops = [sch.get(loop) for loop in sch.get_loops(partials)]
    row = int(np.prod([shape[axis] for axis in axes]))
    assert tvm.tirx.ForKind(int(loops[0].kind)) == tvm.tirx.ForKind.PARALLEL
    assert tvm.tirx.ForKind(int(loops[-1].kind)) == tvm.tirx.ForKind.VECTORIZED
    assert int(loops[-1].extent) == max(f for f in range(1, 17) if row % f == 0)
    data = np.random.default_rng(4).normal(size=shape).astype("float32")
    np.testing.assert_allclose(run_built(mod, avx512, data), data.mean(axis=tuple(axes), keepdims=True),
                               rtol=1e-5, atol=1e-6)


def test_contractions_are_not_loop_schedules_and_relax_convs_keep_plain_loops(llvm):
    """A matmul is gemm_schedule.py's (tests/test_gemm_schedule.py), not loop_schedule's; a relax conv neither's."""
    rng = np.random.default_rng(2)
    mod = module((8, 32), lambda x: relax.op.matmul(x, relax.const(rng.normal(size=(32, 16)).astype("float32"))))
    (func,) = kernels(mod, llvm)
    assert loop_schedule(func, llvm) is None and default_schedule(func, llvm) is not None
    mod = module((1, 4, 9, 9), lambda x: relax.op.nn.conv2d(x, relax.const(rng.normal(size=(8, 4, 3, 3)).astype("float32"))))
    (func,) = kernels(mod, llvm)
    assert loop_schedule(func, llvm) is None and default_schedule(func, llvm) is None


def test_untuned_build_schedules_every_kernel_but_relax_convs(zoo_relax, llvm):
    """mobilenet_block untuned: its mean, reshape, the SE block's matmul and its 1x1 convs (in NCHW a matmul of the
    weight by the image, gemm_schedule.py's) get the default schedule, its 3x3 convs (relax conv2d) none; the build
    still matches ONNX Runtime."""
    from workbench.measure.runners import ort_runner

    model, mod = zoo_relax("mobilenet_block")
    optimized, _ = run_pipeline(mod, parse_text("fold_constant,fold_batchnorm,fuse,dce"), llvm, stats=False)
    funcs = kernels(optimized, llvm, named=True)
    scheduled = {name for name, func in funcs.items() if default_schedule(func, llvm) is not None}
    plain = set(funcs) - scheduled
    assert len(plain) == 2 and all("conv2d" in name for name in plain)
    assert len([name for name in scheduled if "conv2d" in name]) == 3 and any("matmul" in name for name in scheduled)
    data = np.random.default_rng(3).uniform(size=(1, 16, 56, 56)).astype("float32")
    reference = ort_runner("ort_none", model, {"x": data}).infer()[0]
    np.testing.assert_allclose(run_built(optimized, llvm, data), reference, rtol=1e-4, atol=1e-4)


def tile(extent: int) -> int:
    """A transpose tile side: the largest divisor of `extent` up to 16 where it is more than 8, else 16 (a partial
    last tile) unless the extent is shorter."""
    divisor = max(f for f in range(1, 17) if extent % f == 0)
    return divisor if 2 * divisor > 16 or extent < 16 else 16


@pytest.mark.parametrize("shape, perm, pad", [((1, 96, 20, 20), [0, 2, 3, 1], 0), ((1, 20, 20, 96), [0, 3, 1, 2], 0),
                                              ((1, 21, 35, 27), [0, 2, 3, 1], 0), ((1, 96, 80, 80), [0, 2, 3, 1], 1)])
def test_a_transpose_runs_in_square_tiles(avx512, shape, perm, pad):
    """NCHW to NHWC and back (`pad`: with a depthwise conv's pad fused after it, which reads `x[.., w - 1]`): the loop
    along the input's last dimension and the output's innermost are split into tiles of about 16 (fp32 lanes of a
    zmm), the two tile loops innermost, the output's vectorized; element by element one side strides a whole row
    apart on every step."""
    spatial = [0, 0, pad, pad, pad, pad, 0, 0]
    mod = module(shape, lambda x: relax.op.nn.pad(relax.op.permute_dims(x, perm), spatial) if pad
                 else relax.op.permute_dims(x, perm))
    (func,) = kernels(mod, avx512)
    sch = loop_schedule(func, avx512)
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    loops = [sch.get(loop) for loop in sch.get_loops(block)]
    out_shape = [shape[i] + 2 * pad * (0 < axis < 3) for axis, i in enumerate(perm)]
    source = perm.index(len(shape) - 1)  # the output axis that walks the input's last dimension
    assert tvm.tirx.ForKind(int(loops[0].kind)) == tvm.tirx.ForKind.PARALLEL
    assert [int(loop.extent) for loop in loops[-2:]] == [tile(out_shape[source]), tile(out_shape[-1])]
    assert tvm.tirx.ForKind(int(loops[-1].kind)) == tvm.tirx.ForKind.VECTORIZED or int(loops[-1].extent) == 1
    assert source != len(shape) - 1
    replayed = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    sch.trace.apply_to_schedule(replayed, remove_postproc=False)
    tvm.ir.assert_structural_equal(replayed.mod, sch.mod)
    data = np.random.default_rng(2).normal(size=shape).astype("float32")
    expected = np.pad(data.transpose(perm), [(0, 0), (pad, pad), (pad, pad), (0, 0)])
    np.testing.assert_array_equal(run_built(mod, avx512, data), expected)


@pytest.mark.parametrize("pad", [0, 1])
def test_a_transpose_to_a_few_channels_is_left_whole_to_llvm_to_interleave(avx512, pad):
    """An image's NCHW to NHWC (3 channels; with the first conv's pad fused after it): the channels unrolled and the
    loop along the input's rows left whole, which LLVM vectorizes, interleaving the 3 planes into whole vectors by
    shuffles (as 16x3 tiles it read each 3-lane vector element by element); built for AVX-512 it holds
    vector shuffles and no 3-lane tiles; the output against numpy."""
    shape = (1, 3, 96, 100)  # enough elements to run in parallel
    mod = module(shape, lambda x: relax.op.nn.pad(relax.op.permute_dims(x, [0, 2, 3, 1]), [0, 0, pad, pad, pad, pad,
                                                                                         0, 0]))
    (func,) = kernels(mod, avx512)
    sch = loop_schedule(func, avx512)
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    loops = [sch.get(loop) for loop in sch.get_loops(block)]
    kinds = [tvm.tirx.ForKind(int(loop.kind)) for loop in loops]
    assert kinds[0] == tvm.tirx.ForKind.PARALLEL and tvm.tirx.ForKind.VECTORIZED not in kinds
    assert kinds[-1] == tvm.tirx.ForKind.UNROLLED and int(loops[-1].extent) == 3  # the channels
    assert kinds[-2] == tvm.tirx.ForKind.SERIAL and int(loops[-2].extent) == shape[3] + 2 * pad  # along the rows
    skylake = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512", "mtriple": "x86_64-linux-gnu"})
    assert any(shuffle in assembly(mod, skylake) for shuffle in ("vpermt2ps", "vpermi2ps", "vpermps", "vshufps", "vunpcklps"))
    data = np.random.default_rng(6).normal(size=shape).astype("float32")
    np.testing.assert_array_equal(run_built(mod, avx512, data),
                                  np.pad(data.transpose(0, 2, 3, 1), [(0, 0), (pad, pad), (pad, pad), (0, 0)]))


def _softmax(data, axis):
    exp = np.exp(data - data.max(axis=axis, keepdims=True))
    return exp / exp.sum(axis=axis, keepdims=True)


def _max_pool_nhwc(data):
    """3x3, stride 2, padding 1 over H and W of an NHWC array."""
    padded = np.pad(data, [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=-np.inf)
    height, width = (data.shape[1] - 1) // 2 + 1, (data.shape[2] - 1) // 2 + 1
    windows = [padded[:, i:i + 2 * height:2, j:j + 2 * width:2] for i in range(3) for j in range(3)]
    return np.max(windows, axis=0)


@pytest.mark.parametrize("shape, body, expected", [
    ((2, 8, 512), lambda x: relax.op.nn.softmax(x, axis=-1), lambda d: _softmax(d, -1)),
    ((1, 20, 20, 200), lambda x: relax.op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1, 1, 1), layout="NHWC"),
     _max_pool_nhwc)])
def test_no_masked_stores_on_avx2(shape, body, expected):
    """LLVM 22 turns a vector store of a select of the value loaded from the same place into `vmaskmovps`, which
    AMD Zen 1-3 run microcoded (llvm-project issue 213195): a softmax whose `x - max` was written in place and then
    overwritten by TOPI's fast exp, `max(exp, x)`, ran 4x slower than ONNX Runtime on a znver3; a max pool over
    200 channels left to LLVM's vectorizer stored its running maximum so. Built for znver3 (cross-compiled), no
    kernel holds one; on this host the outputs match numpy."""
    mod = module(shape, body, "fast_math,fuse")
    zen3 = assembly(mod, ZEN3)
    assert "ymm" in zen3 and "vmaskmov" not in zen3
    data = np.random.default_rng(5).normal(size=shape).astype("float32")
    np.testing.assert_allclose(tvm_runner("t", build_lowered(mod, HOST), {"x": data}, HOST).infer()[0],
                               expected(data), rtol=1e-5, atol=1e-6)


def test_a_concatenation_along_the_row_is_cut_into_its_inputs(avx512):
    """An NHWC concat of 24 + (24 + 24 + 24 + 4, doubled) + 8 + 72 (a tile) channels, the inner concat inlined into
    the outer: the row loop cut where each input starts (loop partition, the inner's bounds read through their
    shift), each short piece one whole vector, none reading every input and selecting (the long last one, which
    TVM cannot split as it does not start at 0, left to LLVM); the output against numpy, and, built for znver3,
    no masked store."""
    shape = (1, 20, 30, 24)

    def body(x):
        wide = relax.op.concat([x, x, x, relax.op.strided_slice(x, [3], [0], [4])], axis=3)  # 76 channels
        return relax.op.concat([x, relax.op.multiply(wide, relax.const(2.0, "float32")),
                                relax.op.strided_slice(x, [3], [0], [8]), relax.op.tile(x, [1, 1, 1, 3])], axis=3)

    mod = module(shape, body)
    (func,) = kernels(mod, avx512)
    sch = loop_schedule(func, avx512)
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    assert tvm.tirx.ForKind(int(sch.get(sch.get_loops(block)[0]).kind)) == tvm.tirx.ForKind.PARALLEL
    pieces = [line.split(" in ")[1] for line in sch.mod["main"].script().splitlines()
              if line.strip().startswith("for ") and "parallel" not in line]
    assert pieces == ["T.vectorized(T.int64(24)):", *(f"T.vectorized(T.int64({start}), T.int64({start + 24})):"
                                                        for start in (24, 48, 72)),
                      "T.vectorized(T.int64(96), T.int64(100)):", "T.vectorized(T.int64(100), T.int64(108)):",
                      "range(T.int64(108), T.int64(180)):"]  # 72 channels not from 0: left to LLVM
    data = np.random.default_rng(7).normal(size=shape).astype("float32")
    wide = np.concatenate([data, data, data, data[..., :4]], axis=3)
    expected = np.concatenate([data, wide * 2, data[..., :8], np.tile(data, (1, 1, 1, 3))], axis=3)
    np.testing.assert_array_equal(run_built(mod, avx512, data), expected)
    zen3 = assembly(mod, ZEN3)
    assert "ymm" in zen3 and "vmaskmov" not in zen3


@pytest.mark.parametrize("compare", ["<", "<=", ">", ">="])
@pytest.mark.parametrize("var_left", [True, False])
@pytest.mark.parametrize("shift", [0, -24, 5])
def test_a_comparison_of_the_row_var_is_cut_where_its_answer_changes(compare, var_left, shift):
    """`v + k OP 24` and `24 OP v + k`, every OP: the cut is the first v whose answer differs from the one before
    (checked against Python's comparison over a range of v)."""
    import operator

    op = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}[compare]
    v = tvm.tirx.Var("v", "int64")
    shifted = v + tvm.tirx.IntImm("int64", shift) if shift else v
    c = tvm.tirx.IntImm("int64", 24)
    node = op(shifted, c) if var_left else op(c, shifted)
    answers = [op(x + shift, 24) if var_left else op(24, x + shift) for x in range(80)]
    (expected,) = [x for x in range(1, 80) if answers[x] != answers[x - 1]]
    assert crossing(node, v) == expected
    assert crossing(tvm.tirx.LT(v * 2, c), v) is None  # not a shifted var: no cut
