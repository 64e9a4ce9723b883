"""What each pass of an ablation buys on each model: the study's cells, heatmap, table, CSV and best pipelines.

A cell is (model, variant label, untuned or tuned): the variant's median latency over the full pipeline's, both
of the same model and the same tuning state. A study's variant runs time the full pipeline's build beside their
own, in interleaved rounds of the same process (label `full`), and the cell's ratio is read from that run
(`paired`); a run without it is compared with the full pipeline's own run, timed in another process. Its 95%
interval is the ratio of the two medians' bootstrap CIs taken at their far ends (the variant's low over the full's
high, and the other way round): conservative, so a cell marked significant is. A variant whose optimized IR
equals the full pipeline's is the same build ("same IR": the pass does nothing on that model); a variant that broke
the model is a failed cell with its reason.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from workbench.atomic import atomic_write_text
from workbench.record.charts import save_png
from workbench.record.markdown import markdown_table
from workbench.sweep.study import FULL

SAME_IR, NOISE, PAYS, HURTS, FAILED = "same IR", "noise", "pays", "hurts", "failed"
UNSTEADY = "unsteady"  # the full pipeline, timed beside the variant, ran far from its time in the model's other cells
# A process can run one build at a fraction of its speed while the other label in it runs as usual (rapidocr_cls's
# full pipeline at 1.49 ms in one cell's process against 0.50-0.55 ms in its five others, 2026-12-07): pairing
# cancels what slows both labels, not this. Such a cell's ratio says nothing about the pass.
UNSTEADY_FACTOR = 1.3


@dataclass(frozen=True)
class Cell:
    """One model × variant × tuning state; `ratio` = variant median / full median (> 1: dropping the pass, or
    changing its parameters, made the model slower, so the full pipeline's choice pays)."""

    model: str
    label: str
    tuned: bool
    verdict: str  # SAME_IR, NOISE, PAYS (ratio > 1 beyond the CI), HURTS (< 1 beyond it), FAILED, UNSTEADY
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    median_ms: float | None = None
    full_ms: float | None = None
    pipeline: str = ""
    error: str = ""
    paired: bool = False  # the ratio was timed in one process, interleaved with the full pipeline's build

    @property
    def change(self) -> str:
        """'+12% [+5, +20]' (the slowdown without the pass), '=' for the same IR, 'failed'."""
        if self.verdict == FAILED:
            return "failed"
        if self.verdict == SAME_IR:
            return "= (same IR)"
        if self.verdict == UNSTEADY:
            return f"? ({self.ratio - 1:+.0%}: the full pipeline ran at an unusual time in this process)"
        return f"{self.ratio - 1:+.0%} [{self.low - 1:+.0%}, {self.high - 1:+.0%}]"


def _verdict(low: float, high: float) -> str:
    return PAYS if low > 1 else HURTS if high < 1 else NOISE


def study_cells(rows: list[dict], variants: list[dict]) -> list[Cell]:
    """The cells of a study from the sweep report's class rows (`ranked_rows`) and the store's variant rows."""
    class_of = {member: row for row in rows for member in row["members"]}
    by_key: dict[tuple[str, bool], dict[str, dict]] = {}
    for v in variants:
        if v.get("ablation"):
            model = json.loads(v["grid_json"] or "{}").get("model", "")
            by_key.setdefault((model, bool(v["tuned"])), {}).setdefault(v["ablation"], v)
    cells = []
    for (model, tuned), labels in by_key.items():
        full = class_of.get(labels[FULL]["id"]) if FULL in labels else None
        for label, v in labels.items():
            if label == FULL:
                continue
            row = class_of.get(v["id"])
            if v["status"] == "failed" or row is None or full is None:
                reason = (v.get("error") or "").splitlines()[0] if v.get("error") else (
                    "the full pipeline failed on this model" if full is None else "not measured yet")
                cells.append(Cell(model, label, tuned, FAILED, pipeline=v["pipeline_text"], error=reason))
                continue
            if row is full:
                cells.append(Cell(model, label, tuned, SAME_IR, 1.0, 1.0, 1.0, row["median_ms"], full["median_ms"],
                                  v["pipeline_text"]))
                continue
            paired = row.get("against", {}).get(FULL)
            ratio, low, high = paired or (row["median_ms"] / full["median_ms"], row["ci_low"] / full["ci_high"],
                                          row["ci_high"] / full["ci_low"])
            # the full pipeline's median as timed beside this variant where it was, else its own run's
            full_ms = row["median_ms"] * row["speedup"][FULL] if paired else full["median_ms"]
            cells.append(Cell(model, label, tuned, _verdict(low, high), ratio, low, high, row["median_ms"],
                              full_ms, v["pipeline_text"], paired=paired is not None))
    return flag_unsteady(cells)


def flag_unsteady(cells: list[Cell]) -> list[Cell]:
    """The cells, with UNSTEADY for a paired cell whose full pipeline ran more than UNSTEADY_FACTOR from its median
    over the model's paired cells (at least three of them: with fewer there is no usual time to compare with)."""
    usual: dict[tuple[str, bool], float] = {}
    for key in {(c.model, c.tuned) for c in cells}:
        times = [c.full_ms for c in cells if (c.model, c.tuned) == key and c.paired and c.full_ms]
        if len(times) >= 3:
            usual[key] = float(np.median(times))
    return [replace(c, verdict=UNSTEADY) if c.paired and c.full_ms and (c.model, c.tuned) in usual
            and not 1 / UNSTEADY_FACTOR <= c.full_ms / usual[(c.model, c.tuned)] <= UNSTEADY_FACTOR else c
            for c in cells]


def _order(cells: list[Cell], attribute: str) -> list[str]:
    """The distinct values of a cell attribute (model, label) in the order the cells first have them."""
    return list(dict.fromkeys(getattr(c, attribute) for c in cells))


def heatmap(cells: list[Cell], models: list[str], labels: list[str], path: Path) -> Path:
    """Models × variant labels, the slowdown when the pass is dropped (or changed), untuned and tuned side by side:
    red where the pass pays, blue where it hurts, pale where the CI holds no change (its figure in grey italics),
    grey for the same IR (=), black for a failed cell (x), "?" where the cell is UNSTEADY."""
    states = sorted({c.tuned for c in cells})
    fig = Figure(figsize=(3.2 + 0.55 * len(labels) * len(states), 2.6 + 0.3 * len(models)), layout="constrained")
    axes = fig.subplots(1, len(states), squeeze=False)[0]
    lookup = {(c.model, c.label, c.tuned): c for c in cells}
    image = None
    for ax, tuned in zip(axes, states):
        values = np.full((len(models), len(labels)), np.nan)
        for i, model in enumerate(models):
            for j, label in enumerate(labels):
                cell = lookup.get((model, label, tuned))
                if cell is None:
                    continue
                if cell.ratio is not None and cell.verdict != SAME_IR:
                    values[i, j] = np.clip(np.log2(cell.ratio), -1, 1) * (1 if cell.verdict in (PAYS, HURTS) else 0.35)
                mark = {SAME_IR: "=", FAILED: "x", UNSTEADY: "?"}.get(cell.verdict, f"{(cell.ratio or 1) - 1:+.0%}")
                dark = cell.verdict == FAILED or abs(values[i, j]) > 0.6  # white figures on the deep colours
                ax.text(j, i, mark, ha="center", va="center", fontsize=6.5,
                        color="white" if dark else "0.5" if cell.verdict in (NOISE, UNSTEADY) else "black",
                        style="italic" if cell.verdict in (NOISE, UNSTEADY) else "normal")
                if cell.verdict in (SAME_IR, FAILED):
                    ax.add_patch(_square(j, i, "0.85" if cell.verdict == SAME_IR else "0.15"))
        image = ax.imshow(values, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(models)), models, fontsize=7)
        ax.set_title("tuned" if tuned else "untuned", fontsize=9)
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes), shrink=0.8)
        bar.set_ticks([-1, 0, 1], labels=["2x faster\nwithout", "no change", "2x slower\nwithout"], fontsize=7)
    fig.suptitle("slowdown when the pass is dropped (or changed)\ngrey italic: within the 95% CI of no change, "
                 "= same IR, x failed, ? full pipeline at an unusual time in that process", fontsize=9)
    return save_png(fig, path)


def _square(x: float, y: float, color: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, color=color, zorder=0.5)


def best_line(model: str, tuned: bool, cells: list[Cell]) -> str:
    """The model's fastest variant against the full pipeline, by the cells' ratios (timed side by side where they
    were paired), and whether its lead is beyond the interval; the full pipeline where no variant was faster."""
    state = "tuned" if tuned else "untuned"
    measured = [c for c in cells if c.model == model and c.tuned == tuned and c.ratio is not None
                and c.verdict not in (SAME_IR, UNSTEADY)]
    fastest = min(measured, key=lambda c: c.ratio, default=None)
    if fastest is None or fastest.ratio >= 1:
        return f"- {model} ({state}): the full pipeline; no variant was faster"
    return (f"- {model} ({state}): `{fastest.label}` (`{fastest.pipeline}`), {1 / fastest.ratio:.2f}x the full "
            f"pipeline's speed" + (" beyond the interval" if fastest.verdict == HURTS else ", within the noise"))


def write_study(folder: Path, rows: list[dict], variants: list[dict]) -> list[str]:
    """study.png, study.csv and the report's section (Markdown paragraphs); [] for a sweep that is no study."""
    cells = study_cells(rows, variants)
    if not cells:
        return []
    labels = _order(cells, "label")
    models = _order(cells, "model")
    picture = heatmap(cells, models, labels, folder / "study.png")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(Cell.__dataclass_fields__))
    writer.writeheader()
    writer.writerows(asdict(cell) for cell in cells)
    table_csv = atomic_write_text(folder / "study.csv", buffer.getvalue())
    lookup = {(c.model, c.label, c.tuned): c for c in cells}
    section = ["## What each pass buys, per model",
               "Each cell: the model's median latency with the pass dropped (or changed) over its median with the "
               "full pipeline, minus 1, and its conservative 95% interval; *pays* / *hurts* where the interval "
               "excludes no change. `= (same IR)`: the pass changes nothing on that model.",
               f"![passes per model]({picture.name})"]
    for tuned in sorted({c.tuned for c in cells}):
        section.append("### " + ("Tuned" if tuned else "Untuned"))
        section.append(markdown_table(("model", *labels), [
            [model, *[lookup[(model, label, tuned)].change + (f" ({lookup[(model, label, tuned)].verdict})"
                                                              if lookup[(model, label, tuned)].verdict in (PAYS, HURTS)
                                                              else "") if (model, label, tuned) in lookup else "—"
                      for label in labels]] for model in models]))
    section.append("### Best pipeline found per model")
    section.append("\n".join(best_line(model, tuned, cells) for tuned in sorted({c.tuned for c in cells})
                             for model in models))
    section.append(f"Cells: [{table_csv.name}]({table_csv.name}).")
    return section
