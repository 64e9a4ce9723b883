"""Throughput of `workbench sweep`: a small untuned sweep on zoo:convnet_small, printed as variants/minute;
with --tuned, the wall time of a tuned sweep split into tuning and measuring.

    python scripts/bench_sweep.py [--workers 2]      # goal: >= 20 variants/min
    python scripts/bench_sweep.py --tuned [--sweep configs/sweeps/orderings_tuned.yaml] [--out DIR]
                                                     # goal: the tuned 6-ordering sweep within 20 minutes on 2 cores

Also prints the workers' CPU seconds per variant, which other load on the machine disturbs less than
wall time (compare versions with it when the machine is shared). The tuned run keeps its output folder
(report.md, latency.png) in --out.
"""

import argparse
import resource
import tempfile
import time
from pathlib import Path

import yaml

from workbench.sweep.driver import run_sweep
from workbench.sweep.report import tuning_counts, write_sweep_report
from workbench.sweep.spec import load_sweep
from workbench.sweep.tuning import read_tuning_summary

SWEEP = {
    "name": "bench_sweep",
    "base": {"name": "bench_sweep", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}},
             "baselines": ["tvm_unoptimized"], "accuracy": {"reference": "tvm_unoptimized"},
             "measure": {"warmup": 1, "repeat": 5}},
    "sweep": {"orderings": {"permutations": ["fold_constant", "canonicalize", "fuse"], "suffix": ["dce"]},
              "grid": {"seed": [0, 1]}, "timeout_s": 300},
}


def throughput(workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump({**SWEEP, "output": str(Path(tmp) / "out")}))
        sweep = load_sweep(path, Path(tmp))
        started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = run_sweep(sweep, Path(tmp), workers=workers)
        elapsed = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = cpu_after.ru_utime - cpu.ru_utime + cpu_after.ru_stime - cpu.ru_stime
    done = sum(r["status"] == "done" for r in rows.values())
    classes = len({r["class_id"] for r in rows.values() if r["status"] == "done"})
    print(f"{len(rows)} variants ({done} done, {classes} equivalence classes measured) in {elapsed:.1f} s "
          f"with {workers} workers: {len(rows) / elapsed * 60:.1f} variants/min (goal >= 20); "
          f"worker CPU {cpu_s / len(rows):.2f} s/variant")


def tuned(sweep_file: Path, out: Path) -> None:
    sweep = load_sweep(sweep_file, Path.cwd(), [f"output={out}"])
    if out.exists():
        raise SystemExit(f"{out} exists: remove it (or pass another --out) so the sweep starts from scratch")
    started = time.perf_counter()
    rows = run_sweep(sweep, Path.cwd())
    elapsed = time.perf_counter() - started
    report = write_sweep_report(sweep.output)
    counts = tuning_counts(read_tuning_summary(sweep.output))
    tuning_s = counts["seconds"]
    done = sum(r["status"] == "done" for r in rows.values())
    print(f"{len(rows)} variants ({done} done) of {sweep.name} in {elapsed / 60:.1f} min (goal <= 20 min on 2 cores): "
          f"tuning {tuning_s:.0f} s ({counts['union']} distinct tasks of {counts['sum']} summed over "
          f"{counts['classes']} classes, {counts['trials']} trials), measuring and the rest {elapsed - tuning_s:.0f} s; "
          f"report {report}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tuned", action="store_true", help="time a tuned sweep: tuning vs measuring")
    parser.add_argument("--sweep", type=Path, default=Path("configs/sweeps/orderings_tuned.yaml"))
    parser.add_argument("--out", type=Path, default=Path("runs/bench_sweep_tuned"))
    args = parser.parse_args()
    if args.tuned:
        tuned(args.sweep, args.out.resolve())
    else:
        throughput(args.workers)


if __name__ == "__main__":
    main()
