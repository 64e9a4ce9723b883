"""The Ray executor of `workbench sweep` (`sweep.executor: ray`, `pip install -e ".[ray]"`).

Same tasks, same variant function (`run_variant_task`), same store as the local process pool: only where
the tasks run changes. One Ray task per task; Ray worker processes isolate crashes (a segfault or
os.abort fails that task with WorkerCrashedError, retries are off) and a task past the sweep's timeout
is cancelled with force=True, which kills its worker.
Each result says which node ran it (the store's `ran_on`). A cell whose node dies is recorded as failed with
Ray's reason; the cells done before stay, and `--resume` runs the failed ones again on the nodes left.
Without `sweep.ray_address` a local Ray instance with `workers` CPUs is started for the sweep and shut
down after it; with it, the sweep connects to that cluster (whose nodes need workbench installed).
"""

from __future__ import annotations

import os
import time
from collections import deque
from pathlib import Path

from workbench.errors import UserError
from workbench.sweep.workers import WorkerSetup, run_variant_task, worker_setup


def run_on_node(setup: WorkerSetup, kind: str, config: dict, reference: dict | None) -> tuple[str, object, str]:
    """`run_variant_task` as a Ray task, with the Ray node it ran on (the store's `ran_on`: did the cells spread)."""
    import ray

    status, value = run_variant_task(setup, kind, config, reference)
    return status, value, f"ray node {ray.get_runtime_context().get_node_id()[:12]}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0] if text else ''}".strip(": ")


class RayPool:
    """Like `workbench.sweep.workers.LocalPool`, on Ray: at most `workers` tasks in flight, no worker routing.
    Ray is started (or joined) on the first `run` and shut down by `close` if this pool started it."""

    def __init__(self, sweep, workers: int, base_dir: Path):
        self.sweep, self.workers, self.base_dir = sweep, workers, base_dir
        self.ray = None
        self.started_here = False

    def _start(self):
        try:
            import ray
        except ImportError as exc:
            raise UserError(f"{self.sweep.path}: sweep.executor is 'ray' but Ray is not installed; "
                            "install the extra (pip install -e \".[ray]\") or set executor: local") from exc
        self.setup = worker_setup(self.sweep, self.base_dir, self.workers)
        address = self.sweep.section.ray_address
        self.started_here = not ray.is_initialized()
        if self.started_here and address:
            ray.init(address=address, log_to_driver=False)
        elif self.started_here:
            # a local instance: its workers import workbench (and the sweep's plugins) from where this process does
            package_root = str(Path(__file__).resolve().parents[2])
            python_path = os.pathsep.join([package_root, *self.setup.paths,
                                           os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": python_path}})
        self.task = ray.remote(max_retries=0, num_cpus=1)(run_on_node)
        self.ray = ray

    def run(self, pending: deque, on_done) -> None:
        if self.ray is None:
            self._start()
        ray, task, setup = self.ray, self.task, self.setup
        timeout_s = self.sweep.section.timeout_s
        in_flight: dict = {}  # object ref -> (key, kind, deadline)
        try:
            while pending or in_flight:
                while pending and len(in_flight) < self.workers:
                    queued = pending.popleft()
                    key, kind = queued.key, queued.kind
                    ref = task.remote(setup, kind, queued.config, queued.reference)
                    in_flight[ref] = (key, kind, time.monotonic() + timeout_s)
                soonest = min(deadline for _, _, deadline in in_flight.values())
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=max(0.05, soonest - time.monotonic()))
                for ref in ready:
                    key, kind, _deadline = in_flight.pop(ref)
                    try:
                        status, value, node = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # its worker or node died (signal, abort, memory...)
                        stage = "the pipeline" if kind == "hash" else "build/measure"
                        on_done(key, False, f"Ray worker failed during {stage}: {_first_line(exc)}", None)
                    else:
                        on_done(key, status == "ok", value, node)
                now = time.monotonic()
                for ref, (key, _kind, deadline) in list(in_flight.items()):
                    if now > deadline:
                        ray.cancel(ref, force=True)
                        del in_flight[ref]
                        on_done(key, False, f"timeout after {timeout_s:g} s (Ray task cancelled, its worker killed)",
                                None)
        finally:
            for ref in in_flight:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self.ray is not None and self.started_here:
            self.ray.shutdown()
        self.ray = None
