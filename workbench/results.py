"""The SQLite results store: one row per run plus one per measured label, WAL, one transaction per result.

WAL mode and a busy timeout let several processes (sweep workers, two sweeps) write one store at
once without losing rows; a result is committed whole or not at all.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

from workbench.atomic import atomic_write_text

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    created TEXT,
    config_hash TEXT,
    model_source TEXT,
    target TEXT,
    pipeline_text TEXT,
    result_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
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
);
"""
ROW_COLUMNS = ("run_id", "name", "created", "pipeline_text", "target", "label", "median_ms", "p90_ms", "repeats",
               "kernels", "max_abs_err", "max_rel_err", "accuracy_ok", "note")


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value, sort_keys=True)


class ResultsStore:
    """Runs and their measurements in one SQLite file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA busy_timeout=60000")
        self.db.execute("PRAGMA foreign_keys=ON")
        with self.db:
            self.db.executescript(SCHEMA)
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def add(self, result: dict) -> int:
        """Store one result (both tables in one transaction); return its run id."""
        blob = json.dumps(result, default=str)
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO runs (name, created, config_hash, model_source, target, pipeline_text, result_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (result["name"], result.get("created"), result.get("provenance", {}).get("config_hash"),
                 result.get("model", {}).get("source"), _text(result.get("target")), result.get("pipeline_text"),
                 blob),
            )
            run_id = cursor.lastrowid
            accuracy, kernels = result.get("accuracy", {}), result.get("kernels", {})
            self.db.executemany(
                "INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run_id, label, m.get("median_ms"), m.get("p90_ms"), m.get("repeats"), kernels.get(label),
                  accuracy.get(label, {}).get("max_abs_err"), accuracy.get(label, {}).get("max_rel_err"),
                  accuracy.get(label, {}).get("ok"), m.get("note"))
                 for label, m in result["measurements"].items()],
            )
        return run_id

    def get(self, run_id: int) -> dict:
        row = self.db.execute("SELECT result_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no run {run_id} in {self.path}")
        return json.loads(row["result_json"])

    def runs(self, name: str | None = None) -> list[dict]:
        query = "SELECT id, name, created, config_hash, model_source, target, pipeline_text FROM runs"
        rows = self.db.execute(query + (" WHERE name = ?" if name else "") + " ORDER BY id", (name,) if name else ())
        return [dict(row) for row in rows]

    def measurement_rows(self, run_ids: list[int] | None = None) -> list[dict]:
        """Flat rows, one per (run, label), with the run's name, pipeline and target."""
        query = ("SELECT m.run_id, r.name, r.created, r.pipeline_text, r.target, m.label, m.median_ms, m.p90_ms,"
                 " m.repeats, m.kernels, m.max_abs_err, m.max_rel_err, m.accuracy_ok, m.note"
                 " FROM measurements m JOIN runs r ON r.id = m.run_id")
        params: tuple = ()
        if run_ids is not None:
            query += f" WHERE m.run_id IN ({','.join('?' * len(run_ids))})"
            params = tuple(run_ids)
        return [dict(row) for row in self.db.execute(query + " ORDER BY m.run_id, m.rowid", params)]

    def export_csv(self, path: Path, run_ids: list[int] | None = None) -> Path:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=ROW_COLUMNS)
        writer.writeheader()
        writer.writerows(self.measurement_rows(run_ids))
        return atomic_write_text(path, buffer.getvalue())

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
