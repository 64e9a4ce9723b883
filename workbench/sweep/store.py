"""The sweep's own table, `sweep_variants`, next to the runs in the sweep's results store."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench.record.result import RunResult
from workbench.sweep.spec import Variant

SWEEP_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_variants (
    id TEXT PRIMARY KEY,
    position INTEGER,
    repeat INTEGER,
    pipeline_text TEXT,
    grid_json TEXT,
    status TEXT NOT NULL,
    error TEXT,
    run_id INTEGER,
    structural_hash TEXT,
    class_id TEXT,
    representative TEXT,
    median_ms REAL,
    seconds REAL,
    updated TEXT,
    tuned INTEGER,
    ablation TEXT,
    ran_on TEXT
);
"""
COLUMNS = ("id", "position", "repeat", "pipeline_text", "grid_json", "status", "error", "run_id", "structural_hash",
           "class_id", "representative", "median_ms", "seconds", "updated", "tuned", "ablation", "ran_on")
ADDED_COLUMNS = {"tuned": "INTEGER", "ablation": "TEXT", "ran_on": "TEXT"}  # columns a store written by an older version lacks


class SweepStore:
    """The sweep's table next to `runs` in one SQLite store; a measured run and the variants it stands for
    are written in one transaction, so a kill at any moment leaves no run that no variant refers to."""

    def __init__(self, path: Path):
        from workbench.record.store import ResultsStore

        self.results = ResultsStore(path)
        self.db = self.results.db
        with self.results.transaction():
            self.db.execute(SWEEP_SCHEMA)
            have = {row[1] for row in self.db.execute("PRAGMA table_info(sweep_variants)")}
            for column, kind in ADDED_COLUMNS.items():  # a store written before sweeps were tuned, or studies
                if column not in have:
                    self.db.execute(f"ALTER TABLE sweep_variants ADD COLUMN {column} {kind}")

    def record(self, variants: list[Variant], status: str, *, result: RunResult | None = None, run_id: int | None = None,
               **columns: Any) -> int | None:
        """Record `variants` with one status; with `result`, first add that run and refer to it. Return the run id."""

        def insert(run_id: int | None) -> None:
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self.db.executemany(
                f"INSERT OR REPLACE INTO sweep_variants ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                [(v.id, v.position, v.repeat, v.pipeline_text, json.dumps(v.grid, sort_keys=True), status,
                  columns.get("error"), run_id, columns.get("structural_hash"), columns.get("class_id"),
                  columns.get("representative"), columns.get("median_ms"), columns.get("seconds"), now, int(v.tuned),
                  v.ablation, columns.get("ran_on"))
                 for v in variants])

        if result is not None:
            return self.results.add(result, then=insert)
        with self.results.transaction():
            insert(run_id)
        return run_id

    def rows(self) -> dict[str, dict]:
        return {row["id"]: dict(row) for row in self.db.execute("SELECT * FROM sweep_variants ORDER BY position")}

    def close(self) -> None:
        self.results.close()


