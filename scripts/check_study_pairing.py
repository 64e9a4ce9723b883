"""A/A check of a study's paired timing: each model's full-pipeline cell run as a study runs an ablation variant,
with the full pipeline's own build timed beside it (label `full`), so the paired ratio should be 1.0.

A study cell's ratio is the variant's median (label `workbench`, loaded from its exported library) over the full
pipeline's (label `full`, the in-memory build), both in the same process and interleaved rounds. If that method
were biased (library vs in-memory build, label order in a round, cache warmth), a ratio away from 1 here would say
by how much, and every cell of the study would carry it.

    python scripts/check_study_pairing.py configs/studies/corpus_ablation.yaml mobilenet_block transformer_block
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.config.baselines import WORKBENCH_LABEL
from workbench.record.result import RunResult
from workbench.runtime.threads import cpu_threads
from workbench.sweep.report import paired_ratio
from workbench.sweep.spec import load_sweep
from workbench.sweep.study import FULL
from workbench.sweep.workers import VariantRunner, WorkerSetup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", type=Path)
    parser.add_argument("models", nargs="+", help="corpus model names")
    parser.add_argument("--runs", type=int, default=3, help="A/A runs per model (each its own paired ratio)")
    args = parser.parse_args()
    models = "[" + ",".join(args.models) + "]"
    sweep = load_sweep(args.study, overrides=[f"sweep.models={models}",
                                              "output=/tmp/check_study_pairing"])
    runner = VariantRunner(WorkerSetup((), (str(Path.cwd()),), str(Path.cwd()), cpu_threads()))
    print("model | run | full (in-memory) ms | workbench (exported) ms | workbench/full [95% CI]")
    for variant in [v for v in sweep.variants if v.ablation == FULL]:
        for run in range(args.runs):
            status, value = runner("run", variant.config, reference=variant.config)
            if status != "ok":
                print(f"{variant.config['model']}: {value}")
                break
            result = RunResult.from_json(value["result"], "A/A run")
            ours, full = result.measurements[WORKBENCH_LABEL], result.measurements[FULL]
            ratio, low, high = paired_ratio(ours, full)
            print(f"{variant.config['model']['source']} | {run} | {full.median_ms:.4f} | {ours.median_ms:.4f} | {ratio:.3f} [{low:.3f}, {high:.3f}]",
                  flush=True)


if __name__ == "__main__":
    main()
