"""The workbench's parallel launcher (runtime/launcher.py, parallel_launch.c): a real exported library runs its
parallel loops on the workbench's pool with the same outputs, in a forked child too, and keeps TVM's launcher where
asked. Each check runs in a fresh process: the pool and TVM's belong to the process."""

import psutil
import pytest
from fresh_process import run_fresh

CORES = psutil.cpu_count(logical=False) or 1

RUN = """
    import json, multiprocessing, tempfile
    from pathlib import Path
    import numpy as np
    from workbench.measure.factory import Bench, runner_for
    from workbench.runtime import launcher
    from workbench.runtime.threads import use_tvm_threads

    def child(path, data, queue):
        lib = tvm.runtime.load_module(str(path))  # loading points the library at TVM's launcher again
        launcher.install(path, {cores})
        out = relax.VirtualMachine(lib, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
        queue.put(bool(np.allclose(out, data @ data.T, rtol=1e-4, atol=1e-3)))

    if __name__ == "__main__":
        use_tvm_threads({cores})
        target = target_on({cores})
        data = np.random.default_rng(0).normal(size=(256, 256)).astype("float32")
        work = Path(tempfile.mkdtemp())
        # through the factory, as every measurement runs a CPU build: exported, loaded, the launcher installed
        bench = Bench(None, {{"x": data}}, target, work)
        matmul = built(lambda x: relax.op.matmul(x, relax.op.permute_dims(x)), {cores}, 256)
        runner = runner_for("workbench", bench, matmul)
        outputs = [runner.infer()[0] for _ in range(3)]
        # a second build under the same label, while the first is loaded: its own library, not the first again
        doubled = runner_for("workbench", bench, built(lambda x: relax.op.add(x, x), {cores}, 256))
        seen = {{
            "equal": all(np.allclose(out, data @ data.T, rtol=1e-4, atol=1e-3) for out in outputs),
            "second": bool(np.array_equal(doubled.infer()[0], 2 * data)),
            "left": sorted(path.name for path in work.iterdir()),
            "workers": launcher.pool_workers(),
        }}
        library = matmul.export(work / "matmul.so")
        tvm.runtime.load_module(str(library))
        # a forked child inherits the pool's state but not its threads: its own start afresh (TVM's own pool, which
    # does not, would hang there)
        if launcher.wanted():
            queue = multiprocessing.get_context("fork").Queue()
            forked = multiprocessing.get_context("fork").Process(target=child, args=(library, data, queue))
            forked.start()
            forked.join(60)
            forked.kill()
            seen["forked"] = queue.get(timeout=5) if forked.exitcode == 0 else f"exit {{forked.exitcode}}"
        # a library without parallel loops has nothing to point at the pool
        tiny = built(lambda x: relax.op.strided_slice(x, axes=[0], begin=[0], end=[1]), {cores}, 256)
        tiny_path = tiny.export(work / "tiny.so")
        tvm.runtime.load_module(str(tiny_path))
        seen["tiny"] = launcher.install(tiny_path, {cores})
        print(json.dumps(seen))
"""


def _run(env: dict[str, str] | None = None) -> dict:
    return run_fresh(RUN.format(cores=CORES), timeout=300, env=env)


@pytest.mark.skipif(CORES < 2, reason="one core: the pool starts no worker")
def test_a_cpu_build_runs_on_the_workbench_pool_with_the_same_outputs_and_in_a_forked_child():
    seen = _run()
    assert seen["equal"] and seen["second"]
    assert seen["left"] == []  # each library removed once loaded
    assert seen["workers"] == CORES - 1  # the pool ran the loops: the caller and CORES - 1 workers
    assert seen["forked"] is True
    assert seen["tiny"] is False


def test_workbench_launcher_tvm_keeps_tvms_own_launcher():
    seen = _run({"WORKBENCH_LAUNCHER": "tvm"})
    assert seen["equal"] and seen["second"]
    assert seen["workers"] == 0  # the pool never ran


WAKE = """
    import json, os, tempfile, time
    from pathlib import Path
    import numpy as np
    from workbench.runtime import launcher

    path = built(lambda x: relax.op.add(x, x), 2, 256).export(Path(tempfile.mkdtemp()) / "add.so")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    assert launcher.install(path, 2)
    data = tvm.runtime.tensor(np.ones((256, 256), "float32"))
    before = {int(tid) for tid in os.listdir("/proc/self/task")}
    vm["main"](data)  # starts the worker, from a caller free to run on every core
    worker = ({int(tid) for tid in os.listdir("/proc/self/task")} - before).pop()
    caller_core = min(os.sched_getaffinity(0))
    time.sleep(0.3)  # the worker sleeps; where it wakes is the scheduler's choice, here forced onto the caller's core
    os.sched_setaffinity(0, {caller_core})
    os.sched_setaffinity(worker, {caller_core})
    for _ in range(20):
        vm["main"](data)
    time.sleep(0.1)  # the caller's core is free for the worker to run on, if it has not yet
    print(json.dumps({"caller": caller_core, "worker": sorted(os.sched_getaffinity(worker))}))
"""


@pytest.mark.skipif(len(psutil.Process().cpu_affinity()) < 2, reason="one core: there is no other core to move to")
def test_a_worker_woken_on_the_callers_core_moves_off_it():
    """The scheduler may wake a worker on the core its caller runs on, where the two take turns: ~7 inferences
    after each pause ran serially. The worker moves to the pool's other cores when it finds itself there."""
    seen = run_fresh(WAKE, timeout=300)
    assert seen["worker"] and seen["caller"] not in seen["worker"]
