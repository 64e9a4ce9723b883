"""Layout passes: change the data layout operators compute in (TVM's ConvertLayout)."""

from __future__ import annotations

import logging
from collections import Counter

import tvm
from pydantic import BaseModel, ConfigDict, model_validator
from tvm import relax

from workbench.passes.clip import clip_as_ops
from workbench.passes.figures import count_ops, report_analysis
from workbench.passes.operands import constants_last
from workbench.passes.registry import register
from workbench.passes.stack import stack_as_concat

log = logging.getLogger("workbench.passes")

# op -> data layout -> the kernel layout we pair with it (one TVM's legalization builds on llvm)
DESIRED: dict[str, dict[str, str]] = {
    "conv1d": {"NCW": "OIW", "NWC": "WIO"},
    "conv2d": {"NCHW": "OIHW", "NHWC": "HWIO"},
    "conv3d": {"NCDHW": "OIDHW", "NDHWC": "DHWIO"},
}
# ops TVM's ConvertLayout refuses a desired layout for: they follow the layout of their input
FOLLOWERS = ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
             "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "batch_norm", "layer_norm",
             "relu", "add", "conv2d_transpose")
LAYOUT_OPS = ("relax.layout_transform", "relax.permute_dims")


class ConvertLayoutParams(BaseModel):
    """op name -> data layout (`NHWC`), or [data layout, kernel layout] (`[NHWC, OHWI]`); e.g. conv2d=NHWC."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _check(self) -> ConvertLayoutParams:
        layouts = self.layouts()
        if not layouts:
            raise ValueError(f"give at least one op=layout, e.g. conv2d=NHWC (ops: {', '.join(DESIRED)})")
        for op, value in layouts.items():
            _pair(op, value)
        return self

    def layouts(self) -> dict:
        """op (without a `relax.`/`nn.` prefix) -> layout value, as given."""
        return {op.removeprefix("relax.").removeprefix("nn."): v for op, v in (self.model_extra or {}).items()}


def _pair(op: str, value) -> list[str]:
    """[data layout, kernel layout] for `op`; a ValueError says what was expected."""
    if op not in DESIRED:
        if op in FOLLOWERS:
            raise ValueError(f"{op}: TVM's ConvertLayout takes no desired layout for {op}; it follows the layout "
                             f"of its input, so convert the op producing it (ops with a layout: {', '.join(DESIRED)})")
        raise ValueError(f"unknown op {op!r}; ops with a desired layout: {', '.join(DESIRED)}")
    choices = DESIRED[op]
    if isinstance(value, str):
        value = value.split(":") if ":" in value else [value]
    if not isinstance(value, list) or not 1 <= len(value) <= 2 or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{op}: expected a data layout ({', '.join(choices)}) or [data, kernel] layouts, got {value!r}")
    data = value[0]
    if data not in choices:
        raise ValueError(f"{op}: data layout {data!r} is not one of {', '.join(choices)}")
    kernel = value[1] if len(value) == 2 else choices[data]
    if sorted(kernel) != sorted(choices[data]):
        raise ValueError(f"{op}: kernel layout {kernel!r} must be a permutation of {choices[data]}")
    return [data, kernel]


def layout_ops(mod: tvm.IRModule) -> int:
    """Number of layout-changing ops (layout_transform, permute_dims) in the module."""
    return _count_calls(mod, LAYOUT_OPS)


def _unlowerable_transposes(mod: tvm.IRModule) -> list[str]:
    """Layouts other than NCHW that conv2d_transpose ops ended up in (they follow their input's layout, but TVM
    0.27 only legalizes them in NCHW)."""
    layouts: set[str] = set()

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d_transpose":
            layouts.add(str(expr.attrs.data_layout))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return sorted(layouts - {"NCHW"})


class _Refused(Exception):
    """A conversion that cannot be kept: TVM's ConvertLayout failed, or left an op it cannot lower."""


def _convert(mod: tvm.IRModule, desired: dict[str, list[str]], chosen: set[int] | None) -> tvm.IRModule:
    """TVM's ConvertLayout with the calls of `desired`'s ops numbered in the order it meets them: all of them
    convert (`chosen` None) or those numbered in `chosen`. Raises _Refused with the reason."""
    seen = 0

    def layout_of(call: relax.Call) -> dict[str, list[str]]:
        nonlocal seen
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else ""
        if name not in desired:
            return {}
        seen += 1
        return {name: desired[name]} if chosen is None or seen - 1 in chosen else {}

    try:
        converted = relax.transform.ConvertLayout(desired, layout_of)(mod)
    except Exception as exc:  # noqa: BLE001 - TVM raises InternalError, IndexError, ...: none can be kept
        raise _Refused(f"TVM's ConvertLayout failed: {(str(exc).strip().splitlines() or [type(exc).__name__])[-1]}") from exc
    transposes = _unlowerable_transposes(converted)
    if transposes:
        raise _Refused(f"conv2d_transpose would follow into {transposes}, and TVM 0.27 lowers it only in NCHW")
    return converted


def _count_calls(mod: tvm.IRModule, ops) -> int:
    """Calls of any of `ops` (Relax op names) in the module."""
    counts = count_ops(mod)
    return sum(counts.get(op, 0) for op in ops)


def _convert_what_can(mod: tvm.IRModule, desired: dict[str, list[str]]) -> tuple[tvm.IRModule, dict]:
    """Convert every op of `desired`; where that cannot be kept, one op at a time, keeping each that can be (the
    rest stay in their layout). Returns the module and its analysis: how many ops were converted and, where some
    kept their layout, how many for each reason."""
    total = _count_calls(mod, set(desired))
    if total == 0:  # nothing to convert: TVM's pass would only risk failing (it ran out of memory on silero-vad)
        return mod, {"converted": 0}
    try:
        return _convert(mod, desired, None), {"converted": total}
    except _Refused as whole:
        reason = str(whole)
    try:  # a model TVM fails on whatever is converted (its rules for some other op): no op alone can do better
        _convert(mod, desired, set())
    except _Refused as none:
        log.warning("convert_layout: all %d ops kept their layout (%s)", total, none)
        return mod, {"converted": 0, "kept_layout": {str(none): total}}
    chosen: set[int] = set()
    skipped: Counter[str] = Counter()
    for index in range(total):
        try:
            _convert(mod, desired, chosen | {index})
            chosen.add(index)
        except _Refused as one:
            skipped[str(one)] += 1
    log.warning("convert_layout: %d of %d ops kept their layout (%s)", total - len(chosen), total, reason)
    converted = _convert(mod, desired, chosen) if chosen else mod
    return converted, {"converted": len(chosen), "kept_layout": dict(skipped)}


@register("convert_layout", "layout", ConvertLayoutParams)
def convert_layout(params: ConvertLayoutParams) -> tvm.transform.Pass:
    """Convert ops to layouts, op=layout: conv2d=NHWC (conv1d/2d/3d; kernel layout chosen: HWIO), pools follow.

    The frontend's Clip call_tirs become relax.maximum/minimum first (clip.py), constant operands come second at
    full rank (operands.py), so they follow too, and stacks become concats (stack.py). Where the whole conversion
    cannot be kept (TVM fails on the model, or a conv2d_transpose would follow out of NCHW), each op is tried
    alone and kept where it can be: the analysis lists the ops that kept their layout and why."""
    desired = {f"relax.nn.{op}": _pair(op, value) for op, value in params.layouts().items()}

    def run(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        before = layout_ops(mod)
        # else Clips, `Mul(scale, x)` and stacks break or stay NCHW in transpose pairs
        prepared = stack_as_concat(constants_last(clip_as_ops(mod), {len(pair[0]) for pair in desired.values()}))
        mod, skipped = _convert_what_can(prepared, desired)
        report_analysis(layout_ops_before=before, layout_ops_after=layout_ops(mod),
                        desired={op: "/".join(pair) for op, pair in desired.items()}, **skipped)
        return mod

    return tvm.transform.module_pass(run, opt_level=0, name="convert_layout")
