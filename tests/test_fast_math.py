"""fast_math: the approximations replace the exact ops, still fuse, and match ONNX Runtime's numbers."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from workbench.compile.build import build_lowered
from workbench.config.pipeline_spec import parse_text
from workbench.errors import UserError
from workbench.measure.runners import tvm_runner
from workbench.models.importer import import_to_relax
from workbench.passes.analysis import module_stats
from workbench.passes.figures import count_ops
from workbench.passes.pipeline import run_pipeline

EXACT_OPS = ("relax.erf", "relax.exp", "relax.tanh", "relax.nn.softmax", "relax.nn.gelu", "relax.sigmoid")


def transcendental_model() -> onnx.ModelProto:
    """x -> Erf, Exp, Tanh, Softmax, Gelu and Sigmoid of it, each an output (inputs span [-4, 4])."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])
    names = ["erf", "exp", "tanh", "softmax", "gelu", "sigmoid"]
    nodes = [helper.make_node("Erf", ["x"], ["erf"]), helper.make_node("Exp", ["x"], ["exp"]),
             helper.make_node("Tanh", ["x"], ["tanh"]), helper.make_node("Softmax", ["x"], ["softmax"], axis=-1),
             helper.make_node("Gelu", ["x"], ["gelu"]), helper.make_node("Sigmoid", ["x"], ["sigmoid"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 256]) for n in names]
    graph = helper.make_graph(nodes, "transcendental", [x], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def run_fast_math(mod, text: str, target):
    return run_pipeline(mod, parse_text(text), target, stats=False)[0]


def test_fast_math_matches_onnx_runtime_and_leaves_no_exact_op(llvm):
    model = transcendental_model()
    mod = import_to_relax(model)
    before = count_ops(mod)
    assert all(before.get(op, 0) == 1 for op in EXACT_OPS), before

    fast = run_fast_math(mod, "fast_math", llvm)
    after = count_ops(fast)
    assert not any(after.get(op) for op in EXACT_OPS), after
    assert after["relax.call_tir"] == len(EXACT_OPS)

    x = np.linspace(-4, 4, 4 * 256, dtype="float32").reshape(4, 256)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = tvm_runner("fast", build_lowered(run_fast_math(mod, "fast_math,fuse", llvm), llvm), {"x": x}, llvm).infer()
    for name, want, have in zip(("erf", "exp", "tanh", "softmax", "gelu", "sigmoid"), expected, got, strict=True):
        np.testing.assert_allclose(have, want, rtol=2e-5, atol=2e-6, err_msg=name)


def test_fast_math_ops_option_picks_what_is_approximated(llvm):
    mod = import_to_relax(transcendental_model())
    after = count_ops(run_fast_math(mod, "fast_math(ops=[erf])", llvm))
    assert "relax.erf" not in after
    assert all(after.get(op) == 1 for op in EXACT_OPS if op != "relax.erf")
    with pytest.raises(UserError, match="fast_math"):
        run_fast_math(mod, "fast_math(ops=[sin])", llvm)


def test_fast_erf_fuses_into_the_transformer_matmul(zoo_relax, llvm):
    """The GELU's fast erf joins the MLP matmul's kernel: as many kernels as the exact pipeline, none with erf."""
    _, mod = zoo_relax("transformer_block")
    exact = run_fast_math(mod, "fold_constant,fuse", llvm)
    fast = run_fast_math(mod, "fold_constant,fast_math,fuse", llvm)
    assert module_stats(fast, llvm)["kernels"] == module_stats(exact, llvm)["kernels"]
    assert any("erf" in gv.name_hint and "matmul" in gv.name_hint for gv in exact.get_global_vars())
    assert any("fast_erf" in gv.name_hint and "matmul" in gv.name_hint for gv in fast.get_global_vars())


def test_powers_by_a_constant_become_multiplies_and_square_roots(llvm):
    """Pow by 2, 0.5, 0.75 (LRN's beta), -0.5 and -1 is rewritten (LLVM would call powf one lane at a time); an
    exponent without a form (1.3) and a computed one stay `power`; the outputs match ONNX Runtime's."""
    exponents = [2.0, 0.5, 0.75, -0.5, -1.0, 1.3]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])
    nodes = [helper.make_node("Pow", ["x", f"e{i}"], [f"p{i}"]) for i in range(len(exponents))]
    nodes.append(helper.make_node("Pow", ["x", "x"], ["computed"]))
    inits = [helper.make_tensor(f"e{i}", TensorProto.FLOAT, [], [e]) for i, e in enumerate(exponents)]
    outputs = [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, [4, 256]) for node in nodes]
    model = helper.make_model(helper.make_graph(nodes, "powers", [x], outputs, inits),
                              opset_imports=[helper.make_opsetid("", 15)])
    mod = import_to_relax(model)
    fast = run_fast_math(mod, "fast_math", llvm)
    assert count_ops(fast).get("relax.power") == 2  # 1.3 and x ** x
    data = np.linspace(0.05, 4, 4 * 256, dtype="float32").reshape(4, 256)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": data})
    got = tvm_runner("fast", build_lowered(run_fast_math(mod, "fast_math,fuse", llvm), llvm), {"x": data}, llvm).infer()
    for name, want, have in zip([*map(str, exponents), "computed"], expected, got, strict=True):
        np.testing.assert_allclose(have, want, rtol=2e-6, atol=1e-7, err_msg=name)
