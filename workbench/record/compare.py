"""`workbench compare`: two or more runs side by side, from the store or from their folders.

What a reader asks of two runs is "what did I change, and what did it do": so the config table shows only the
settings that differ (the equal ones in one line), each label's median carries its 95% CI (two medians whose
intervals overlap are not shown to differ) and its ratio to the first run, then the op counts each pass left and,
where every run has one, the per-kernel profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from rich.table import Table

from workbench.config.baselines import WORKBENCH_LABEL
from workbench.errors import UserError
from workbench.record.result import Measurement, RunResult
from workbench.record.store import ResultsStore


@dataclass
class Compared:
    """One run of a comparison: what the user called it (store id or folder) and its result."""

    label: str
    result: RunResult


def load_runs(specs: list[str], store_path: Path) -> list[Compared]:
    """Each spec is a store id (digits) or a run folder / result.json; the store is opened only if an id is given,
    so comparing folders needs no store."""
    if len(specs) < 2:
        raise UserError("give two or more runs to compare (store ids or run folders), e.g. workbench compare 1 2")
    ids = [spec for spec in specs if spec.isdigit()]
    store = ResultsStore.open_existing(store_path) if ids else None
    try:
        return [Compared(f"run {spec}", _from_store(store, int(spec))) if spec.isdigit()
                else Compared(Path(spec).name or spec, RunResult.read(Path(spec))) for spec in specs]
    finally:
        if store is not None:
            store.close()


def _from_store(store: ResultsStore, run_id: int) -> RunResult:
    try:
        return store.get(run_id)
    except KeyError:
        raise UserError(f"no run {run_id} in {store.path}; `workbench runs --store {store.path}` lists them") from None


def _tuning_text(result: RunResult) -> str:
    tuning = result.tuning
    if not tuning:
        return "none"
    if tuning.match == "none":
        return "none (no database for this target)"
    return f"{tuning.path} ({tuning.match}, {len(tuning.covered or [])} kernels tuned)"


def _tuning_budget(result: RunResult) -> str:
    trials = result.tuning_trials
    return f"{sum(task.trials_run for task in trials)} trials tuned in this run" if trials else "none in this run"


def settings(result: RunResult) -> dict[str, str]:
    """The config facets a comparison sets side by side, as text (equal text = equal setting)."""
    model = result.model
    ours = result.measurements.get(WORKBENCH_LABEL) or Measurement()
    target = (result.target_resolved or {}).get("key") or json.dumps(result.target, sort_keys=True)
    return {
        "model": f"{model.get('source')} {json.dumps(model.get('inputs'), sort_keys=True)}",
        "target": target,
        "pipeline": result.pipeline_text or "(empty)",
        "tuning database": _tuning_text(result),
        "tuning budget": _tuning_budget(result),
        "repeats": str(ours.repeats),
        "threads": str(result.threads),
        "status": result.status,
    }


def split_settings(runs: list[Compared]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(facet -> each run's value, for the facets that differ; facet -> value, for those all runs share)."""
    per_run = [settings(run.result) for run in runs]
    differ, same = {}, {}
    for facet in per_run[0]:
        values = [values[facet] for values in per_run]
        if len(set(values)) > 1:
            differ[facet] = values
        else:
            same[facet] = values[0]
    return differ, same


def settings_table(runs: list[Compared]) -> Table | None:
    differ, _ = split_settings(runs)
    if not differ:
        return None
    table = Table(title="what differs")
    table.add_column("setting")
    for run in runs:
        table.add_column(run.label, overflow="fold")
    for facet, values in differ.items():
        table.add_row(facet, *[value.replace(",", ", ") for value in values])
    return table


def same_line(runs: list[Compared]) -> str:
    _, same = split_settings(runs)
    return "same in every run: " + ("; ".join(f"{facet} {value}" for facet, value in same.items()) or "nothing")


def labels(runs: list[Compared]) -> list[str]:
    """Every measured label, the workbench first, then the others in the order the runs measured them."""
    seen = dict.fromkeys(label for run in runs for label in run.result.measurements)
    return sorted(seen, key=lambda label: label != WORKBENCH_LABEL)


def _median(result: RunResult, label: str) -> float | None:
    figures = result.measurements.get(label)
    return figures.median_ms if figures else None


def _ci95(figures: Measurement | None) -> tuple[float, float] | None:
    """A measurement's 95% CI of the median (a Timing's extra field, kept in result.json), if it has one."""
    ci = getattr(figures, "ci95_ms", None)
    return (float(ci[0]), float(ci[1])) if ci else None


def _latency_cell(figures: Measurement | None) -> str:
    if figures is None or figures.median_ms is None:
        return f"— ({figures.note})" if figures is not None and figures.note else "—"
    ci = _ci95(figures)
    return f"{figures.median_ms:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def latency_table(runs: list[Compared]) -> Table:
    """Per label: each run's median [95% CI] and, after the first run, its ratio to the first (< 1: faster)."""
    table = Table(title="median ms [95% CI]", caption=f"÷ {runs[0].label}: this run's median over the first's "
                                                       "(< 1: faster)")
    table.add_column("label")
    for i, run in enumerate(runs):
        table.add_column(run.label, justify="right")
        if i:
            table.add_column(f"÷ {runs[0].label}", justify="right")
    for label in labels(runs):
        first = _median(runs[0].result, label)
        cells = []
        for i, run in enumerate(runs):
            cells.append(_latency_cell(run.result.measurements.get(label)))
            if i:
                median = _median(run.result, label)
                cells.append(f"{median / first:.2f}×" if median and first else "—")
        table.add_row(label, *cells, style="bold" if label == WORKBENCH_LABEL else None)
    return table


def passes_table(runs: list[Compared]) -> Table:
    """Step by step, each run's pass and the total Relax op count it left; the last row is where each pipeline
    ends ("(no passes)" for an empty pipeline)."""
    table = Table(title="ops after each pass")
    table.add_column("step", justify="right")
    for run in runs:
        table.add_column(run.label)
    steps = max(len(run.result.passes) for run in runs)
    for step in range(steps):
        cells = []
        for run in runs:
            passes = run.result.passes
            cells.append(f"{passes[step].name} → {sum(passes[step].ops_after.values())}" if step < len(passes)
                         else "")
        table.add_row(str(step + 1), *cells)
    table.add_row("end", *[str(_ops_left(run.result)) for run in runs], style="bold")
    return table


def _ops_left(result: RunResult) -> int | str:
    passes = result.passes
    return sum(passes[-1].ops_after.values()) if passes else "(no passes)"


def profile_tables(runs: list[Compared]) -> list[Table]:
    """Per profiled label that every run has: the kernels each run timed (union of their top lists), µs per
    inference per run, largest in the first run first. Empty when any run has no profile."""
    profiles = [run.result.profile for run in runs]
    if not all(profiles):
        return []
    tables = []
    for label in [label for label in profiles[0] if all(label in p for p in profiles)]:
        per_run = [{k.name: k.us for k in p[label].kernels} for p in profiles]
        names = list(dict.fromkeys(name for kernels in per_run for name in kernels))
        table = Table(title=f"{label}: µs per inference by kernel")
        table.add_column("kernel")
        for run in runs:
            table.add_column(run.label, justify="right")
        for name in names:
            table.add_row(name, *[f"{kernels[name]:.1f}" if name in kernels else "—" for kernels in per_run])
        table.add_row("total", *[f"{p[label].total_us:.1f}" for p in profiles], style="bold")
        tables.append(table)
    return tables


def compare_view(runs: list[Compared]) -> Table:
    """Everything `workbench compare` prints, as one renderable."""
    grid = Table.grid(padding=(1, 0))
    grid.add_column()
    differ = settings_table(runs)
    grid.add_row(differ if differ is not None else "no setting differs")
    grid.add_row(same_line(runs))
    grid.add_row(latency_table(runs))
    grid.add_row(passes_table(runs))
    for table in profile_tables(runs):
        grid.add_row(table)
    return grid


def compare_figure(runs: list[Compared]) -> Figure:
    """Grouped horizontal bars: per label, one bar per run (its median, 95% CI as whisker), so a change shows as
    bars of one group that differ; a label a run did not measure has no bar there; log x-scale past a 20x spread."""
    names = labels(runs)
    fig = Figure(figsize=(7.5, 0.35 * len(names) * len(runs) + 1.8))
    ax = fig.subplots()
    height = 0.8 / len(runs)
    for i, run in enumerate(runs):
        rows = [(y, run.result.measurements.get(label)) for y, label in enumerate(names)]
        rows = [(y, m) for y, m in rows if m is not None and m.median_ms]
        medians = np.array([m.median_ms for _, m in rows])
        cis = [_ci95(m) or (m.median_ms, m.median_ms) for _, m in rows]
        whiskers = [[max(median - low, 0) for median, (low, _) in zip(medians, cis)],
                    [max(high - median, 0) for median, (_, high) in zip(medians, cis)]]
        ax.barh([y + i * height for y, _ in rows], medians, height=height, xerr=whiskers, capsize=2, label=run.label)
    ax.set_yticks([y + height * (len(runs) - 1) / 2 for y in range(len(names))], names)
    ax.invert_yaxis()
    medians = [m.median_ms for run in runs for m in run.result.measurements.values() if m.median_ms]
    log_scale = bool(medians) and max(medians) / min(medians) > 20  # as the run report's chart: keep small bars visible
    if log_scale:
        ax.set_xscale("log")
    ax.set_xlabel("median latency, ms (whisker: 95% CI)" + (" — log scale" if log_scale else ""))
    ax.legend(fontsize=8)
    ax.set_title(" vs ".join(run.label for run in runs), fontsize=10)
    fig.tight_layout()
    return fig
