"""The run report: one summary row per label, shown as a rich table, as Markdown, and as a bar chart.

Both tables are built from `summary_rows`, so the console and report.md always agree.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.table import Table  # noqa: E402

from workbench.atomic import atomic_write_bytes, atomic_write_text  # noqa: E402

WORKBENCH = "workbench"
COLUMNS = ("label", "median ms", "p90 ms", "workbench speedup", "kernels", "max abs err", "accuracy", "note")


def summary_rows(result: dict) -> list[dict]:
    """One row per label, workbench first: latency, speedup of the workbench vs that label, accuracy."""
    measurements = result["measurements"]
    ours = (measurements.get(WORKBENCH) or {}).get("median_ms")
    rows = []
    for label in sorted(measurements, key=lambda name: name != WORKBENCH):
        figures, accuracy = measurements[label], result.get("accuracy", {}).get(label)
        median = figures.get("median_ms")
        rows.append({
            "label": label, "median_ms": median, "p90_ms": figures.get("p90_ms"),
            "speedup": median / ours if median and ours else None,
            "kernels": result.get("kernels", {}).get(label),
            "max_abs_err": accuracy.get("max_abs_err") if accuracy else None,
            "ok": accuracy.get("ok") if accuracy else None,
            "reference": label == result.get("reference"),
            "note": figures.get("note") or (accuracy or {}).get("note"),
        })
    return rows


def _cells(row: dict) -> list[str]:
    """A summary row as display strings (shared by the console and Markdown tables)."""
    def number(value, fmt):
        return "—" if value is None else format(value, fmt)
    accuracy = "reference" if row["reference"] else {True: "ok", False: "FAIL", None: "—"}[row["ok"]]
    return [row["label"], number(row["median_ms"], ".3f"), number(row["p90_ms"], ".3f"),
            "—" if row["speedup"] is None else f"{row['speedup']:.2f}×", number(row["kernels"], "d"),
            number(row["max_abs_err"], ".2e"), accuracy, row["note"] or ""]


def _op_changes(record: dict) -> str:
    before, after = record.get("ops_before", {}), record.get("ops_after", {})
    moved = [f"{op.removeprefix('relax.')} {before.get(op, 0)}→{after.get(op, 0)}"
             for op in sorted(set(before) | set(after)) if before.get(op, 0) != after.get(op, 0)]
    return ", ".join(moved) or "no op-count change"


def _pass_cells(record: dict) -> list[str]:
    total = f"{sum(record.get('ops_before', {}).values())} → {sum(record.get('ops_after', {}).values())}"
    return [record["name"], f"{record.get('seconds', 0):.3f}", total, _op_changes(record)]


PASS_COLUMNS = ("pass", "seconds", "ops before → after", "changes")


def console_table(result: dict) -> Table:
    table = Table(title=f"{result['name']}: {result.get('pipeline_text') or '(empty pipeline)'} on {result['target']}",
                  caption="workbench speedup = that label's median / workbench median (> 1: workbench is faster)")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("label", "accuracy", "note") else "right")
    for row in summary_rows(result):
        table.add_row(*_cells(row), style="bold" if row["label"] == WORKBENCH else None)
    return table


def passes_table(result: dict) -> Table:
    table = Table(title="passes")
    for column in PASS_COLUMNS:
        table.add_column(column)
    for record in result.get("passes", []):
        table.add_row(*_pass_cells(record))
    return table


def _markdown_table(header: tuple[str, ...], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def latency_chart(result: dict, path: Path) -> Path:
    """Horizontal bars of median latency per label (p90 as whisker); unmeasured labels listed as a footnote."""
    rows = [row for row in summary_rows(result) if row["median_ms"]]
    missing = [row["label"] for row in summary_rows(result) if not row["median_ms"]]
    fig, ax = plt.subplots(figsize=(7, 0.55 * len(rows) + 1.6))
    medians = [row["median_ms"] for row in rows]
    whiskers = [[0] * len(rows), [max(row["p90_ms"] - row["median_ms"], 0) for row in rows]]
    colors = ["tab:orange" if row["label"] == WORKBENCH else "tab:blue" for row in rows]
    ax.barh([row["label"] for row in rows], medians, xerr=whiskers, color=colors, capsize=3)
    ax.invert_yaxis()
    if medians and max(medians) / min(medians) > 20:
        ax.set_xscale("log")
    for y, row in enumerate(rows):
        ax.text(max(row["p90_ms"], row["median_ms"]), y, f"  {row['median_ms']:.3g} ms", va="center", fontsize=8)
    ax.set_xlim(right=ax.get_xlim()[1] * (3 if medians and max(medians) / min(medians) > 20 else 1.15))
    ax.set_xlabel("median latency, ms (whisker: p90)" + (" — log scale" if ax.get_xscale() == "log" else ""))
    ax.set_title(f"{result['name']}: {result.get('pipeline_text') or '(empty pipeline)'}", fontsize=10)
    if missing:
        fig.text(0.01, 0.01, "not measured: " + ", ".join(missing), fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def write_report(result: dict, out_dir: Path) -> Path:
    """Write report.md and latency.png into `out_dir`; return the report's path."""
    chart = latency_chart(result, out_dir / "latency.png")
    provenance = result.get("provenance", {})
    text = "\n\n".join([
        f"# {result['name']}",
        f"- model: `{result['model']['source']}` inputs {result['model'].get('inputs')}\n"
        f"- target: `{result['target']}`\n- pipeline: `{result.get('pipeline_text') or '(empty)'}`\n"
        f"- accuracy reference: `{result.get('reference')}`",
        "## Latency and accuracy",
        _markdown_table(COLUMNS, [_cells(row) for row in summary_rows(result)]),
        "*workbench speedup* = that label's median / the workbench median (> 1: the workbench build is faster).",
        f"![latency]({chart.name})",
        "## Passes",
        _markdown_table(PASS_COLUMNS, [_pass_cells(r) for r in result.get("passes", [])]) if result.get("passes")
        else "(empty pipeline)",
        "## Provenance",
        "\n".join(f"- {key}: `{value}`" for key, value in provenance.items()),
    ])
    return atomic_write_text(out_dir / "report.md", text + "\n")
