"""The run report's chart (latency.png: median latency per label, p90 as whisker) and `save_png`, the one PNG
writer of every chart the workbench draws (the sweep report's, the corpus and parity pages', `workbench compare`'s).
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

from matplotlib.figure import Figure  # a bare Figure renders with Agg, with no pyplot state or GUI backend

from workbench.atomic import atomic_write_bytes
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.record.result import RunResult
from workbench.record.rows import heading, summary_rows


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
    ax.set_title(heading(result), fontsize=10)
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
