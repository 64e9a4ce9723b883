"""Where MetaSchedule's search starts for each task: its design space (schedule rules, postprocessors, mutators)
and the workbench's own schedule as its first candidate.

- Importing `tvm.s_tir.tensor_intrin` parses every tensor intrinsic (tens of seconds); MetaSchedule does it in
  every TuneContext. Kernels without low-precision buffers get the plain rules of their target kind (llvm, cuda)
  instead of the VNNI/AVX-512 or tensor-core ones MetaSchedule picks for CPUs and GPUs that have them, so their
  contexts need no import. The int8 path's u8 x s8 kernels on an x86 CPU with AVX2 get those llvm rules plus a
  tiling that tensorizes with the workbench's own dot product for that CPU (`dot_space`: VNNI's `vpdpbusd`, or
  AVX2's `vpmaddubsw` + `vpmaddwd` without VNNI), again without the import.
- A kernel the workbench schedules itself when untuned (kernels/default_schedule.py: a packed conv, an elementwise
  op) is first measured with that schedule, committed as its first record, so the search starts from it.
- A kernel another database (another model's, compile/schedule_sources.py) has a record for is measured first with
  that schedule, so the search starts from the best schedule known for it anywhere; a kernel none has is measured
  first with the best schedule of the same op at the closest other shapes there or among the model's kernels
  tuned before it, its tiles refit (compile/similar_workloads.py). Either is offered only where its trace fits
  the search (compile/trace_fit.py): one that would break it is skipped with the reason logged.
"""

from __future__ import annotations

import functools
import logging
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.postproc import PyPostproc

from workbench.compile.similar_workloads import similar_schedule
from workbench.compile.trace_fit import misfit, mutators
from workbench.kernels.default_schedule import default_schedule
from workbench.kernels.packed_conv import BF16, PackedKind, int8_kind, runs_on
from workbench.kernels.x86_bf16 import IMPORT_ANNOTATION


def _low_precision(task: ms.ExtractedTask) -> bool:
    """Does the kernel read or write buffers of a type MetaSchedule's own tensor intrinsics take for its target
    (fp16/bf16/int8 for CUDA's tensor cores; int8 for x86's VNNI/AVX-512: it has no bf16 one)?"""
    text = task.dispatched[0].script()  # PrimFunc exposes no buffer map in 0.27; dtypes appear quoted
    dtypes = ("int8", "uint8") if task.target.kind.name == "llvm" else ("float16", "bfloat16", "int8", "uint8")
    return any(f'"{dtype}"' in text for dtype in dtypes)


def _packed_dot(task: ms.ExtractedTask) -> PackedKind | None:
    """The packed kind whose dot product the task's kernel is tensorized with on its CPU: a u8 x s8 kernel (the
    int8 path's) on an x86 CPU with AVX2 (`int8_kind`: VNNI's, else AVX2's), the bf16 packed conv on a CPU with
    AVX512_BF16; None for other kernels and CPUs."""
    kind = int8_kind(task.target)
    text = task.dispatched[0].script()
    if kind is not None and '"uint8"' in text and '"int8"' in text:
        return kind
    return BF16 if f'"{BF16.name}"' in text and runs_on(BF16, task.target) else None


LAYOUT_REWRITE_PREPROC = "meta_schedule.layout_rewrite_preproc"  # the block RewriteLayout adds for a weight


@derived_object
class ImportLLVM(PyPostproc):
    """Annotates a schedule's first loop with LLVM IR to link into the kernel's module (`pragma_import_llvm`):
    the IR a dot product's implementation calls (kernels/x86_bf16.py). A postprocessor, so every candidate the
    search builds carries it, and so does its trace in the database."""

    def __init__(self, ir: str) -> None:
        self.ir = ir

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        pass

    def apply(self, sch: tvm.s_tir.Schedule) -> bool:
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            loops = sch.get_loops(block)
            # not the weight's layout-rewrite block: a build moves it into a function of its own
            if loops and LAYOUT_REWRITE_PREPROC not in sch.get(block).annotations:
                sch.annotate(loops[0], IMPORT_ANNOTATION, self.ir)
                return True
        return False

    def clone(self) -> ImportLLVM:
        return ImportLLVM(self.ir)


def dot_space(kind: PackedKind) -> ms.space_generator.PostOrderApply:
    """MetaSchedule's own VNNI rules (its "vnni" kind: the llvm rules with a tensorizing tiling first and
    RewriteTensorize) with one of the workbench's dot products (kernels/x86_int8.py, x86_bf16.py): TVM's
    `dot_16x4_vnni` fails LLVM verification, and TVM has no AVX2 or bf16 form. The packed conv kernel maps whole;
    a block the intrinsic cannot map (an NCHW int8 conv, whose innermost input index is a spatial sum) falls
    through to the plain tiling. A kind whose intrinsic calls LLVM IR gets it linked in (`ImportLLVM`)."""
    intrinsic = kind.dot
    rules = list(ms.schedule_rule.ScheduleRule.create("llvm"))
    tiling = next(i for i, rule in enumerate(rules) if isinstance(rule, ms.schedule_rule.MultiLevelTiling))
    rules.insert(tiling, ms.schedule_rule.MultiLevelTilingWithIntrin(
        intrinsic, structure="SSRSRS", max_innermost_factor=64,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global")))
    postprocs = list(ms.postproc.Postproc.create("llvm"))
    layout = next(i for i, post in enumerate(postprocs) if isinstance(post, ms.postproc.RewriteLayout))
    postprocs.insert(layout, ms.postproc.RewriteTensorize(vectorize_init_loop=True))
    if kind.dot_ir is not None:
        postprocs.append(ImportLLVM(kind.dot_ir))
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=postprocs, mutator_probs="llvm")


def _space_generator(task: ms.ExtractedTask) -> ms.space_generator.SpaceGenerator | str:
    """Kernels that cannot use tensor intrinsics (no fp16/bf16/int8 buffers) get the plain rules of their target
    kind. MetaSchedule would pick tensor-core rules for CUDA sm_70+ and VNNI/AVX-512 rules for x86 CPUs that
    have them: they help only low-precision kernels and need the slow `tvm.s_tir.tensor_intrin` import.
    u8 x s8 kernels on an x86 CPU with AVX2, and the bf16 packed conv on a CPU with AVX512_BF16, get `dot_space`
    (the workbench's own intrinsic, no import); other bf16 kernels (pads, casts) the plain llvm rules."""
    packed = _packed_dot(task)
    if packed is not None:
        return dot_space(packed)
    kind = task.target.kind.name
    if kind in ("cuda", "llvm") and not _low_precision(task):
        return ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind)
    return "post-order-apply"


def _needs_tensor_intrinsics(task: ms.ExtractedTask) -> bool:
    """Only MetaSchedule's target-default rules (low-precision kernels, other target kinds) may use them."""
    return isinstance(_space_generator(task), str)


@contextmanager
def without_tensor_intrin_import() -> Iterator[None]:
    """Let TuneContext's `import tvm.s_tir.tensor_intrin` (slow: it parses every tensor intrinsic TVM has) be a
    no-op, where nothing needs TVM's intrinsics (the workbench's own are registered by kernels/x86_int8.py)."""
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        yield
        return
    sys.modules[name] = types.ModuleType(name)
    try:
        yield
    finally:
        del sys.modules[name]


@contextmanager
def _tensor_intrinsics_if_needed(task: ms.ExtractedTask) -> Iterator[None]:
    """Let TuneContext's `import tvm.s_tir.tensor_intrin` be a no-op when the task's rules use none."""
    if _needs_tensor_intrinsics(task):
        yield
        return
    with without_tensor_intrin_import():
        yield


def tune_context(task: ms.ExtractedTask, num_cores: int, search_strategy: ms.search_strategy.SearchStrategy | str,
                 logger: logging.Logger | None = None, rand_state: int = -1) -> ms.TuneContext:
    """A TuneContext for one task with MetaSchedule's default rules for its target (tensor_intrin only if used)."""
    with _tensor_intrinsics_if_needed(task):
        return ms.TuneContext(mod=task.dispatched[0], target=task.target, space_generator=_space_generator(task),
                              search_strategy=search_strategy, task_name=task.task_name, logger=logger,
                              rand_state=rand_state, num_threads=num_cores).clone()


def _measure_and_commit(task: ms.ExtractedTask, schedule: tvm.s_tir.Schedule, target: tvm.target.Target,
                        database: ms.database.Database, builder: ms.builder.Builder, runner: ms.runner.Runner,
                        what: str) -> bool:
    """Build and run `schedule` of the task's kernel here and commit it to `database` as a record of the task;
    False (and a warning naming `what`) if it failed to build or run."""
    (built,) = builder.build([ms.builder.BuilderInput(schedule.mod, target)])
    args_info = ms.arg_info.ArgInfo.from_entry_func(schedule.mod)
    device = "cpu" if target.kind.name == "llvm" else target.kind.name
    ran = None if built.error_msg else runner.run([ms.runner.RunnerInput(built.artifact_path, device,
                                                                         args_info)])[0].result()
    if ran is None or ran.error_msg:
        logging.getLogger("workbench.tuning").warning("%s: %s failed to %s: %s", task.task_name, what,
                                                      "build" if ran is None else "run",
                                                      (built.error_msg or ran.error_msg).strip().splitlines()[-1])
        return False
    database.commit_tuning_record(ms.database.TuningRecord(
        schedule.trace, database.commit_workload(task.dispatched[0]), [float(s) for s in ran.run_secs], target,
        args_info))
    return True


def measure_default_schedule(task: ms.ExtractedTask, target: tvm.target.Target, database: ms.database.Database,
                             builder: ms.builder.Builder, runner: ms.runner.Runner) -> bool:
    """Measure the schedule an untuned build gives the kernel (kernels/default_schedule.py) and commit it as the
    task's first record, so the evolutionary search starts from it (it seeds its population with the database's
    best) rather than from random tilings, and a tuned kernel is never slower than the untuned one. False for
    kernels without one (contractions other than matmuls, in plain loops), or if it failed to build or run."""
    schedule = default_schedule(task.dispatched[0]["main"], target)
    if schedule is None:
        return False
    return _measure_and_commit(task, schedule, target, database, builder, runner, "the default schedule")


SharedDatabase = tuple[str, ms.database.Database]  # a database tuning reads but never writes, and its name
TUNED_DATABASE = "the database being tuned"  # its name where a similar kernel there lends a schedule


def shared_schedule(task: ms.ExtractedTask, target: tvm.target.Target,
                    shared: list[SharedDatabase]) -> tuple[str, tvm.s_tir.Schedule] | None:
    """The best schedule another database holds for the task's workload (the first that has one, in lookup order,
    as a build would take it) and that database's name; None where none has the workload."""
    workload = task.dispatched[0]
    for name, database in shared:
        # has_workload first: a query for an unknown workload must not commit it to a database tuning only reads
        if database.has_workload(workload):
            schedule = database.query_schedule(workload, target, task.task_name)
            if schedule is not None:
                return name, schedule
    return None


def postprocs(task: ms.ExtractedTask) -> list[ms.postproc.Postproc]:
    """The postprocessors the task's search applies to each candidate (its design space's, for its target)."""
    return list(tune_context(task, 1, "replay-trace").space_generator.postprocs)


def search_mutators(task: ms.ExtractedTask) -> list[ms.mutator.Mutator]:
    """The mutators the task's search applies to the traces it evolves (its design space's, for its target)."""
    return mutators(tune_context(task, 1, "replay-trace"))


Found = tuple[str, tvm.s_tir.Schedule]  # a first candidate and where it came from


def _fitting(task: ms.ExtractedTask, found: Found | None, search: Callable[[], ms.TuneContext]) -> Found | None:
    """`found` where its trace fits the task's search (compile/trace_fit.py); None, with the reason logged, where
    it would break it."""
    if found is None:
        return None
    reason = misfit(task.dispatched[0], found[1].trace, mutators(search()))
    if reason is None:
        return found
    logging.getLogger("workbench.tuning").warning("%s: the schedule from %s is not offered: %s", task.task_name,
                                                  found[0], reason)
    return None


def measure_shared_schedule(task: ms.ExtractedTask, target: tvm.target.Target, database: ms.database.Database,
                            builder: ms.builder.Builder, runner: ms.runner.Runner,
                            shared: list[SharedDatabase]) -> str | None:
    """Measure here the schedule another model's database holds for this kernel (same workload: the same TIR), else
    the adapted schedule of a similar kernel (same op, other shapes) there or in `database` itself (a kernel of
    this model tuned before this one), and commit it as a record of the task, so its search starts from what was
    found there (measured on this machine, not trusted from elsewhere); either only where it fits the search.
    Where it came from (the database's name, or `a similar kernel (...) in <name>`), or None (none has one, it
    would break the search, or it failed)."""
    search = functools.cache(lambda: tune_context(task, 1, "replay-trace"))  # made once, and only for a candidate
    found = (_fitting(task, shared_schedule(task, target, shared), search)
             or _fitting(task, similar_schedule(task, [*shared, (TUNED_DATABASE, database)],
                                                lambda: list(search().space_generator.postprocs)), search))
    if found is None:
        return None
    name, schedule = found
    return name if _measure_and_commit(task, schedule, target, database, builder, runner,
                                       f"the schedule from {name}") else None
