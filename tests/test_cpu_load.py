"""The thread governor (runtime/cpu_load.py): with a real process spinning beside it, TVM's pool runs on the cores
left free, and on all of them again once the machine is quiet. The check runs in a fresh process (the pool belongs
to the process)."""

import psutil
import pytest
from fresh_process import run_fresh

CORES = psutil.cpu_count(logical=False) or 1

# a fresh process's runner of x @ 2I (2x exactly, and enough work to gain from every core: the governor keeps fewer
# threads where they are clearly faster, as for a lone x + x) on the test's cores: the library both checks run
DOUBLING_RUNNER = """
    import numpy as np
    from workbench.measure.runners import tvm_runner

    def doubling_runner(cores, data):
        twice = relax.const(2 * np.eye(data.shape[0], dtype="float32"))
        library = built(lambda x: relax.op.matmul(x, twice), cores, data.shape[0])
        return tvm_runner("workbench", library, {"x": data}, target_on(cores))
"""

GOVERN = """
    import json, multiprocessing, time
    from workbench.runtime.cpu_load import INTERVAL_S
    from workbench.runtime.threads import use_tvm_threads

    def spin():
        while True:
            pass

    def settle(runner, seconds=3.0):
        # the pool sizes seen over `seconds` of inferences (each lets the governor look at the load first), and the last
        seen = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            time.sleep(INTERVAL_S / 8)
            np.testing.assert_array_equal(runner.infer()[0], 2 * data)
            seen.append(int(tvm.get_global_func("runtime.NumThreads")()))
        return sorted(set(seen)), seen[-1]

    if __name__ == "__main__":
        use_tvm_threads({cores})
        data = np.random.default_rng(0).normal(size=(256, 256)).astype("float32")
        runner = doubling_runner({cores}, data)
        runner.infer()  # the first inference times half the cores against all of them
        quiet = settle(runner, 1.0)
        busy = multiprocessing.Process(target=spin, daemon=True)
        busy.start()
        loaded = settle(runner)
        busy.terminate()
        busy.join()
        again = settle(runner)
        print(json.dumps({{"quiet": quiet, "loaded": loaded, "again": again}}))
"""


@pytest.mark.skipif(CORES < 2, reason="one core: there is no thread to give up")
def test_a_runner_tries_the_free_cores_under_load_and_takes_all_back_when_quiet():
    """A TVM runner's inferences (outputs checked) drive the governor: quiet, every core; with one spinning process
    it times the free cores against all of them; quiet again, every core."""
    seen = run_fresh(DOUBLING_RUNNER, GOVERN.format(cores=CORES), timeout=180)
    assert seen["quiet"] == [[CORES], CORES]
    assert seen["loaded"][0] == [CORES - 1, CORES]
    assert seen["again"][1] == CORES


@pytest.fixture
def spinning():
    """One process keeping a core busy for the test's length."""
    import multiprocessing

    from workbench.bench.load import _spin

    busy = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
    busy.start()
    yield
    busy.terminate()
    busy.join()


@pytest.fixture
def governor():
    """A governor over every core, TVM's pool put back to every core after (skipped where this process's pool was
    sized before, smaller than the cores)."""
    from workbench.runtime.cpu_load import ThreadGovernor, set_tvm_threads
    from workbench.runtime.threads import use_tvm_threads

    if use_tvm_threads(CORES) != CORES:
        pytest.skip("TVM's pool in this test process was sized before, smaller than the cores")
    yield ThreadGovernor(CORES)
    set_tvm_threads(CORES)


def sleeping(on_all_s: float, on_fewer_s: float):
    """An inference that sleeps for a time set by the size of TVM's pool: the faster thread count is known."""
    import time

    import tvm

    def inference():
        time.sleep(on_all_s if int(tvm.get_global_func("runtime.NumThreads")()) == CORES else on_fewer_s)

    return inference


@pytest.mark.skipif(CORES < 2, reason="one core: there is no thread to give up")
def test_under_load_the_governor_holds_its_choice_longer_each_time(spinning, governor):
    """Under load a choice is probed again after 1 s, then 2 s, 4 s... (HOLD_S doubling): over 4 s after the first
    second, a few probes, each switching the thread count two or three times. Its calibration's quiet-machine
    stretch, kept through the load, had it probe every 100 calls: 40-60 switches."""
    import time

    inference = sleeping(0.004, 0.001)
    started = time.perf_counter()
    while time.perf_counter() < started + 1.0:
        governor.run(inference)
    switches, last = 0, governor.threads
    while time.perf_counter() < started + 5.0:
        governor.run(inference)
        switches, last = switches + (governor.threads != last), governor.threads
    assert 1 <= switches <= 15


@pytest.mark.skipif(CORES < 2, reason="one core: there is no thread to give up")
@pytest.mark.parametrize("faster", ["free cores", "all cores"])
def test_under_load_the_governor_keeps_the_thread_count_that_measured_faster(spinning, faster, governor):
    """Under load the choice is measured, not assumed: an inference that runs faster on the free cores keeps them, one
    that runs faster on all of them (the scheduler gives its bursts both) keeps all. The inference here sleeps for a
    time set by the pool's size, so the faster count is known."""
    import time

    inference = sleeping(0.004, 0.001) if faster == "free cores" else sleeping(0.001, 0.004)
    deadline = time.perf_counter() + 3.0
    while time.perf_counter() < deadline or governor._probes:  # the end not inside a probe: it sets each count
        governor.run(inference)
    assert governor.threads == (CORES - 1 if faster == "free cores" else CORES)


@pytest.mark.skipif(CORES < 2, reason="one core: there is no thread to give up")
@pytest.mark.parametrize("fewer_help", [True, False])
def test_a_slow_stretch_on_a_quiet_machine_is_run_on_fewer_threads_while_they_are_faster(fewer_help, governor):
    """With no other process busy, a stretch in which every core runs 4x slower (the threads' synchronization, as
    seen on a 2-core VM) sends the governor to half the cores where they are clearly faster there, and back to all
    once the stretch is over; where half the cores are no faster in the stretch it stays on all of them. The
    inference sleeps for a time set by the phase and the pool's size, so the right count is known."""
    import time

    from workbench.runtime.cpu_load import PROBE_CALLS

    half = max(1, CORES // 2)
    # seconds a call takes on (all cores, half of them), outside and inside the stretch
    steady, stretch = (0.001, 0.002), ((0.004, 0.002) if fewer_help else (0.002, 0.002))
    seen = []

    def phase(seconds, sleeps):
        threads = []
        deadline = time.perf_counter() + seconds
        inference = sleeping(*sleeps)
        while time.perf_counter() < deadline:
            governor.run(inference)
            threads.append(governor.threads)
        while governor._probes:  # a probe in flight at the deadline settles: the phase ends on the count kept
            governor.run(inference)
            threads.append(governor.threads)
        seen.append(threads)

    phase(1.0, steady)
    phase(2.0, stretch)
    phase(2.5, steady)
    before, during, after = seen
    assert before[-1] == CORES and before.count(half) <= PROBE_CALLS  # at most one probe of half, not kept
    assert during[-1] == (half if fewer_help else CORES)
    if fewer_help:  # most of the stretch on half the cores
        assert during.count(half) > len(during) / 2
    else:  # one probe of half the cores, not kept; the slower speed is then the one to compare with
        assert during.count(half) <= PROBE_CALLS
    assert after[-1] == CORES


PINNING = """
    import json, os, threading
    from workbench.runtime.cpu_load import set_tvm_threads

    before = sorted(os.sched_getaffinity(0))
    doubling_runner({cores}, np.ones((64, 64), "float32")).infer()
    set_tvm_threads(1)
    set_tvm_threads({cores})
    started = []
    thread = threading.Thread(target=lambda: started.append(sorted(os.sched_getaffinity(0))))
    thread.start()
    thread.join()
    print(json.dumps({{"before": before, "caller": sorted(os.sched_getaffinity(0)), "started": started[0]}}))
"""


@pytest.mark.skipif(CORES < 2, reason="one core: a pin to one core changes nothing")
def test_sizing_tvm_threads_leaves_the_callers_cores_alone():
    """TVM's runtime.config_threadpool pins the calling thread to one core, and every thread started from it later
    (ONNX Runtime's and OpenVINO's pools in a side-by-side run, the launcher's workers) inherits the pin: the
    corpus benchmark then ran every runtime created after the workbench's runner on one core. The governor's
    sizing puts the caller's cores back."""
    affinity = run_fresh(DOUBLING_RUNNER, PINNING.format(cores=CORES), timeout=300)
    assert len(affinity["before"]) >= 2
    assert affinity["caller"] == affinity["before"]
    assert affinity["started"] == affinity["before"]
