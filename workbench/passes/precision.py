"""Precision passes: fp16 mixed precision and INT8 calibration with Q/DQ annotation.

Both work on high-level Relax operators (`relax.nn.conv2d`, `relax.matmul`, ...), so they must run
before `fuse` (which lowers everything to TIR calls).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Literal

import numpy as np
import tvm
from pydantic import BaseModel, ConfigDict, Field, field_validator
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from workbench.errors import UserError
from workbench.passes import calibration
from workbench.passes.clip import clip_as_ops
from workbench.passes.figures import report_analysis
from workbench.passes.int8 import lower_int8, weight_qmax
from workbench.passes.registry import register
from workbench.passes.rewrite import rewrite_functions

# ---------------------------------------------------------------------------------------------- fp16

# ToMixedPrecision reads this op attribute: 0 = always fp16, 1 = follow the inputs, 2 = never (fp32).
_POLICY_ATTR = "TMixedPrecisionPolicy"
_FOLLOW, _NEVER = 1, 2
# ops TVM registers no policy for although they are elementwise: without one, ToMixedPrecision casts every
# argument to fp32 and fails on clip's PrimValue bounds ("Expected TensorType, but got T.int64")
_FOLLOWING = {"relax.clip": _FOLLOW}


def _op_name(name: str) -> str:
    """`nn.softmax` or `relax.nn.softmax` -> `relax.nn.softmax`."""
    return name if name.startswith("relax.") else "relax." + name


def _known_op(name: str) -> bool:
    try:
        tvm.ir.Op.get(name)
    except Exception:  # noqa: BLE001 - TVM raises its own error type for an unregistered op
        return False
    return True


class Fp16Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    out_dtype: Literal["float16", "float32"] = Field(
        default="float32", description="accumulation (output) dtype of conv2d/matmul run in fp16")
    keep_fp32: list[str] = Field(
        default_factory=list,
        description="Relax op names kept in fp32 (e.g. nn.softmax, nn.layer_norm, matmul); their inputs are cast "
                    "back to fp32. softmax and reductions (sum, mean...) are fp32 already")
    fold_casts: bool = Field(
        default=True, description="store weights as fp16 constants (fold astype of constants) instead of casting at run time")

    @field_validator("keep_fp32")
    @classmethod
    def _known_ops(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if not _known_op(_op_name(n))]
        if unknown:
            raise ValueError(f"unknown Relax op(s) {', '.join(map(repr, unknown))} "
                             "(use names like 'nn.softmax', 'nn.layer_norm', 'matmul')")
        return names


@contextlib.contextmanager
def _policies(policies: dict[str, int]):
    """Temporarily give ops (by name) a ToMixedPrecision policy, restoring each op's own policy after."""
    saved = []
    try:
        for name, policy in policies.items():
            op = tvm.ir.Op.get(name)
            saved.append((op, op.get_attr(_POLICY_ATTR)))
            op.reset_attr(_POLICY_ATTR)
            op.set_attr(_POLICY_ATTR, policy)
        yield
    finally:
        for op, old in reversed(saved):
            op.reset_attr(_POLICY_ATTR)
            if old is not None:
                op.set_attr(_POLICY_ATTR, old)


@mutator
class _FoldConstCasts(PyExprMutator):
    """astype(constant) -> constant of the new dtype, so the IR carries fp16 weights."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod_ = mod
        self.astype = tvm.ir.Op.get("relax.astype")

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if call.op.same_as(self.astype) and isinstance(call.args[0], tvm.ir.expr.Constant):
            return relax.const(call.args[0].value.numpy().astype(str(call.attrs.dtype)))
        return call

    def run(self) -> tvm.IRModule:
        return rewrite_functions(self, self.mod_)


@register("fp16", "precision", Fp16Params)
def fp16(params: Fp16Params) -> tvm.transform.Pass:
    """FP16 mixed precision (TVM's ToMixedPrecision): conv2d/matmul and what follows them run in fp16."""
    keep = [_op_name(n) for n in params.keep_fp32]

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        mod = clip_as_ops(mod)
        with _policies({**_FOLLOWING, **{name: _NEVER for name in keep}}):
            mod = relax.transform.ToMixedPrecision(out_dtype=params.out_dtype)(mod)
        return _FoldConstCasts(mod).run() if params.fold_casts else mod

    return tvm.transform.module_pass(run, opt_level=0, name="fp16")


# ---------------------------------------------------------------------------------------------- int8

# user-facing op name -> Relax op. Relax has no dense op: ONNX Gemm/MatMul and relax.op.linear import as
# matmul (with a transposed weight for Gemm transB), so `dense` is the same selection as `matmul`.
QUANT_OPS = {"conv2d": "relax.nn.conv2d", "conv1d": "relax.nn.conv1d", "matmul": "relax.matmul",
             "dense": "relax.matmul"}


class QuantizeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dtype: Literal["int8"] = Field(default="int8", description="quantized weight dtype (per channel, symmetric)")
    activations: Literal["symmetric", "asymmetric"] = Field(
        default="symmetric", description="symmetric: int8, zero point 0; asymmetric: uint8 over the calibrated "
                                         "[min, max] with a zero point (ONNX Runtime's default)")
    calibration: Literal["minmax", "percentile", "entropy"] = Field(
        default="minmax", description="activation range: max |x|, a percentile of |x|, or KL-divergence (TensorRT)")
    percentile: float = Field(default=99.99, gt=0.0, le=100.0, description="percentile of |x| (calibration=percentile)")
    samples: int = Field(default=8, ge=1, le=1024, description="random calibration inputs (uniform [0,1) floats), seeded")
    files: list[Path] = Field(
        default_factory=list,
        description="calibration inputs instead of random ones: .npy (single-input models) or .npz by input name, "
                    "one sample per file; relative paths are relative to the working directory")
    seed: int = Field(default=0, ge=0, description="seed of the random calibration inputs")
    ops: list[str] = Field(default_factory=lambda: ["conv2d", "matmul", "dense"],
                           description=f"ops whose activation and constant weight get Q/DQ: {', '.join(QUANT_OPS)}")
    execute: Literal["fake", "int8"] = Field(
        default="fake", description="fake: Q/DQ around fp32 kernels (accuracy only); int8: conv2d/matmul run as "
                                    "int8 x int8 -> int32 kernels with an fp32 rescale epilogue (see passes/int8.py; "
                                    "7-bit weights on x86 CPUs with AVX2 and no VNNI)")

    @field_validator("ops")
    @classmethod
    def _known(cls, ops: list[str]) -> list[str]:
        unknown = [op for op in ops if op not in QUANT_OPS]
        if unknown:
            raise ValueError(f"unknown op(s) {', '.join(map(repr, unknown))}; expected {', '.join(QUANT_OPS)}")
        if not ops:
            raise ValueError("ops is empty: nothing would be quantized")
        return ops

    @field_validator("files")
    @classmethod
    def _exist(cls, files: list[Path]) -> list[Path]:
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise ValueError(f"calibration file(s) not found: {', '.join(missing)}")
        bad = [str(f) for f in files if f.suffix not in (".npy", ".npz")]
        if bad:
            raise ValueError(f"calibration files must be .npy or .npz: {', '.join(bad)}")
        return files


def _tensor_dtype(expr: relax.Expr) -> str | None:
    ty = expr.ty
    return str(ty.dtype) if isinstance(ty, relax.TensorType) and ty.dtype is not None else None


class _Selector:
    """Decides which calls get Q/DQ and resolves their constant weight (through permute_dims) to numpy."""

    def __init__(self, op_names: set[str], lookup):
        self.ops = {tvm.ir.Op.get(n) for n in op_names}
        self.permute = tvm.ir.Op.get("relax.permute_dims")
        self.lookup = lookup

    def _const(self, expr: relax.Expr) -> np.ndarray | None:
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value.numpy()
        if isinstance(expr, relax.Var):
            bound = self.lookup(expr)
            return None if bound is None else self._const(bound)
        if isinstance(expr, relax.Call) and expr.op.same_as(self.permute):
            inner = self._const(expr.args[0])
            if inner is None:
                return None
            axes = None if expr.attrs.axes is None else [int(a) for a in expr.attrs.axes]
            return np.transpose(inner, axes)
        return None

    def select(self, call: relax.Call) -> tuple[np.ndarray, int] | None:
        """(float weight, output-channel axis) when `call` is a selected op with a float32 constant weight."""
        if not isinstance(call.op, tvm.ir.Op) or not any(call.op.same_as(op) for op in self.ops):
            return None
        if len(call.args) < 2 or _tensor_dtype(call.args[0]) != "float32":
            return None
        weight = self._const(call.args[1])
        if weight is None or weight.dtype != np.float32 or weight.ndim < 2:
            return None
        if call.op.name == "relax.matmul":
            axis = weight.ndim - 1  # [.., K, N]: N is the output channel
        else:
            layout = str(call.attrs.kernel_layout)
            axis = layout.index("O") if "O" in layout else 0
        return weight, axis


def _quantize_weight(weight: np.ndarray, axis: int, qmax: int = calibration.INT8_MAX) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8 in [-qmax, qmax]: (int8 weight, float32 scale per channel)."""
    reduce = tuple(i for i in range(weight.ndim) if i != axis)
    amax = np.abs(weight).max(axis=reduce)
    scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.round(weight / scale.reshape(shape)), -qmax, qmax)
    return q.astype(np.int8), scale


@mutator
class _QDQ(PyExprMutator):
    """Observe mode: emit every selected call's activation as an output var (for calibration).
    Rewrite mode: activation -> quantize/dequantize(act scale); weight -> dequantize(int8 constant)."""

    def __init__(self, mod: tvm.IRModule, op_names: set[str],
                 act_quants: list[calibration.ActivationQuant] | None = None, weight_qmax: int = calibration.INT8_MAX):
        super().__init__(mod)
        self.mod_ = mod
        self.selector = _Selector(op_names, self.lookup_binding)
        self.act_quants = act_quants
        self.weight_qmax = weight_qmax
        self.observed: list[relax.Var] = []
        self.count = 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        selected = self.selector.select(call)
        if selected is None:
            return call
        index, self.count = self.count, self.count + 1
        act = call.args[0]
        if self.act_quants is None:
            emit = self.builder_.emit_output if self.builder_.current_block_is_dataflow() else self.builder_.emit
            self.observed.append(emit(act, f"calib{index}"))
            return call
        weight, axis = selected
        quant = self.act_quants[index]
        scale = relax.const(np.float32(quant.scale))
        zero = relax.const(np.dtype(quant.dtype).type(quant.zero_point))
        q = self.builder_.emit(relax.op.quantize(act, scale, zero, axis=-1, out_dtype=quant.dtype))
        dq = self.builder_.emit(relax.op.dequantize(q, scale, zero, axis=-1, out_dtype="float32"))
        w_int8, w_scale = _quantize_weight(weight, axis, self.weight_qmax)
        w_dq = self.builder_.emit(relax.op.dequantize(
            relax.const(w_int8), relax.const(w_scale), relax.const(np.zeros(w_scale.shape, np.int8)),
            axis=axis, out_dtype="float32"))
        return relax.Call(call.op, [dq, w_dq, *call.args[2:]], call.attrs, call.ty_args)

    def run(self, func_name: str = "main") -> tvm.IRModule:
        gv = self.mod_.get_global_var(func_name)
        self.builder_.update_func(gv, self.visit_expr(self.mod_[gv]))
        return self.builder_.get()


def _observable(mod: tvm.IRModule, op_names: set[str]) -> tuple[tvm.IRModule, int, int]:
    """`main` returning (its outputs..., activation of every selected call...); (module, outputs, observed)."""
    observer = _QDQ(mod, op_names)
    observed_mod = observer.run()
    main = observed_mod["main"]
    body = main.body
    ret = body.body
    outputs = list(ret.fields) if isinstance(ret, relax.Tuple) else [ret]
    if isinstance(ret.ty, relax.TupleType) and not isinstance(ret, relax.Tuple):
        raise UserError("quantize: main returns a tuple variable; calibration needs a flat output list")
    fields = outputs + observer.observed
    new_body = relax.SeqExpr(body.blocks, relax.Tuple(fields))
    ret_ty = relax.TupleType([f.ty for f in fields])
    new_main = relax.Function(main.params, new_body, ret_ty, main.is_pure, main.attrs)
    observed_mod = tvm.IRModule({**{gv: f for gv, f in observed_mod.functions.items() if gv.name_hint != "main"},
                                 observed_mod.get_global_var("main"): new_main}, attrs=observed_mod.attrs)
    observed_mod = relax.transform.Normalize()(observed_mod)
    return observed_mod, len(outputs), len(observer.observed)


def _input_sigs(mod: tvm.IRModule) -> list[calibration.InputSig]:
    main = mod["main"]
    n = int(main.attrs["num_input"]) if main.attrs is not None and "num_input" in main.attrs else len(main.params)
    if n != len(main.params):
        raise UserError("quantize: main takes weights as parameters; calibration needs them bound as constants")
    sigs = []
    for param in main.params[:n]:
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
            raise UserError(f"quantize: input {param.name!r} is not a tensor of known shape")
        try:
            shape = tuple(int(v) for v in ty.shape.values)
        except TypeError as exc:
            raise UserError(f"quantize: input {param.name!r} has a dynamic shape {ty.shape}; "
                            "freeze input shapes first (model.inputs)") from exc
        sigs.append(calibration.InputSig(param.name, shape, str(ty.dtype)))
    return sigs


def calibrate(mod: tvm.IRModule, params: QuantizeParams) -> list[calibration.ActivationQuant]:
    """Run the float module on the calibration inputs; one activation's quantization per selected call, in order."""
    op_names = {QUANT_OPS[o] for o in params.ops}
    observed_mod, n_outputs, observed = _observable(mod, op_names)
    if observed == 0:
        raise UserError(f"quantize: no {'/'.join(params.ops)} call with a constant float32 weight in main — "
                        "quantize works on high-level float32 Relax ops, so run it before `fuse` (and before `fp16`)")
    sigs = _input_sigs(mod)
    inputs = (calibration.file_inputs(sigs, list(params.files)) if params.files
              else calibration.random_inputs(sigs, params.samples, params.seed))
    target = tvm.target.Target({"kind": "llvm"})
    with tvm.transform.PassContext(opt_level=3, instruments=[]):
        executable = tvm.compile(observed_mod, target)
    vm = relax.VirtualMachine(executable, tvm.cpu())

    def run(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        result = vm["main"](*[tvm.runtime.tensor(arrays[s.name], tvm.cpu()) for s in sigs])
        return [t.numpy() for t in result]

    stats = calibration.collect(run, inputs, observed, n_outputs, seed=params.seed)
    return [calibration.activation_quant(s, params.calibration, params.percentile, params.activations == "asymmetric")
            for s in stats]


@register("quantize", "precision", QuantizeParams)
def quantize(params: QuantizeParams) -> tvm.transform.Pass:
    """INT8 calibration + Q/DQ annotation: per-tensor activations (int8, or asymmetric uint8), per-channel int8 weights."""
    op_names = {QUANT_OPS[o] for o in params.ops}

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        quants = calibrate(mod, params)
        # executed in int8 on an AVX2 CPU without VNNI, 7-bit weights (passes/int8.py: weight_qmax)
        qmax = (weight_qmax(tvm.target.Target.current(allow_none=True)) if params.execute == "int8"
                else calibration.INT8_MAX)
        mod = _QDQ(mod, op_names, quants, qmax).run()
        mod = relax.transform.DeadCodeElimination()(mod)  # drops the folded weights' float permute_dims
        if params.execute == "int8":
            mod, record = lower_int8(mod)
            report_analysis(int8=record)
        return mod

    return tvm.transform.module_pass(run, opt_level=0, name="quantize")
