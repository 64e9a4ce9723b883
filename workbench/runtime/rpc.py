"""Reaching a TVM RPC tracker: fail fast with a readable error instead of hanging.

TVM's own client retries a dead tracker for a minute and blocks forever on a key no server has
registered; both are user mistakes (wrong address, wrong key, server not started), so they are
checked first, with `RpcConfig.timeout_s`; so is a server that stays busy (TVM would
wait for it forever).
"""

from __future__ import annotations

import socket
import time
from typing import Protocol

from tvm import rpc

from workbench.errors import UserError


class RpcEndpoint(Protocol):
    """Where the tracker is and which servers to ask for (the experiment's `measure.rpc` / `tuning.rpc`)."""

    tracker: str  # host:port, as the user wrote it
    key: str
    timeout_s: float
    session_timeout_s: float

    @property
    def address(self) -> tuple[str, int]: ...


def check_tracker(config: RpcEndpoint) -> dict:
    """Reach the tracker and make sure a server with `config.key` is registered; return its summary."""
    host, port = config.address
    try:
        socket.create_connection((host, port), timeout=config.timeout_s).close()
    except OSError as exc:
        raise UserError(f"rpc.tracker {config.tracker!r}: cannot reach the RPC tracker within {config.timeout_s:g} s "
                        f"({exc.strerror or exc}); start it with `python -m tvm.exec.rpc_tracker --port {port}` "
                        "or fix the host:port") from exc
    deadline = time.monotonic() + config.timeout_s
    while True:  # a server is busy while a session holds it; it re-registers as free when the session ends
        summary = rpc.connect_tracker(host, port).summary()
        queues = summary.get("queue_info", {})
        if config.key not in queues:
            found = f"registered keys: {', '.join(sorted(queues))}" if queues else "no server is registered"
            raise UserError(f"rpc.key {config.key!r}: the tracker at {config.tracker} has no such device ({found}); "
                            f"start one with `python -m tvm.exec.rpc_server --tracker {config.tracker} "
                            f"--key {config.key}`")
        if queues[config.key].get("free", 0) > 0:
            return summary
        if time.monotonic() > deadline:
            raise UserError(f"rpc.key {config.key!r}: every server with this key at {config.tracker} stayed busy "
                            f"for {config.timeout_s:g} s; wait for the other session, start another server, "
                            "or raise rpc.timeout_s")
        time.sleep(0.2)


def connect(config: RpcEndpoint) -> rpc.RPCSession:
    """A session on a free server with `config.key` (checked first, so a wrong key is an error, not a hang)."""
    check_tracker(config)
    host, port = config.address
    return rpc.connect_tracker(host, port).request(config.key, session_timeout=config.session_timeout_s)
