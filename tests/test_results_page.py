"""A benchmark's docs/results page names the machine it ran on and holds the table as measured."""

import csv

import pytest

from workbench.record.parity import ParityPoint, geomean_by_checkpoint, minutes_to_parity, parity_figure, write_parity
from workbench.record.results_page import Machine, cpu_name, write_results_page


def test_a_page_is_headed_by_the_cpu_date_threads_and_versions(tmp_path):
    machine = Machine(target="llvm-znver2", threads=2)
    page = write_results_page(tmp_path, "cpu_znver2", "Tuned workbench vs ONNX Runtime", machine,
                              "3 interleaved rounds of 20 runs", ("config", "ratio"), [["quickstart", "0.91×"]],
                              notes="quickstart: the committed database")
    text = page.read_text()
    assert page.name == "cpu_znver2.md" and text.startswith(f"# Tuned workbench vs ONNX Runtime on {cpu_name()}, ")
    assert "TVM target `llvm-znver2`), 2 threads for every runtime" in text and "onnxruntime " in text
    assert "| config | ratio |\n|---|---|\n| quickstart | 0.91× |" in text and text.endswith("committed database\n")


def test_a_printed_rich_table_becomes_the_pages_rows():
    from rich.table import Table

    from workbench.record.results_page import rich_rows

    table = Table(title="levers")
    for column in ("variant", "median ms"):
        table.add_column(column)
    table.add_row("quickstart", "0.615")
    table.add_row("untuned", "0.398")
    assert rich_rows(table) == (("variant", "median ms"), [["quickstart", "0.615"], ["untuned", "0.398"]])


def test_parity_page_reads_time_to_parity_and_geomeans(tmp_path):
    """record/parity.py: minutes to parity per model (first checkpoint at ratio >= 1), geomean per checkpoint, and
    the page, CSV and chart written and read back."""
    points = [ParityPoint("a", 0, 0, 0, 2.0, 1.0), ParityPoint("a", 1, 1.04, 40, 1.0, 1.0),
              ParityPoint("a", 2, 2.1, 80, 0.5, 1.0), ParityPoint("b", 0, 0, 0, 4.0, 1.0),
              ParityPoint("b", 1, 1.2, 30, 2.0, 1.0), ParityPoint("c", 0, 0, 0, None, None, "load: no such file")]
    assert minutes_to_parity(points, "a") == 1.04 and minutes_to_parity(points, "b") is None
    assert geomean_by_checkpoint(points) == pytest.approx({0: (0.5 * 0.25) ** 0.5, 1: (1 * 0.5) ** 0.5, 2: 2.0})
    written = write_parity(points, Machine("llvm-test", 2, cpu="Test CPU"), "ort_all", "- protocol", tmp_path, "p")
    page, table, chart = written
    text = page.read_text()
    assert "- a: at parity after 1.04 min" in text and "- b: not at parity within the budget" in text
    assert "| c | 0 | 0 | 0 | — | — | — | load: no such file |" in text
    rows = list(csv.DictReader(table.open()))
    assert [r["ratio"] for r in rows] == ["0.5", "1.0", "2.0", "0.25", "0.5", ""]
    assert chart.read_bytes()[:4] == b"\x89PNG"
    lines = {line.get_label(): line for line in parity_figure(points, "ort_all", "t").axes[0].get_lines()}
    assert set(lines) >= {"a", "b", "geomean (2 models)"} and "c" not in lines  # c has no ratio to draw
    assert list(lines["geomean (2 models)"].get_ydata()) == pytest.approx(list(geomean_by_checkpoint(points).values()))
    assert lines["a"].get_color() != lines["b"].get_color()
