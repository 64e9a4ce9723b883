"""Checks that must run in a fresh Python process (TVM's thread pool, the launcher's pool and a thread's core
affinity belong to the process): a script is run with `python -c` after a prelude that builds small CPU modules, and
its last stdout line, JSON, is read back."""

import json
import os
import subprocess
import sys
import textwrap

# `built(op, cores, size)`: relax `op` applied to one float32 [size, size] input, built for this CPU on `cores`
PRELUDE = """
    import tvm
    from tvm import relax
    from workbench.compile.build import build_lowered

    def target_on(cores):
        return tvm.target.Target({"kind": "llvm", "num-cores": cores})

    def built(op, cores, size):
        x = relax.Var("x", relax.TensorType([size, size], "float32"))
        bb = relax.BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                out = bb.emit_output(op(x))
            bb.emit_func_output(out)
        return build_lowered(bb.get(), target_on(cores))
"""


def run_fresh(*scripts: str, timeout: float, env: dict[str, str] | None = None) -> dict:
    """Run the prelude and `scripts` (each dedented) in a fresh interpreter, with `env` added to the environment;
    the JSON its last stdout line holds."""
    code = "".join(textwrap.dedent(script) for script in (PRELUDE, *scripts))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
