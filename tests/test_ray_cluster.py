"""A sweep on a real two-node Ray cluster started on this machine (loopback): the cells spread over both nodes;
the second node killed while it runs a cell loses no finished cell, the cell it ran is recorded as failed with
Ray's reason, and `--resume` completes the sweep on the node left.

The second node's workers hold at their second "run" task (tests/sweep_plugin_pause.py, armed only in that node's
environment), so the node is killed while it certainly has a cell in flight.
"""

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from pause_points import PAUSE_ENV, REPO

pytestmark = [pytest.mark.slow]
ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (pip install -e '.[ray]')")
RAY = [sys.executable, "-m", "ray.scripts.scripts"]  # the `ray` command of this interpreter
# A loopback test cluster: without token authentication (Ray 2.5x turns it on for `ray start --head`; the second
# node and the sweep would need the head's token file)
NO_AUTH = {"RAY_AUTH_MODE": "disabled"}
DEAD_NODE_S = 120  # the head notices a dead node after its health checks fail (15 s by default), then the task


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(args: list[str], env: dict) -> None:
    subprocess.run([*RAY, "start", "--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats",
                    *args], env=env, check=True, capture_output=True, timeout=180)


def raylet(port: int) -> psutil.Process:
    """The raylet process of the node started with `--node-manager-port=port`."""
    return next(p for p in psutil.process_iter(["cmdline"])
                if any(arg == f"--node_manager_port={port}" for arg in p.info["cmdline"] or []))


@pytest.fixture
def cluster(tmp_path):
    """A head node and a second node, one CPU each, both on 127.0.0.1; the second node's workers hold at their
    second run. Yields (head address, the second node's pause folder, its raylet port); stops both."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **NO_AUTH}
    port, second = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    pause = tmp_path / "hold"
    pause.mkdir()
    try:
        start_node(["--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false"], env)
        start_node([f"--address={address}", "--node-ip-address=127.0.0.1", f"--node-manager-port={second}"],
                   {**env, PAUSE_ENV: str(pause)})
        yield address, pause, second
    finally:
        subprocess.run([*RAY, "stop", "--force"], capture_output=True, timeout=120)


def variants(store: Path) -> list[tuple[str, str, str | None, str | None]]:
    with sqlite3.connect(store) as db:
        return db.execute("select id, status, ran_on, error from sweep_variants order by position").fetchall()


def test_cells_spread_over_two_nodes_and_a_killed_node_loses_no_finished_cell(tmp_path, cluster):
    address, pause, second = cluster
    shapes = [[1, 3, s, s] for s in (16, 20, 24, 28, 32, 36)]  # six IRs: six cells
    sweep = tmp_path / "cluster.yaml"
    sweep.write_text(yaml.safe_dump({
        "base": {"name": "c", "model": {"source": "zoo:convnet_small", "inputs": {"x": shapes[0]}},
                 "baselines": ["tvm_unoptimized"], "accuracy": {"reference": "tvm_unoptimized"},
                 "measure": {"warmup": 1, "repeat": 3}},
        "plugins": ["tests.sweep_plugin_pause"],
        "sweep": {"orderings": ["fuse,dce"], "grid": {"model.inputs.x": shapes}, "executor": "ray",
                  "ray_address": address, "workers": 2, "timeout_s": 600},
        "output": str(tmp_path / "out")}))
    store = tmp_path / "out" / "results.sqlite"
    command = [sys.executable, "-m", "workbench.cli", "sweep", str(sweep)]
    env = {k: v for k, v in os.environ.items() if k != PAUSE_ENV} | {"PYTHONPATH": str(REPO), **NO_AUTH}
    with open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 600
        while not (pause / "ready").exists():  # a worker of the second node holds at its second cell
            assert proc.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
            assert time.monotonic() < deadline, "the second node never took a second cell"
            time.sleep(0.2)
        node = raylet(second)
        for process in [*node.children(recursive=True), node]:  # the node and its workers, as a machine dies
            process.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=DEAD_NODE_S + 600) == 0, (tmp_path / "stderr").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    first = variants(store)
    done = {vid: where for vid, status, where, _ in first if status == "done"}
    failed = [(vid, error) for vid, status, _, error in first if status == "failed"]
    assert len({where for where in done.values()}) == 2  # both nodes finished cells
    assert failed and all("Ray worker failed" in error for _, error in failed)
    assert len(done) + len(failed) == len(shapes)

    resumed = subprocess.run(command + ["--resume"], cwd=REPO, env=env, capture_output=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
    after = variants(store)
    assert all(status == "done" for _, status, _, _ in after) and len(after) == len(shapes)
    assert {vid: where for vid, _, where, _ in after if vid in done} == done  # finished cells kept, not rerun
