"""The run report on the console: rich tables of the rows in record/rows.py (latency and accuracy per label,
passes, CUDA kernels, the per-kernel profile), and `console_table`, what `workbench run` and `workbench report`
print; the tuning table `workbench tune` prints, and the pass registry `workbench passes` lists.
"""

from __future__ import annotations

from rich.table import Table

from workbench.compile.tasks import TaskResult
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.config.named_pipelines import NAMED_PIPELINES
from workbench.passes.library import all_passes
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


def tuning_table(tasks: list[TaskResult], title: str, profiled: bool) -> Table:
    """What `workbench tune` did per task: uses, its time in the profiled build before tuning (and after, where the
    tuned build was checked), trials before and now against the budget, best µs, the minutes spent on it (where a
    budget went), and notes (hot trials, skipped, flags)."""
    table = Table(title=title)
    checked = any(task.model_us is not None for task in tasks)
    model_column = ["in the model µs (before → tuned)" if checked else "in the model µs"] if profiled else []
    for column in ("task", "uses", *model_column, "trials (before + now) / budget", "best µs", "min", "note"):
        table.add_column(column)
    for task in tasks:
        best = f"{task.best_us:.1f}" if task.best_us is not None else "—"
        if task.model_us is not None:  # the check's medians, the two builds profiled in turn
            in_model = [f"{task.model_before_us:.1f} → {task.model_us:.1f}"]
        else:
            in_model = [f"{task.profiled_us:.1f}" if task.profiled_us is not None else "—"]
        in_model = in_model if profiled else []
        if task.budget is None:  # a minutes budget: rounds went where the model gained (compile/gain.py)
            trials_note = ""
        elif task.trials > task.budget:  # past its budget: the rest went to it as the kernel holding the most time
            trials_note = f"{task.trials - task.budget} hot trials"
        else:
            trials_note = "skipped: at budget" if task.trials_before >= task.budget and not task.exhausted else ""
        note = "; ".join(filter(None, [trials_note, *task.flags]))
        table.add_row(task.name, str(task.weight), *in_model,
                      f"{task.trials_before} + {task.trials_run} / {task.budget or '—'}", best,
                      f"{task.seconds / 60:.2f}", note)
    return table


def registry_tables() -> list[Table]:
    """`workbench passes`: every registered pass with its parameters' defaults, and the named pipelines."""
    passes = Table(title="Registered passes (use in `pipeline:` or --pipeline 'a,b(k=v)')")
    for column in ("name", "family", "parameters (default)", "what it does"):
        passes.add_column(column)
    for entry in all_passes():
        params = ", ".join(f"{name}={field.get_default(call_default_factory=True)!r}"
                           for name, field in entry.params.model_fields.items()) or "—"
        passes.add_row(entry.name, entry.family, params, entry.doc)
    named = Table(title="Named pipelines (a name in `pipeline:`, alone or among passes; --pipeline default)")
    for column in ("name", "what it is for", "target", "expands to"):
        named.add_column(column)
    for pipeline in NAMED_PIPELINES.values():
        for kind, text in pipeline.by_target.items():
            named.add_row(pipeline.name, pipeline.doc, "any" if kind == "*" else kind, text.replace(",", ", "))
    return [passes, named]
