"""Ctrl-C during a long run: exit 130 with one line, and the labels already measured stay in result.json."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_sigint_mid_run_keeps_measured_labels_and_exits_130(tmp_path):
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config.update(output=str(tmp_path / "run"), pipeline=[], baselines=["ort_none", "tvm_unoptimized"],
                  measure={"warmup": 0, "repeat": 3000})
    config["model"]["inputs"] = {"x": [1, 3, 16, 16]}
    config.pop("tuning")
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(config))
    # The child starts with Ctrl-C at its default and unblocked (Python then raises KeyboardInterrupt on it), whatever
    # an earlier test left in this process: an ignored or blocked SIGINT is inherited (a fresh-clone suite run once
    # saw the run finish with exit 0 after the signal; not reproduced alone or under load).
    process = subprocess.Popen([sys.executable, "-m", "workbench.cli", "run", str(tmp_path / "long.yaml")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    result_file = tmp_path / "run" / "result.json"
    deadline = time.monotonic() + 240
    while not result_file.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert result_file.exists(), process.communicate()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, (err, "SIGINT in the test process:", signal.getsignal(signal.SIGINT),
                                       signal.pthread_sigmask(signal.SIG_BLOCK, []))
    assert "interrupted" in err and "Traceback" not in err
    partial = json.loads(result_file.read_text())
    assert partial["status"] == "running"
    assert partial["measurements"]["workbench"]["repeats"] == 3000
