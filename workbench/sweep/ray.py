"""The Ray executor of `workbench sweep` (`sweep.executor: ray`, `pip install -e ".[ray]"`).

Same tasks, same variant function (`run_variant_task`), same store as the local process pool: only where
the tasks run changes. One Ray task per task; Ray worker processes isolate crashes (a segfault or
os.abort fails that task with WorkerCrashedError, retries are off) and a task past the sweep's timeout
is cancelled with force=True, which kills its worker.
Without `sweep.ray_address` a local Ray instance with `workers` CPUs is started for the sweep and shut
down after it; with it, the sweep connects to that cluster (whose nodes need workbench installed).
"""

from __future__ import annotations

import os
import time
from collections import deque
from pathlib import Path

from workbench.errors import UserError


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0] if text else ''}".strip(": ")


def run_tasks_ray(pending: deque, sweep, workers: int, base_dir: Path, on_done) -> None:
    """Like `workbench.sweep.workers.run_tasks`, on Ray: at most `workers` tasks in flight, no worker routing."""
    try:
        import ray
    except ImportError as exc:
        raise UserError(f"{sweep.path}: sweep.executor is 'ray' but Ray is not installed; "
                        "install the extra (pip install -e \".[ray]\") or set executor: local") from exc
    from workbench.sweep.workers import run_variant_task, worker_setup

    setup = worker_setup(sweep, base_dir)
    address = sweep.section.ray_address
    started_here = not ray.is_initialized()
    if started_here and address:
        ray.init(address=address, log_to_driver=False)
    elif started_here:
        # a local instance: its workers import workbench (and the sweep's plugins) from where this process does
        package_root = str(Path(__file__).resolve().parent.parent)
        python_path = os.pathsep.join([package_root, *setup.paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": python_path}})
    task = ray.remote(max_retries=0, num_cpus=1)(run_variant_task)
    timeout_s = sweep.section.timeout_s
    in_flight: dict = {}  # object ref -> (key, kind, deadline)
    try:
        while pending or in_flight:
            while pending and len(in_flight) < workers:
                key, kind, config, _prefer = pending.popleft()
                in_flight[task.remote(setup, kind, config)] = (key, kind, time.monotonic() + timeout_s)
            soonest = min(deadline for _, _, deadline in in_flight.values())
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=max(0.05, soonest - time.monotonic()))
            for ref in ready:
                key, kind, _deadline = in_flight.pop(ref)
                try:
                    status, value = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the worker died (signal, abort, out of memory...)
                    stage = "the pipeline" if kind == "hash" else "build/measure"
                    on_done(key, False, f"Ray worker failed during {stage}: {_first_line(exc)}", None)
                else:
                    on_done(key, status == "ok", value, None)
            now = time.monotonic()
            for ref, (key, _kind, deadline) in list(in_flight.items()):
                if now > deadline:
                    ray.cancel(ref, force=True)
                    del in_flight[ref]
                    on_done(key, False, f"timeout after {timeout_s:g} s (Ray task cancelled, its worker killed)", None)
    finally:
        for ref in in_flight:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()
