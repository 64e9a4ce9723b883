"""Does a schedule's trace survive what MetaSchedule's search will do with it?

A record the search starts from (a shared database's, a similar kernel's adapted, one an earlier run left) is not
only replayed as it stands: the evolutionary search mutates its decisions (tile sizes, where a producer is
computed, the parallel extent, unrolling) and replays the mutated trace without its postprocessing section,
then runs the postprocessors again. A trace that holds postprocessor instructions outside that section (the
similar-kernel seed once did: its postprocessors ran without `enter_postproc`) replays at its own decisions but
not at others: the blocks or loops a recorded `GetChildBlocks` or `GetLoops` saw are no longer there, and
MetaSchedule's C++ search stops with `old_outputs.size() == new_outputs.size()` inside the task, which ended the
whole tuning run (tests/test_tune_robustness.py). So a trace is mutated here by the task's own mutators, a few
times each with fixed seeds, and every mutation replayed, before the trace is offered to the search.
"""

from __future__ import annotations

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule import _ffi_api

from workbench.errors import one_line

MUTATIONS = 8  # per mutator; each is a replay of a few milliseconds
MUTATION_SEED = 0  # the same mutations every time: a seed that fits fits in every run


def mutators(context: ms.TuneContext) -> list[ms.mutator.Mutator]:
    """The mutators the context's search applies (initialized with the context)."""
    return list(context.space_generator.mutator_probs or {})


def _replays(mod: tvm.IRModule, trace: tvm.s_tir.Trace) -> str | None:
    try:
        trace.apply_to_schedule(tvm.s_tir.Schedule(mod), remove_postproc=True)
    except Exception as error:  # noqa: BLE001 - TVM raises ScheduleError, InternalError, ...: all mean "misfit"
        return one_line(error)
    return None


def misfit(mod: tvm.IRModule, trace: tvm.s_tir.Trace, search_mutators: list[ms.mutator.Mutator]) -> str | None:
    """Why `trace` would break the search of `mod`'s task, or None where it fits: without its postprocessing it
    must replay as it is and after each of `search_mutators`' mutations (MUTATIONS each, seeded). A trace the
    postprocessors reject does not break the search, which skips it, so that is not checked here."""
    error = _replays(mod, trace)
    if error is not None:
        return f"it does not replay: {error}"
    for mutator in search_mutators:
        # well-mixed seeds: TVM's generator takes the state as it is, and 1..8 would all draw the same first choice
        # (which instruction to mutate)
        for seed in ms.utils.fork_seed(MUTATION_SEED, n=MUTATIONS):
            mutated = _ffi_api.MutatorApply(mutator, trace, seed)  # the public `apply` takes no seed
            error = None if mutated is None else _replays(mod, mutated)
            if error is not None:
                return f"it does not replay once {type(mutator).__name__} changed it: {error}"
    return None
