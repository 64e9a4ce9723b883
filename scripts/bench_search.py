"""Ordering search against enumeration, measured in one session: does the search find a pipeline at least as
fast as the best fixed ordering, within its budget?

    python scripts/bench_search.py [--fixed configs/sweeps/orderings.yaml] [--search configs/sweeps/orderings_search.yaml]
                                   [--set KEY=VALUE ...]   # applied to both (e.g. sweep.tuning={...} for tuned runs)
                                   [--out runs/bench_search]

Prints the best class of each (median, 95% CI), their ratio, whether the CIs overlap, and the variants each
measured; both output folders (with report.md and, for the search, search.png) are kept under --out.
"""

import argparse
import json
import shutil
import time
from pathlib import Path

from workbench.sweep.driver import run_sweep
from workbench.sweep.report import ranked_rows, ranking, write_sweep_report
from workbench.sweep.spec import load_sweep


def best_of(sweep_file: Path, out: Path, overrides: list[str]) -> tuple[dict, int, float]:
    """Run one sweep from scratch; (its best ranked class, distinct classes measured, wall seconds)."""
    shutil.rmtree(out, ignore_errors=True)
    sweep = load_sweep(sweep_file, Path.cwd(), [*overrides, f"output={out}"])
    started = time.perf_counter()
    run_sweep(sweep, Path.cwd())
    elapsed = time.perf_counter() - started
    write_sweep_report(out)
    rows, _failed, _meta = ranked_rows(out)
    shown = ranking(rows)
    return shown[0], len(shown), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed", type=Path, default=Path("configs/sweeps/orderings.yaml"))
    parser.add_argument("--search", type=Path, default=Path("configs/sweeps/orderings_search.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_search"))
    args = parser.parse_args()
    out = args.out.resolve()
    fixed, fixed_n, fixed_s = best_of(args.fixed, out / "fixed", args.set)
    found, found_n, found_s = best_of(args.search, out / "search", args.set)
    search = json.loads((out / "search" / "search.json").read_text())
    overlap = found["ci_low"] <= fixed["ci_high"] and fixed["ci_low"] <= found["ci_high"]
    verdict = ("within noise of it (95% CIs overlap)" if overlap else
               "faster (CIs apart)" if found["median_ms"] < fixed["median_ms"] else "slower (CIs apart)")
    for label, row, n, seconds in (("best fixed ordering", fixed, fixed_n, fixed_s),
                                   ("search's best", found, found_n, found_s)):
        print(f"{label:20} {row['pipeline_text']:60} {row['median_ms']:.3f} ms "
              f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]  ({n} classes measured, {seconds:.0f} s)")
    print(f"{search['strategy']} search, {search['measured']}/{search['budget']} distinct variants measured: "
          f"best fixed / search best = {fixed['median_ms'] / found['median_ms']:.3f}x; the search's best is {verdict}")


if __name__ == "__main__":
    main()
