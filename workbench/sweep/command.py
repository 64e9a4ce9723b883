"""The `workbench sweep` verb and the sweep side of `workbench report`.

cli.py registers them and hands in its consoles; nothing here imports cli.py (sweeps sit below the verbs).
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

from rich.console import Console

from workbench.errors import ERROR_LOG_FOLDER
from workbench.sweep.spec import SWEEP_MARKER, Sweep, load_sweep


def variants_table(sweep: Sweep):
    from rich.table import Table

    title = f"sweep {sweep.name}: {len(sweep.variants)} variants → {sweep.output}"
    if sweep.search is not None:
        search = sweep.search
        title = (f"sweep {sweep.name}: {search.search} search over {', '.join(sweep.permuted)} (max length "
                 f"{search.max_length or len(sweep.permuted)}, budget {search.budget} distinct IRs) → {sweep.output}")
    if sweep.models:
        labels = len({v.ablation or v.pipeline_text for v in sweep.variants})
        title += f"; a study: {len(sweep.models)} models × {labels} pipeline variants"
    if sweep.tuning is not None:
        budget = (f"{sweep.tuning.minutes:g} minutes" if sweep.tuning.minutes else f"{sweep.tuning.trials} trials")
        title += f"; tuned into {sweep.database_root} within {budget} (each pipeline measured tuned and untuned)"
    table = Table(title=title)
    ablation = any(v.ablation for v in sweep.variants)
    for column in ("#", "id", *(["variant"] if ablation else []), "pipeline", "grid", "repeat", "tuned"):
        table.add_column(column)
    for v in sweep.variants:
        grid = ", ".join(f"{k}={json.dumps(val)}" for k, val in v.grid.items()) or "—"
        table.add_row(str(v.position), v.id, *([v.ablation or ""] if ablation else []), v.pipeline_text or "(empty)",
                      grid, str(v.repeat), "yes" if v.tuned else "")
    return table


def cmd_sweep(args: argparse.Namespace, stdout: Console, stderr: Console) -> int:
    from workbench.sweep.driver import run_sweep
    from workbench.sweep.report import console_table, write_sweep_report

    sweep = load_sweep(Path(args.sweep_file), Path.cwd(), list(args.set or []))
    ERROR_LOG_FOLDER.set(sweep.output)
    if args.dry_run:
        stdout.print(variants_table(sweep))
        return 0
    rows = run_sweep(sweep, Path.cwd(), workers=args.workers, resume=args.resume, console=stderr)
    report = write_sweep_report(sweep.output)
    stdout.print(console_table(sweep.output))
    failed = sum(r["status"] == "failed" for r in rows.values())
    stdout.print(f"Wrote {report} (and plots, variants.csv, all_rows.csv); store {sweep.store_path}"
                 + (f"; {failed} variants failed (see the report)" if failed else ""))
    return 0


def add_parser(verbs, stdout: Console, stderr: Console) -> argparse.ArgumentParser:
    sweep = verbs.add_parser("sweep", help="run many variants (orderings × grid, or a study: models × an ablation "
                                         "of a pipeline) in crash-isolated workers, rank them")
    sweep.add_argument("sweep_file", metavar="SWEEP.yaml", help="sweep file (base experiment + what to vary)")
    sweep.add_argument("--workers", type=int, metavar="N", help="worker processes (default: the file's sweep.workers)")
    sweep.add_argument("--resume", action="store_true", help="continue a sweep: skip variants already done")
    sweep.add_argument("--dry-run", action="store_true", help="print the variants and exit")
    sweep.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a key of the sweep file (output, sweep.workers, base.measure.repeat, ...)")
    sweep.set_defaults(handler=partial(cmd_sweep, stdout=stdout, stderr=stderr))
    return sweep


def report_dispatch(run_report, stdout: Console):
    """`workbench report DIR`: a sweep folder gets the sweep report, anything else the run report."""

    def handler(args: argparse.Namespace) -> int:
        folder = Path(args.run_dir)
        if (folder / SWEEP_MARKER).is_file():
            from workbench.sweep.report import console_table, write_sweep_report

            report = write_sweep_report(folder)
            stdout.print(console_table(folder))
            stdout.print(f"Wrote {report}")
            return 0
        return run_report(args)

    return handler
