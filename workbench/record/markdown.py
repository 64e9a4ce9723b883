"""The run report as Markdown (report.md): the run's settings, the rows of record/rows.py as tables, the chart
linked; and `markdown_table`, the one Markdown table form of every page the workbench writes (the sweep report,
the corpus, parity and results pages).
"""

from __future__ import annotations

import json

from workbench.config.baselines import WORKBENCH_LABEL
from workbench.record.result import RunResult
from workbench.record.rows import (
    COLUMNS,
    CUDA_COLUMNS,
    KERNEL_COLUMNS,
    PASS_COLUMNS,
    PROFILE_COLUMNS,
    SPEEDUP_NOTE,
    cuda_cells,
    kernel_cells,
    pass_cells,
    profile_note,
    profile_rows,
    resolved_text,
    summary_cells,
    summary_rows,
    target_text,
)
from workbench.record.tuning_notes import tuning_lines


def markdown_table(header: tuple[str, ...], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")  # one line per row; a '|' would split the cell
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(text) for text in row) + " |" for row in rows]
    return "\n".join(lines)


def _cuda_markdown(result: RunResult) -> str:
    """report.md's CUDA section: the per-build table, then every workbench kernel."""
    reports = result.cuda
    parts = ["## CUDA kernels (static: from the generated CUDA source and `ptxas -v`, no GPU needed)",
             markdown_table(CUDA_COLUMNS, [cuda_cells(label, report) for label, report in reports.items()]),
             "*launches / inference: kernel calls one inference makes; intermediate MB: tensors one kernel writes "
             "for another (graph outputs excluded). Sources: `cuda/<label>.cu`, `cuda/<label>.ptx`.*"]
    if WORKBENCH_LABEL in reports:
        parts += ["### workbench kernels", markdown_table(KERNEL_COLUMNS, kernel_cells(reports[WORKBENCH_LABEL]))]
    return "\n\n".join(parts)


def _header(result: RunResult) -> str:
    """The run's settings as a list: model and inputs, target, pipeline, reference, tuning, a failure."""
    model = result.model
    return (f"- model: `{model.get('source')}`, inputs `{json.dumps(model.get('inputs'))}`\n"
            f"- target: `{target_text(result)}`, built for {resolved_text(result)}\n"
            f"- pipeline: `{result.pipeline_text or '(empty)'}`\n"
            f"- accuracy reference: `{result.reference}`"
            + "".join(f"\n- {line}" for line in tuning_lines(result))
            + (f"\n- **run failed**: {result.error}" if result.status == "failed" else ""))


def report_markdown(result: RunResult, chart: str) -> str:
    """report.md's text; `chart` is the latency chart's file name, linked relatively."""
    passes = result.passes
    return "\n\n".join([
        f"# {result.name}",
        _header(result),
        "## Latency and accuracy",
        markdown_table(COLUMNS, [summary_cells(row) for row in summary_rows(result)]),
        f"*{SPEEDUP_NOTE}.*",
        f"![latency]({chart})",
        "## Passes",
        markdown_table(PASS_COLUMNS, [pass_cells(record) for record in passes]) if passes else "(empty pipeline)",
        *([_cuda_markdown(result)] if result.cuda else []),
        *(["## Where the time goes", markdown_table(PROFILE_COLUMNS, profile_rows(result)), f"*{profile_note(result)}.*"]
          if result.profile else []),
        "## Provenance",
        "\n".join(f"- {key}: `{value}`" for key, value in result.provenance.items()),
    ]) + "\n"
