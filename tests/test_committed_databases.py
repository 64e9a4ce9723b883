"""The committed schedule databases still fit the configs that apply them.

A pipeline change (a pass added, a parameter changed) changes the kernels, and a database tuned for the old
kernels then covers none of them: the run would quietly measure untuned code. Each shipped config with a
`tuning:` section must find a database for this CPU (its own or the closest) with a tuned record for every
conv/matmul kernel its budget reaches (tasks are tuned heaviest first, as `plan` budgets them).
"""

import json
from pathlib import Path

import pytest

from workbench.compile.databases import TARGET_FILE, choose_database, open_database
from workbench.compile.targets import make_target
from workbench.compile.tasks import extract_tasks, plan, tuning_module
from workbench.config import load_experiment
from workbench.stages import optimized_module

TUNED_CONFIGS = ["quickstart", "mobilenet_block", "transformer_block", "rapidocr_det"]


@pytest.mark.parametrize("name", TUNED_CONFIGS)
def test_committed_database_covers_the_configs_heavy_kernels(name):
    experiment = load_experiment(Path("configs") / f"{name}.yaml")
    target = make_target(experiment.target)
    choice = choose_database(experiment.database_root(Path.cwd()), target, f"workbench tune configs/{name}.yaml")
    assert choice.path is not None, choice.note
    tuned_for = json.loads((choice.path / TARGET_FILE).read_text())
    assert tuned_for["kind"] == "llvm" and tuned_for["key"] == choice.path.name
    database = open_database(choice.path, create=False)
    tasks = extract_tasks(tuning_module(optimized_module(experiment, Path.cwd(), target), target,
                                        experiment.layout_rewrite), target)
    left, reached = experiment.tuning.trials, []
    for task, planned in zip(tasks, plan(tasks, database, choice.path, experiment.tuning)):  # heaviest first
        if left > 0 and any(op in task.task_name for op in ("conv2d", "matmul")):
            reached.append(task)
        left -= planned.budget
    # has_workload first: commit_workload would add an unknown workload to the committed file
    missing = [t.task_name for t in reached if not database.has_workload(t.dispatched[0])
               or not database.get_top_k(database.commit_workload(t.dispatched[0]), 1)]
    assert not missing, f"{choice.path} has no tuned record for {missing}: retune with `workbench tune`"
