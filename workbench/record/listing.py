"""`workbench runs`: the runs of a results store, newest first, as a rich table, JSON or CSV.

The rows come from `ResultsStore.find` (filtered in SQL); this module only shapes them, so the three forms
carry the same columns and a script reading the CSV sees what a person reads in the table.
"""

from __future__ import annotations

import csv
import io
import json

from rich.table import Table

from workbench.record.rows import number_text

LIST_COLUMNS = ("id", "created", "name", "model", "target", "pipeline", "workbench_ms", "ort_all_ratio", "status")


def listing_rows(found: list[dict]) -> list[dict]:
    """`find`'s rows in LIST_COLUMNS; ort_all_ratio = ort_all median / workbench median (> 1: the workbench is
    faster), None where either was not measured."""
    rows = []
    for row in found:
        ours, theirs = row["workbench_ms"], row["ort_all_ms"]
        rows.append({
            "id": row["id"], "created": row["created"], "name": row["name"], "model": row["model_source"],
            "target": row["target_key"], "pipeline": row["pipeline_text"], "workbench_ms": ours,
            "ort_all_ratio": theirs / ours if ours and theirs else None, "status": row["status"],
        })
    return rows


def listing_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=2)


def listing_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=LIST_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def listing_table(rows: list[dict], title: str) -> Table:
    """The rows for a person: times to the minute, the pipeline folded rather than cut."""
    table = Table(title=title, caption="vs ort_all: ONNX Runtime's median ÷ the workbench's "
                                       "(> 1: the workbench is faster)")
    for column in ("id", "created", "name", "model", "target"):
        table.add_column(column, justify="right" if column == "id" else "left", no_wrap=column in ("id", "created"),
                         overflow="fold")
    table.add_column("pipeline", min_width=20, overflow="fold")  # the column a comparison is about: never squeezed
    for column in ("workbench ms", "vs ort_all", "status"):
        table.add_column(column, justify="left" if column == "status" else "right", no_wrap=True)
    for row in rows:
        ratio = "—" if row["ort_all_ratio"] is None else f"{row['ort_all_ratio']:.2f}×"
        table.add_row(str(row["id"]), (row["created"] or "—")[:16].replace("T", " "), row["name"],
                      number_text(row["model"]), number_text(row["target"]),
                      (row["pipeline"] or "(empty)").replace(",", ", "),
                      number_text(row["workbench_ms"], ".3f"), ratio, number_text(row["status"]))
    return table
