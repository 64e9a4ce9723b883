"""TVM's kernels on the cores other processes leave free: measured while a model runs, not guessed.

TVM's thread pool gives each worker a fixed share of every parallel loop (task i to worker i) and the caller waits
for the last one. When another process runs on a worker's core, every parallel kernel waits for that worker's
next time slice: with one busy process beside it a 2-core detector ran 143 ms instead of 64 on one thread, and the
quickstart's 0.34 ms became 65 ms with two (ONNX Runtime's pool, whose caller takes unstarted work, lost ~2x).
Where cores are busy the workbench's launcher (runtime/launcher.py) already keeps a kernel from waiting for a
worker that has not started; what it cannot avoid is a worker preempted inside its share, which this governor
avoids by running on fewer threads where that measured faster.
The meter reads the CPU time the whole machine spent against this process's own (psutil: /proc/stat and
/proc/self/stat), at most every `INTERVAL_S`; a quiet machine keeps every core (but below), a busy one gets the thread
count that measured faster: the cores the others left free or all of them (the scheduler may give a short burst both).
A quiet machine can slow the threads' synchronization too: on a 2-core VM rapidocr_cls ran 1.4-1.7 ms instead of
0.44-0.61 on both threads for seconds at a time, in 9 of 48 half-second blocks, while one thread ran 0.49-0.62 in
every block, with no other process busy. So the governor also watches its own speed on every core, and where the
median of a window of calls rises well above the best window seen (`SLOWER_THAN_BEST`), it times fewer threads.
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
# a window of PROBE_CALLS calls on every core whose median is this far above the best window's sends the governor
# to time fewer threads (a median: one call after a pause, caches cold, is not a slow stretch; the stretches seen
# were ~3x)
SLOWER_THAN_BEST = 1.5
CALIBRATE_S = 2.0  # at most this long, before its first inference returns, a governor times half its cores and all
# (after PROBE_CALLS calls on every core: cold, the first calls on two threads ran 0.92 ms against 0.65 on one, and
# one thread would have been kept for a model that runs 0.30 ms on two)
SLOW_HOLD_CALLS = 10 * PROBE_CALLS  # in a slow stretch, probed again after this many calls too, if sooner than HOLD_S
CLEARLY_FASTER = 0.9  # fewer threads are kept on a quiet machine only where their mean is below this share of all's
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
    """Runs each inference (`run`) on a thread count chosen by measurement. Quiet machine: every core, unless half
    of them measured clearly faster (below). Where other
    processes keep cores busy, fewer threads are not always faster (the scheduler may still give a short burst
    both cores), so the counts worth trying, the free cores and all of them, are each timed over PROBE_CALLS
    inferences and the faster on average kept; it is probed again after HOLD_S, then after twice as long while the load
    stays the same (at most HOLD_MAX_S), and at once when the load changes.

    On a quiet machine it watches the calls on every core: a window whose median is SLOWER_THAN_BEST times the best
    window's starts a slow stretch, in which half the cores and all of them are probed every HOLD_S (a stretch
    ends unannounced; holding longer would keep fewer threads past it), or every SLOW_HOLD_CALLS calls if sooner,
    fewer kept only where CLEARLY_FASTER. The
    stretch is over once all cores are kept; the next window is then the speed to compare with (probes run back
    to back, a caller may pause between inferences, which slows each). A process may start in
    a stretch, where no window is slower than the best: the first inference probes both counts first (at most
    CALIBRATE_S), and a model too small to gain from every core keeps fewer the same way."""

    cores: int
    meter: LoadMeter = field(default_factory=LoadMeter)
    threads: int = field(init=False)
    _free: int = field(init=False)  # the cores other processes left free at the last reading
    _slow: bool = field(init=False, default=False)  # in a slow stretch on a quiet machine
    _candidates: tuple[int, ...] = field(init=False)
    _probes: dict[int, list[float]] = field(init=False, default_factory=dict)
    _hold_s: float = field(init=False, default=0.0)
    _probe_at: float = field(init=False, default=float("inf"))
    _window: list[float] = field(init=False, default_factory=list)  # the latest calls on every core, not probes
    _best_s: float = field(init=False, default=float("inf"))  # the smallest window median since the last stretch
    _calibrated: bool = field(init=False, default=False)
    _held_calls: int = field(init=False, default=0)  # calls since the last probe settled

    def __post_init__(self) -> None:
        set_tvm_threads(self.cores)  # the pool is the process's: another runner's governor may have shrunk it
        self.threads = self._free = self.cores
        self._candidates = (self.cores,)

    def run(self, call: Callable[[], object]) -> object:
        """One inference on the thread count the load and the probes chose."""
        if not self._calibrated:
            self._calibrate(call)
        self._follow_load()
        wanted = self._next_probe() or self.threads
        if wanted != self.threads:
            set_tvm_threads(wanted)
            self.threads = wanted
        started = time.perf_counter()
        result = call()
        elapsed = time.perf_counter() - started
        if self._probing:
            self._probes.setdefault(wanted, []).append(elapsed)
            self._settle()
            return result
        self._held_calls += 1
        if wanted == self.cores and self._quiet:
            self._watch(elapsed)
        return result

    @property
    def _quiet(self) -> bool:
        """No core taken by other processes at the last reading."""
        return self._free == self.cores

    @property
    def _probing(self) -> bool:
        return (bool(self._probes) or time.perf_counter() >= self._probe_at
                or (self._in_stretch and self._held_calls >= SLOW_HOLD_CALLS))

    @property
    def _in_stretch(self) -> bool:
        """In a slow stretch (or the calibration's probe) on a quiet machine. A stretch outlives a spell of load,
        so that half the cores kept as clearly faster are probed again once the machine is quiet; under load the
        probes follow HOLD_S, doubling, as for any load."""
        return self._slow and self._quiet

    def _follow_load(self) -> None:
        busy = self.meter.others_busy()
        if busy is not None:
            self._free = max(1, min(self.cores, self.cores - round(busy)))
            self._choose_candidates()

    def _choose_candidates(self) -> None:
        """The counts worth probing now: the free cores and all under load, half and all in a slow stretch, else all
        of them; a change starts the probes afresh."""
        if not self._quiet:
            candidates = (self._free, self.cores)
        elif self._slow:
            candidates = (max(1, self.cores // 2), self.cores)
        else:
            candidates = (self.cores,)
        if candidates != self._candidates:
            self._candidates, self._probes, self._hold_s, self._window = candidates, {}, HOLD_S, []
            self._probe_at = time.perf_counter() if len(candidates) > 1 else float("inf")
            if len(candidates) == 1 and self.threads != self.cores:
                set_tvm_threads(self.cores)
                self.threads = self.cores

    def _calibrate(self, call: Callable[[], object]) -> None:
        """Probe half the cores and all of them (as in a slow stretch) before the first inference returns."""
        self._calibrated = True
        if self.cores < 2:
            return
        deadline = time.perf_counter() + CALIBRATE_S
        for _ in range(PROBE_CALLS):  # warm: the pool's workers started, the caches and pages touched
            if time.perf_counter() >= deadline:
                return
            call()
        self._slow = True
        self._choose_candidates()
        while self._probing and time.perf_counter() < deadline:
            self.run(call)

    def _watch(self, elapsed: float) -> None:
        """Take a call on every core of a quiet machine into the window; a full window ends or starts nothing but
        a slow stretch."""
        self._window.append(elapsed)
        if len(self._window) < PROBE_CALLS:
            return
        median, self._window = statistics.median(self._window), []
        self._best_s = min(self._best_s, median)
        if self.cores > 1 and median > SLOWER_THAN_BEST * self._best_s:
            self._slow = True
            self._choose_candidates()

    def _next_probe(self) -> int | None:
        if not self._probing:
            return None
        return next((count for count in self._candidates if len(self._probes.get(count, [])) < PROBE_CALLS), None)

    def _settle(self) -> None:
        if self._next_probe() is not None:
            return
        means = {count: statistics.fmean(self._probes[count]) for count in self._candidates}
        fewer = min(means, key=means.get)
        keep_fewer = means[fewer] < (CLEARLY_FASTER if self._quiet else 1.0) * means[self.cores]
        self.threads = fewer if keep_fewer else self.cores
        set_tvm_threads(self.threads)
        self._probes, self._held_calls = {}, 0
        self._probe_at = time.perf_counter() + self._hold_s
        if self._in_stretch and self.threads == self.cores:  # the stretch is over, or fewer threads do not help
            self._slow, self._best_s = False, float("inf")  # the next window, timed as the caller calls, compares
            self._choose_candidates()
        elif not self._in_stretch:
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
