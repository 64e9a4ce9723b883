"""Which tuning database a build uses: one folder per resolved target under the configured root.

`tuning.database` names a root (default `schedules/<name>`); tuning writes into `<root>/<target key>`
(e.g. `schedules/quickstart/llvm-znver3`) and leaves a `target.json` there saying what it was tuned
for. A build takes the folder of its own target; failing that, the closest folder of the same kind
(most shared CPU vector features), and says so; failing that it stays untuned and says how to tune.
A root that is itself a database (records directly inside, as older configs have it) is used as is.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tvm

from workbench.atomic import atomic_write_json, atomic_write_text
from workbench.compile.targets import cpu_features, target_key
from workbench.config import Experiment
from workbench.errors import UserError

if TYPE_CHECKING:  # MetaSchedule is imported when a database is opened, not by every config load
    from tvm.s_tir import meta_schedule as ms

WORKLOADS_FILE = "database_workload.json"
RECORDS_FILE = "database_tuning_record.json"
TARGET_FILE = "target.json"


@dataclass
class DatabaseChoice:
    """The database a build applies (`path`, None: untuned), what it was tuned for, and the note a run shows."""

    root: Path
    path: Path | None
    tuned_for: str | None
    match: str  # "exact", "closest" or "none"
    note: str | None = None

    def as_dict(self) -> dict:
        return {**asdict(self), "root": str(self.root), "path": str(self.path) if self.path else None}


def is_database(folder: Path) -> bool:
    return (folder / WORKLOADS_FILE).is_file()


def tuning_folder(root: Path, target: tvm.target.Target) -> Path:
    """Where tuning for `target` writes: `<root>/<target key>`, created with its `target.json`
    (or `root` itself when it is a database already, as older configs point at one)."""
    if is_database(root):
        return root
    folder = root / target_key(target)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"tuning.database {str(root)!r}: cannot create {folder} ({exc.strerror or exc})") from exc
    if not (folder / TARGET_FILE).is_file():
        atomic_write_json(folder / TARGET_FILE, {"key": target_key(target), "kind": target.kind.name,
                                                 "features": cpu_features(target)})
    return folder


def _tuned_for(folder: Path) -> dict:
    try:
        return json.loads((folder / TARGET_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {"key": folder.name, "kind": folder.name.split("-", 1)[0], "features": []}


def _similarity(features: list[str], others: list[str]) -> float:
    """Jaccard overlap of two feature lists (1: the same vector units)."""
    union = set(features) | set(others)
    return len(set(features) & set(others)) / len(union) if union else 1.0


def choose_database(root: Path, target: tvm.target.Target, tune_hint: str) -> DatabaseChoice:
    """The database folder a build for `target` applies, read from `root` (see the module doc).

    `tune_hint` is the command that would tune for this target (shown when nothing fits)."""
    key = target_key(target)
    if not root.is_dir():
        raise UserError(f"tuning database {str(root)!r} does not exist: run `{tune_hint}` first, set "
                        "tuning.tune: true, or point tuning.database at a tuned folder")
    if is_database(root):
        tuned_for = _tuned_for(root)["key"] if (root / TARGET_FILE).is_file() else None
        exact = tuned_for == key
        note = None if exact else f"tuned for {tuned_for or 'an unrecorded target'}, built for {key}"
        return DatabaseChoice(root, root, tuned_for, "exact" if exact else "closest", note)
    if is_database(root / key):
        return DatabaseChoice(root, root / key, key, "exact")
    candidates = [(folder, _tuned_for(folder)) for folder in sorted(root.iterdir())
                  if folder.is_dir() and is_database(folder)]
    candidates = [(folder, tuned) for folder, tuned in candidates if tuned.get("kind") == target.kind.name]
    if not candidates:
        return DatabaseChoice(root, None, None, "none",
                              f"untuned: no database for {key} in {root}; tune it: {tune_hint}")
    features = cpu_features(target)
    folder, tuned = max(candidates, key=lambda item: _similarity(features, item[1].get("features", [])))
    return DatabaseChoice(root, folder, tuned["key"], "closest",
                          f"tuned for {tuned['key']} (closest to {key}, which has no database; "
                          f"tune it: {tune_hint})")


def applied_database(experiment: Experiment, base_dir: Path, target: tvm.target.Target, tune_hint: str):
    """The experiment's database choice for `target` and the database opened (None where untuned), or (None, None)
    without a `tuning:` section; MetaSchedule is imported only when there is one."""
    if experiment.tuning is None:
        return None, None
    choice = choose_database(experiment.database_root(base_dir), target, tune_hint)
    return choice, open_database(choice.path, create=False) if choice.path is not None else None


def _drop_torn_lines(path: Path) -> None:
    """A kill while a record is written can leave its line cut short; JSONDatabase would refuse the file."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    good = []
    for line in lines:
        try:
            json.loads(line)
            good.append(line if line.endswith("\n") else line + "\n")
        except json.JSONDecodeError:
            continue
    if good != lines:
        path.write_text("".join(good))


def open_database(path: Path, create: bool):
    """Open (or create) the JSON database folder (a MetaSchedule JSONDatabase); a missing one is a user mistake
    unless we are tuning. MetaSchedule is imported here, when a database is opened, not by every config load."""
    from tvm.s_tir import meta_schedule as ms

    if not path.is_dir():
        if not create:
            raise UserError(f"tuning database {str(path)!r} does not exist: run `workbench tune` with this config "
                            "first, set tuning.tune: true, or point tuning.database at a tuned folder")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"tuning.database {str(path)!r}: cannot create it ({exc.strerror or exc})") from exc
    for name in (WORKLOADS_FILE, RECORDS_FILE):
        _drop_torn_lines(path / name)
    return ms.database.JSONDatabase(work_dir=str(path))


def drop_records(path: Path, records: list[ms.database.TuningRecord]) -> ms.database.JSONDatabase:
    """Rewrite the database folder's records file without `records` (each matched by its trace and run times; JSON
    databases have no delete) and open it again."""
    dropped = [record.as_json()[:2] for record in records]
    records_file = path / RECORDS_FILE
    kept = [line for line in records_file.read_text().splitlines() if json.loads(line)[1][:2] not in dropped]
    atomic_write_text(records_file, "".join(line + "\n" for line in kept))
    return open_database(path, create=False)
