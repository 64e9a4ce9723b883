"""Ctrl-C during a long run: exit 130 with one line, and the labels already measured stay in result.json."""

import json
import signal
from pathlib import Path

import yaml
from pause_points import held, hold_run_after_first_result_write, workbench_command


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
    # It holds right after result.json's first write (the workbench label measured), so the Ctrl-C lands mid-run.
    command = workbench_command(hold_run_after_first_result_write, ["run", str(tmp_path / "long.yaml")])
    with held(command, tmp_path / "hold", preexec_fn=_default_sigint) as child:
        child.proc.send_signal(signal.SIGINT)
        child.proc.wait(timeout=120)
    err = child.stderr()
    assert child.proc.returncode == 130, (err, "SIGINT in the test process:", signal.getsignal(signal.SIGINT),
                                          signal.pthread_sigmask(signal.SIG_BLOCK, []))
    assert "interrupted" in err and "Traceback" not in err
    partial = json.loads((tmp_path / "run" / "result.json").read_text())
    assert partial["status"] == "running"
    assert list(partial["measurements"]) == ["workbench"] and partial["measurements"]["workbench"]["repeats"] == 3000
