"""Schedules shared across databases, and tuning budgets in minutes.

A build looks each kernel up in its own database, then the shared ones (`tuning.shared`, by default the committed
schedules/), then the closest-target folders; the run says how many kernels came from which. Tuning writes only
its own database but starts a new task from a shared record; `tuning.minutes` stops it after a search round.

The shared database here is tuned in the test (the default schedule of convnet_small's heaviest kernel: one
measured record, seconds), under another config's name, so the tests do not depend on the committed databases
matching this CPU.
"""

import json
import time
from pathlib import Path

import pytest
import yaml

from workbench.cli import main
from workbench.compile.databases import RECORDS_FILE, WORKLOADS_FILE, DatabaseChoice, open_database, tuning_folder
from workbench.compile.schedule_sources import COMMITTED_SCHEDULES, ScheduleSource, lookup_order, schedule_sources
from workbench.compile.targets import make_target, target_key
from workbench.compile.tasks import extract_tasks, tuning_module
from workbench.compile.tune import tune_tasks
from workbench.compile.tuning_clock import TuningClock
from workbench.config import TargetConfig, TuningConfig, load_experiment, validate
from workbench.passes.pipeline import run_pipeline
from workbench.record.tuning_notes import schedules_line, tuning_note

HOST = make_target(TargetConfig())
HOST_KEY = target_key(HOST)


def write_config(folder: Path, **tuning) -> Path:
    """The quickstart (convnet_small) measured against ort_none only, with the given `tuning:` section."""
    config = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    config.update(output=str(folder / "run"), baselines=["ort_none"], measure={"warmup": 1, "repeat": 3},
                  tuning=tuning)
    path = folder / "tune.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def tasks(zoo_relax):
    """convnet_small's tuning tasks for this CPU after the quickstart pipeline, heaviest first."""
    experiment = load_experiment(Path("configs/quickstart.yaml"))
    module, _ = run_pipeline(zoo_relax("convnet_small")[1], experiment.pipeline, HOST, stats=False)
    return extract_tasks(tuning_module(module, HOST), HOST)


@pytest.fixture(scope="module")
def shared(tasks, tmp_path_factory):
    """A folder of roots as schedules/ is: `other_model/<host key>` holds one record, for the heaviest kernel."""
    folder = tmp_path_factory.mktemp("shared")
    database = tuning_folder(folder / "other_model", HOST)
    config = TuningConfig(trials=1, trials_per_task=1, cost_model="random")
    (result,) = tune_tasks(tasks[:1], HOST, config, database, folder / "logs")
    assert result.trials_run == 1 and result.best_us is not None
    return {"folder": folder, "database": database, "kernel": tasks[0].task_name}


def empty_root(folder: Path) -> Path:
    """A database root whose folder for this CPU exists and holds no record."""
    root = folder / "own"
    open_database(tuning_folder(root, HOST), create=True)
    return root


def test_lookup_order_is_own_exact_then_shared_exact_then_closest(tmp_path):
    def choice(name: str, match: str) -> DatabaseChoice:
        return DatabaseChoice(tmp_path / name, tmp_path / name / "llvm-x", "llvm-x", match)

    own = choice("mine", "closest")
    order = lookup_order(own, "mine", [choice("a", "exact"), choice("b", "closest"), choice("c", "exact")])
    assert [(s.name, s.match, s.own) for s in order] == [("a", "shared", False), ("c", "shared", False),
                                                        ("mine", "closest", True), ("b", "closest", False)]
    assert ScheduleSource("a", tmp_path, "llvm-x", "shared").label == "a (shared)"


def test_committed_schedules_are_shared_by_default_and_an_empty_list_turns_sharing_off(tmp_path):
    root = empty_root(tmp_path)
    base = {"name": "t", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}}}
    default = validate({**base, "tuning": {"database": str(root)}}, "t")
    sources = schedule_sources(default, tmp_path, HOST, "hint")
    assert sources.sources[0].own and sources.sources[0].match == "exact"  # its own database first, empty or not
    committed = [s for s in sources.sources if COMMITTED_SCHEDULES in s.path.parents]
    assert {s.name for s in committed} >= {"quickstart", "rapidocr_det"}  # schedules/<config>/<this or closest CPU>
    alone = validate({**base, "tuning": {"database": str(root), "shared": []}}, "t")
    assert [s.own for s in schedule_sources(alone, tmp_path, HOST, "hint").sources] == [True]


def test_a_config_without_tuning_reads_the_committed_schedules_and_its_default_root_once_tuned(tmp_path):
    """No `tuning:` section (as `workbench run --model` writes): the committed schedules are read, quietly; once
    `workbench tune` has written the default root schedules/<name>, it comes first."""
    experiment = validate({"name": "t", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}}},
                          "t")
    sources = schedule_sources(experiment, tmp_path, HOST, "hint")  # tmp_path/schedules/t does not exist
    assert sources.own.match == "none" and sources.own.note is None and not any(s.own for s in sources.sources)
    assert {s.name for s in sources.sources} >= {"quickstart", "rapidocr_det"}
    open_database(tuning_folder(tmp_path / "schedules" / "t", HOST), create=True)
    first = schedule_sources(experiment, tmp_path, HOST, "hint").sources[0]
    assert first.own and first.match == "exact" and first.name == "t"


@pytest.mark.slow
def test_a_kernel_tuned_in_another_database_is_applied_counted_and_named(shared, tmp_path, capsys):
    """The own database is empty; the shared one has the heaviest conv: the run applies that record, counts it
    under the other database, says so in result.json, the note and the report, and still matches ONNX Runtime.
    Reading the shared database writes nothing into it."""
    before = {name: (shared["database"] / name).read_text() for name in (WORKLOADS_FILE, RECORDS_FILE)}
    config = write_config(tmp_path, database=str(empty_root(tmp_path)), shared=[str(shared["folder"])])
    assert main(["run", str(config)]) == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    tuning = result["tuning"]
    assert tuning["covered"] == [shared["kernel"]]
    assert [(s["name"], s["match"], s["kernels"]) for s in tuning["sources"]] == \
        [("other_model", "shared", [shared["kernel"]])]
    untuned = len(tuning["fallback"])
    assert untuned >= 5 and result["accuracy"]["workbench"]["ok"]
    line = f"schedules: 1 from other_model (shared), {untuned} untuned"
    assert schedules_line(tuning) == line and tuning_note(tuning) == line
    assert line in (tmp_path / "run" / "report.md").read_text()
    assert line in " ".join(capsys.readouterr().err.split())  # the run's progress note (wrapped at 140)
    assert {name: (shared["database"] / name).read_text() for name in before} == before


@pytest.mark.slow
def test_a_new_task_starts_from_the_shared_record_and_tuning_writes_only_its_own_database(shared, tasks, tmp_path):
    before = (shared["database"] / RECORDS_FILE).read_text()
    own = tuning_folder(tmp_path / "own", HOST)
    config = TuningConfig(trials=2, trials_per_task=2, trials_per_iter=2, cost_model="random")
    (result,) = tune_tasks(tasks[:1], HOST, config, own, tmp_path / "logs",
                           shared=[("other_model (shared)", open_database(shared["database"], create=False))])
    assert result.seeded_from == "other_model (shared)" and "started from other_model (shared)'s schedule" in result.flags
    assert result.trials_run == 2  # the shared schedule, then the default one: the budget
    assert len((own / RECORDS_FILE).read_text().splitlines()) == 2
    assert (shared["database"] / RECORDS_FILE).read_text() == before


def test_the_clock_says_minutes_used_of_the_budget_and_why_it_stopped():
    clock = TuningClock(minutes=1.0, started=time.monotonic() - 120)
    assert clock.spent() and clock.stopped == "minutes"  # started two minutes ago: the 1-minute budget is spent
    assert clock.reason() == "stopped: the 1-minute budget is spent (a rerun resumes)"
    assert clock.as_dict()["minutes_budget"] == 1.0 and clock.as_dict()["stopped"] == "minutes"
    done = TuningClock()
    assert not done.spent()
    done.finish()
    assert done.stopped == "done" and done.reason() == "every task at its budget" and " of " not in done.usage()


def test_minutes_is_validated_and_set_from_the_command_line(tmp_path):
    config = write_config(tmp_path, database=str(tmp_path / "db"))
    assert load_experiment(config, ["tuning.minutes=2.5"]).tuning.minutes == 2.5
    assert load_experiment(config, ["tuning.minutes=2.5"]).tuning.hot_until_time
    assert not load_experiment(config, ["tuning.minutes=2.5", "tuning.hot_trials=8"]).tuning.hot_until_time
    with pytest.raises(Exception, match="minutes"):
        load_experiment(config, ["tuning.minutes=0"])


@pytest.mark.slow
def test_a_minutes_budget_stops_after_the_first_round_says_so_and_the_next_tune_and_build_use_it(tmp_path, capsys):
    """0.05 minutes (3 s): the heaviest kernel's first round is measured, then tuning stops; the record says why,
    the database is valid, a second tune resumes from it and a run applies it."""
    root = tmp_path / "db"
    config = write_config(tmp_path, database=str(root), shared=[], trials=400, trials_per_task=64,
                          trials_per_iter=8, cost_model="random", model_check=False)  # keeps what it measured
    assert main(["tune", str(config), "--minutes", "0.05"]) == 0
    record = json.loads((tmp_path / "run" / "tuning.json").read_text())
    assert record["stopped"] == "minutes" and record["minutes_budget"] == 0.05
    assert record["minutes_used"] >= 0.05 and "0.05-minute budget is spent" in record["reason"]
    first, *rest = record["tasks"]
    assert 1 <= first["trials_run"] < first["budget"] and all(t["trials_run"] == 0 for t in rest)
    out = capsys.readouterr()
    printed, progress = " ".join(out.out.split()), " ".join(out.err.split())  # the console wraps long lines
    assert "of 0.05 min (stopped: the 0.05-minute budget is spent" in printed  # the CLI's summary line
    assert "of 0.05 min, stopped: the 0.05-minute budget is spent" in progress  # the last progress line

    assert main(["tune", str(config), "--minutes", "0.05"]) == 0  # resumes: the first task's records count
    again = json.loads((tmp_path / "run" / "tuning.json").read_text())
    resumed = next(task for task in again["tasks"] if task["name"] == first["name"])  # the order is the profile's
    assert resumed["trials_before"] == first["trials_run"]

    assert main(["run", str(config)]) == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert first["name"] in result["tuning"]["covered"] and result["accuracy"]["workbench"]["ok"]
    assert result["tuning"]["sources"][0]["name"] == "db" and result["tuning"]["sources"][0]["match"] == "exact"
