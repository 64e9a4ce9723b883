"""The report: speedups computed from the numbers, a real PNG chart, unmeasured labels handled."""

import matplotlib.image
from rich.console import Console

from test_results import sample_result
from workbench.report import console_table, summary_rows, write_report


def test_summary_rows_compute_speedups_and_keep_notes():
    rows = {row["label"]: row for row in summary_rows(sample_result(workbench_ms=2.0))}
    assert list(rows)[0] == "workbench" and rows["workbench"]["speedup"] == 1.0
    assert rows["ort_all"]["speedup"] == 0.5 and rows["tvm_default"]["speedup"] is None
    assert rows["tvm_default"]["note"] == "not available: x" and rows["workbench"]["ok"] is True


def test_write_report_markdown_and_png(tmp_path):
    report = write_report(sample_result(workbench_ms=4.0), tmp_path)
    text = report.read_text()
    assert "| ort_all | 1.000 | 1.100 | 0.25× | — |" in text
    assert "| tvm_default | — | — | — |" in text and "not available: x" in text
    assert "![latency](latency.png)" in text and "| fuse | 0.100 | 3 → 1 | add 3→0, call_tir 0→1 |" in text
    png = (tmp_path / "latency.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(tmp_path / "latency.png")
    assert image.shape[0] > 100 and image.shape[1] > 300


def test_console_table_renders_speedups():
    console = Console(record=True, width=160)
    console.print(console_table(sample_result(workbench_ms=2.0)))
    text = console.export_text()
    assert "0.50×" in text and "1.00×" in text and "not available: x" in text
