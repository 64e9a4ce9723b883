"""A study's results page for docs/results/: its header (CPU, date, models, cells, how long), the report's section
*What each pass buys, per model*, and the heatmap and cells beside it. A `## Findings` section written by hand
into the page is kept when the page is written again. Usage:

    python scripts/study_page.py runs/sweeps/corpus_ablation docs/results/passes_<cpu>.md
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from datetime import datetime
from pathlib import Path

from workbench.compile.targets import host_cpu
from workbench.record.results_page import cpu_name
from workbench.sweep.report import ranked_rows, write_sweep_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the study's sweep output folder")
    parser.add_argument("page", type=Path, help="the Markdown page to write (its .png and .csv beside it)")
    parser.add_argument("--wall-minutes", type=float, help="how long the study ran (`workbench sweep` prints it)")
    args = parser.parse_args()
    write_sweep_report(args.folder)  # study.png, study.csv and report.md, from the store as it is
    rows, failed, meta = ranked_rows(args.folder)
    with sqlite3.connect(args.folder / "results.sqlite") as db:
        cells, done, models = db.execute(
            "select count(*), sum(status = 'done'), count(distinct grid_json) from sweep_variants").fetchone()
    report = (args.folder / "report.md").read_text()
    section = report[report.index("## What each pass buys, per model"):report.index("## Per-pass attribution")]
    stem = args.page.with_suffix("")
    shutil.copyfile(args.folder / "study.png", stem.with_suffix(".png"))
    shutil.copyfile(args.folder / "study.csv", stem.with_suffix(".csv"))
    section = section.replace("](study.png)", f"]({stem.name}.png)").replace("](study.csv)", f"]({stem.name}.csv)")
    header = (f"# Which passes matter where: {cpu_name()} ({host_cpu()}), {datetime.now():%Y-%m-%d %H:%M}\n\n"
              f"- study: `{meta.get('sweep_file')}`, {models} models, {cells} cells ({done or 0} done, "
              f"{len(failed)} failed), {len(rows)} distinct builds measured (the other cells had the same IR as one "
              f"of them)" + (f", {args.wall_minutes:.0f} minutes in all (pipelines, builds, timing)"
                             if args.wall_minutes else "") + "\n"
              "- each cell in its own worker process, one at a time (2 cores), untuned unless a column says tuned\n\n")
    args.page.write_text(header + _findings(args.page) + section)
    print(f"wrote {args.page}, {stem.with_suffix('.png')}, {stem.with_suffix('.csv')}")


def _findings(page: Path) -> str:
    """The page's hand-written `## Findings` section (up to the next section), if it has one."""
    text = page.read_text() if page.exists() else ""
    if "## Findings" not in text:
        return ""
    start = text.index("## Findings")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end + 1]


if __name__ == "__main__":
    main()
