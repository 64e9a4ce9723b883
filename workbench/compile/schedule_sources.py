"""Every schedule database a build looks a kernel up in, in order, and which one supplied each kernel.

A kernel's workload (MetaSchedule's structural hash of its TIR) does not depend on the model it came from: a 3x3
conv at 32 channels is the same workload in the quickstart and in another convnet. So a build looks each kernel up
in its own database first, then in the exact-target folder of every shared root (`tuning.shared`; by default the
repo's committed `schedules/`), then in the closest-target folders (its own root's, then the shared roots'), and
the first database with a record supplies the schedule: MetaSchedule's `OrderedUnionDatabase`, whose lookups are
each database's own `query_tuning_record`. Which database answered is worked out the same way, one database at a
time, so the run can say where its schedules came from. Shared databases are only read; tuning writes into the
config's own database (compile/databases.py `tuning_folder`). A config without a `tuning:` section reads the same
(its own root being schedules/<name>, where `workbench tune` writes, when it exists): a schedule tuned anywhere
for a kernel is used wherever the kernel appears.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import tvm

from workbench.compile.databases import RECORDS_FILE, DatabaseChoice, choose_database, is_database, open_database
from workbench.config import Experiment

COMMITTED_SCHEDULES = Path(__file__).resolve().parents[2] / "schedules"  # the repo's; absent in a wheel install
UNKNOWN = "unknown"  # the source of a kernel no listed database answers for (should not happen)

Match = Literal["exact", "shared", "closest"]  # own folder for this target, another root's, another target's


@dataclass(frozen=True)
class ScheduleSource:
    """One database a build reads: its root's name (`quickstart`), its folder, what it was tuned for, and how it
    fits this build."""

    name: str
    path: Path
    tuned_for: str | None
    match: Match
    own: bool = False  # the config's own database (opened afresh: tuning may have just written it)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.match})"


@dataclass
class SourceCount:
    """How many of a build's kernels one database supplied (result.json's `tuning.sources`)."""

    source: ScheduleSource
    kernels: list[str]

    def as_dict(self) -> dict:
        return {"name": self.source.name, "match": self.source.match, "path": str(self.source.path),
                "tuned_for": self.source.tuned_for, "kernels": self.kernels}


def shared_roots(folder: Path) -> list[Path]:
    """The database roots in a shared folder: the folder itself when it is a database or a root (a database in a
    sub-folder), else each sub-folder (a folder of roots, as `schedules/` is)."""
    if not folder.is_dir():
        return []
    children = sorted(child for child in folder.iterdir() if child.is_dir())
    if is_database(folder) or any(is_database(child) for child in children):
        return [folder]
    return children


def _key(path: Path) -> str:
    return str(path.resolve())


def _name(root: Path) -> str:
    """How a run names a root: its folder (`quickstart`); a database given directly with its parent's
    (`quickstart/llvm-znver2`)."""
    return f"{root.parent.name}/{root.name}" if is_database(root) else root.name


@dataclass
class ScheduleSources:
    """The databases of one build in lookup order (`own` is the config's own choice, as before sharing)."""

    own: DatabaseChoice
    sources: list[ScheduleSource]
    databases: list = field(default_factory=list)  # MetaSchedule databases, one per source
    target: tvm.target.Target | None = None

    @property
    def database(self):
        """One database for the build: the sources in order (None: no database at all)."""
        if not self.databases:
            return None
        if len(self.databases) == 1:
            return self.databases[0]
        from tvm.s_tir import meta_schedule as ms

        return ms.database.OrderedUnionDatabase(*self.databases)

    def state(self) -> tuple:
        """What the databases hold now (each records file's size and time of change): a build of the same module
        with the same state is the same build."""
        return tuple((_key(source.path), *_records_stat(source.path)) for source in self.sources)

    def source_of(self, workload: tvm.IRModule) -> str:
        """The path (the key of `Built.tuning['sources']`) of the first database with a record for `workload`, as
        the ordered union answers it."""
        for source, database in zip(self.sources, self.databases):
            # has_workload first: a query for an unknown workload must not commit it to a read-only database
            if database.has_workload(workload) and database.query_tuning_record(workload, self.target, "main"):
                return _key(source.path)
        return UNKNOWN

    def counts(self, by_source: dict[str, list[str]]) -> list[SourceCount]:
        """Kernels per source, in lookup order, from a build's `tuning['sources']` (sources that gave none left
        out)."""
        return [SourceCount(source, sorted(by_source[_key(source.path)])) for source in self.sources
                if by_source.get(_key(source.path))]

    def record(self, coverage: dict | None, layout_rewrite: bool) -> dict:
        """result.json's `tuning` section: the own database's choice, coverage, and the kernels per source (no
        coverage: no database was applied, and the own choice's note says why)."""
        if coverage is None:
            return {**self.own.as_dict(), "layout_rewrite": layout_rewrite}
        coverage = dict(coverage)
        by_source = coverage.pop("sources", {})
        return {**self.own.as_dict(), "layout_rewrite": layout_rewrite, **coverage,
                "sources": [count.as_dict() for count in self.counts(by_source)]}


def lookup_order(own: DatabaseChoice, own_name: str, shared: list[DatabaseChoice]) -> list[ScheduleSource]:
    """Own exact, shared exact, then own and shared closest; each folder once."""
    exact = [ScheduleSource(own_name, own.path, own.tuned_for, "exact", True)] if own.match == "exact" else []
    exact += [ScheduleSource(_name(c.root), c.path, c.tuned_for, "shared") for c in shared if c.match == "exact"]
    closest = [ScheduleSource(own_name, own.path, own.tuned_for, "closest", True)] if own.match == "closest" else []
    closest += [ScheduleSource(_name(c.root), c.path, c.tuned_for, "closest") for c in shared
                if c.match == "closest" and c.tuned_for is not None]  # a shared database of unknown target: not used
    seen, order = set(), []
    for source in exact + closest:
        if _key(source.path) not in seen:
            seen.add(_key(source.path))
            order.append(source)
    return order


_OPENED: dict[tuple[str, int, int], object] = {}  # shared databases, read once per process while unchanged


def _records_stat(path: Path) -> tuple[int, int]:
    """A database folder's records file's time of change and size (0, 0 where it has none yet)."""
    records = path / RECORDS_FILE
    stat = records.stat() if records.is_file() else None
    return (stat.st_mtime_ns, stat.st_size) if stat else (0, 0)


def _open_shared(path: Path):
    """A shared database opened once per process (a sweep worker builds many times) until its records change."""
    key = (_key(path), *_records_stat(path))
    if key not in _OPENED:
        _OPENED[key] = open_database(path, create=False)
    return _OPENED[key]


def schedule_sources(experiment: Experiment, base_dir: Path, target: tvm.target.Target,
                     tune_hint: str) -> ScheduleSources | None:
    """The databases a build of `experiment` for `target` reads, opened, in lookup order. A configured own root
    must exist (a mistyped `tuning.database` is an error). Without a `tuning:` section a build reads what there
    is: its default root (schedules/<name>, where `workbench tune` wrote) if it exists, and the committed
    schedules; None where there is nothing to read."""
    root = experiment.database_root(base_dir)
    if experiment.tuning is None and not root.is_dir():
        own = DatabaseChoice(root, None, None, "none")  # nothing tuned for it, and nothing asked: no note
    else:
        own = choose_database(root, target, tune_hint)
    folders = experiment.shared_roots(base_dir)
    folders = [COMMITTED_SCHEDULES] if folders is None else folders
    shared = [choose_database(r, target, tune_hint) for folder in folders for r in shared_roots(folder)
              if _key(r) != _key(root)]
    sources = lookup_order(own, _name(root), [c for c in shared if c.path is not None])
    if experiment.tuning is None and not sources:
        return None
    databases = [open_database(s.path, create=False) if s.own else _open_shared(s.path) for s in sources]
    return ScheduleSources(own, sources, databases, target)
