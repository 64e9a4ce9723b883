"""The run report: report.md and latency.png written into a run folder (`write_report`).

The parts have a module each: the rows every form shows (record/rows.py), the console tables (record/tables.py),
the Markdown (record/markdown.py), the chart (record/charts.py) and the wording of where the schedules came from
(record/tuning_notes.py). This module composes them.
"""

from __future__ import annotations

from pathlib import Path

from workbench.atomic import atomic_write_text
from workbench.record.charts import latency_chart
from workbench.record.markdown import report_markdown
from workbench.record.result import RunResult


def write_report(result: RunResult, out_dir: Path) -> Path:
    """Write report.md and latency.png (linked relatively) into `out_dir`; return the report's path."""
    out_dir = Path(out_dir)
    chart = latency_chart(result, out_dir / "latency.png")
    return atomic_write_text(out_dir / "report.md", report_markdown(result, chart.name))
