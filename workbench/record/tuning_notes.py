"""How a run's schedules are worded: which databases supplied the workbench build's kernels, how many kept their
default schedule, why the own database is another target's or missing, and how long the run tuned first. The
summary table's note, report.md's header, the run's progress line and MLflow's `schedules` parameter all read here.
"""

from __future__ import annotations

from workbench.record.result import RunResult, TuningSummary


def schedules_line(tuning: TuningSummary | dict) -> str | None:
    """How many kernels each database supplied and how many kept their default schedule, in lookup order:
    'schedules: 12 from quickstart (exact), 3 from rapidocr_det (shared), 9 untuned'. None where no database was
    applied (a result of an older workbench is migrated to this form when read: record/migrate.py). `tuning` may
    be the producer's dict (compile/schedule_sources.py `ScheduleSources.record`)."""
    tuning = TuningSummary.model_validate(tuning)
    if tuning.sources is None:
        return None
    parts = [f"{len(source.kernels)} from {source.name} ({source.match})" for source in tuning.sources]
    return "schedules: " + ", ".join([*parts, f"{len(tuning.fallback or [])} untuned"])


def tuning_note(tuning: TuningSummary | dict) -> str | None:
    """Which schedules the workbench build ran with: the kernels each database supplied and, where the config's own
    database is another target's or missing, why; where no database was applied, why it is untuned (no database
    for this target, and the command that tunes it), or None when nothing was asked for."""
    tuning = TuningSummary.model_validate(tuning)
    line = schedules_line(tuning)
    if line is None:
        return tuning.note
    own = (tuning.note or "").removeprefix("untuned: ")
    prepacked = ", weights pre-packed" if tuning.layout_rewrite and tuning.covered else ""
    return line + prepacked + (f"; {own}" if own else "")


def tuning_lines(result: RunResult) -> list[str]:
    """report.md's header lines on tuning: where the schedules came from; how long tuning ran first and why it
    stopped."""
    lines = [line] if result.tuning and (line := schedules_line(result.tuning)) else []
    timing = result.tuning_time
    if timing:
        budget = timing.minutes_budget
        used = f"{timing.minutes_used:.2f}" + (f" of {budget:g}" if budget else "")
        lines.append(f"tuned first: {used} min ({timing.reason})")
    return lines
