"""Time to parity: how a model's speed against ONNX Runtime grows with minutes of tuning
(`workbench bench parity --tune-minutes N`): one point per model per checkpoint (0 minutes: untuned), written as
a Markdown page, a CSV and a chart, so "how long until it beats ONNX Runtime" is read off one plot.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from workbench.atomic import atomic_write_text
from workbench.record.charts import save_png
from workbench.record.results_page import Machine, write_results_page
from workbench.record.rows import number_text

CHECKPOINT_PASSED = "checkpoint passed"  # a point's note where the previous step's last round ran past its checkpoint


@dataclass(frozen=True)
class ParityPoint:
    """One model after `minutes` of tuning (cumulative, up to `checkpoint`), timed beside the baseline in one
    process."""

    model: str
    checkpoint: float  # the budget it was measured at (minutes; 0: untuned)
    minutes: float  # wall-clock tuning minutes actually spent so far (the round in flight runs past the budget)
    trials: int  # measured trials so far
    workbench_ms: float | None
    baseline_ms: float | None
    note: str = ""  # why a figure is missing or may be off, or that the checkpoint was passed (CHECKPOINT_PASSED)

    @property
    def failed(self) -> bool:
        """Did something go wrong at this point (a passed checkpoint is a measurement like any other)?"""
        return bool(self.note) and not self.note.startswith(CHECKPOINT_PASSED)

    @property
    def ratio(self) -> float | None:
        """baseline median / workbench median (> 1: the workbench is faster)."""
        return self.baseline_ms / self.workbench_ms if self.workbench_ms and self.baseline_ms else None


def minutes_to_parity(points: Iterable[ParityPoint], model: str) -> float | None:
    """The tuning minutes after which `model` was first at least as fast as the baseline (None: not within the
    budget)."""
    return next((p.minutes for p in sorted(points, key=lambda p: p.minutes)
                 if p.model == model and p.ratio is not None and p.ratio >= 1), None)


def geomean_by_checkpoint(points: list[ParityPoint]) -> dict[float, float]:
    """Per checkpoint (in minutes), the geometric mean ratio over the models measured there."""
    by_minutes: dict[float, list[float]] = {}
    for point in points:
        if point.ratio:
            by_minutes.setdefault(point.checkpoint, []).append(point.ratio)
    return {m: math.exp(sum(math.log(r) for r in ratios) / len(ratios)) for m, ratios in sorted(by_minutes.items())}


def parity_figure(points: list[ParityPoint], baseline: str, title: str) -> Figure:
    """Ratio against tuning minutes, one line per model (20 colours, then markers tell them apart), the geomean
    over the models at each checkpoint in bold, the parity line at 1 (log scale, plain numbers)."""
    fig = Figure(figsize=(9, 5.5))
    ax = fig.subplots()
    colours, markers = colormaps["tab20"].colors, "osD^v<>ph"
    for index, model in enumerate(dict.fromkeys(p.model for p in points)):
        mine = sorted((p for p in points if p.model == model and p.ratio), key=lambda p: p.minutes)
        if mine:
            ax.plot([p.minutes for p in mine], [p.ratio for p in mine], label=model, linewidth=1,
                    color=colours[index % len(colours)], marker=markers[index // len(colours) % len(markers)])
    geomeans = geomean_by_checkpoint(points)
    models = len({p.model for p in points if p.ratio})
    ax.plot(list(geomeans), list(geomeans.values()), color="black", linewidth=2.5, linestyle="--", marker="s",
            label=f"geomean ({models} models)")
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.set_xlabel("tuning minutes (wall clock, this machine; the geomean at each budget)")
    ax.set_ylabel(f"{baseline} median / workbench median (> 1: faster)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def csv_text(points: list[ParityPoint]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([f.name for f in fields(ParityPoint)] + ["ratio"])
    for point in points:
        writer.writerow(["" if v is None else v for v in asdict(point).values()] + [point.ratio or ""])
    return buffer.getvalue()


def read_points(path: Path) -> list[ParityPoint]:
    """The points of a parity CSV written by `csv_text` (none where the file does not exist)."""
    if not path.is_file():
        return []
    numbers = {"checkpoint", "minutes", "trials", "workbench_ms", "baseline_ms"}

    def number(text: str) -> float | None:  # as written: 0 stays 0, 0.05 stays 0.05, empty is None
        return None if not text else int(text) if text.lstrip("-").isdigit() else float(text)

    with path.open(newline="") as handle:
        return [ParityPoint(**{f.name: number(row[f.name]) if f.name in numbers else row[f.name]
                               for f in fields(ParityPoint)}) for row in csv.DictReader(handle)]


def write_parity(points: list[ParityPoint], machine: Machine, baseline: str, protocol: str, out_dir: Path,
                 stem: str) -> list[Path]:
    """Write `<stem>.md` (table, chart, time to parity per model, geomean per checkpoint), `.csv` and `.png`."""
    title = f"Time to parity with {baseline} on {machine.cpu}, {machine.date}"
    chart = save_png(parity_figure(points, baseline, title), Path(out_dir) / f"{stem}.png")
    table = atomic_write_text(Path(out_dir) / f"{stem}.csv", csv_text(points))
    models = list(dict.fromkeys(p.model for p in points))
    parity = "\n".join(f"- {model}: " + (f"at parity after {m:g} min" if (m := minutes_to_parity(points, model))
                                         is not None else "not at parity within the budget") for model in models)
    geomeans = ", ".join(f"{m:g} min: {g:.2f}" for m, g in geomean_by_checkpoint(points).items())
    rows = [[p.model, number_text(p.checkpoint, "g"), number_text(p.minutes, "g"), str(p.trials),
             number_text(p.workbench_ms, ".3f"), number_text(p.baseline_ms, ".3f"), number_text(p.ratio, ".2f"), p.note]
            for p in points]
    notes = f"![time to parity]({chart.name})\n\n## Time to parity\n\n{parity}\n\ngeomean {baseline}/workbench by " \
            f"checkpoint: {geomeans}"
    page = write_results_page(out_dir, stem, f"Time to parity with {baseline}", machine, protocol,
                              ("model", "budget min", "tuning min", "trials", "workbench ms", f"{baseline} ms",
                               f"{baseline}/workbench", "note"), rows, notes)
    return [page, table, chart]
