"""A benchmark's docs/results page names the machine it ran on and holds the table as measured."""

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
