"""One shared tuning per sweep: the union of the classes' kernels, deduplicated by workload, tuned once.

Orderings change which kernels exist, but many kernels recur: the same conv produced by two orderings is one
MetaSchedule workload (same structural hash of its TIR function) and is tuned once, into one database that
every tuned class is then built with. The tuning runs in one process of its own (a TVM crash fails the
tuned variants, not the sweep; one process, because concurrent writers would corrupt the JSON database).
Resume is the database's: it appends each measured batch, and the tuner skips trials already recorded.

`<output>/tuning.json` keeps, merged over runs and search steps, each tuned class's workloads (the report's
union-vs-sum count), each workload's trials and best time, and the tuning wall time.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

from rich.progress import Progress

from workbench.atomic import atomic_write_json
from workbench.config import TuningConfig, validate
from workbench.sweep.spec import Sweep
from workbench.sweep.workers import VariantRunner, WorkerSetup, child_process_setup, signal_name, worker_setup

SUMMARY = "tuning.json"


def read_tuning_summary(output: Path) -> dict:
    path = Path(output) / SUMMARY
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def union_of_tasks(runner: VariantRunner, classes: dict[str, dict], layout_rewrite: bool) -> tuple[dict, dict]:
    """({target key: (target, [tasks])}, {class id: ["<target key>/<workload>", ...]}): every class's tuning tasks,
    one per distinct workload per target, weights summed over the classes that use it, heaviest first."""
    from tvm.s_tir import meta_schedule as ms

    from workbench.compile.targets import make_target, target_key
    from workbench.compile.tasks import extract_tasks, task_cost, tuning_module

    union: dict[str, dict[str, Any]] = {}
    targets: dict[str, Any] = {}
    per_class: dict[str, list[str]] = {}
    for class_id, config in classes.items():
        experiment = validate(config, "variant")
        target = make_target(experiment.target)
        optimized = runner.optimized_module(experiment, config).module
        key = target_key(target)
        targets[key] = target
        tasks = union.setdefault(key, {})
        per_class[class_id] = []
        for task in extract_tasks(tuning_module(optimized, target, layout_rewrite), target):
            workload = ms.utils.shash2hex(task.dispatched[0])
            per_class[class_id].append(f"{key}/{workload}")
            known = tasks.get(workload)
            weight = int(task.weight) + (int(known.weight) if known is not None else 0)
            tasks[workload] = ms.ExtractedTask((known or task).task_name, task.mod, task.target, task.dispatched,
                                               weight)
    out = {}
    for key, tasks in union.items():
        names: dict[str, int] = {}
        renamed = []
        for workload, task in tasks.items():  # one log file and result row per task: names must be unique
            n = names[task.task_name] = names.get(task.task_name, 0) + 1
            name = task.task_name if n == 1 else f"{task.task_name}_{n}"
            renamed.append((workload, ms.ExtractedTask(name, task.mod, task.target, task.dispatched, task.weight)))
        renamed.sort(key=lambda item: task_cost(item[1]), reverse=True)
        out[key] = (targets[key], renamed)
    return out, per_class


def tune_union(runner: VariantRunner, payload: dict, report) -> dict:
    """Tune the union of the classes' tasks (runs in the tuning process); `report(message)` sends progress."""
    from workbench.compile.databases import tuning_folder
    from workbench.compile.tune import tune_tasks

    config = TuningConfig.model_validate(payload["tuning"])
    union, per_class = union_of_tasks(runner, payload["classes"], config.layout_rewrite)
    count = sum(len(tasks) for _target, tasks in union.values())
    if config.trials_per_task is not None and "trials" not in config.model_fields_set:
        config = config.model_copy(update={"trials": config.trials_per_task * max(1, count)})
    report({"kind": "plan", "union": count, "sum": sum(len(keys) for keys in per_class.values()),
            "trials": config.trials})
    results: dict[str, dict] = {}
    for key, (target, tasks) in union.items():
        folder = tuning_folder(Path(payload["root"]), target)
        done = tune_tasks([task for _w, task in tasks], target, config, folder, Path(payload["log_dir"]),
                          progress=lambda r: report({"kind": "task", **r.as_dict()}))
        for (workload, _task), result in zip(tasks, done):
            results[f"{key}/{workload}"] = {**result.as_dict(), "database": str(folder)}
    return {"classes": per_class, "tasks": results}


def _tuning_main(conn, log_path: str, setup: WorkerSetup, payload: dict) -> None:
    child_process_setup(log_path)
    try:
        summary = tune_union(VariantRunner(setup), payload, lambda message: conn.send(("progress", message)))
        conn.send(("done", summary))
    except BaseException as exc:  # noqa: BLE001 - the parent records it against the tuned variants
        traceback.print_exc()
        conn.send(("error", f"{exc.__class__.__name__}: {exc}".strip()))


def _merge(output: Path, summary: dict, seconds: float, root: Path) -> None:
    state = read_tuning_summary(output)
    state.setdefault("classes", {}).update(summary.get("classes", {}))
    state.setdefault("tasks", {}).update(summary.get("tasks", {}))
    state["seconds"] = state.get("seconds", 0.0) + seconds
    state["database"] = str(root)
    atomic_write_json(output / SUMMARY, state)


def tune_classes(sweep: Sweep, base_dir: Path, classes: dict[str, dict], progress: Progress) -> str | None:
    """Tune the union of `classes`' (class id -> a member's config) kernels in one tuning process, with a
    progress bar; return None, or why it failed (the process crashed or raised)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    log = sweep.output / "logs" / "tuning.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    payload = {"classes": classes, "tuning": sweep.tuning.model_dump(mode="json", exclude_unset=True),
               "root": str(sweep.database_root), "log_dir": str(sweep.output / "tuning_logs")}
    payload["tuning"].pop("database", None)
    conn, child = ctx.Pipe()
    # not a daemon: MetaSchedule's builder and runner start processes of their own
    process = ctx.Process(target=_tuning_main, name="workbench-sweep-tuning",
                          args=(child, str(log), worker_setup(sweep, base_dir, workers=1), payload))
    started = time.monotonic()
    bar = progress.add_task(f"tuning {len(classes)} classes", total=None, status="extracting tasks")
    trials: dict[str, int] = {}
    summary: dict = {}
    error = None
    process.start()
    child.close()
    try:
        while True:
            if conn.poll(1.0):
                try:
                    kind, value = conn.recv()
                except (EOFError, OSError):
                    kind, value = "crashed", None
                if kind == "progress" and value["kind"] == "plan":
                    progress.update(bar, total=value["trials"], status=f"{value['union']} distinct tasks "
                                                                       f"(sum over classes {value['sum']})")
                elif kind == "progress":
                    done = value["trials_before"] + value["trials_run"]  # a minutes budget gives tasks no cap
                    trials[value["name"]] = done if value["budget"] is None else min(done, value["budget"])
                    progress.update(bar, completed=sum(trials.values()))
                elif kind == "done":
                    summary = value
                    break
                elif kind == "error":
                    error = value
                    break
                if kind != "crashed":
                    continue
            if not process.is_alive() and not conn.poll():
                process.join()
                error = f"the tuning process crashed ({signal_name(process.exitcode)}); log: {log}"
                break
    finally:
        if process.is_alive():
            process.kill()
        process.join(10)
        conn.close()
        _merge(sweep.output, summary, time.monotonic() - started, sweep.database_root)
        progress.update(bar, visible=False)
    return error
