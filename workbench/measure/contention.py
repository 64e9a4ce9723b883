"""How much the machine's cores slow each other down right now, for the head of every results page.

On a shared VM the cores a benchmark gets are not always whole: for seconds or minutes the two vCPUs of a 2-core
AMD EPYC (znver4) ran a fixed multiply-add loop on two threads 1.1-2.0x as slowly each as on one, where
at other times they ran it at 1.0x. Every parallel runtime slows then (sub-millisecond models most), the
workbench's thread pool and ONNX Runtime's alike, and a page measured in such a stretch is not comparable with one
measured outside it. The probe times a small single-threaded matmul loop (numpy, which lets go of the GIL) on one
thread, then on `threads` threads at once: their mean time over the lone one is 1.0 where each thread has a core of
its own and about `threads` where they share one.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

import numpy as np

SIZE = 64  # a 64x64 float32 matmul: below the sizes at which numpy's BLAS starts threads of its own, in L1
CALLS = 4000  # about 25 ms on one znver4 core
TRIALS = 3  # the median of three probes: one is often caught by a burst


@dataclass(frozen=True)
class Contention:
    """The probe's figure when a benchmark started and when it ended."""

    threads: int
    start: float
    end: float


def _loop_seconds(matrix: np.ndarray) -> float:
    out = np.empty_like(matrix)
    started = time.perf_counter()
    for _ in range(CALLS):
        np.matmul(matrix, matrix, out=out)
    return time.perf_counter() - started


def _together(matrix: np.ndarray, threads: int) -> float:
    """The mean time each of `threads` threads takes for the loop, all started together."""
    seconds: list[float] = []
    barrier = threading.Barrier(threads)

    def run() -> None:
        barrier.wait()
        seconds.append(_loop_seconds(matrix))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return statistics.fmean(seconds)


def thread_contention(threads: int) -> float:
    """How many times as long each of `threads` threads running at once takes for a fixed loop as one thread alone
    (the median of TRIALS probes; 1.0 for one thread)."""
    if threads < 2:
        return 1.0
    matrix = np.random.default_rng(0).random((SIZE, SIZE), dtype=np.float32)
    _loop_seconds(matrix)  # warm: the BLAS library's first call
    ratios = [_together(matrix, threads) / _loop_seconds(matrix) for _ in range(TRIALS)]
    return statistics.median(ratios)


def contention_since(threads: int, start: float) -> Contention:
    """A benchmark's Contention: `start`, probed when it began, and the probe now that it ends."""
    return Contention(threads, start, thread_contention(threads))
