"""One thread count for every runtime (runtime/threads.py): TVM's pool is sized by the target, once per process,
to the physical cores (or `num_cores`), not to TVM's own default of half the logical CPUs; ONNX Runtime gets
the same count, and result.json records it. Each check runs in a fresh process: the pool is sized once."""

import json
import subprocess
import sys
import textwrap

import psutil
import pytest

PHYSICAL_CORES = psutil.cpu_count(logical=False)


def threads_in_fresh_process(code: str, env: dict | None = None) -> dict:
    """Run `code` in a new Python process (TVM's pool not yet sized) and return the JSON it prints last."""
    import os

    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


SIZE_POOL = """
    import json, tvm
    from workbench.compile.targets import make_target
    from workbench.config import TargetConfig
    make_target(TargetConfig({config}))
    print(json.dumps({{"tvm": int(tvm.get_global_func("runtime.NumThreads")())}}))
"""


def test_an_llvm_target_runs_tvm_kernels_on_the_physical_cores():
    got = threads_in_fresh_process(SIZE_POOL.format(config=""), env={"TVM_NUM_THREADS": None})
    assert got["tvm"] == PHYSICAL_CORES


def test_num_cores_sets_the_thread_count():
    got = threads_in_fresh_process(SIZE_POOL.format(config="num_cores=1"), env={"TVM_NUM_THREADS": None})
    assert got["tvm"] == 1


@pytest.mark.skipif(PHYSICAL_CORES < 2, reason="needs two cores to tell the counts apart")
def test_onnx_runtime_gets_the_same_count_as_tvm(tmp_path):
    """A whole run with num_cores 1: TVM's pool, ORT's intra-op pool and result.json all say 1."""
    config = tmp_path / "one_core.yaml"
    config.write_text(textwrap.dedent(f"""
        name: one_core
        model: {{source: "zoo:convnet_small", inputs: {{x: [1, 3, 32, 32]}}}}
        target: {{kind: llvm, num_cores: 1}}
        pipeline: [fold_constant]
        baselines: [ort_all, ort_none]
        measure: {{warmup: 1, repeat: 2}}
        output: {tmp_path / "run"}
    """))
    got = threads_in_fresh_process(f"""
        import json, onnxruntime as ort, tvm
        from pathlib import Path
        sessions = []
        original = ort.InferenceSession.__init__
        def remember(self, *args, **kwargs):
            original(self, *args, **kwargs)
            sessions.append(self.get_session_options().intra_op_num_threads)
        ort.InferenceSession.__init__ = remember
        from workbench.cli import main
        assert main(["run", "{config}"]) == 0
        result = json.loads(Path("{tmp_path / 'run' / 'result.json'}").read_text())
        print(json.dumps({{"tvm": int(tvm.get_global_func("runtime.NumThreads")()), "ort": sessions,
                          "recorded": result["threads"]}}))
    """, env={"TVM_NUM_THREADS": None})
    assert got["tvm"] == 1 and got["recorded"] == 1 and got["ort"] and set(got["ort"]) == {1}
