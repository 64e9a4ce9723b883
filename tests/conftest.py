"""Shared fixtures: zoo models imported to Relax once per session (imports cost seconds)."""

import time

import onnx
import pytest
import tvm

from workbench.models import zoo
from workbench.models.canonicalize import InputSpec, canonicalize
from workbench.models.importer import import_to_relax


@pytest.fixture(scope="session")
def llvm() -> tvm.target.Target:
    return tvm.target.Target({"kind": "llvm"})


@pytest.fixture(scope="session")
def zoo_relax():
    """name -> (canonical ONNX model, imported Relax module), built lazily."""
    cache = {}

    def get(name: str):
        if name not in cache:
            raw = zoo.build(name)
            dtypes = {v.name: onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name
                      for v in raw.graph.input}
            specs = {k: InputSpec(tuple(v), dtypes[k]) for k, v in zoo.default_inputs(name).items()}
            model = canonicalize(raw, specs).model
            cache[name] = (model, import_to_relax(model))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def rpc_tracker():
    """A TVM RPC tracker and one CPU server (key `workbench-test`) on 127.0.0.1, for the RPC code paths."""
    from tvm.rpc import server, tracker

    from workbench.config import RpcConfig

    tracker_proc = tracker.Tracker(host="127.0.0.1", port=19190, port_end=19290, silent=True)
    server_proc = server.Server(host="127.0.0.1", port=19300, port_end=19400, key="workbench-test", silent=True,
                                tracker_addr=("127.0.0.1", tracker_proc.port))
    config = RpcConfig(tracker=f"127.0.0.1:{tracker_proc.port}", key="workbench-test")
    try:
        from workbench.runtime.rpc import check_tracker

        for _ in range(50):  # the server registers with the tracker shortly after it starts
            try:
                check_tracker(config)
                break
            except Exception:
                time.sleep(0.2)
        yield config
    finally:
        server_proc.terminate()
        tracker_proc.terminate()


@pytest.fixture
def run_two_writers():
    """Run `target(path, worker, barrier)` in two spawned processes that start writing together; both must exit 0."""
    import multiprocessing

    def run(target, path) -> None:
        context = multiprocessing.get_context("spawn")
        start = context.Barrier(2)  # both processes are up (imports done) before either writes: they really overlap
        writers = [context.Process(target=target, args=(path, w, start)) for w in range(2)]
        for process in writers:
            process.start()
        for process in writers:
            process.join(120)
            assert process.exitcode == 0

    return run


def _optimized_config(config: str) -> dict:
    """A config's model after its pipeline, for the host CPU: the optimized module, its tuning module, tasks and
    inputs."""
    from pathlib import Path

    from workbench.compile.targets import make_target
    from workbench.compile.tasks import extract_tasks, tuning_module
    from workbench.config import TargetConfig, load_experiment
    from workbench.stages import optimize, prepare

    host = make_target(TargetConfig())
    experiment = load_experiment(Path(config))
    prepared = prepare(experiment, Path.cwd(), host)
    optimized = optimize(prepared, experiment.pipeline, stats=False).module
    plain = tuning_module(optimized, host)
    return {"optimized": optimized, "plain": plain, "tasks": extract_tasks(plain, host), "inputs": prepared.inputs}


@pytest.fixture(scope="session")
def quickstart():
    """convnet_small after the quickstart pipeline (configs/quickstart.yaml)."""
    return _optimized_config("configs/quickstart.yaml")


@pytest.fixture(scope="session")
def mobilenet_block():
    """mobilenet_block after the default pipeline (configs/mobilenet_block.yaml): kernels used twice, one of them
    a transpose (no FLOPs)."""
    return _optimized_config("configs/mobilenet_block.yaml")
