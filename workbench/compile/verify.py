"""Tuned schedules checked against the kernel's untuned outputs before a build can pick them.

MetaSchedule measures candidates for speed only. Tuning rapidocr det (znver2, 2 threads), it committed as the
best of 56 trials of a packed 3x3 conv with a sliced epilogue (24 of its 32 channels, then an add) a schedule
whose outputs were wrong (max error 596 against the default schedule; the model's output off by 1.0). So after
each search round of a task, its best record is run here on seeded random inputs and compared with the
schedule an untuned build gives the kernel (plain loops where it has none); a record that disagrees is taken
out of the database (and logged) and the next best checked, until one agrees. Only where candidates run on this
machine (an llvm target with the local runner): a CUDA or RPC-measured record cannot be run here.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from workbench.compile.databases import drop_records
from workbench.kernels.default_schedule import default_schedule

log = logging.getLogger("workbench.tuning")


# Intrinsics that are NaN (or infinite) for part of [-1, 1): the square roots and logarithms below 0, pow of a negative
# base to a fractional power. Their operands are drawn from POSITIVE (see `random_args`).
DOMAIN_RESTRICTED = frozenset({"sqrt", "rsqrt", "log", "log2", "log10", "log1p", "pow"})
POSITIVE = (0.5, 1.5)


def _loaded(expr: tvm.ir.Expr) -> set[tvm.tirx.Var]:
    """The buffers `expr` reads (in TVM 0.27 a buffer is its data Var, the PrimFunc's parameter for an input)."""
    loads: list[tvm.ir.TensorLoad] = []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, loads.append)])
    return {load.source for load in loads}


def _integer_constant(expr: tvm.ir.Expr) -> bool:
    return isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) and float(expr.value).is_integer()


def _restricted_operands(func: tvm.tirx.PrimFunc) -> list[tvm.ir.Expr]:
    """The operands whose sign or closeness to 0 decides whether the kernel computes a number: the arguments of
    DOMAIN_RESTRICTED intrinsics (pow's base only, and not for an integer exponent: x^2 is fine for any x) and
    every divisor (near 0 it blows the quotient up, and the tolerance `agrees` scales with it)."""
    operands: list[tvm.ir.Expr] = []

    def call(node: tvm.ir.Call) -> None:
        name = getattr(node.op, "name", "").rsplit(".", 1)[-1]  # tirx.sqrt, but prim.log2
        if name == "pow":
            operands.extend([] if _integer_constant(node.args[1]) else [node.args[0]])
        elif name in DOMAIN_RESTRICTED:
            operands.extend(node.args)

    tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, call), (tvm.tirx.Div, lambda node: operands.append(node.b))])
    return operands


def _sources(func: tvm.tirx.PrimFunc) -> dict[tvm.tirx.Var, set[tvm.tirx.Var]]:
    """Buffer -> the buffers the values stored into it are computed from."""
    sources: dict[tvm.tirx.Var, set[tvm.tirx.Var]] = {}

    def store(node: tvm.tirx.BufferStore) -> None:
        sources.setdefault(node.buffer, set()).update(_loaded(node.value))

    tvm_ffi.structural_walk(func.body, [(tvm.tirx.BufferStore, store)])
    return sources


def positive_params(func: tvm.tirx.PrimFunc) -> set[int]:
    """Indices of the parameters a domain-restricted operand (`_restricted_operands`) is computed from, followed
    back through the intermediate buffers of the kernel: the variance a fused layer norm's `mean, add, sqrt,
    divide` kernel reads is one (it is summed, then square-rooted), the `x - mean` it divides is not. Any
    buffer a restricted operand is computed from counts, through subtractions too: a `layer_norm` kernel's x,
    whose variance it computes itself, is drawn positive though any x would do; that costs nothing."""
    sources = _sources(func)
    feeding: set[tvm.tirx.Var] = set()
    pending = [buffer for operand in _restricted_operands(func) for buffer in _loaded(operand)]
    while pending:
        buffer = pending.pop()
        if buffer not in feeding:
            feeding.add(buffer)
            pending.extend(sources.get(buffer, ()))
    return {index for index, param in enumerate(func.params) if param in feeding}


def random_args(func: tvm.tirx.PrimFunc, seed: int = 0) -> list[np.ndarray]:
    """Seeded arguments for every buffer of `func`: floats in [-1, 1), integers in [-8, 8) (non-negative for
    unsigned); the outputs are overwritten by the kernel, so they start the same for both schedules.

    Floats that feed a square root, logarithm, fractional power or divisor (`positive_params`) are drawn from
    POSITIVE instead, the domain those ops are used on in a model (a variance, a sum of exponentials). Drawn from
    [-1, 1), a layer norm's variance averaged to below 0 in about half its rows: both schedules computed NaN there,
    so no schedule agreed with the untuned one and every record of the kernel was dropped. Sums, products and
    quotients of positive inputs stay positive. Only the buffers that feed such an op are drawn positive, not
    every input of such a kernel, so the others (the `x - mean` a layer norm divides) keep both signs and a
    schedule that mixes them up still shows. A kernel that subtracts before the sqrt may still see NaN: `agrees`
    counts a NaN where the untuned schedule computes one too as agreeing."""
    rng = np.random.default_rng(seed)
    positive = positive_params(func)
    args = []
    for index, info in enumerate(ms.arg_info.ArgInfo.from_prim_func(func)):
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        if "float" in dtype:
            low, high = POSITIVE if index in positive else (-1, 1)
            args.append(rng.uniform(low, high, shape).astype(dtype))
        else:
            args.append(rng.integers(0 if dtype.startswith("u") else -8, 8, shape).astype(dtype))
    return args


def run_kernel(mod: tvm.IRModule, target: tvm.target.Target, args: list[np.ndarray]) -> list[np.ndarray]:
    """Compile `mod`'s kernel for `target`, run it once here on copies of `args`, return every buffer after."""
    tensors = [tvm.runtime.tensor(array.copy()) for array in args]
    tvm.compile(mod, target=target).mod["main"](*tensors)
    return [tensor.numpy() for tensor in tensors]


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    """`got` equals `want` up to 1e-3 of `want`'s largest finite value; NaN and inf only where `want` has them."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max(initial=0)))
    return bool(np.allclose(got, want, rtol=1e-3, atol=1e-3 * scale, equal_nan=True))


def agrees(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    """Equal up to the reassociation of float sums (FMA, split reductions): 1e-3 of the largest value.

    A NaN or inf where the untuned schedule computes the same counts as equal (a kernel may compute one on the
    random inputs whatever its schedule, and NaN never equals itself); one where it computes a number does not.
    The scale is the largest finite value: an inf in the reference would make every difference tolerable."""
    return all(_close(g, w) for g, w in zip(got, want))


Reference = tuple[list[np.ndarray], list[np.ndarray]]  # (seeded arguments, the untuned kernel's buffers after)


def untuned_reference(task_mod: tvm.IRModule, target: tvm.target.Target) -> Reference:
    """The kernel's seeded arguments and its outputs with the schedule an untuned build gives it."""
    reference = default_schedule(task_mod["main"], target)
    args = random_args(task_mod["main"])
    return args, run_kernel(reference.mod if reference is not None else task_mod, target, args)


def reject_wrong_best(task: ms.ExtractedTask, target: tvm.target.Target, database: ms.database.JSONDatabase,
                      database_dir: Path, reference: Reference) -> tuple[ms.database.JSONDatabase, int]:
    """Check the task's best record against its untuned outputs (`untuned_reference`), dropping best records that
    disagree until one agrees (or none is left). Returns the database (reopened when records were dropped) and
    how many were."""
    task_mod = task.dispatched[0]
    args, want = reference
    dropped = 0
    while database.has_workload(task_mod):
        best = database.get_top_k(database.commit_workload(task_mod), 1)
        if not best:
            break
        tuned = tvm.s_tir.Schedule(task_mod)
        best[0].trace.apply_to_schedule(tuned, remove_postproc=False)
        if agrees(run_kernel(tuned.mod, target, args), want):
            break
        log.warning("%s: the best tuned schedule (%.1f us) computes wrong outputs; dropped from the database",
                    task.task_name, float(best[0].run_secs[0]) * 1e6)
        database = drop_records(database_dir, [best[0]])
        dropped += 1
    return database, dropped
