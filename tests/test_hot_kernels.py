"""A minutes budget tunes the hottest kernels of the current build first (stages/hot_kernels.py).

mobilenet_block is profiled as built with default schedules; each tuning task gets the time of the kernels that are
its workload (both calls of a kernel used twice), and `workbench tune --minutes` tunes the quickstart in that order
and says so.
"""

import json
from pathlib import Path

import pytest
import yaml

from workbench.cli import main
from workbench.compile.targets import make_target
from workbench.compile.tasks import task_cost
from workbench.config import TargetConfig
from workbench.measure.profile import VM_BUILTINS
from workbench.stages.hot_kernels import build_executable, hottest_first, profile_executable, task_times

HOST = make_target(TargetConfig())


def test_every_kernel_call_is_charged_to_its_task(mobilenet_block):
    """The tasks' times add up to the profiled kernels' (every call of a kernel used twice included), and the order
    they give differs from FLOPs x uses: a transpose has no FLOPs but takes time."""
    model = mobilenet_block
    profile = profile_executable(build_executable(model["optimized"], HOST), HOST, model["inputs"])
    tasks = model["tasks"]
    times = task_times(model["plain"], profile, tasks)
    kernels_us = sum(k.us for k in profile.kernels if k.name != VM_BUILTINS)
    assert [t.name for t in times] == [task.task_name for task in tasks]
    assert sum(t.us for t in times) == pytest.approx(kernels_us, rel=1e-9)
    assert sum(t.share for t in times) == pytest.approx(kernels_us / profile.total_us, rel=1e-9)
    reused = [(task, t) for task, t in zip(tasks, times) if int(task.weight) > 1]
    assert reused and all(t.us > 0 for _, t in reused)  # a conv and a transpose used twice: both calls counted
    layout_changes = [t for task, t in zip(tasks, times) if task_cost(task) == 0 and t.us > 0]
    assert layout_changes  # kernels FLOPs x uses puts last, which the profile says take time
    ordered, ordered_times = hottest_first(tasks, times)
    assert [t.us for t in ordered_times] == sorted((t.us for t in times), reverse=True)
    assert [task.task_name for task in ordered] == [t.name for t in ordered_times]


@pytest.mark.slow
def test_a_minutes_budget_tunes_in_profile_order_and_says_so(tmp_path, capsys):
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config.update(output=str(tmp_path / "run"), tuning={"database": str(tmp_path / "db"), "shared": [],
                                                           "trials_per_task": 64, "cost_model": "random"})
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["tune", str(path), "--minutes", "0.05"]) == 0
    record = json.loads((tmp_path / "run" / "tuning.json").read_text())
    assert record["order"] == "profile"
    profiled = [task["profiled_us"] for task in record["tasks"]]
    assert profiled == sorted(profiled, reverse=True) and profiled[0] > 0
    assert record["tasks"][0]["trials_run"] >= 1  # the hottest kernel is the one tuned first
    out = capsys.readouterr()
    assert "in the model µs" in out.out and "hottest kernels first" in " ".join(out.err.split())

    assert main(["tune", str(path), "--set", "tuning.trials=1"]) == 0  # no minutes: FLOPs x uses, no profile
    assert json.loads((tmp_path / "run" / "tuning.json").read_text())["order"] == "flops"
