"""The register-blocked schedule untuned CPU matmul-like kernels get (kernels/gemm_schedule.py): dense with a fused
epilogue, matmul, batch_matmul with a transposed B, odd sizes; outputs against numpy and ONNX Runtime, the loops
the kernel got, a trace that replays, and the kernels it does not fit."""

import numpy as np
import tvm
from tvm import relax, te, topi

from workbench.compile.build import build_lowered, legalized
from workbench.compile.targets import make_target
from workbench.config import TargetConfig, validate
from workbench.config.pipeline_spec import parse_text
from workbench.kernels.default_schedule import default_schedule
from workbench.kernels.gemm_schedule import gemm_schedule, tile
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.passes.pipeline import run_pipeline

HOST = make_target(TargetConfig())  # this machine's CPU
RNG = np.random.default_rng(0)


def module(shapes, body):
    """A Relax module of inputs x0, x1, ... of `shapes` whose output is `body(*inputs)`, fused into kernels."""
    bb = relax.BlockBuilder()
    inputs = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i, shape in enumerate(shapes)]
    with bb.function("main", inputs):
        with bb.dataflow():
            out = bb.emit_output(body(*inputs))
        bb.emit_func_output(out)
    fused, _ = run_pipeline(bb.get(), parse_text("fuse"), HOST, stats=False)
    return fused


def loop_kinds(sch) -> set[str]:
    """The kinds of the loops around the blocks of a scheduled kernel."""
    return {tvm.tirx.ForKind(int(sch.get(loop).kind)).name for block in sch.get_child_blocks(sch.get_sblock("root"))
            for loop in sch.get_loops(block)}


def run(mod, arrays):
    built = build_lowered(mod, HOST)
    return tvm_runner("t", built, {f"x{i}": a for i, a in enumerate(arrays)}, HOST).infer()[0]


def the_kernel(mod, word="matmul"):
    (func,) = [f for gv, f in legalized(mod, HOST).functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and word in gv.name_hint]
    return func


def test_dense_with_bias_and_relu_at_odd_sizes():
    """M=7, N=13, K=33: no vector width divides, the tile is the whole 7 x 13 output, its 13 columns one vector;
    the bias and relu run per tile."""
    weight, bias = RNG.normal(size=(33, 13)).astype("float32"), RNG.normal(size=13).astype("float32")
    mod = module([(7, 33)], lambda x: relax.op.nn.relu(relax.op.add(relax.op.matmul(x, relax.const(weight)),
                                                                   relax.const(bias))))
    sch = gemm_schedule(the_kernel(mod), HOST)
    assert sch is not None and "VECTORIZED" in loop_kinds(sch) and "UNROLLED" in loop_kinds(sch)
    assert len(sch.get_child_blocks(sch.get_sblock("root"))) == 3  # init, update, the fused epilogue
    data = RNG.normal(size=(7, 33)).astype("float32")
    np.testing.assert_allclose(run(mod, [data]), np.maximum(data @ weight + bias, 0), rtol=1e-5, atol=1e-5)


def test_batched_matmul_by_a_weight_runs_in_parallel_vector_tiles():
    weight = RNG.normal(size=(64, 96)).astype("float32")
    mod = module([(2, 64, 64)], lambda x: relax.op.matmul(x, relax.const(weight)))
    sch = gemm_schedule(the_kernel(mod), HOST)
    assert sch is not None and {"PARALLEL", "VECTORIZED", "UNROLLED"} <= loop_kinds(sch)
    data = RNG.normal(size=(2, 64, 64)).astype("float32")
    np.testing.assert_allclose(run(mod, [data]), data @ weight, rtol=1e-4, atol=1e-4)


def test_batch_matmul_with_a_transposed_b_builds_and_matches_numpy():
    """topi's batch_matmul reads B as [batch, n, k] (attention's Q K^T): the same tile, B's column vector strided."""
    a, b = te.placeholder((3, 7, 33), name="a"), te.placeholder((3, 13, 33), name="b")
    func = te.create_prim_func([a, b, topi.nn.batch_matmul(a, b, transpose_b=True)])
    sch = gemm_schedule(func, HOST)
    assert sch is not None and "VECTORIZED" in loop_kinds(sch)
    lib = tvm.compile(sch.mod, HOST)
    x, y = RNG.normal(size=(3, 7, 33)).astype("float32"), RNG.normal(size=(3, 13, 33)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((3, 7, 13), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_allclose(out.numpy(), x @ y.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


def test_the_trace_replays_on_the_kernel():
    """Tuning commits the default schedule's trace as the task's first record: replayed on the unscheduled kernel
    it gives the same function."""
    mod = module([(32, 64)], lambda x: relax.op.add(relax.op.matmul(x, relax.const(RNG.normal(size=(64, 256)).astype(
        "float32"))), relax.const(1.0)))
    func = the_kernel(mod)
    sch = default_schedule(func, HOST)
    replayed = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    sch.trace.apply_to_schedule(replayed, remove_postproc=False)
    tvm.ir.assert_structural_equal(replayed.mod, sch.mod)


def test_tiles_take_divisors_and_keep_to_the_registers():
    assert tile(32, 64, 16) == (4, 32)  # 2 vectors of columns, 6 rows at most: the largest divisor of 32
    assert tile(32, 48, 16) == (8, 16)
    assert tile(7, 13, 16) == (7, 13)
    assert tile(1, 2, 16) == (1, 2)


def test_kernels_it_does_not_fit_keep_their_schedule():
    """A relax conv (an index like h + kh) keeps plain loops; an elementwise kernel still gets loop_schedule's."""
    weight = relax.const(RNG.normal(size=(8, 4, 3, 3)).astype("float32"))
    conv = the_kernel(module([(1, 4, 9, 9)], lambda x: relax.op.nn.conv2d(x, weight)), "conv2d")
    assert gemm_schedule(conv, HOST) is None and default_schedule(conv, HOST) is None
    add = the_kernel(module([(4, 64), (4, 64)], lambda x, y: relax.op.multiply(x, y)), "multiply")
    assert gemm_schedule(add, HOST) is None and default_schedule(add, HOST) is not None
    a, v = te.placeholder((8, 32), name="a"), te.placeholder((32,), name="v")
    k = te.reduce_axis((0, 32), "k")
    broadcast = te.compute((8, 16), lambda i, j: te.sum(a[i, k] * v[k], axis=k))  # its columns read by neither
    assert gemm_schedule(te.create_prim_func([a, v, broadcast]), HOST) is None


def test_transformer_block_with_the_default_pipeline_matches_ort(zoo_relax):
    """Every matmul of the zoo's transformer block (q, k, v, the two attention products, the GELU MLP) gets the
    tile, and the build matches ONNX Runtime."""
    model, mod = zoo_relax("transformer_block")
    specs = validate({"name": "t", "model": {"source": "zoo:transformer_block", "inputs": {}},
                      "pipeline": "default"}, "t").pipeline
    optimized, _ = run_pipeline(mod, specs, HOST, stats=False)
    kernels = {gv.name_hint: f for gv, f in legalized(optimized, HOST).functions.items()
               if isinstance(f, tvm.tirx.PrimFunc)}
    matmuls = [name for name in kernels if "matmul" in name]
    assert len(matmuls) >= 6 and all(gemm_schedule(kernels[name], HOST) is not None for name in matmuls)
    data = {"x": RNG.uniform(0, 1, (1, 32, 64)).astype("float32")}
    built = build_lowered(optimized, HOST)
    assert built.fell_back == []
    np.testing.assert_allclose(tvm_runner("workbench", built, data, HOST).infer()[0],
                               ort_runner("ort_none", model, data).infer()[0], rtol=1e-4, atol=1e-4)



def _update_loops(sch) -> list[str]:
    """The kinds of the loops around the matmul's update block, outside in."""
    return [tvm.tirx.ForKind(int(sch.get(loop).kind)).name for loop in sch.get_loops(sch.get_sblock("matmul_update"))]


def test_a_gemv_streams_b_row_by_row_in_column_chunks():
    """One row of A (a fully connected layer at batch 1): each parallel task owns a chunk of columns and walks K
    outside it, several rows of B per vector of sums (unrolled), so B is read in order; odd K and N divide in."""
    for k, n in ((512, 2048), (333, 4100), (768, 1000)):
        weight, bias = RNG.normal(size=(k, n)).astype("float32"), RNG.normal(size=n).astype("float32")
        mod = module([(1, k)], lambda x, w=weight, b=bias: relax.op.nn.relu(relax.op.add(
            relax.op.matmul(x, relax.const(w)), relax.const(b))))
        sch = gemm_schedule(the_kernel(mod), HOST)
        assert sch is not None
        kinds = _update_loops(sch)
        assert kinds[0] == "PARALLEL" and kinds[-1] == "VECTORIZED" and "UNROLLED" in kinds, kinds
        tasks = int(sch.get(sch.get_loops(sch.get_sblock("matmul_update"))[0]).extent)
        assert tasks >= 4, f"{n} columns in {tasks} chunks: too few for the cores"
        replayed = tvm.s_tir.Schedule(tvm.IRModule({"main": the_kernel(mod)}))
        sch.trace.apply_to_schedule(replayed, remove_postproc=False)
        tvm.ir.assert_structural_equal(replayed.mod, sch.mod)
        data = RNG.normal(size=(1, k)).astype("float32")
        np.testing.assert_allclose(run(mod, [data]), np.maximum(data @ weight + bias, 0), rtol=1e-4, atol=1e-4)


def test_a_gemv_whose_columns_have_no_vector_divisor_keeps_the_register_tile():
    """4099 columns (a prime): no vector divides them, so no GEMV chunks of scalar columns (one task per column);
    the register tile takes it, its tasks over the columns."""
    weight = RNG.normal(size=(64, 4099)).astype("float32")
    mod = module([(1, 64)], lambda x: relax.op.matmul(x, relax.const(weight)))
    sch = gemm_schedule(the_kernel(mod), HOST)
    assert sch is not None and "matmul_global" in sch.mod["main"].script()  # the tile's write-back, not a GEMV
    data = RNG.normal(size=(1, 64)).astype("float32")
    np.testing.assert_allclose(run(mod, [data]), data @ weight, rtol=1e-4, atol=1e-4)


def test_a_weight_larger_than_the_activations_is_walked_column_tile_by_column_tile():
    """[32, 512] x [512, 2048] (an LSTM's input projection over its steps): the tile loops run column tiles outside
    row tiles, so each column of B is read once while A stays in cache (rows outside read B once per row tile:
    0.86 -> 0.59 ms on znver4); outputs are numpy's."""
    weight = RNG.normal(size=(512, 2048)).astype("float32")
    mod = module([(32, 512)], lambda x: relax.op.matmul(x, relax.const(weight)))
    sch = gemm_schedule(the_kernel(mod), HOST)
    update = next(b for b in sch.get_child_blocks(sch.get_sblock("root")) if sch.get(b).name_hint.endswith("update"))
    names = [sch.get(loop).loop_var.name for loop in sch.get_loops(update)]
    column = names[-1].split("_")[0]  # the innermost, vectorized loop walks the columns: ax1_1_1 -> ax1
    assert names[0].endswith("_fused") and names[0].startswith(f"{column}_0_")  # e.g. ax1_0_ax0_0_fused
    data = RNG.normal(size=(32, 512)).astype("float32")
    np.testing.assert_allclose(run(mod, [data]), data @ weight, rtol=1e-4, atol=1e-3)
