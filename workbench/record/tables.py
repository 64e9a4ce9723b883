"""The run report on the console: rich tables of the rows in record/rows.py (latency and accuracy per label,
passes, CUDA kernels, the per-kernel profile), and `console_table`, what `workbench run` and `workbench report`
print.
"""

from __future__ import annotations

from rich.table import Table

from workbench.config.baselines import WORKBENCH_LABEL
from workbench.record.result import RunResult
from workbench.record.rows import (
    COLUMNS,
    CUDA_COLUMNS,
    PASS_COLUMNS,
    PROFILE_COLUMNS,
    SPEEDUP_NOTE,
    cuda_cells,
    heading,
    pass_cells,
    profile_note,
    profile_rows,
    summary_cells,
    summary_rows,
)


def summary_table(result: RunResult) -> Table:
    """The per-label latency/accuracy table."""
    table = Table(title=heading(result), caption=SPEEDUP_NOTE)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("label", "accuracy", "note") else "right")
    for row in summary_rows(result):
        table.add_row(*summary_cells(row), style="bold" if row["label"] == WORKBENCH_LABEL else None)
    return table


def passes_table(result: RunResult) -> Table:
    """Per pass: wall time, total op count before → after, and the op counts that moved."""
    table = Table(title="passes")
    for column in PASS_COLUMNS:
        table.add_column(column, justify="right" if column == "seconds" else "left")
    for record in result.passes:
        table.add_row(*pass_cells(record))
    return table


def cuda_table(result: RunResult) -> Table:
    """The static kernel report of each CUDA build (no GPU needed): fewer launches and MB is fusion's effect."""
    table = Table(title=f"CUDA kernels, static ({next(iter(result.cuda.values())).arch})")
    for column in CUDA_COLUMNS:
        table.add_column(column, justify="left" if column == "label" else "right")
    for label, report in result.cuda.items():
        table.add_row(*cuda_cells(label, report), style="bold" if label == WORKBENCH_LABEL else None)
    return table


def profile_table(result: RunResult) -> Table:
    """The workbench's top kernels beside ONNX Runtime's top nodes."""
    table = Table(title=f"{result.name}: where the time goes", caption=profile_note(result))
    for column in PROFILE_COLUMNS:
        table.add_column(column, justify="right" if column.strip() in ("#", "µs", "share") else "left")
    for row in profile_rows(result):
        table.add_row(*row, style="bold" if row[1] == "total" else None)
    return table


def console_table(result: RunResult) -> Table:
    """What `workbench run` prints: the summary table and, below it, the passes table (one renderable), then the
    CUDA and profile tables where the run has them."""
    grid = Table.grid(padding=(1, 0))
    grid.add_column()
    grid.add_row(summary_table(result))
    grid.add_row(passes_table(result) if result.passes else "passes: (empty pipeline)")
    if result.cuda:
        grid.add_row(cuda_table(result))
    if result.profile:
        grid.add_row(profile_table(result))
    return grid
