"""The run report: one summary row per label, shown as a rich table, as Markdown, and as a bar chart.

Both tables are built from `summary_rows` and `_cells`, so the console and report.md always agree.
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

from matplotlib.figure import Figure  # a bare Figure renders with Agg, with no pyplot state or GUI backend
from rich.table import Table

from workbench.atomic import atomic_write_bytes, atomic_write_text
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.record.result import Accuracy, PassEntry, RunResult

COLUMNS = ("label", "median ms", "p90 ms", "workbench speedup vs this", "kernels", "max abs err", "accuracy", "note")
PASS_COLUMNS = ("pass", "seconds", "ops before → after", "changes")
CUDA_COLUMNS = ("label", "kernels (PTX)", "launches / inference", "intermediate MB", "max threads/block",
                "max registers", "max smem bytes")
KERNEL_COLUMNS = ("kernel", "threads/block", "registers", "smem bytes")
PROFILE_COLUMNS = ("#", "workbench kernel", "µs", "share", "ort_all node", "µs ", "share ")
SPEEDUP_NOTE = "workbench speedup vs this = that label's median / the workbench median (> 1: the workbench is faster)"


def profile_note(result: RunResult) -> str:
    """The profile table's caption; it gives the instrument cost taken off each workbench call."""
    ours = (result.profile or {}).get(WORKBENCH_LABEL) or {}
    less = f", less the instrument's own {ours['instrument_us']:.1f} µs per call" if ours.get("instrument_us") else ""
    return ("mean time per inference of each kernel (workbench: timed around each VM call" + less +
            "; ort_all: ONNX Runtime's node trace), largest first; share: of the kernels' summed time")


def summary_rows(result: RunResult) -> list[dict]:
    """One row per label, workbench first then the baselines in measured order: latency, the
    workbench's speedup vs that label (label median / workbench median), kernels, accuracy, note."""
    measurements = result.measurements
    ours = measurements[WORKBENCH_LABEL].median_ms if WORKBENCH_LABEL in measurements else None
    rows = []
    for label in sorted(measurements, key=lambda name: name != WORKBENCH_LABEL):  # stable: baselines keep their order
        figures = measurements[label]
        accuracy = result.accuracy.get(label) or Accuracy()
        median = figures.median_ms
        rows.append({
            "label": label, "median_ms": median, "p90_ms": figures.p90_ms,
            "speedup": median / ours if median and ours else None,
            "kernels": result.kernels.get(label),
            "max_abs_err": accuracy.max_abs_err,
            "ok": accuracy.ok,
            "reference": label == result.reference,
            "note": figures.note or accuracy.note
                    or (tuning_note(result.tuning) if label == WORKBENCH_LABEL and result.tuning else None),
        })
    return rows


def schedules_line(tuning: dict) -> str | None:
    """How many kernels each database supplied and how many kept their default schedule, in lookup order:
    'schedules: 12 from quickstart (exact), 3 from rapidocr_det (shared), 9 untuned'. None for a result written
    before builds read shared databases (it has no `sources`)."""
    if "sources" not in tuning:
        return None
    parts = [f"{len(source['kernels'])} from {source['name']} ({source['match']})" for source in tuning["sources"]]
    return "schedules: " + ", ".join([*parts, f"{len(tuning.get('fallback') or [])} untuned"])


def tuning_note(tuning: dict) -> str:
    """Which schedules the workbench build ran with: the kernels each database supplied (and, where the config's
    own database is another target's or missing, why), or for an older result the database's target and its
    kernel coverage, or why it is untuned (no database for this target, and the command that tunes it)."""
    line = schedules_line(tuning)
    if line is not None:
        own = (tuning.get("note") or "").removeprefix("untuned: ")
        prepacked = ", weights pre-packed" if tuning.get("layout_rewrite") and tuning.get("covered") else ""
        return line + prepacked + (f"; {own}" if own else "")
    if tuning.get("match") == "none":
        return tuning["note"]
    covered = len(tuning.get("covered") or [])
    total = covered + len(tuning.get("fallback") or [])
    database = tuning.get("tuned_for") or tuning.get("path")
    if covered == 0:  # a database was applied, but it holds none of this build's kernels (another model's)
        return f"untuned: the database for {database} has none of these {total} kernels"
    where = tuning.get("note") or f"tuned for {database}"
    return f"{where}; {covered}/{total} kernels tuned" + (", weights pre-packed" if tuning.get("layout_rewrite") else "")


def number_text(value, fmt: str = "") -> str:
    """A table cell: `value` formatted, or a dash where there is none."""
    return "—" if value is None else format(value, fmt)


def _cells(row: dict) -> list[str]:
    """A summary row as display strings (shared by the console and Markdown tables)."""
    accuracy = "reference" if row["reference"] else {True: "ok", False: "FAIL"}.get(row["ok"], "—")
    speedup = "—" if row["speedup"] is None else f"{row['speedup']:.2f}×"
    return [row["label"], number_text(row["median_ms"], ".3f"), number_text(row["p90_ms"], ".3f"), speedup,
            number_text(row["kernels"], "d"), number_text(row["max_abs_err"], ".2e"), accuracy, row["note"] or ""]


def changed_ops(before: dict[str, int], after: dict[str, int]) -> dict[str, tuple[int, int]]:
    """op -> (count before, count after), for the ops whose count a pass changed, by name."""
    return {op: (before.get(op, 0), after.get(op, 0)) for op in sorted({*before, *after})
            if before.get(op, 0) != after.get(op, 0)}


def _op_changes(record: PassEntry) -> str:
    """The op counts a pass moved, e.g. 'nn.batch_norm 5→0, add 0→5'."""
    moved = [f"{op.removeprefix('relax.')} {was}→{now}"
             for op, (was, now) in changed_ops(record.ops_before, record.ops_after).items()]
    return ", ".join(moved) or "no op-count change"


def _pass_cells(record: PassEntry) -> list[str]:
    before, after = record.ops_before, record.ops_after
    return [record.name, number_text(record.seconds, ".3f"), f"{sum(before.values())} → {sum(after.values())}",
            _op_changes(record)]


def _target_text(result: RunResult) -> str:
    target = result.target
    return target if isinstance(target, str) else json.dumps(target, sort_keys=True)


def _resolved_text(result: RunResult) -> str:
    """'llvm-znver3 (sse4.2, avx, avx2, fma, f16c; host CPU znver3; 2 threads for every runtime)': what the configured
    target resolved to, and the threads TVM's, ONNX Runtime's and IREE's kernels ran on."""
    resolved = result.target_resolved
    if not resolved:
        return "—"
    features = ", ".join(resolved.get("features") or []) or "no vector extensions"
    threads = f"; {result.threads} threads for every runtime" if result.threads else ""
    return f"{resolved['key']} ({features}; host CPU {resolved.get('host_cpu')}{threads})"


def _heading(result: RunResult) -> str:
    target = (result.target_resolved or {}).get("key") or _target_text(result)
    return f"{result.name}: {result.pipeline_text or '(empty pipeline)'} on {target}"


def _cuda_cells(label: str, report: dict) -> list[str]:
    """One build's static CUDA figures: kernels, launches, intermediate bytes, the largest per-kernel figures."""
    kernels = report["per_kernel"].values()

    def most(key: str) -> str:
        return number_text(max((k[key] for k in kernels if k[key] is not None), default=None), "d")

    return [label, str(report["kernels"]), str(report["launches"]), f"{report['intermediate_bytes'] / 1e6:.2f}",
            most("threads_per_block"), most("registers"), most("shared_bytes")]


def cuda_table(result: RunResult) -> Table:
    """The static kernel report of each CUDA build (no GPU needed): fewer launches and MB is fusion's effect."""
    table = Table(title=f"CUDA kernels, static ({next(iter(result.cuda.values()))['arch']})")
    for column in CUDA_COLUMNS:
        table.add_column(column, justify="left" if column == "label" else "right")
    for label, report in result.cuda.items():
        table.add_row(*_cuda_cells(label, report), style="bold" if label == WORKBENCH_LABEL else None)
    return table


def _cuda_markdown(result: RunResult) -> str:
    """report.md's CUDA section: the per-build table, then every workbench kernel."""
    reports = result.cuda
    parts = ["## CUDA kernels (static: from the generated CUDA source and `ptxas -v`, no GPU needed)",
             markdown_table(CUDA_COLUMNS, [_cuda_cells(label, report) for label, report in reports.items()]),
             "*launches / inference: kernel calls one inference makes; intermediate MB: tensors one kernel writes "
             "for another (graph outputs excluded). Sources: `cuda/<label>.cu`, `cuda/<label>.ptx`.*"]
    if WORKBENCH_LABEL in reports:
        parts += ["### workbench kernels", markdown_table(KERNEL_COLUMNS, [
            [name, number_text(k["threads_per_block"], "d"), number_text(k["registers"], "d"), number_text(k["shared_bytes"], "d")]
            for name, k in reports[WORKBENCH_LABEL]["per_kernel"].items()])]
    return "\n\n".join(parts)


def _profile_side(profile: dict | None, rows: int) -> list[list[str]]:
    """One side of the profile table: name, µs, share per kernel, then 'other' and the total; padded to `rows`."""
    if profile is None:
        return [["", "", ""]] * rows
    cells = [[k["name"], f"{k['us']:.1f}", f"{k['share']:.0%}"] for k in profile["kernels"]]
    other = profile["other"]
    if other["kernels"]:
        cells.append([f"other ({other['kernels']})", f"{other['us']:.1f}", f"{other['share']:.0%}"])
    cells += [["", "", ""]] * (rows - 1 - len(cells))
    return cells + [["total", f"{profile['total_us']:.1f}", "100%"]]


def profile_rows(result: RunResult) -> list[list[str]]:
    """The workbench's top kernels beside ort_all's top nodes, row by row (rank, then each side's cells)."""
    sides = result.profile or {}
    ours, theirs = sides.get(WORKBENCH_LABEL), sides.get("ort_all")
    length = max(len(side["kernels"]) + (1 if side["other"]["kernels"] else 0) + 1 for side in (ours, theirs) if side)
    left, right = _profile_side(ours, length), _profile_side(theirs, length)
    return [[str(i + 1) if i < length - 1 else "", *a, *b] for i, (a, b) in enumerate(zip(left, right))]


def profile_table(result: RunResult) -> Table:
    table = Table(title=f"{result.name}: where the time goes", caption=profile_note(result))
    for column in PROFILE_COLUMNS:
        table.add_column(column, justify="right" if column.strip() in ("#", "µs", "share") else "left")
    for row in profile_rows(result):
        table.add_row(*row, style="bold" if row[1] == "total" else None)
    return table


def summary_table(result: RunResult) -> Table:
    """The per-label latency/accuracy table."""
    table = Table(title=_heading(result), caption=SPEEDUP_NOTE)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("label", "accuracy", "note") else "right")
    for row in summary_rows(result):
        table.add_row(*_cells(row), style="bold" if row["label"] == WORKBENCH_LABEL else None)
    return table


def passes_table(result: RunResult) -> Table:
    """Per pass: wall time, total op count before → after, and the op counts that moved."""
    table = Table(title="passes")
    for column in PASS_COLUMNS:
        table.add_column(column, justify="right" if column == "seconds" else "left")
    for record in result.passes:
        table.add_row(*_pass_cells(record))
    return table


def console_table(result: RunResult) -> Table:
    """What `workbench run` prints: the summary table and, below it, the passes table (one renderable)."""
    grid = Table.grid(padding=(1, 0))
    grid.add_column()
    grid.add_row(summary_table(result))
    grid.add_row(passes_table(result) if result.passes else "passes: (empty pipeline)")
    if result.cuda:
        grid.add_row(cuda_table(result))
    if result.profile:
        grid.add_row(profile_table(result))
    return grid


def markdown_table(header: tuple[str, ...], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")  # one line per row; a '|' would split the cell
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(text) for text in row) + " |" for row in rows]
    return "\n".join(lines)


def _chart_footnote(rows: list[dict]) -> str:
    """'not measured: label (note); ...' for the labels the chart leaves out, wrapped to the figure width."""
    parts = [f"{row['label']} ({row['note']})" if row["note"] else row["label"] for row in rows]
    return "\n".join(textwrap.wrap("not measured: " + "; ".join(parts), 120, max_lines=3, placeholder=" …"))


def _measured(row: dict) -> bool:
    return row["median_ms"] is not None and row["median_ms"] > 0


def latency_figure(result: RunResult) -> Figure:
    """Horizontal bars of median latency per label (p90 as whisker), the workbench bar highlighted, log
    x-scale past a 20x spread; unmeasured labels are left out and named, with their notes, in a footnote."""
    rows = summary_rows(result)
    shown = [row for row in rows if _measured(row)]
    missing = [row for row in rows if not _measured(row)]
    medians = [row["median_ms"] for row in shown]
    log_scale = bool(medians) and max(medians) / min(medians) > 20
    fig = Figure(figsize=(7.5, 0.55 * max(len(shown), 1) + 1.8))
    ax = fig.subplots()
    whiskers = [[0] * len(shown), [max((row["p90_ms"] or row["median_ms"]) - row["median_ms"], 0) for row in shown]]
    colors = ["tab:orange" if row["label"] == WORKBENCH_LABEL else "tab:blue" for row in shown]
    ax.barh([row["label"] for row in shown], medians, xerr=whiskers, color=colors, capsize=3)
    ax.invert_yaxis()
    if log_scale:
        ax.set_xscale("log")
    for y, row in enumerate(shown):
        ax.text(max(row["p90_ms"] or 0, row["median_ms"]), y, f"  {row['median_ms']:.3g} ms", va="center", fontsize=8)
    if shown:
        ax.set_xlim(right=ax.get_xlim()[1] * (3 if log_scale else 1.15))  # room for the bar labels
    else:
        ax.text(0.5, 0.5, "no label was measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("median latency, ms (whisker: p90)" + (" — log scale" if log_scale else ""))
    ax.set_title(_heading(result), fontsize=10)
    footnote = _chart_footnote(missing) if missing else ""
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, va="bottom")
    footnote_inches = (footnote.count("\n") + 1) * 0.13 + 0.05 if footnote else 0  # 7 pt lines
    fig.tight_layout(rect=(0, footnote_inches / fig.get_figheight(), 1, 1))
    return fig


def save_png(figure: Figure, path: Path, dpi: int = 120) -> Path:
    """`figure` as a PNG at `path`, rendered to memory first and written atomically (a kill never leaves half a
    picture); every chart the workbench writes goes through here. Returns the path."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return atomic_write_bytes(path, buffer.getvalue())


def latency_chart(result: RunResult, path: Path) -> Path:
    """`latency_figure` saved as a PNG; return the path."""
    return save_png(latency_figure(result), path)


def _tuning_lines(result: RunResult) -> list[str]:
    """The header's tuning lines: where the schedules came from; how long tuning ran first and why it stopped."""
    lines = [line] if result.tuning and (line := schedules_line(result.tuning)) else []
    timing = result.tuning_time
    if timing:
        budget = timing.get("minutes_budget")
        used = f"{timing.get('minutes_used', 0):.2f}" + (f" of {budget:g}" if budget else "")
        lines.append(f"tuned first: {used} min ({timing.get('reason')})")
    return lines


def write_report(result: RunResult, out_dir: Path) -> Path:
    """Write report.md and latency.png (linked relatively) into `out_dir`; return the report's path."""
    out_dir = Path(out_dir)
    chart = latency_chart(result, out_dir / "latency.png")
    model, passes = result.model, result.passes
    text = "\n\n".join([
        f"# {result.name}",
        f"- model: `{model.get('source')}`, inputs `{json.dumps(model.get('inputs'))}`\n"
        f"- target: `{_target_text(result)}`, built for {_resolved_text(result)}\n"
        f"- pipeline: `{result.pipeline_text or '(empty)'}`\n"
        f"- accuracy reference: `{result.reference}`"
        + "".join(f"\n- {line}" for line in _tuning_lines(result))
        + (f"\n- **run failed**: {result.error}" if result.status == "failed" else ""),
        "## Latency and accuracy",
        markdown_table(COLUMNS, [_cells(row) for row in summary_rows(result)]),
        f"*{SPEEDUP_NOTE}.*",
        f"![latency]({chart.name})",
        "## Passes",
        markdown_table(PASS_COLUMNS, [_pass_cells(record) for record in passes]) if passes else "(empty pipeline)",
        *([_cuda_markdown(result)] if result.cuda else []),
        *(["## Where the time goes", markdown_table(PROFILE_COLUMNS, profile_rows(result)), f"*{profile_note(result)}.*"]
          if result.profile else []),
        "## Provenance",
        "\n".join(f"- {key}: `{value}`" for key, value in result.provenance.items()),
    ])
    return atomic_write_text(out_dir / "report.md", text + "\n")
