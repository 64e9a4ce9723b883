"""Throughput of `workbench sweep`: a small untuned sweep on zoo:convnet_small, printed as variants/minute.

    python scripts/bench_sweep.py [--workers 2]      # goal: >= 20 variants/min

Also prints the workers' CPU seconds per variant, which other load on the machine disturbs less than
wall time (compare versions with it when the machine is shared).
"""

import argparse
import resource
import tempfile
import time
from pathlib import Path

import yaml

from workbench.sweep.run import run_sweep
from workbench.sweep.spec import load_sweep

SWEEP = {
    "name": "bench_sweep",
    "base": {"name": "bench_sweep", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]}},
             "baselines": ["tvm_unoptimized"], "accuracy": {"reference": "tvm_unoptimized"},
             "measure": {"warmup": 1, "repeat": 5}},
    "sweep": {"orderings": {"permutations": ["fold_constant", "canonicalize", "fuse"], "suffix": ["dce"]},
              "grid": {"seed": [0, 1]}, "timeout_s": 300},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump({**SWEEP, "output": str(Path(tmp) / "out")}))
        sweep = load_sweep(path, Path(tmp))
        started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = run_sweep(sweep, Path(tmp), workers=args.workers)
        elapsed = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = cpu_after.ru_utime - cpu.ru_utime + cpu_after.ru_stime - cpu.ru_stime
    done = sum(r["status"] == "done" for r in rows.values())
    classes = len({r["class_id"] for r in rows.values() if r["status"] == "done"})
    print(f"{len(rows)} variants ({done} done, {classes} equivalence classes measured) in {elapsed:.1f} s "
          f"with {args.workers} workers: {len(rows) / elapsed * 60:.1f} variants/min (goal >= 20); "
          f"worker CPU {cpu_s / len(rows):.2f} s/variant")


if __name__ == "__main__":
    main()
