"""The SQLite results store: one row per run plus one per measured label, WAL, one transaction per result.

WAL mode and a busy timeout let several processes (sweep workers, two sweeps) write one store at
once without losing rows: a writer that finds the store locked waits instead of failing. Each result
is written in one transaction, so a crash or a bad value halfway never leaves a run without its
measurements. The full result is kept as JSON next to the flat columns, so `get` gives back exactly
what was added while SQL and CSV see one row per (run, label).
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workbench.atomic import atomic_write_text
from workbench.errors import UserError
from workbench.record.result import Accuracy, RunResult

SCHEMA_VERSION = 1
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        created TEXT,
        config_hash TEXT,
        model_source TEXT,
        target TEXT,
        pipeline_text TEXT,
        result_json TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS measurements (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        median_ms REAL,
        p90_ms REAL,
        repeats INTEGER,
        kernels INTEGER,
        max_abs_err REAL,
        max_rel_err REAL,
        accuracy_ok INTEGER,
        note TEXT,
        PRIMARY KEY (run_id, label)
    )""",
    "CREATE INDEX IF NOT EXISTS runs_by_name ON runs(name)",
)
BUSY_TIMEOUT_MS = 60_000
ROW_COLUMNS = ("run_id", "name", "created", "pipeline_text", "target", "label", "median_ms", "p90_ms", "repeats",
               "kernels", "max_abs_err", "max_rel_err", "accuracy_ok", "note")
RUN_COLUMNS = ("id", "name", "created", "config_hash", "model_source", "target", "pipeline_text")
# `find`'s row: the run's columns, what its target resolved to, its status and two labels' medians
FIND_SELECT = (
    "SELECT r.id, r.name, r.created, r.model_source, r.target, r.pipeline_text,"
    " coalesce(json_extract(r.result_json, '$.target_resolved.key'), r.target) AS target_key,"
    " json_extract(r.result_json, '$.status') AS status,"
    " w.median_ms AS workbench_ms, o.median_ms AS ort_all_ms"
    " FROM runs r"
    " LEFT JOIN measurements w ON w.run_id = r.id AND w.label = 'workbench'"
    " LEFT JOIN measurements o ON o.run_id = r.id AND o.label = 'ort_all'"
)


def _text(value: Any) -> str | None:
    """Targets are a string or a dict; store dicts as canonical JSON so equal targets compare equal in SQL."""
    return value if value is None or isinstance(value, str) else json.dumps(value, sort_keys=True)


def _measurement_row(run_id: int, label: str, result: RunResult) -> tuple:
    figures = result.measurements[label]
    accuracy = result.accuracy.get(label) or Accuracy()
    return (run_id, label, figures.median_ms, figures.p90_ms, figures.repeats, result.kernels.get(label),
            accuracy.max_abs_err, accuracy.max_rel_err, accuracy.ok, figures.note)


class ResultsStore:
    """Runs and their measurements in one SQLite file; usable as a context manager."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; `_transaction` opens them explicitly.
        self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self.db.execute("PRAGMA foreign_keys=ON")
        self._retry_busy(lambda: self.db.execute("PRAGMA journal_mode=WAL"))
        self._retry_busy(self._migrate)

    def _retry_busy(self, step: Callable[[], object]) -> None:
        """Run `step`, retrying while the store is locked, up to the busy timeout. Needed when two processes
        open a fresh file at once: switching it to WAL can fail with 'database is locked' at once, without
        SQLite's busy handler ever waiting (tests/test_results.py's two-process test opens one at once)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                step()
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE takes the write lock up front, so concurrent writers queue on the busy timeout;
        any exception (KeyboardInterrupt included) rolls the whole transaction back."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self) -> None:
        """Create the schema in a fresh file; refuse a store written by a newer workbench."""
        with self._transaction():
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise UserError(f"{self.path}: results store has schema version {version}, this workbench "
                                f"reads up to {SCHEMA_VERSION}; upgrade workbench or use another results path")
            for statement in SCHEMA:
                self.db.execute(statement)
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @property
    def schema_version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def transaction(self):
        """One write transaction, for callers that keep their own tables in this store (the sweep)."""
        return self._transaction()

    def add(self, result: RunResult, then: Callable[[int], object] | None = None) -> int:
        """Store one result (both tables, one transaction: all or nothing); return its run id.

        `then(run_id)` runs inside the same transaction: a sweep records the variants this run measured,
        so a crash never leaves a run that no variant refers to."""
        blob = json.dumps(result.to_json())
        with self._transaction():
            cursor = self.db.execute(
                "INSERT INTO runs (name, created, config_hash, model_source, target, pipeline_text, result_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (result.name, result.created, result.provenance.get("config_hash"), result.model.get("source"),
                 _text(result.target), result.pipeline_text, blob),
            )
            run_id = cursor.lastrowid
            self.db.executemany("INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                [_measurement_row(run_id, label, result) for label in result.measurements])
            if then is not None:
                then(run_id)
        return run_id

    def get(self, run_id: int) -> RunResult:
        """The run's full result as added."""
        row = self.db.execute("SELECT result_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no run {run_id} in {self.path}")
        return RunResult.from_json(json.loads(row["result_json"]), f"{self.path}, run {run_id}")

    def runs(self, name: str | None = None) -> list[dict]:
        """One summary row per run (oldest first), optionally only the runs of one experiment name."""
        query = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"
        params: tuple = ()
        if name is not None:
            query, params = query + " WHERE name = ?", (name,)
        return [dict(row) for row in self.db.execute(query + " ORDER BY id", params)]

    def find(self, name: str | None = None, model: str | None = None, target: str | None = None,
             since: str | None = None, limit: int | None = None) -> list[dict]:
        """One row per run, newest first, for `workbench runs`: filtered here in SQL so a store of thousands of
        runs is never loaded whole. `model` and `target` match a substring (of the model source, and of the
        resolved target key or the configured target); `since` keeps runs created on or after that ISO date."""
        clauses, params = [], []
        if name is not None:
            clauses.append("r.name = ?")
            params.append(name)
        if model is not None:
            clauses.append("instr(r.model_source, ?) > 0")
            params.append(model)
        if target is not None:
            clauses.append("(instr(target_key, ?) > 0 OR instr(r.target, ?) > 0)")
            params += [target, target]
        if since is not None:
            clauses.append("r.created >= ?")
            params.append(since)
        query = FIND_SELECT + (" WHERE " + " AND ".join(clauses) if clauses else "") + " ORDER BY r.id DESC"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        return [dict(row) for row in self.db.execute(query, params)]

    def measurement_rows(self, run_ids: list[int] | None = None) -> list[dict]:
        """Flat rows, one per (run, label) in the order measured, with the run's name, pipeline and target."""
        columns = ", ".join(f"r.{c}" if c in ("name", "created", "pipeline_text", "target") else f"m.{c}"
                            for c in ROW_COLUMNS)
        query = f"SELECT {columns} FROM measurements m JOIN runs r ON r.id = m.run_id"
        params: tuple = ()
        if run_ids is not None:
            query += f" WHERE m.run_id IN ({','.join('?' * len(run_ids))})"
            params = tuple(run_ids)
        return [dict(row) for row in self.db.execute(query + " ORDER BY m.run_id, m.rowid", params)]

    def export_csv(self, path: Path, run_ids: list[int] | None = None) -> Path:
        """`measurement_rows` as CSV (header = ROW_COLUMNS), written atomically; return the path."""
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=ROW_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.measurement_rows(run_ids))
        return atomic_write_text(path, buffer.getvalue())

    @classmethod
    def open_existing(cls, path: Path) -> ResultsStore:
        """A store the user named for reading: a missing path or a file that is not a SQLite store is their
        mistake (a UserError), not a new empty store made for them nor an internal error."""
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: no results store here; `workbench run` writes one (default runs/results.sqlite)")
        try:
            store = cls(path)
            store.db.execute("SELECT 1 FROM runs LIMIT 1")
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{path}: not a workbench results store ({exc})") from exc
        return store

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

