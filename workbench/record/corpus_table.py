"""The corpus benchmark's results as files: a Markdown table under a heading that says where, when and how it ran,
the same rows as CSV (for scripts and spreadsheets), and a PNG of the speed ratios per model.

Every file is built from the same `Column` list, so the three never disagree, and a model that failed is a row
like any other, with its reason, never a gap.
"""

from __future__ import annotations

import csv
import io
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from matplotlib.figure import Figure  # a bare Figure renders with Agg, with no pyplot state or GUI backend

from workbench.atomic import atomic_write_text
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.measure.contention import Contention
from workbench.models.corpus import CorpusEntry
from workbench.record.charts import save_png
from workbench.record.markdown import markdown_table
from workbench.record.results_page import contention_line, load_line
from workbench.record.rows import number_text


@dataclass
class Row:
    """What one model's run produced: medians by label, the workbench's accuracy, and why anything is missing."""

    name: str
    rtol: float  # the tolerance the workbench's outputs were checked with
    atol: float
    medians_ms: dict[str, float] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)  # baseline label -> why it was not measured
    accuracy: dict | None = None  # workbench vs ort_none (models.accuracy.compare)
    kernels: int | None = None
    failure: str | None = None  # "stage: reason" where the workbench's path stopped
    mismatch: str | None = None  # why the workbench's outputs do not count as ONNX Runtime's
    kernel_shares: list[tuple[str, float]] = field(default_factory=list)  # the workbench's kernels, largest first

    @property
    def status(self) -> Literal["ok", "mismatch", "failed"]:
        return "failed" if self.failure else "mismatch" if self.mismatch else "ok"

    @property
    def reason(self) -> str | None:
        return self.failure or self.mismatch

    def ratio(self, label: str) -> float | None:
        """label median / workbench median (> 1: the workbench is faster); None where either was not timed."""
        ours, theirs = self.medians_ms.get(WORKBENCH_LABEL), self.medians_ms.get(label)
        return theirs / ours if ours and theirs else None


@dataclass(frozen=True)
class Setting:
    """Where and how the rows were measured: the Markdown's heading and the chart's title."""

    date: str
    cpu: str  # the CPU's model name
    target: str  # the resolved TVM target, e.g. llvm-znver3
    threads: int
    pipeline: str  # as given (e.g. `default`)
    passes: str  # the passes it expanded to
    baselines: tuple[str, ...]
    repeat: int
    rounds: int
    versions: dict[str, str] = field(default_factory=dict)
    load: int = 0  # processes spinning beside (`--load`)
    contention: Contention | None = None  # how whole the cores were at the start and the end
    accuracy_rule: str = "numpy's allclose rule with each model's rtol/atol (workbench/models/corpus.yaml)"


@dataclass(frozen=True)
class Column:
    """One column: its CSV name, its Markdown title and how a row's value is read and shown."""

    key: str
    title: str
    value: Callable[[Row], object]
    fmt: str = ""

    def text(self, row: Row) -> str:
        return number_text(self.value(row), self.fmt)


def _reason(row: Row) -> str | None:
    """The row's failure or mismatch, then why any baseline was not measured."""
    parts = [row.reason] if row.reason else []
    parts += [f"{label} not measured: {why}" for label, why in row.unavailable.items()]
    return "; ".join(parts) or None


def _error(key: str) -> Callable[[Row], object]:
    return lambda row: row.accuracy.get(key) if row.accuracy else None


def columns(baselines: tuple[str, ...]) -> list[Column]:
    return [
        Column("model", "model", lambda row: row.name),
        Column("status", "status", lambda row: row.status),
        Column("workbench_ms", "workbench ms", lambda row: row.medians_ms.get(WORKBENCH_LABEL), ".3f"),
        *(Column(f"{label}_ms", f"{label} ms", lambda row, label=label: row.medians_ms.get(label), ".3f")
          for label in baselines),
        *(Column(f"{label}_over_workbench", f"{label}/workbench", lambda row, label=label: row.ratio(label), ".2f")
          for label in baselines),
        Column("kernels", "kernels", lambda row: row.kernels, "d"),
        Column("max_abs_err", "max abs err", _error("max_abs_err"), ".1e"),
        Column("max_rel_err", "max rel err", _error("max_rel_err"), ".1e"),
        Column("cosine", "cosine", _error("cosine"), ".6f"),
        Column("top1_agreement", "top-1", _error("top1_agreement"), ".2f"),
        Column("rtol", "rtol", lambda row: row.rtol, "g"),
        Column("atol", "atol", lambda row: row.atol, "g"),
        Column("reason", "reason", _reason),
    ]


def csv_text(rows: list[Row], setting: Setting) -> str:
    """The rows as CSV: plain numbers (full precision), empty where not measured."""
    cols = columns(setting.baselines)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([col.key for col in cols])
    writer.writerows([["" if (value := col.value(row)) is None else value for col in cols] for row in rows])
    return buffer.getvalue()


def _heading(setting: Setting) -> str:
    return f"Real-model corpus on {setting.cpu}, {setting.date}"


def ratio_summary(rows: list[Row], baselines: tuple[str, ...]) -> str:
    """Per baseline: the geometric mean of its ratios over the models both ran, and the model the workbench trails
    most (the figures the goals are stated in)."""
    parts = []
    for label in baselines:
        ratios = {row.name: ratio for row in rows if (ratio := row.ratio(label))}
        if ratios:
            worst = min(ratios, key=ratios.get)
            geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
            parts.append(f"{label}/workbench geomean {geomean:.2f}× over {len(ratios)} models, lowest "
                         f"{ratios[worst]:.2f}× ({worst})")
    return "; ".join(parts) + "." if parts else ""


def _setting_lines(setting: Setting) -> str:
    """The page's lines on where and how it was measured (CPU, pipeline, peers, protocol, accuracy, versions)."""
    versions = ", ".join(f"{name} {version}" for name, version in setting.versions.items())
    return (
        f"- CPU: {setting.cpu} (TVM target `{setting.target}`), {setting.threads} threads for every runtime\n"
        f"{contention_line(setting.contention)}"
        f"- workbench: pipeline `{setting.pipeline}` (`{setting.passes}`), untuned (default schedules)\n"
        f"- compared with: {', '.join(setting.baselines) or 'nothing'}; ratios are their median / the workbench "
        f"median (> 1: the workbench is faster)\n"
        f"- timing: median of {setting.rounds} interleaved rounds of {setting.repeat} runs per label, in one process\n"
        f"{load_line(setting.load)}"
        f"- accuracy: the workbench vs ONNX Runtime without graph optimizations (ort_none), {setting.accuracy_rule}; "
        f"inputs are seeded random values\n"
        f"- versions: {versions}")


def markdown_text(rows: list[Row], entries: dict[str, CorpusEntry], setting: Setting, chart: str) -> str:
    """The report: heading (date, CPU, threads, versions, protocol), the table, the chart, what each model is."""
    cols = columns(setting.baselines)
    counts = {status: sum(row.status == status for row in rows) for status in ("ok", "mismatch", "failed")}
    lines = [
        f"# {_heading(setting)}",
        _setting_lines(setting),
        f"{len(rows)} models: {counts['ok']} ok, {counts['mismatch']} outside their tolerance, "
        f"{counts['failed']} failed. {ratio_summary(rows, setting.baselines)}",
        markdown_table(tuple(col.title for col in cols), [[col.text(row) for col in cols] for row in rows]),
        f"![ratios]({chart})",
        "## Models",
        "\n".join(f"- **{row.name}** (`{entries[row.name].source}`): {entries[row.name].exercises}"
                  for row in rows if row.name in entries),
    ]
    return "\n\n".join(lines) + "\n"


def write_not_measured(setting: Setting, why: str, out_dir: Path, stem: str) -> Path:
    """`<stem>.md` for a setting this CPU cannot run (a bf16 pipeline without AVX512_BF16): the setting and why no
    model was measured, so the results folder says so instead of holding no page (or an older CPU's)."""
    text = f"# {_heading(setting)}\n\n{_setting_lines(setting)}\n\n**Not measured on this CPU**: {why}\n"
    return atomic_write_text(out_dir / f"{stem}.md", text)


def ratio_figure(rows: list[Row], setting: Setting) -> Figure:
    """Horizontal bars per model, one per baseline: its median / the workbench median on a log scale around 1;
    a model without a ratio says why (failed, or no baseline measured) in place of its bars."""
    fig = Figure(figsize=(9, 0.45 * max(len(rows), 1) * max(len(setting.baselines), 1) ** 0.5 + 1.8))
    ax = fig.subplots()
    height = 0.8 / max(len(setting.baselines), 1)
    for i, label in enumerate(setting.baselines):
        measured = [(y - 0.4 + height * (i + 0.5), row.ratio(label)) for y, row in enumerate(rows) if row.ratio(label)]
        ax.barh([y for y, _ in measured], [ratio - 1 for _, ratio in measured], height,
                left=1, label=f"{label} / workbench")  # from 1 (as fast) to the ratio, either side
        for y, ratio in measured:
            ax.text(ratio, y, f" {ratio:.2f}× ", va="center", fontsize=7,
                    ha="left" if ratio >= 1 else "right")
    for y, row in enumerate(rows):
        if not any(row.ratio(label) for label in setting.baselines):
            note = row.failure.split(":", 1)[0] + " failed" if row.failure else "no baseline measured"
            ax.text(1, y, f" {note}", va="center", fontsize=8, color="tab:red")
    ax.set_xscale("log")
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [row.name + (" (mismatch)" if row.mismatch else "") for row in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("baseline median / workbench median — log scale (> 1: the workbench is faster)")
    ax.set_title("\n".join(textwrap.wrap(f"{_heading(setting)}; pipeline {setting.pipeline}, untuned, "
                                         f"{setting.threads} threads", 90)), fontsize=10)
    ax.margins(x=0.15)  # room for the ratio labels at both ends
    if setting.baselines:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def write(rows: list[Row], entries: dict[str, CorpusEntry], setting: Setting, out_dir: Path, stem: str) -> list[Path]:
    """Write `<stem>.md`, `<stem>.csv` and `<stem>.png` into `out_dir` (atomically each); return their paths."""
    chart = save_png(ratio_figure(rows, setting), out_dir / f"{stem}.png")
    table = atomic_write_text(out_dir / f"{stem}.csv", csv_text(rows, setting))
    report = atomic_write_text(out_dir / f"{stem}.md", markdown_text(rows, entries, setting, chart.name))
    return [report, table, chart]
