"""How many threads the kernels run on: one count for TVM, ONNX Runtime and IREE alike.

By default the machine's physical cores, which is what ONNX Runtime picks by itself; `target.num_cores` (or
TVM_NUM_THREADS in the environment) sets another count for all three.

Why this is set at all: TVM's runtime sizes its thread pool once per process, at its first parallel call, from
TVM_NUM_THREADS, or else from half the logical CPUs on x86 (it assumes two hyper-threads per core). On a
machine with one thread per core that halves the cores, and every TVM build ran on half the cores ONNX Runtime
used (tests/test_threads.py checks the count). Setting TVM_NUM_THREADS in this process before that first call sizes the pool, and
MetaSchedule's runner processes, started later, inherit it, so tuning measures candidates on the threads the
build will run on.
"""

from __future__ import annotations

import logging
import os

import psutil
import tvm

TVM_THREADS_ENV = "TVM_NUM_THREADS"

log = logging.getLogger("workbench.threads")


def cpu_threads(num_cores: int | None = None) -> int:
    """The thread count: `num_cores` if given, else TVM_NUM_THREADS if the user set it, else physical cores."""
    if num_cores:
        return int(num_cores)
    if os.environ.get(TVM_THREADS_ENV, "").isdigit() and int(os.environ[TVM_THREADS_ENV]) > 0:
        return int(os.environ[TVM_THREADS_ENV])
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def target_threads(target: tvm.target.Target) -> int:
    """The thread count for a build for `target` (its `num-cores`, if the config set one)."""
    num_cores = target.attrs.get("num-cores") if target.kind.name == "llvm" else None
    return cpu_threads(int(num_cores) if num_cores else None)


def use_tvm_threads(count: int) -> int:
    """Run TVM's kernels in this process (and in the processes it starts from now on) on `count` threads;
    returns the count TVM's pool runs, which differs (warned) when the pool was sized earlier in this process."""
    os.environ[TVM_THREADS_ENV] = str(count)
    running = int(tvm.get_global_func("runtime.NumThreads")())
    if running != count:
        log.warning("TVM's thread pool already runs %d threads in this process (asked for %d): it is sized once per "
                    "process, at its first use", running, count)
    return running
