"""TVM's kernels on the cores other processes leave free: measured while a model runs, not guessed.

TVM's thread pool gives each worker a fixed share of every parallel loop (task i to worker i) and the caller waits
for the last one. When another process runs on a worker's core, every parallel kernel waits for that worker's
next time slice: with one busy process beside it a 2-core detector ran 143 ms instead of 64 on one thread, and the
quickstart's 0.34 ms became 65 ms with two (ONNX Runtime's pool, whose caller takes unstarted work, lost ~2x).
Where cores are busy the workbench's launcher (runtime/launcher.py) already keeps a kernel from waiting for a
worker that has not started; what it cannot avoid is a worker preempted inside its share, which this governor
avoids by running on fewer threads where that measured faster.
The meter reads the CPU time the whole machine spent against this process's own (psutil: /proc/stat and
/proc/self/stat), at most every `INTERVAL_S`; a quiet machine keeps every core, a busy one gets the thread count that
measured faster: the cores the others left free or all of them (the scheduler may give a short burst both).
docs/tuning.md says what a user sees on a busy machine.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import tvm

from workbench.runtime import launcher

INTERVAL_S = 0.2  # how often the load is read: a busy neighbour is seen within a fifth of a second
# inferences timed on each thread count worth trying, compared by their mean: beside one busy process on 2 cores
# the quickstart on both threads ran a median 0.46-0.62 ms but a mean 0.84-0.95 (one call in ten or more waited
# ~2 ms for a worker preempted in its share), on one thread 0.63 and 0.65: the median would pick the slower
PROBE_CALLS = 10
HOLD_S = 1.0  # how long a probed choice holds before it is probed again (doubling up to HOLD_MAX_S)
HOLD_MAX_S = 8.0
_BIG_CORES = 1  # TVM's affinity mode for runtime.config_threadpool: the one its pool starts in


CPUSET_FILE = Path("/sys/fs/cgroup/cpuset.cpus.effective")  # cgroup v2: the CPUs a container may use


def _allowed_cpus() -> set[int] | None:
    """The CPUs this process's container may use, or None for all. Not the thread's own affinity: TVM's pool pins
    the calling thread to one core."""
    try:
        text = CPUSET_FILE.read_text().strip()
    except OSError:
        return None
    cpus: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus or None


# not busy (idle, waiting on I/O) or counted twice (Linux includes guest time in user and nice)
_NOT_BUSY = ("idle", "iowait", "guest", "guest_nice")


def _machine_busy_s(allowed: set[int] | None) -> float:
    """CPU seconds every process (and a hypervisor's steal) has spent so far on the `allowed` CPUs."""
    return sum(sum(cpu) - sum(getattr(cpu, name, 0.0) for name in _NOT_BUSY)
               for index, cpu in enumerate(psutil.cpu_times(percpu=True)) if allowed is None or index in allowed)


def _own_busy_s() -> float:
    """CPU seconds this process's threads have spent so far (TVM's and ONNX Runtime's pools included)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


@dataclass
class LoadMeter:
    """How many cores other processes kept busy, read from the CPU-time counters at most every INTERVAL_S."""

    _read_at: float = field(init=False, default=0.0)
    _machine: float = field(init=False, default=0.0)
    _own: float = field(init=False, default=0.0)
    _allowed: set[int] | None = field(init=False, default_factory=_allowed_cpus)

    def __post_init__(self) -> None:
        self._reading()

    def _reading(self) -> tuple[float, float, float]:
        previous = (self._read_at, self._machine, self._own)
        self._read_at, self._machine, self._own = time.perf_counter(), _machine_busy_s(self._allowed), _own_busy_s()
        return previous

    def others_busy(self) -> float | None:
        """Cores other processes kept busy since the last reading, or None before INTERVAL_S has passed."""
        if time.perf_counter() - self._read_at < INTERVAL_S:
            return None
        read_at, machine, own = self._reading()
        return max(0.0, (self._machine - machine) - (self._own - own)) / (self._read_at - read_at)


@dataclass
class ThreadGovernor:
    """Runs each inference (`run`) on a thread count chosen by measurement. Quiet machine: every core. Where other
    processes keep cores busy, fewer threads are not always faster (the scheduler may still give a short burst
    both cores), so the counts worth trying, the free cores and all of them, are each timed over PROBE_CALLS
    inferences and the faster on average kept; it is probed again after HOLD_S, then after twice as long while the load
    stays the same (at most HOLD_MAX_S), and at once when the load changes."""

    cores: int
    meter: LoadMeter = field(default_factory=LoadMeter)
    threads: int = field(init=False)
    _candidates: tuple[int, ...] = field(init=False)
    _probes: dict[int, list[float]] = field(init=False, default_factory=dict)
    _hold_s: float = field(init=False, default=0.0)
    _probe_at: float = field(init=False, default=float("inf"))

    def __post_init__(self) -> None:
        set_tvm_threads(self.cores)  # the pool is the process's: another runner's governor may have shrunk it
        self.threads = self.cores
        self._candidates = (self.cores,)

    def run(self, call: Callable[[], object]) -> object:
        """One inference on the thread count the load and the probes chose."""
        self._follow_load()
        wanted = self._next_probe() or self.threads
        if wanted != self.threads:
            set_tvm_threads(wanted)
            self.threads = wanted
        started = time.perf_counter()
        result = call()
        if self._probing:
            self._probes.setdefault(wanted, []).append(time.perf_counter() - started)
            self._settle()
        return result

    @property
    def _probing(self) -> bool:
        return bool(self._probes) or time.perf_counter() >= self._probe_at

    def _follow_load(self) -> None:
        busy = self.meter.others_busy()
        if busy is None:
            return
        free = max(1, min(self.cores, self.cores - round(busy)))
        candidates = (self.cores,) if free == self.cores else (free, self.cores)
        if candidates != self._candidates:
            self._candidates, self._probes, self._hold_s = candidates, {}, HOLD_S
            self._probe_at = time.perf_counter() if len(candidates) > 1 else float("inf")
            if len(candidates) == 1 and self.threads != self.cores:
                set_tvm_threads(self.cores)
                self.threads = self.cores

    def _next_probe(self) -> int | None:
        if not self._probing:
            return None
        return next((count for count in self._candidates if len(self._probes.get(count, [])) < PROBE_CALLS), None)

    def _settle(self) -> None:
        if self._next_probe() is not None:
            return
        self.threads = min(self._candidates, key=lambda count: statistics.fmean(self._probes[count]))
        set_tvm_threads(self.threads)
        self._probes = {}
        self._probe_at = time.perf_counter() + self._hold_s
        self._hold_s = min(2 * self._hold_s, HOLD_MAX_S)


def set_tvm_threads(count: int) -> None:
    """Run TVM's parallel kernels in this process on `count` threads from the next call on, on TVM's pool and on
    the workbench's launcher alike (both keep their workers; the ones not used sleep).

    TVM's `runtime.config_threadpool` also pins the calling thread to one core, and every thread started from it
    afterwards inherits that pin: ONNX Runtime's and OpenVINO's pools created after a TVM runner, and the
    launcher's workers, all ran on one core (convnet_small's ort_all 0.37 -> 0.44 ms, openvino 0.45 -> 0.62, the
    workbench's 0.33 -> 0.65 in the corpus benchmark). The caller's affinity is put back as it was."""
    affinity = os.sched_getaffinity(0)
    try:
        tvm.get_global_func("runtime.config_threadpool")(_BIG_CORES, count)
    finally:
        os.sched_setaffinity(0, affinity)
    launcher.set_threads(count)
