"""result.json as an older workbench wrote it, brought to the current form before it is validated
(`RunResult.from_json` calls `migrate` for every file and store row), so the readers know one shape.

What older results lack or name differently, oldest first (the commit that changed the writer):

- `tuning` before per-target databases (8abb204): `{"database": FOLDER, "covered", "fallback"}`, written only
  when a database was applied. That folder was the database itself, its target not recorded: the current
  writer's `root` and `path`, `tuned_for` None, `match` "closest" with the note it gives a database of an
  unrecorded target (compile/databases.py `choose_database`), and no weight pre-packing (`layout_rewrite`
  came with 8abb204).
- `tuning` before shared databases (78fc963) has no `sources`: the build read its own database only, so every
  covered kernel came from it; it becomes the one source, named as compile/schedule_sources.py names a root.
- `tuning_trials` tasks before the verify, seed, hot-kernel and failure fields: none was rejected, seeded,
  profiled or failed.
- `profile` sides before 2d2e95e have no `instrument_us` (no instrument cost was taken off: 0) or `plain_us`.
- `canonicalize` before 77e92f0 has no `converted_from_opset` (nothing was converted).

`migrate` changes nothing a current workbench wrote (it is applied to every read), and fills no section a
run did not have.
"""

from __future__ import annotations

import copy
from pathlib import PurePath
from typing import Any

UNRECORDED_TARGET = "tuned for an unrecorded target"  # the note a database without target.json is applied with

TASK_DEFAULTS = {"rejected": 0, "seeded_from": None, "profiled_us": None, "failed": None}
PROFILE_DEFAULTS = {"instrument_us": 0.0, "plain_us": None}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a result.json form) in the current form, as a copy: `data` itself is not changed."""
    data = copy.deepcopy(data)
    if isinstance(data.get("tuning"), dict):
        data["tuning"] = _tuning(data["tuning"])
    if isinstance(data.get("tuning_trials"), list):
        data["tuning_trials"] = [{**TASK_DEFAULTS, **task} if isinstance(task, dict) else task
                                 for task in data["tuning_trials"]]
    if isinstance(data.get("profile"), dict):
        data["profile"] = {label: {**PROFILE_DEFAULTS, **side} if isinstance(side, dict) else side
                           for label, side in data["profile"].items()}
    if isinstance(data.get("canonicalize"), dict):
        data["canonicalize"] = {"converted_from_opset": None, **data["canonicalize"]}
    return data


def _tuning(tuning: dict[str, Any]) -> dict[str, Any]:
    if "database" in tuning and "match" not in tuning:  # before per-target databases: the folder was the database
        folder = tuning.pop("database")
        tuning = {"root": folder, "path": folder, "tuned_for": None, "match": "closest", "note": UNRECORDED_TARGET,
                  "layout_rewrite": False, **tuning}
    if "covered" in tuning and "sources" not in tuning and tuning.get("path"):  # before shared databases
        tuning["sources"] = [{"name": _source_name(tuning), "match": tuning["match"], "path": tuning["path"],
                              "tuned_for": tuning.get("tuned_for"), "kernels": list(tuning["covered"])}]
    return tuning


def _source_name(tuning: dict[str, Any]) -> str:
    """How compile/schedule_sources.py names the own root: its folder, or `parent/name` where the root was the
    database itself (its path)."""
    root = PurePath(tuning.get("root") or tuning["path"])
    return f"{root.parent.name}/{root.name}" if str(root) == tuning["path"] else root.name
