"""result.json files older workbenches wrote are read into the current typed form (record/migrate.py).

The two fixtures are real files, written by `workbench run` at an older commit (the quickstart's convnet_small at
32x32, tuned first with 2 trials per task, ort_all and tvm_unoptimized as baselines):

- tests/data/result_85350cf.json: at 85350cf, when `tuning` was `{"database", "covered", "fallback"}` and
  `tuning_trials` tasks had no rejected/seeded_from/profiled_us/failed; no target_resolved, no threads.
- tests/data/result_abdc0b6.json: at abdc0b6 (with a `profile:` section), per-target databases but no
  `tuning.sources` yet, and profile sides without `instrument_us` or `plain_us`.
"""

import copy
import json
from pathlib import Path

from test_results import sample_result

from workbench.record.compare import settings
from workbench.record.migrate import UNRECORDED_TARGET, migrate
from workbench.record.mlflow_sink import run_params
from workbench.record.report import write_report
from workbench.record.result import (
    Canonicalization,
    CudaReport,
    Profile,
    RunResult,
    TuningSource,
    TuningSummary,
    TuningTask,
    TuningTime,
)
from workbench.record.rows import summary_rows
from workbench.record.tuning_notes import schedules_line, tuning_note

DATA = Path(__file__).parent / "data"
COVERED = ["fused_conv2d1_add_add1_relu", "fused_conv2d1_add_relu", "fused_conv2d2_add2_relu1",
           "fused_conv2d3_add3_add4_relu2", "fused_conv2d3_add3_relu2", "fused_conv2d_add_relu", "max_pool2d", "mean"]
FALLBACK = ["fused_matmul_add5", "reshape"]


def current_result() -> dict:
    """A result.json in the current form, with every section the migration touches."""
    result = sample_result()
    result["tuning"] = {
        "root": "schedules/q", "path": "schedules/q/llvm-znver2", "tuned_for": "llvm-znver2", "match": "exact",
        "note": None, "layout_rewrite": True, "covered": ["a", "b"], "fallback": ["c"],
        "sources": [{"name": "q", "match": "exact", "path": "schedules/q/llvm-znver2", "tuned_for": "llvm-znver2",
                     "kernels": ["a"]},
                    {"name": "other", "match": "shared", "path": "schedules/other/llvm-znver2",
                     "tuned_for": "llvm-znver2", "kernels": ["b"]}]}
    result["tuning_trials"] = [{"name": "a", "weight": 2, "budget": 8, "trials_before": 4, "trials_run": 4,
                                "exhausted": False, "best_us": 12.5, "rejected": 1, "seeded_from": "other",
                                "profiled_us": 30.0, "failed": None}]
    result["tuning_time"] = {"minutes_used": 0.5, "minutes_budget": 1.0, "stopped": "done",
                             "reason": "every task at its budget"}
    result["profile"] = {"workbench": {"label": "workbench", "runs": 3, "total_us": 10.0, "instrument_us": 0.4,
                                       "plain_us": 11.0, "kernels": [{"name": "a", "us": 10.0, "calls": 1, "share": 1.0}],
                                       "other": {"kernels": 0, "us": 0.0, "share": 0.0}}}
    result["canonicalize"] = {"folded": 3, "unfolded": [{"node": "n", "op": "Resize", "opset": 10, "reason": "r"}],
                              "converted_from_opset": 9}
    result["cuda"] = {"workbench": {"arch": "sm_90", "kernels": 1, "launches": 2, "intermediate_bytes": 4096,
                                    "per_kernel": {"k_kernel": {"threads_per_block": 256, "registers": 32,
                                                                "shared_bytes": 0}},
                                    "files": {"cu": "workbench.cu", "ptx": "workbench.ptx"}}}
    return result


def test_a_result_from_before_per_target_databases_reads_typed():
    """85350cf named the applied database `database`; it becomes root/path of an unrecorded target's database
    (closest), the one source of every covered kernel."""
    raw = json.loads((DATA / "result_85350cf.json").read_text())
    assert set(raw["tuning"]) == {"database", "covered", "fallback"}  # the old shape, as written
    result = RunResult.read(DATA / "result_85350cf.json")
    tuning = result.tuning
    assert isinstance(tuning, TuningSummary)
    assert (tuning.root, tuning.path, tuning.tuned_for, tuning.match) == \
        ("schedules/quickstart", "schedules/quickstart", None, "closest")
    assert tuning.note == UNRECORDED_TARGET and tuning.layout_rewrite is False
    assert tuning.covered == COVERED and tuning.fallback == FALLBACK
    assert tuning.sources == [TuningSource(name="schedules/quickstart", match="closest", path="schedules/quickstart",
                                           tuned_for=None, kernels=COVERED)]
    line = "schedules: 8 from schedules/quickstart (closest), 2 untuned"
    assert schedules_line(tuning) == line and tuning_note(tuning) == f"{line}; {UNRECORDED_TARGET}"
    assert summary_rows(result)[0]["note"] == f"{line}; {UNRECORDED_TARGET}"

    tasks = result.tuning_trials
    assert len(tasks) == len(raw["tuning_trials"]) and all(isinstance(task, TuningTask) for task in tasks)
    assert [task.name for task in tasks] == [task["name"] for task in raw["tuning_trials"]]
    assert tasks[0].trials_run == 2 and tasks[0].budget == 2 and tasks[0].best_us == raw["tuning_trials"][0]["best_us"]
    assert all(task.rejected == 0 and task.seeded_from is None and task.failed is None for task in tasks)
    assert result.profile is None and result.canonicalize is None and result.tuning_time is None

    assert settings(result)["tuning database"] == "schedules/quickstart (closest, 8 kernels tuned)"
    params = run_params(result)
    assert params["database"] == "schedules/quickstart" and params["schedules"] == line
    assert params["tuning.trials_run"] == str(sum(task["trials_run"] for task in raw["tuning_trials"]))


def test_a_result_from_before_shared_databases_and_instrument_costs_reads_typed(tmp_path):
    """abdc0b6 had per-target databases but no `sources`, and profiles without instrument_us / plain_us."""
    raw = json.loads((DATA / "result_abdc0b6.json").read_text())
    assert "sources" not in raw["tuning"] and "instrument_us" not in raw["profile"]["workbench"]
    result = RunResult.read(DATA / "result_abdc0b6.json")
    tuning = result.tuning
    assert tuning.match == "exact" and tuning.tuned_for == "llvm-znver4" and tuning.path == raw["tuning"]["path"]
    assert tuning.sources == [TuningSource(name="quickstart_v2", match="exact", path=raw["tuning"]["path"],
                                           tuned_for="llvm-znver4", kernels=COVERED)]
    assert tuning_note(tuning) == "schedules: 8 from quickstart_v2 (exact), 2 untuned"

    assert set(result.profile) == {"workbench", "ort_all"}
    ours = result.profile["workbench"]
    assert isinstance(ours, Profile) and ours.instrument_us == 0.0 and ours.plain_us is None
    assert ours.total_us == raw["profile"]["workbench"]["total_us"] and ours.other.kernels == 6
    assert [k.name for k in ours.kernels] == [k["name"] for k in raw["profile"]["workbench"]["kernels"]]

    text = write_report(result, tmp_path).read_text()
    assert "## Where the time goes" in text and ours.kernels[0].name in text
    assert "- schedules: 8 from quickstart_v2 (exact), 2 untuned" in text
    assert "less the instrument's own" not in text  # nothing was taken off before 2d2e95e


def test_migrated_results_write_the_current_form_and_read_back_the_same():
    for name in ("result_85350cf.json", "result_abdc0b6.json"):
        data = RunResult.read(DATA / name).to_json()
        assert "database" not in data["tuning"] and data["tuning"]["sources"]
        assert migrate(data) == data and RunResult.from_json(data, name).to_json() == data


def test_a_current_result_is_left_as_it_is_and_typed():
    raw = current_result()
    before = copy.deepcopy(raw)
    assert migrate(raw) == raw and raw == before  # and the argument is not changed
    result = RunResult.from_json(raw, "test")
    assert result.to_json() == raw
    assert isinstance(result.tuning_time, TuningTime) and result.tuning_time.stopped == "done"
    assert isinstance(result.canonicalize, Canonicalization) and result.canonicalize.unfolded[0].op == "Resize"
    assert isinstance(result.cuda["workbench"], CudaReport)
    assert result.cuda["workbench"].per_kernel["k_kernel"].registers == 32
    assert tuning_note(result.tuning) == "schedules: 1 from q (exact), 1 from other (shared), 1 untuned, weights pre-packed"


def test_an_old_result_migrates_in_a_copy():
    raw = json.loads((DATA / "result_85350cf.json").read_text())
    before = copy.deepcopy(raw)
    assert migrate(raw)["tuning"]["path"] == "schedules/quickstart" and raw == before


def test_assigned_sections_are_validated_and_keep_their_json_form():
    """The conductor assigns the producers' dicts; they become the models and are written back unchanged."""
    raw = current_result()
    result = RunResult.from_json(sample_result(), "test")
    for field in ("tuning", "tuning_trials", "tuning_time", "profile", "canonicalize", "cuda"):
        setattr(result, field, raw[field])
    assert isinstance(result.tuning, TuningSummary) and isinstance(result.tuning_trials[0], TuningTask)
    assert isinstance(result.profile["workbench"], Profile) and isinstance(result.cuda["workbench"], CudaReport)
    assert result.to_json() == raw
    untuned = {"root": "schedules/q", "path": None, "tuned_for": None, "match": "none", "note": "untuned: no database",
               "layout_rewrite": False}
    result.tuning = untuned  # no database applied: no coverage keys, none written
    assert result.to_json()["tuning"] == untuned and tuning_note(result.tuning) == "untuned: no database"
    assert schedules_line(result.tuning) is None


def test_the_report_reads_the_typed_cuda_and_profile_sections(tmp_path):
    result = RunResult.from_json(current_result(), "test")
    text = write_report(result, tmp_path).read_text()
    assert "| workbench | 1 | 2 | 0.00 | 256 | 32 | 0 |" in text  # kernels, launches, MB, threads, registers, smem
    assert "| k_kernel | 256 | 32 | 0 |" in text
    assert "less the instrument's own 0.4 µs per call" in text and "| 1 | a | 10.0 | 100% |" in text
    assert "- tuned first: 0.50 of 1 min (every task at its budget)" in text
