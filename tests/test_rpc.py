"""The RPC tracker checks: a live tracker gives a session; a dead address or wrong key is a UserError, fast."""

import socket
import time

import numpy as np
import pytest
import tvm

from workbench.config import RpcConfig
from workbench.errors import UserError
from workbench.runtime.rpc import check_tracker, connect


def test_session_runs_on_the_remote_device(rpc_tracker):
    session = connect(rpc_tracker)
    device = session.cpu(0)
    data = np.arange(6, dtype="float32")
    remote = tvm.runtime.tensor(data, device)
    np.testing.assert_array_equal(remote.numpy(), data)


def test_unknown_key_is_a_user_error_naming_the_registered_keys(rpc_tracker):
    wrong = rpc_tracker.model_copy(update={"key": "no-such-gpu"})
    with pytest.raises(UserError, match="no-such-gpu.*registered keys: workbench-test"):
        check_tracker(wrong)


def test_unreachable_tracker_fails_within_the_timeout():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    with pytest.raises(UserError, match="cannot reach the RPC tracker"):
        check_tracker(RpcConfig(tracker=f"127.0.0.1:{port}", key="x", timeout_s=2))
    assert time.perf_counter() - started < 5


def test_busy_server_is_an_error_after_the_timeout_not_a_hang(rpc_tracker):
    held = connect(rpc_tracker)  # the only server with this key is now busy
    started = time.perf_counter()
    with pytest.raises(UserError, match="stayed busy"):
        check_tracker(rpc_tracker.model_copy(update={"timeout_s": 1.5}))
    assert time.perf_counter() - started < 6
    del held
