"""fold_batchnorm folds its constant arithmetic with numpy: the same IR and the same weight bits as FoldConstant;
fold_constant folds every constant subgraph, whatever its ops, and records what it could not fold."""

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R
from tvm.script import tirx as T

from workbench.compile.build import build_lowered
from workbench.config.named_pipelines import expand
from workbench.config.pipeline_spec import parse_text
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.models.canonicalize import InputSpec, canonicalize
from workbench.models.importer import import_to_relax
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


def _weights_built_by_constant_subgraphs() -> onnx.ModelProto:
    """Convs whose weights an exporter computes from initializers with ops FoldConstant leaves computed (CumSum, a
    Split read through its tuple) or folds (DequantizeLinear of int8, Cast of fp16, a TF-layout Transpose, Range
    larger than canonicalize folds, ConstantOfShape + Expand)."""
    rng = np.random.default_rng(0)
    channels = 24
    inits = {
        "w_int8": rng.integers(-127, 127, (channels, 3, 3, 3)).astype(np.int8), "scale": np.array(0.01, np.float32),
        "zero": np.array(0, np.int8),
        "w_fp16": (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float16),
        "w_hwio": (rng.standard_normal((3, 3, channels, channels)) * 0.05).astype(np.float32),
        "steps": (rng.standard_normal((channels, channels, 3, 3)) * 0.01).astype(np.float32),
        "axis": np.array(1, np.int64),
        "pair": (rng.standard_normal((2 * channels, channels, 1, 1)) * 0.05).astype(np.float32),
        "start": np.array(0.0, np.float32), "limit": np.array(channels * channels, np.float32),
        "delta": np.array(1.0, np.float32), "square": np.array([channels, channels, 1, 1], np.int64),
        "tiny": np.array(1e-4, np.float32), "row": (rng.standard_normal((1, channels, 1, 1)) * 0.05).astype(np.float32),
    }
    node = onnx.helper.make_node
    nodes = [
        node("DequantizeLinear", ["w_int8", "scale", "zero"], ["w1"]), node("Conv", ["x", "w1"], ["y1"], pads=[1] * 4),
        node("Cast", ["w_fp16"], ["w2"], to=onnx.TensorProto.FLOAT), node("Conv", ["y1", "w2"], ["y2"], pads=[1] * 4),
        node("Transpose", ["w_hwio"], ["w3"], perm=[3, 2, 0, 1]), node("Conv", ["y2", "w3"], ["y3"], pads=[1] * 4),
        node("CumSum", ["steps", "axis"], ["w4"]), node("Conv", ["y3", "w4"], ["y4"], pads=[1] * 4),
        node("Split", ["pair"], ["wa", "wb"], axis=0), node("Conv", ["y4", "wa"], ["ya"]),
        node("Conv", ["y4", "wb"], ["yb"]), node("Add", ["ya", "yb"], ["y5"]),
        node("Range", ["start", "limit", "delta"], ["ramp"]), node("Reshape", ["ramp", "square"], ["ramp4"]),
        node("Mul", ["ramp4", "tiny"], ["w6"]), node("Conv", ["y5", "w6"], ["y6"]),
        node("ConstantOfShape", ["square"], ["filled"], value=onnx.numpy_helper.from_array(np.array([0.01], np.float32))),
        node("Expand", ["row", "square"], ["rows"]), node("Add", ["filled", "rows"], ["w7"]),
        node("Conv", ["y6", "w7"], ["out"]),
    ]
    graph = onnx.helper.make_graph(
        nodes, "computed_weights", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 20, 20])],
        [onnx.helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [1, channels, 20, 20])],
        [onnx.numpy_helper.from_array(value, name) for name, value in inits.items()])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)], ir_version=8)
    return canonicalize(model, {"x": InputSpec((1, 3, 20, 20))}).model


def test_fold_constant_turns_every_computed_weight_into_one_packed_constant(llvm):
    model = _weights_built_by_constant_subgraphs()
    mod = import_to_relax(model)
    folded, records = run_pipeline(mod, expand(parse_text("default"), "llvm"), llvm, stats=False)
    first = records[0]
    assert first.name == "fold_constant"
    # the evaluator took what TVM's FoldConstant leaves: the CumSum weight (the Split's pieces were read through
    # their tuple by CanonicalizeBindings)
    assert [entry.split(" ")[1] for entry in first.analysis["constants_evaluated"]] == ["(cumsum)"]
    assert first.analysis["constants_unfolded"] == []
    assert not {"relax.cumsum", "relax.split", "relax.dequantize", "relax.astype", "relax.arange",
                "relax.full", "relax.broadcast_to"} & set(first.ops_after)
    packing = next(record for record in records if record.name == "pack_conv2d")
    assert packing.analysis["conv2d_packed"] == 8 and packing.analysis["conv2d_kept"] == []
    inputs = {"x": np.random.default_rng(1).uniform(-1, 1, (1, 3, 20, 20)).astype(np.float32)}
    reference = ort_runner("ort_none", model, inputs).infer()[0]
    out = tvm_runner("t", build_lowered(folded, llvm), inputs, llvm).infer()[0]
    np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-4)


def test_fold_constant_records_a_constant_subgraph_the_host_cannot_evaluate(llvm):
    """A kernel already bound to GPU threads (fold_constant placed after a CUDA schedule) does not build for the CPU:
    it stays computed and the record says which binding, its ops and why."""

    @tvm.script.ir_module
    class Module:
        @T.prim_func
        def double(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
            for i in T.thread_binding(64, thread="threadIdx.x"):
                b[i] = a[i] * T.float32(2)

        @R.function
        def main(x: R.Tensor((64,), "float32")) -> R.Tensor((64,), "float32"):
            cls = Module
            with R.dataflow():
                weight = R.call_tir(cls.double, (R.const(np.ones(64, "float32")),), R.Tensor((64,), "float32"))
                ramp = R.cumsum(R.const(np.ones(64, "float32")), axis=0)
                y = R.add(R.add(x, weight), ramp)
                R.output(y)
            return y

    folded, (record,) = run_pipeline(Module, parse_text("fold_constant"), llvm, stats=False)
    assert [entry.split(" ")[1] for entry in record.analysis["constants_evaluated"]] == ["(cumsum)"]
    (why,) = record.analysis["constants_unfolded"]
    assert why.startswith("weight (call_tir): ") and len(why) > len("weight (call_tir): ")
    assert record.ops_after == {"relax.add": 2, "relax.call_tir": 1}


def _clipped_convs_with_transposed_weights() -> onnx.ModelProto:
    """Two convs with biases (imported as reshapes of constants), a weight stored HWIO and transposed in the graph
    (a TF export), and Clip(0, 6) between them (its bounds imported as NaN tests and selects of constants)."""
    rng = np.random.default_rng(3)
    w1_hwio = (rng.standard_normal((3, 3, 3, 8)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((5, 8, 3, 3)) * 0.2).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(a, name) for name, a in (
        ("w1_hwio", w1_hwio), ("b1", rng.standard_normal(8).astype(np.float32)), ("w2", w2),
        ("b2", rng.standard_normal(5).astype(np.float32)), ("low", np.array(0, np.float32)),
        ("high", np.array(6, np.float32)))]
    h = onnx.helper
    nodes = [h.make_node("Transpose", ["w1_hwio"], ["w1"], perm=[3, 2, 0, 1]),
             h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("Clip", ["c1", "low", "high"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 13, 11])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])


def test_fold_constant_folds_layout_ops_and_selects_in_numpy_to_the_bits_tvm_computes(llvm, monkeypatch):
    """fold_constant folds reshapes, transposes, NaN tests and selects of constants with numpy (FoldConstant would
    compile each with LLVM): nothing of those kinds is left on constants for FoldConstant, and the pipeline's
    module, constants included, is the one it makes with FoldConstant alone."""
    from workbench.passes import folding

    model = _clipped_convs_with_transposed_weights()
    mod = import_to_relax(model)
    pipeline = parse_text("fold_constant,convert_layout(conv2d=NHWC),fold_constant")
    folded, records = run_pipeline(mod, pipeline, llvm, stats=False)
    first, _layout, second = (record.analysis.get("folded_in_numpy", {}) for record in records)
    assert {"reshape", "isnan", "where"} <= set(first) and set(second) == {"permute_dims"}  # fold_constant used it
    fast_path = folding._numpy_fold  # noqa: SLF001 - the fast path itself is what is checked
    with monkeypatch.context() as patch:
        patch.setattr(folding, "_numpy_fold", tvm.transform.module_pass(lambda m, _c: m, opt_level=0, name="none"))
        expected, _records = run_pipeline(mod, pipeline, llvm, stats=False)
    tvm.ir.assert_structural_equal(folded, expected, map_free_vars=True)
    ours, theirs = constants(folded), constants(expected)
    assert len(ours) == len(theirs) >= 4
    assert all(a.dtype == b.dtype and a.tobytes() == b.tobytes() for a, b in zip(ours, theirs))

    def on_constants(module) -> set[str]:
        """The ops of bindings computed from constants only (shapes and attributes aside)."""
        found, constant = set(), set()
        for binding in (b for block in module["main"].body.blocks for b in block.bindings):
            value = binding.value
            if isinstance(value, tvm.ir.GenericConst):
                constant.add(binding.var)
            elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and all(
                    a in constant if isinstance(a, relax.Var) else not isinstance(a, (relax.Tuple, relax.Call))
                    for a in value.args):
                found.add(value.op.name)
                constant.add(binding.var)
        return found

    kinds = {"relax.reshape", "relax.permute_dims", "relax.isnan", "relax.where"}
    assert len(on_constants(mod) & kinds) >= 3  # what the import leaves: the test has something to fold
    assert not on_constants(fast_path(mod)) & kinds
    inputs = {"x": np.random.default_rng(1).uniform(-1, 1, (1, 3, 13, 11)).astype(np.float32)}
    reference = ort_runner("ort_none", model, inputs).infer()[0]
    out = tvm_runner("t", build_lowered(folded, llvm), inputs, llvm).infer()[0]
    np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-4)


def test_fold_constant_folds_index_arithmetic_on_static_shapes_gathers_and_joins_in_numpy(llvm, monkeypatch):
    """An unrolled LSTM's pattern: a gather index made from a static tensor's shape (shape_of, shape_to_tensor), made
    non-negative (less, add, where), a constant weight gathered by it and joined (take, concat). numpy folds all
    of it to FoldConstant's bits."""
    from workbench.passes import folding

    rng = np.random.default_rng(5)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([3, 2], "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            index = builder.emit(relax.op.shape_to_tensor(builder.emit(relax.op.shape_of(x))))  # [3, 2]
            shifted = builder.emit(relax.op.subtract(index, relax.const(np.array([4, 1]), "int64")))  # [-1, 1]
            negative = builder.emit(relax.op.less(shifted, relax.const(np.array(0), "int64")))
            wrapped = builder.emit(relax.op.where(negative, relax.op.add(shifted, relax.const(np.array(4), "int64")),
                                                  shifted))  # [3, 1]
            weight = relax.const(rng.standard_normal((4, 2)).astype(np.float32))
            rows = builder.emit(relax.op.take(weight, wrapped, axis=0))  # [2, 2]
            joined = builder.emit(relax.op.concat([rows, relax.const(np.ones((1, 2), np.float32))], axis=0))
            out = builder.emit_output(relax.op.add(x, joined))
        builder.emit_func_output(out)
    mod = builder.get()
    folded, (record,) = run_pipeline(mod, parse_text("fold_constant"), llvm, stats=False)
    assert {"shape_to_tensor", "subtract", "less", "add", "where", "take", "concat"} <= set(
        record.analysis["folded_in_numpy"])
    with monkeypatch.context() as patch:
        patch.setattr(folding, "_numpy_fold", tvm.transform.module_pass(lambda m, _c: m, opt_level=0, name="none"))
        expected, _records = run_pipeline(mod, parse_text("fold_constant"), llvm, stats=False)
    tvm.ir.assert_structural_equal(folded, expected, map_free_vars=True)
    (ours,), (theirs,) = constants(folded), constants(expected)
    assert ours.tobytes() == theirs.tobytes() and ours.shape == (3, 2)


def test_fold_constant_in_numpy_keeps_tvms_bits_where_ieee_and_tvm_differ(llvm, monkeypatch):
    """Where TVM does not compute IEEE's answer, numpy must not either: float != with a NaN (LLVM's `fcmp one`:
    false), and arithmetic with a 0-d 0 or 1 (TIR folds x * 0 to 0 even for NaN, -0 + 0 to -0)."""
    from workbench.passes import folding

    special = relax.const(np.array([np.nan, -np.inf, -0.0, 2.5], np.float32))
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            differs = builder.emit(relax.op.not_equal(special, relax.const(np.ones(4, np.float32))))
            times_zero = builder.emit(relax.op.multiply(special, relax.const(0.0, "float32")))
            plus_zero = builder.emit(relax.op.add(special, relax.const(0.0, "float32")))
            picked = builder.emit(relax.op.where(differs, times_zero, plus_zero))
            out = builder.emit_output(relax.op.add(x, picked))
        builder.emit_func_output(out)
    mod = builder.get()
    folded, _records = run_pipeline(mod, parse_text("fold_constant"), llvm, stats=False)
    with monkeypatch.context() as patch:
        patch.setattr(folding, "_numpy_fold", tvm.transform.module_pass(lambda m, _c: m, opt_level=0, name="none"))
        expected, _records = run_pipeline(mod, parse_text("fold_constant"), llvm, stats=False)
    (ours,), (theirs,) = constants(folded), constants(expected)
    assert ours.tobytes() == theirs.tobytes()
