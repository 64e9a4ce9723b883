"""Layout conversion, pattern fusion and analysis passes: real IR changes counted, real numerics against ORT."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm_ffi import structural_hash  # TVM 0.27 moved tvm.ir.structural_hash here

from workbench.compile.build import build_lowered
from workbench.config.pipeline_spec import parse_text
from workbench.errors import UserError
from workbench.measure.runners import ort_runner, tvm_runner
from workbench.passes.figures import count_kernels, count_ops
from workbench.passes.patterns import PATTERNS, composites, pattern_kernels
from workbench.passes.pipeline import run_pipeline


def inputs_for(model, seed=0):
    rng = np.random.default_rng(seed)
    value = model.graph.input[0]
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    return {value.name: rng.uniform(0, 1, shape).astype(np.float32)}


def run(mod, text, target, **kwargs):
    return run_pipeline(mod, parse_text(text), target, **kwargs)


def assert_matches_ort(model, optimized, target):
    inputs = inputs_for(model)
    reference = ort_runner("ort_none", model, inputs).infer()[0]
    built = build_lowered(optimized, target)
    np.testing.assert_allclose(tvm_runner("t", built, inputs, target).infer()[0], reference, atol=1e-4, rtol=1e-4)
    return built


def conv2d_calls(mod):
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d":
            calls.append(expr)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return calls


@pytest.fixture(scope="module")
def convnet_folded(zoo_relax, llvm):
    """convnet_small after fold_constant,fold_batchnorm (conv2d -> add(bias) -> relu), its ONNX and unfused kernels."""
    model, mod = zoo_relax("convnet_small")
    folded, _ = run(mod, "fold_constant,fold_batchnorm", llvm, stats=False)
    return model, folded, build_lowered(folded, llvm).kernels


# ---------------------------------------------------------------- convert_layout

def test_convert_layout_nhwc_changes_conv_layouts_and_keeps_numerics(convnet_folded, llvm):
    model, folded, _ = convnet_folded
    assert {str(c.attrs.data_layout) for c in conv2d_calls(folded)} == {"NCHW"}
    converted, (record,) = run(folded, "convert_layout(conv2d=NHWC)", llvm)
    convs = conv2d_calls(converted)
    assert len(convs) == 6
    assert {(str(c.attrs.data_layout), str(c.attrs.kernel_layout)) for c in convs} == {("NHWC", "HWIO")}
    moved = sum(record.ops_after.get(op, 0) for op in ("relax.layout_transform", "relax.permute_dims"))
    before = sum(record.ops_before.get(op, 0) for op in ("relax.layout_transform", "relax.permute_dims"))
    assert record.analysis["layout_ops_before"] == before and record.analysis["layout_ops_after"] == moved
    assert moved > before  # the input, weights and bias are transposed, the output back to NCHW
    assert_matches_ort(model, converted, llvm)


def test_convert_layout_takes_the_frontends_clips_along(zoo_relax, llvm):
    """mobilenet_block's four Clips (two call_tir, two relax.clip from the ONNX frontend) become maximum/minimum and
    follow NHWC: only the graph input and output are transposed (the weights folded), none around a Clip."""
    model, mod = zoo_relax("mobilenet_block")
    converted, records = run(mod, "fold_constant,fold_batchnorm,convert_layout(conv2d=NHWC),fold_constant", llvm)
    ops = records[-1].ops_after
    assert "relax.clip" not in ops and "relax.call_tir" not in ops
    assert ops["relax.maximum"] == ops["relax.minimum"] == 4
    assert ops["relax.permute_dims"] == 3  # the input to NHWC (twice: the residual reads it too), the output back
    assert_matches_ort(model, converted, llvm)


def affine_convnet():
    """x [1, 4, 10, 10] -> Conv -> Mul(scale, .) -> Add(., shift) -> Conv, scale and shift of shape (1,) and the
    scale first: rapidocr det's LearnableAffineBlock as Paddle exports it."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    arrays = {"w1": rng.standard_normal((8, 4, 3, 3)), "w2": rng.standard_normal((6, 8, 1, 1)),
              "scale": np.array([1.7]), "shift": np.array([-0.3])}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["scale", "c1"], ["m"]), helper.make_node("Add", ["m", "shift"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v.astype("float32"), k) for k, v in arrays.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_convert_layout_takes_rank_1_constants_given_first_along(llvm):
    """`Mul(scale, x)` with a (1,) scale: ConvertLayout alone keeps it NCHW in a transpose pair; with the constant
    second at full rank only the input and output are transposed."""
    from workbench.models.importer import import_to_relax

    model = affine_convnet()
    mod = import_to_relax(model)
    plain = relax.transform.FoldConstant()(relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]})(mod))
    assert count_ops(plain)["relax.permute_dims"] == 4  # TVM's pass alone: in, out, and a pair around the Mul
    converted, records = run(mod, "convert_layout(conv2d=NHWC),fold_constant", llvm)
    assert records[-1].ops_after["relax.permute_dims"] == 2
    assert_matches_ort(model, converted, llvm)


def test_convert_layout_explicit_kernel_layout(convnet_folded, llvm):
    _, folded, _ = convnet_folded
    converted, _ = run(folded, "convert_layout(conv2d=[NHWC,OHWI])", llvm, stats=False)
    assert {str(c.attrs.kernel_layout) for c in conv2d_calls(converted)} == {"OHWI"}


@pytest.mark.parametrize("text, fragment", [("convert_layout(conv9d=NHWC)", "unknown op 'conv9d'"),
                                            ("convert_layout(max_pool2d=NHWC)", "follows the layout of its input"),
                                            ("convert_layout(conv2d=NWHC)", "data layout 'NWHC' is not one of"),
                                            ("convert_layout(conv2d=[NHWC,OIHX])", "must be a permutation"),
                                            ("convert_layout", "give at least one op=layout")])
def test_convert_layout_bad_params_are_user_errors(convnet_folded, llvm, text, fragment):
    with pytest.raises(UserError, match="convert_layout") as info:
        run(convnet_folded[1], text, llvm)
    assert fragment in str(info.value)


# ---------------------------------------------------------------- fuse_patterns

def test_fuse_patterns_convnet_counts_composites_fewer_kernels_same_numerics(convnet_folded, llvm):
    model, folded, unfused_kernels = convnet_folded
    relus = count_ops(folded)["relax.nn.relu"]
    fused, (record,) = run(folded, "fuse_patterns", llvm)
    # 6 relus: 2 after a residual add, 4 after conv+bias; the head's matmul+bias is matched too
    assert record.analysis["composites"] == {"conv2d_add_relu": 2, "conv2d_bias_relu": relus - 2, "matmul_bias": 1}
    assert set(pattern_kernels(fused)) == {"conv2d_add_relu", "conv2d_bias_relu", "matmul_bias"}
    assert "relax.nn.conv2d" not in record.ops_after
    built = assert_matches_ort(model, fused, llvm)
    assert built.kernels < unfused_kernels, (built.kernels, unfused_kernels)
    assert record.analysis["kernels"] == built.kernels


def test_fuse_patterns_unlowered_keeps_composite_functions_in_the_ir(convnet_folded, llvm):
    model, folded, _ = convnet_folded
    kept, (record,) = run(folded, "fuse_patterns(lower=false)", llvm, stats=False)
    assert composites(kept) == record.analysis["composites"]
    assert sum(record.analysis["composites"].values()) == 7
    # the graph left in main has no conv2d/relu any more: they moved into the composite functions
    main_ops = count_ops(tvm.IRModule({"main": kept["main"]}))
    assert "relax.nn.conv2d" not in main_ops and "relax.nn.relu" not in main_ops
    assert_matches_ort(model, kept, llvm)


def test_fuse_patterns_selects_one_pattern_by_name(convnet_folded, llvm):
    _, folded, _ = convnet_folded
    only, (record,) = run(folded, "fuse_patterns(patterns=conv2d_bias_relu,lower=false)", llvm, stats=False)
    assert record.analysis["composites"] == {"conv2d_bias_relu": 4}
    main_ops = count_ops(tvm.IRModule({"main": only["main"]}))
    assert main_ops["relax.nn.conv2d"] == 2 and main_ops["relax.nn.relu"] == 2  # the residual ones stay
    residual, (record,) = run(folded, "fuse_patterns(patterns=[conv2d_add_relu])", llvm, stats=False)
    assert record.analysis["composites"] == {"conv2d_add_relu": 2} and set(pattern_kernels(residual)) == {"conv2d_add_relu"}


def test_fuse_patterns_transformer_gelu_and_layernorm(zoo_relax, llvm):
    model, mod = zoo_relax("transformer_block")
    folded, _ = run(mod, "fold_constant", llvm, stats=False)
    unfused = build_lowered(folded, llvm).kernels
    fused, (record,) = run(folded, "fuse_patterns", llvm)
    assert record.analysis["composites"] == {"layernorm": 2, "matmul_bias": 5, "matmul_bias_gelu": 1}
    built = assert_matches_ort(model, fused, llvm)
    assert built.kernels < unfused, (built.kernels, unfused)
    gelu, (record,) = run(folded, "fuse_patterns(patterns=matmul_bias_gelu,lower=false)", llvm, stats=False)
    assert record.analysis["composites"] == {"matmul_bias_gelu": 1}
    main_ops = count_ops(tvm.IRModule({"main": gelu["main"]}))
    assert "relax.erf" not in main_ops and main_ops["relax.nn.layer_norm"] == 2 and main_ops["relax.matmul"] == 7
    assert_matches_ort(model, gelu, llvm)


def test_fuse_patterns_decomposed_layernorm_becomes_one_kernel(llvm):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 8, 16), "float32"))
    rng = np.random.default_rng(0)
    gamma, beta = (rng.uniform(0.5, 1.5, 16).astype("float32") for _ in range(2))
    with bb.function("main", [x]):
        with bb.dataflow():
            mean = bb.emit(relax.op.mean(x, axis=[-1], keepdims=True))
            centered = bb.emit(relax.op.subtract(x, mean))
            var = bb.emit(relax.op.mean(relax.op.power(centered, relax.const(2.0, "float32")), axis=[-1], keepdims=True))
            normed = bb.emit(relax.op.divide(centered, relax.op.sqrt(relax.op.add(var, relax.const(1e-5, "float32")))))
            out = bb.emit_output(relax.op.add(relax.op.multiply(normed, relax.const(gamma)), relax.const(beta)))
        bb.emit_func_output(out)
    mod = bb.get()
    fused, (record,) = run(mod, "fuse_patterns(patterns=layernorm)", llvm)
    assert record.analysis["composites"] == {"layernorm": 1} and pattern_kernels(fused) == {"layernorm": 1}
    assert count_kernels(fused) == 1
    data = rng.normal(0, 1, (2, 8, 16)).astype("float32")
    expected = (data - data.mean(-1, keepdims=True)) / np.sqrt(data.var(-1, keepdims=True) + 1e-5) * gamma + beta
    got = tvm_runner("t", build_lowered(fused, llvm), {"x": data}, llvm).infer()[0]
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_unknown_pattern_is_a_user_error_listing_the_names(convnet_folded, llvm):
    with pytest.raises(UserError, match="pipeline\\[0\\]") as info:
        run(convnet_folded[1], "fuse_patterns(patterns=[conv2d_bias_relu,conv_bn_relu])", llvm)
    assert "'conv_bn_relu'" in str(info.value) and all(name in str(info.value) for name in PATTERNS)


# ---------------------------------------------------------------- analysis passes

ANALYSES = "op_histogram,static_shapes,planned_memory,kernel_count"


@pytest.mark.parametrize("name", ["convnet_small", "mobilenet_block", "transformer_block"])
def test_analysis_passes_report_and_leave_the_module_unchanged(zoo_relax, llvm, name):
    _, mod = zoo_relax(name)
    out, records = run(mod, ANALYSES, llvm)
    assert structural_hash(out) == structural_hash(mod)
    tvm.ir.assert_structural_equal(out, mod)
    histogram, shapes, memory, kernels = (r.analysis for r in records)
    assert histogram["ops"] == count_ops(mod)
    assert shapes["dynamic"] == 0 and shapes["bindings"] > len(count_ops(mod))
    assert memory["planned_bytes"] > 0 and memory["storages"] > 0
    assert kernels["kernels"] == build_lowered(mod, llvm).kernels
    # every pass also carries the module's kernel count and planned bytes after it
    assert all(r.analysis["kernels"] == kernels["kernels"] for r in records)
    assert all(r.analysis["planned_bytes"] == memory["planned_bytes"] for r in records)


def test_static_shapes_counts_dynamic_bindings(llvm):
    bb = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((n, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(x, x))
            out = bb.emit_output(relax.op.sum(y, axis=[0]))
        bb.emit_func_output(out)
    _, (record,) = run(bb.get(), "static_shapes", llvm, stats=False)
    assert record.analysis["bindings"] == 3 and record.analysis["dynamic"] == 2  # x and y; the sum is static


@pytest.mark.parametrize("name", ["convnet_small", "transformer_block"])
def test_fuse_lowers_planned_memory_and_kernel_count(zoo_relax, llvm, name):
    _, mod = zoo_relax(name)
    _, records = run(mod, "fold_constant,planned_memory,kernel_count,fuse,planned_memory,kernel_count", llvm)
    before_mem, before_k, after_mem, after_k = (records[i].analysis for i in (1, 2, 4, 5))
    assert 0 < after_mem["planned_bytes"] < before_mem["planned_bytes"]
    assert after_k["kernels"] < before_k["kernels"]
    assert records[3].analysis["kernels"] == after_k["kernels"]  # the per-pass figure agrees
