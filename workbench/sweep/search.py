"""Ordering search: build pass sequences step by step instead of enumerating every ordering.

`orderings: {search: greedy | beam | random | local, passes: [...], max_length: K, budget: N, minutes: M}`.
greedy, beam and random first measure the prefix + suffix alone (the reference), then:
- greedy: extends the best sequence by each unused pass, keeps the best extension, stops when none is faster;
- beam: keeps the `beam_width` best sequences of each length and extends all of them, up to `max_length`;
- random: seeded random sequences (random length, random passes in random order), `workers` at a time.
local starts from `passes` in their order (`passes: default` is the default pipeline) and moves to the fastest
neighbour (two adjacent passes swapped, or one pass dropped) while it is faster by more than `MIN_GAIN`: does any
small change of a pipeline beat it, and which. Each neighbour is timed beside the current pipeline's build in the
same worker process and interleaved rounds (label `full`, as a study's cells are), and a move is taken on that
paired ratio, only where its 95% interval lies below 1 - MIN_GAIN: between processes the same build's median can
move by 2x on this project's machines, within one it holds to about 1% (scripts/check_study_pairing.py).
A candidate is scored by its measured median (the tuned build's in a tuned sweep). Candidates are hashed first: one
whose optimized IR equals one seen before joins that class and is not measured again, and only distinct IRs count
toward `budget`; with `minutes`, no new IR is measured once they are spent (checked between batches of `workers`
candidates; a resumed search goes on with the minutes it had left). Everything is recorded in the sweep's store as
it goes, so a resumed search replays the same steps from the store (nothing finished is measured again) and
carries on. `search.json` holds the steps, the trajectory (best so far against distinct variants measured) and the
best sequence found.
"""

from __future__ import annotations

import json
import random
import time

import numpy as np

from workbench.atomic import atomic_write_json
from workbench.config import pipeline_spec
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.config.named_pipelines import expand
from workbench.sweep.report import over_repeats, paired_ratio
from workbench.sweep.run import SweepRun, write_marker
from workbench.sweep.spec import Sweep, Variant, pass_specs, target_kind
from workbench.sweep.study import FULL

SUMMARY = "search.json"
Sequence = tuple[int, ...]  # indices into the search's passes
Ratio = tuple[float, float, float]  # a candidate's median over another's, with its 95% interval
MIN_GAIN = 0.02  # a local move must be this much faster: a move within a run's noise would wander


class OrderingSearch:
    """One search over a sweep being run: what it scored, which IRs it measured, its trajectory."""

    def __init__(self, sweep: Sweep, run: SweepRun):
        spec = sweep.search
        self.sweep, self.sweep_run = sweep, run
        self.spec = spec
        self.passes = expand(pass_specs(spec.passes, f"{sweep.path}: sweep.orderings.passes"), target_kind(sweep.base))
        self.prefix = pass_specs(spec.prefix, f"{sweep.path}: sweep.orderings.prefix")
        self.suffix = pass_specs(spec.suffix, f"{sweep.path}: sweep.orderings.suffix")
        self.max_length = min(spec.max_length or len(self.passes), len(self.passes))
        self.scores: dict[Sequence, float | None] = {}
        self.hashes: dict[str, float | None] = {}  # structural hash -> score of the first candidate with that IR
        self.trajectory: list[dict] = []
        self.steps: list[dict] = []
        self.ir_of: dict[Sequence, str] = {}  # candidate -> its optimized IR's structural hash
        self.timed_beside: dict[str, Sequence] = {}  # IR -> the sequence its run timed beside it
        self.moves: list[dict] = []  # a local search's moves taken: from, to, the paired ratio
        earlier = self.sweep.output / SUMMARY  # a resumed search goes on with the minutes it had left
        spent = json.loads(earlier.read_text()).get("elapsed_min", 0.0) if earlier.is_file() else 0.0
        self.started = time.monotonic() - 60 * spent

    @property
    def measured(self) -> int:
        return len(self.hashes)

    @property
    def elapsed_min(self) -> float:
        return (time.monotonic() - self.started) / 60

    @property
    def exhausted(self) -> bool:
        """The budget of distinct IRs is measured, or the minutes are spent (after the first IR: a search always
        measures its reference or start)."""
        return self.measured >= self.spec.budget or (self.spec.minutes is not None and self.measured > 0
                                                     and self.elapsed_min >= self.spec.minutes)

    def text(self, seq: Sequence) -> str:
        return pipeline_spec.to_text(self.prefix + [self.passes[i] for i in seq] + self.suffix)

    def _ranked(self, variants: list[Variant]) -> list[Variant]:
        """The builds the search ranks by: the tuned ones in a tuned sweep."""
        return [v for v in variants if v.tuned == (self.sweep.tuning is not None)]

    def _variants(self, seq: Sequence) -> list[Variant]:
        return self.sweep.make_variants(self.prefix + [self.passes[i] for i in seq] + self.suffix)

    def _recorded(self, variants: list[Variant]) -> bool:
        return all(self.sweep_run.rows.get(v.id, {}).get("status") == "done" for v in variants)

    def _score(self, variants: list[Variant]) -> float | None:
        """The candidate's median (over repeats) of the builds the search ranks by."""
        medians = [self.sweep_run.rows.get(v.id, {}).get("median_ms") for v in self._ranked(variants)]
        if not medians or any(m is None for m in medians):
            return None
        return float(np.median(medians))

    def versus(self, seq: Sequence, current: Sequence) -> tuple[Ratio, bool] | None:
        """seq's median over current's and whether that ratio is paired (timed beside it in one process): where
        the run of seq's IR timed current beside it; else the two medians from their own runs, an interval-less
        ratio."""
        if seq in self.ir_of and self.timed_beside.get(self.ir_of[seq]) == current:
            ratios = []
            for v in self._ranked(self._variants(seq)):
                result = self.sweep_run.store.results.get(self.sweep_run.rows.get(v.id, {}).get("run_id"))
                timed = result.measurements if result is not None else {}
                if WORKBENCH_LABEL in timed and FULL in timed and timed[FULL].median_ms:
                    ratios.append(paired_ratio(timed[WORKBENCH_LABEL], timed[FULL]))
            if ratios:
                return over_repeats(ratios), True
        ours, theirs = self.scores.get(seq), self.scores.get(current)
        return ((ours / theirs,) * 3, False) if ours is not None and theirs else None

    def evaluate(self, sequences: list[Sequence], step: str, beside: Sequence | None = None
                 ) -> list[tuple[Sequence, float | None]]:
        """Score the sequences not scored yet: hash them, measure new IRs while the budget lasts (each timed with
        the build of `beside`, if given, in its run); return the scored ones (those past the budget are left
        out)."""
        fresh = list(dict.fromkeys(s for s in sequences if s not in self.scores))
        made = {s: self._variants(s) for s in fresh}
        if self.exhausted:  # past the budget only what a resumed search had measured is replayed (not hashed again)
            fresh = [s for s in fresh if self._recorded(made[s])]
        if beside is not None:
            reference = {(v.repeat, v.tuned): v.config for v in self._variants(beside)}
            for v in (v for s in fresh for v in made[s]):
                v.reference = reference.get((v.repeat, v.tuned))
        hashes = self.sweep_run.hash([v for s in fresh for v in made[s]])
        admitted, new = [], set()
        for seq in fresh:
            status, value, _worker = hashes[made[seq][0].ir_key]
            if status == "ok" and value not in self.hashes:
                if self.exhausted and not self._recorded(made[seq]):  # a resumed search replays what it measured
                    continue
                self.hashes[value] = None
                new.add(seq)  # the first candidate with this IR: the one measured
                if beside is not None:
                    self.timed_beside[value] = beside
            if status == "ok":
                self.ir_of[seq] = value
            admitted.append(seq)
        variants = self.sweep.add([v for seq in admitted for v in made[seq]])
        write_marker(self.sweep)
        self.sweep_run.measure(variants, hashes)
        best = self.trajectory[-1]["best_ms"] if self.trajectory else None
        count = sum(p["new"] for p in self.trajectory)
        for seq in admitted:
            status, value, _worker = hashes[made[seq][0].ir_key]
            score = self._score(made[seq]) if status == "ok" else None
            if seq in new:
                self.hashes[value] = score
                count += 1
            self.scores[seq] = score
            if score is not None:
                best = score if best is None else min(best, score)
            self.trajectory.append({"step": step, "pipeline": self.text(seq), "median_ms": score, "best_ms": best,
                                    "measured": count, "new": seq in new, "failed": status != "ok"})
        self.steps.append({"step": step, "candidates": [self.text(s) for s in fresh],
                           "scored": {self.text(s): self.scores[s] for s in admitted}})
        self._write()
        return [(s, self.scores[s]) for s in admitted]

    def _write(self) -> None:
        scored = [(s, v) for s, v in self.scores.items() if v is not None]
        best = min(scored, key=lambda item: item[1]) if scored else None
        start = tuple(range(len(self.passes)))
        atomic_write_json(self.sweep.output / SUMMARY, {
            "strategy": self.spec.search, "budget": self.spec.budget, "measured": self.measured,
            "minutes": self.spec.minutes, "elapsed_min": self.elapsed_min, "tuned": self.sweep.tuning is not None,
            "start": ({"pipeline": self.text(start), "median_ms": self.scores.get(start)}
                      if self.spec.search == "local" else None),
            "best": {"pipeline": self.text(best[0]), "median_ms": best[1]} if best else None,
            "moves": self.moves, "end": (self.moves[-1]["to"] if self.moves else self.text(start))
            if self.spec.search == "local" else None,
            "trajectory": self.trajectory, "steps": self.steps,
        })

    def run(self) -> None:
        if self.spec.search == "local":
            self._local()
            return
        self.evaluate([()], "reference")
        if self.spec.search == "random":
            self._random()
        else:
            self._beam(1 if self.spec.search == "greedy" else self.spec.beam_width)

    def _beam(self, width: int) -> None:
        frontier: list[Sequence] = [()]
        best = self.scores[()]
        for length in range(1, self.max_length + 1):
            if self.exhausted:
                return
            candidates = [s + (i,) for s in frontier for i in range(len(self.passes)) if i not in s]
            ranked = sorted(((s, v) for s, v in self.evaluate(candidates, f"length {length}") if v is not None),
                            key=lambda item: item[1])
            if not ranked:
                return
            if width == 1 and best is not None and ranked[0][1] >= best:  # greedy: no extension is faster
                return
            frontier = [s for s, _v in ranked[:width]]
            best = ranked[0][1] if best is None else min(best, ranked[0][1])

    def _local(self) -> None:
        """Hill-climb from the passes in their order: each move tries every adjacent swap and every single drop of
        the current sequence, each timed beside it, and takes the fastest by that paired ratio if its whole
        interval is more than MIN_GAIN below 1 (a neighbour whose IR was measured earlier, beside another
        sequence, is listed with its unpaired ratio but cannot move the search)."""
        current = tuple(range(len(self.passes)))
        scored = self.evaluate([current], "start")
        move = 0
        while scored and scored[0][1] is not None:  # past the budget, evaluate replays only what was measured
            move += 1
            swaps = [current[:i] + (current[i + 1], current[i]) + current[i + 2:] for i in range(len(current) - 1)]
            drops = [current[:i] + current[i + 1:] for i in range(len(current))]
            neighbours, scored = swaps + drops, []
            batch = max(1, self.sweep.section.workers)  # a batch at a time: the minutes are checked between
            for first in range(0, len(neighbours), batch):
                scored += self.evaluate(neighbours[first:first + batch], f"move {move}", beside=current)
            compared = {s: self.versus(s, current) for s, v in scored if v is not None}
            ranked = sorted(((s, c) for s, c in compared.items() if c is not None), key=lambda item: item[1][0][0])
            self.steps[-1]["versus"] = {self.text(s): {"ratio": list(ratio), "paired": paired}
                                        for s, (ratio, paired) in ranked}
            timed_beside = [(s, ratio) for s, (ratio, paired) in ranked if paired]  # only these may move it
            if not timed_beside or timed_beside[0][1][2] >= 1 - MIN_GAIN:
                self._write()
                return
            best, ratio = timed_beside[0]
            self.moves.append({"from": self.text(current), "to": self.text(best), "ratio": list(ratio)})
            current = best
            self._write()
            scored = [(current, self.scores[current])]

    def _random(self) -> None:
        rng = random.Random(self.spec.seed)
        batch = max(1, self.sweep.section.workers)
        for round_ in range(1, 20 * self.spec.budget + 1):  # bounded: a small space runs out of new sequences
            if self.exhausted:
                return
            seqs = [tuple(rng.sample(range(len(self.passes)), rng.randint(1, self.max_length))) for _ in range(batch)]
            self.evaluate(seqs, f"round {round_}")
