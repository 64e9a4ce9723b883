"""The report: speedups computed from the numbers, a real PNG chart, unmeasured labels handled."""

import matplotlib.image
from rich.console import Console
from test_results import sample_result

from workbench.record.charts import latency_chart, latency_figure
from workbench.record.report import write_report
from workbench.record.result import RunResult
from workbench.record.rows import summary_rows
from workbench.record.tables import console_table


def typed(result: dict) -> RunResult:
    """A result.json form as the run report reads it."""
    return RunResult.from_json(result, "test")


def _render(table) -> str:
    console = Console(record=True, width=160)
    console.print(table)
    return console.export_text()


def test_summary_rows_compute_speedups_and_keep_notes():
    result = sample_result(workbench_ms=2.0)
    result["measurements"] = {"ort_all": result["measurements"]["ort_all"], **result["measurements"]}  # workbench not first
    result["measurements"]["ort_none"] = {"median_ms": 7.0, "p90_ms": 8.0, "repeats": 10, "note": None}
    rows = {row["label"]: row for row in summary_rows(typed(result))}
    assert list(rows) == ["workbench", "ort_all", "tvm_default", "ort_none"]  # workbench, then baselines in order
    assert rows["workbench"]["speedup"] == 1.0 and rows["ort_all"]["speedup"] == 0.5
    assert rows["ort_none"]["speedup"] == 3.5 and rows["tvm_default"]["speedup"] is None
    assert rows["tvm_default"]["note"] == "not available: x" and rows["workbench"]["ok"] is True
    assert rows["workbench"]["kernels"] == 4 and rows["workbench"]["max_abs_err"] == 1e-6
    assert rows["ort_none"]["reference"] and rows["ort_all"]["ok"] is None


def test_write_report_markdown_and_png(tmp_path):
    result = sample_result(workbench_ms=4.0)
    result["accuracy"]["ort_all"] = {"max_abs_err": 0.5, "max_rel_err": 0.1, "ok": False}
    report = write_report(typed(result), tmp_path / "run")
    assert report == tmp_path / "run" / "report.md"
    text = report.read_text()
    assert "| workbench | 4.000 | 2.500 | 1.00× | 4 | 1.00e-06 | ok |" in text
    assert "| ort_all | 1.000 | 1.100 | 0.25× | — | 5.00e-01 | FAIL |" in text  # 1.0 / 4.0
    assert "| tvm_default | — | — | — | — | — | — | not available: x |" in text
    assert "![latency](latency.png)" in text and "| fuse | 0.100 | 3 → 1 | add 3→0, call_tir 0→1 |" in text
    assert "zoo:convnet_small" in text and "fold_constant,fuse" in text and "config_hash: `abc`" in text
    png = (tmp_path / "run" / "latency.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(tmp_path / "run" / "latency.png")
    assert image.shape[0] > 100 and image.shape[1] > 300 and image.std() > 0.05  # not a blank canvas
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["latency.png", "report.md"]  # no temp files


def test_chart_omits_unmeasured_labels_and_footnotes_their_notes(tmp_path):
    figure = latency_figure(typed(sample_result(workbench_ms=2.0)))
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["workbench", "ort_all"]
    assert ax.patches[0].get_facecolor() != ax.patches[1].get_facecolor()  # the workbench bar stands out
    assert any("tvm_default (not available: x)" in t.get_text() for t in figure.texts)
    assert ax.get_xscale() == "linear" and any("2 ms" in t.get_text() for t in ax.texts)
    assert latency_chart(typed(sample_result()), tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_chart_uses_a_log_scale_past_a_20x_spread():
    result = sample_result(workbench_ms=50.0)  # ort_all is 1.0 ms: a 50x spread
    assert latency_figure(typed(result)).axes[0].get_xscale() == "log"


def test_report_with_only_the_workbench_measured_and_a_dict_target(tmp_path):
    result = sample_result()
    result["target"] = {"kind": "cuda", "arch": "sm_90"}
    result["passes"], result["pipeline_text"] = [], ""
    result["measurements"] = {"workbench": result["measurements"]["workbench"]}
    text = write_report(typed(result), tmp_path).read_text()
    assert '"arch": "sm_90"' in text and "(empty pipeline)" in text
    assert matplotlib.image.imread(tmp_path / "latency.png").shape[0] > 100


def test_console_table_renders_speedups_and_passes():
    text = _render(console_table(typed(sample_result(workbench_ms=2.0))))
    assert "workbench speedup vs this" in text and "0.50×" in text and "1.00×" in text
    assert "not available: x" in text and "FAIL" not in text
    assert "fuse" in text and "3 → 1" in text and "add 3→0, call_tir 0→1" in text


def test_a_database_that_covers_none_of_the_kernels_reads_untuned():
    """A database applied to another model's build schedules nothing: the note counts 0 from it and every kernel
    untuned, with why that database (another target's) was chosen."""
    from workbench.record.tuning_notes import tuning_note

    note = "tuned for llvm-znver2 (closest to llvm-znver3, which has no database; tune it: workbench tune q.yaml)"
    applied = {"root": "schedules/q", "match": "closest", "tuned_for": "llvm-znver2", "path": "schedules/q/llvm-znver2",
               "note": note, "layout_rewrite": False}
    source = {"name": "q", "match": "closest", "path": applied["path"], "tuned_for": "llvm-znver2"}
    assert tuning_note({**applied, "covered": [], "fallback": ["a", "b"], "sources": [{**source, "kernels": []}]}) \
        == f"schedules: 0 from q (closest), 2 untuned; {note}"
    assert tuning_note({**applied, "covered": ["a"], "fallback": ["b"], "sources": [{**source, "kernels": ["a"]}]}) \
        == f"schedules: 1 from q (closest), 1 untuned; {note}"
