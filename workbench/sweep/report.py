"""The sweep report: variants ranked by latency with 95% CIs, noise flags, plots, CSV and report.md.

One ranked row per equivalence class (variants whose optimized IR is identical and whose other settings
match are measured once). With repeats > 1 the row's median is the median of the repeats' medians and
its CI a bootstrap over those; with one repeat the CI is the run's own bootstrap CI of its samples.
A class whose CI overlaps the best class's CI is flagged "within noise of best".
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.table import Table  # noqa: E402

from workbench.atomic import atomic_write_text  # noqa: E402
from workbench.config import RESULTS_STORE  # noqa: E402
from workbench.config.baselines import WORKBENCH_LABEL  # noqa: E402
from workbench.errors import UserError  # noqa: E402
from workbench.record.charts import save_png  # noqa: E402
from workbench.record.markdown import markdown_table  # noqa: E402
from workbench.sweep.spec import SWEEP_MARKER  # noqa: E402
from workbench.sweep.store import SweepStore  # noqa: E402
from workbench.sweep.study_report import write_study  # noqa: E402


def _load(folder: Path) -> tuple[dict, list[dict], dict[int, dict]]:
    folder = Path(folder)
    if not (folder / SWEEP_MARKER).is_file() or not (folder / RESULTS_STORE).is_file():
        raise UserError(f"{folder}: not a sweep output folder (expected {SWEEP_MARKER} and {RESULTS_STORE})")
    meta = json.loads((folder / SWEEP_MARKER).read_text())
    store = SweepStore(folder / RESULTS_STORE)
    try:
        variants = list(store.rows().values())
        run_ids = sorted({v["run_id"] for v in variants if v["run_id"] is not None})
        results = {run_id: store.results.get(run_id) for run_id in run_ids}
    finally:
        store.close()
    return meta, variants, results


def _ci_over_repeats(medians: list[float]) -> tuple[float, float]:
    from workbench.measure.timing import median_ci95

    return median_ci95(np.asarray(medians, dtype=float))


def _ci(measurement) -> tuple[float, float]:
    """A measurement's bootstrap CI of its median (an extra figure of the stored Timing), else the median alone."""
    return tuple(getattr(measurement, "ci95_ms", None) or (measurement.median_ms, measurement.median_ms))


def paired_ratio(ours, theirs) -> tuple[float, float, float]:
    """Our median over another label's of the same run (timed in the same process and rounds), with a
    conservative 95% interval: the two bootstrap CIs taken at their far ends."""
    our_low, our_high = _ci(ours)
    their_low, their_high = _ci(theirs)
    return ours.median_ms / theirs.median_ms, our_low / their_high, our_high / their_low


def as_speedup(ratio: list[float] | tuple[float, float, float]) -> str:
    """A paired time ratio (ours over theirs, with its interval) as a speedup with its interval: '1.07x [1.05,
    1.09]'."""
    middle, low, high = ratio
    return f"{1 / middle:.2f}x [{1 / high:.2f}, {1 / low:.2f}]"


def over_repeats(ratios: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """One run's paired ratio as it is; over repeats, the median ratio and a bootstrap CI over the repeats."""
    if len(ratios) == 1:
        return ratios[0]
    medians = [r[0] for r in ratios]
    low, high = _ci_over_repeats(medians)
    return float(np.median(medians)), float(low), float(high)


def ranked_rows(folder: Path) -> tuple[list[dict], list[dict], dict]:
    """(ranked class rows, failed variant rows, sweep metadata)."""
    meta, variants, results = _load(folder)
    classes: dict[str, list[dict]] = defaultdict(list)
    failed = []
    for v in variants:
        if v["status"] == "done" and v["run_id"] in results:
            classes[v["class_id"]].append(v)
        elif v["status"] == "failed":
            failed.append(v)
    rows = []
    for class_id, members in classes.items():
        runs = {m["run_id"]: results[m["run_id"]] for m in members}
        ours = [r.measurements[WORKBENCH_LABEL] for r in runs.values()]
        medians = [m.median_ms for m in ours if m.median_ms]
        if not medians:
            continue
        if len(medians) > 1:
            low, high = _ci_over_repeats(medians)
        else:
            low, high = _ci(ours[0])
        median = float(np.median(medians))
        speedups, against = defaultdict(list), defaultdict(list)
        for r in runs.values():
            for label, m in r.measurements.items():
                if label != WORKBENCH_LABEL and m.median_ms:
                    speedups[label].append(m.median_ms / r.measurements[WORKBENCH_LABEL].median_ms)
                    against[label].append(paired_ratio(r.measurements[WORKBENCH_LABEL], m))
        accuracy = [r.accuracy[WORKBENCH_LABEL].ok if WORKBENCH_LABEL in r.accuracy else None for r in runs.values()]
        distinct = sorted({m["pipeline_text"] for m in members}, key=lambda t: min(
            x["position"] for x in members if x["pipeline_text"] == t))
        first = results[members[0]["run_id"]]
        rows.append({
            "class_id": class_id, "pipeline_text": distinct[0], "equivalent": distinct[1:],
            "members": sorted({m["id"] for m in members}), "grid": json.loads(members[0]["grid_json"] or "{}"),
            "repeats": len(runs), "median_ms": median, "ci_low": float(low), "ci_high": float(high),
            "speedup": {label: float(np.median(vals)) for label, vals in sorted(speedups.items())},
            "against": {label: over_repeats(vals) for label, vals in sorted(against.items())},
            "kernels": first.kernels.get(WORKBENCH_LABEL),
            "accuracy_ok": None if None in accuracy else all(accuracy),
            "structural_hash": members[0]["structural_hash"],
            "passes": [p.name for p in first.passes],
            "tuned": bool(members[0].get("tuned")),
            "covered": len(first.tuning.covered or []) if first.tuning else None,
        })
    for tuned in (False, True):
        _rank([r for r in rows if r["tuned"] == tuned])
    untuned = {(r["structural_hash"], json.dumps(r["grid"], sort_keys=True)): r for r in rows if not r["tuned"]}
    for row in rows:
        if row["tuned"]:
            row["untuned"] = untuned.get((row["structural_hash"], json.dumps(row["grid"], sort_keys=True)))
    rows.sort(key=lambda r: (not r["tuned"], r["median_ms"]))  # a tuned sweep ranks by the tuned builds
    return rows, failed, meta


def _rank(rows: list[dict]) -> None:
    """Rank by median; flag the rows whose 95% CI overlaps the best one's."""
    rows.sort(key=lambda r: r["median_ms"])
    if rows:
        best = rows[0]
        for rank, row in enumerate(rows, 1):
            row["rank"] = rank
            overlaps = row["ci_low"] <= best["ci_high"] and best["ci_low"] <= row["ci_high"]
            row["noise"] = "best" if rank == 1 else ("within noise of best" if overlaps else "")


def ranking(rows: list[dict]) -> list[dict]:
    """The rows the ranking shows: the tuned classes in a tuned sweep (untuned beside them), else all."""
    tuned = [r for r in rows if r["tuned"]]
    return tuned or rows


def _ms(median: float, low: float, high: float) -> list[str]:
    return [f"{median:.3f}", f"[{low:.3f}, {high:.3f}]"]


def _cells(row: dict, baselines: list[str]) -> list[str]:
    pipeline = row["pipeline_text"] or "(empty)"
    if row["equivalent"]:
        pipeline += f"  ≡ {len(row['equivalent'])} more"
    grid = ", ".join(f"{k}={json.dumps(v)}" for k, v in row["grid"].items())
    speedups = [f"{row['speedup'][b]:.2f}×" if b in row["speedup"] else "—" for b in baselines]
    ok = {True: "ok", False: "FAIL", None: "—"}[row["accuracy_ok"]]
    untuned = []
    if row["tuned"]:
        other = row.get("untuned")
        untuned = (_ms(other["median_ms"], other["ci_low"], other["ci_high"]) + [str(other["rank"])]
                   if other else ["—", "—", "—"])
    kernels = "—" if row["kernels"] is None else str(row["kernels"])
    if row["covered"] is not None:
        kernels += f" ({row['covered']} tuned)"
    return [str(row["rank"]), pipeline, grid or "—", *_ms(row["median_ms"], row["ci_low"], row["ci_high"]), *untuned,
            str(row["repeats"]), *speedups, kernels, ok, row["noise"]]


def _header(baselines: list[str], tuned: bool) -> list[str]:
    mode = ["tuned ms", "95% CI ms", "untuned ms", "untuned CI ms", "untuned rank"] if tuned else \
        ["median ms", "95% CI ms"]
    return ["rank", "pipeline", "grid", *mode, "repeats", *[f"vs {b}" for b in baselines],
            "kernels", "accuracy", "noise"]


def _baselines(rows: list[dict]) -> list[str]:
    return sorted({label for row in rows for label in row["speedup"]})


def console_table(folder: Path) -> Table:
    rows, failed, meta = ranked_rows(folder)
    shown = ranking(rows)
    tuned = bool(shown) and shown[0]["tuned"]
    baselines = _baselines(shown)
    table = Table(title=f"sweep {meta['name']}: {len(shown)} equivalence classes ranked"
                        + (" by the tuned build" if tuned else "") + f", {len(failed)} variants failed",
                  caption="vs X = X's median / this variant's median (> 1: this variant is faster)")
    header = _header(baselines, tuned)
    for column in header:
        table.add_column(column, justify="left" if column in ("pipeline", "grid", "accuracy", "noise") else "right")
    for row in shown:
        table.add_row(*_cells(row, baselines), style="bold" if row["rank"] == 1 else None)
    for v in failed:
        cells = [v["pipeline_text"] or "(empty)", v["grid_json"] if v["grid_json"] != "{}" else "—", "failed"]
        table.add_row("✗", *cells, *[""] * (len(header) - 5), (v["error"] or "")[:80], style="red")
    return table


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    save_png(fig, path, dpi=110)
    plt.close(fig)  # a pyplot figure: let pyplot forget it
    return path


def _label(r: dict) -> str:
    return ((r["pipeline_text"] or "(empty)") + (f" (+{len(r['equivalent'])}≡)" if r["equivalent"] else "")
            + (" " + ",".join(f"{k.split('.')[-1]}={v}" for k, v in r["grid"].items()) if r["grid"] else ""))


def _errors(rows: list[dict]) -> list[list[float]]:
    return [[max(r["median_ms"] - r["ci_low"], 0) for r in rows], [max(r["ci_high"] - r["median_ms"], 0) for r in rows]]


def _bars(ax, rows: list[dict], ys, colors) -> None:
    ax.barh(ys, [r["median_ms"] for r in rows], xerr=_errors(rows), color=colors, capsize=3)
    ax.set_xlim(left=0)


def latency_plot(rows: list[dict], path: Path) -> Path:
    """One bar per ranked class (95% CI error bars); a tuned sweep gets a second panel, on its own scale, with
    the same IRs built untuned and their untuned rank."""
    shown = ranking(rows)
    tuned = bool(shown) and shown[0]["tuned"]
    fig, axes = plt.subplots(1, 2 if tuned else 1, sharey=True, squeeze=False,
                             figsize=(11 if tuned else 8, 0.4 * max(len(shown), 1) + 1.6))
    colors = ["tab:orange" if r["noise"] == "best" else "tab:green" if r["noise"] else "tab:blue" for r in shown]
    ys = list(range(len(shown)))
    _bars(axes[0][0], shown, ys, colors)
    axes[0][0].set_yticks(ys, [_label(r) for r in shown], fontsize=7)
    axes[0][0].invert_yaxis()
    axes[0][0].set_xlabel("median latency, ms (95% CI; orange best, green within noise of best)", fontsize=8)
    axes[0][0].set_title("tuned build, ranked" if tuned else "latency per equivalence class", fontsize=10)
    if tuned:
        present = [(y, r["untuned"]) for y, r in zip(ys, shown) if r.get("untuned")]
        ax = axes[0][1]
        _bars(ax, [u for _y, u in present], [y for y, _u in present], "lightgray")
        for y, u in present:
            ax.text(u["ci_high"], y, f" untuned #{u['rank']}", va="center", fontsize=7)
        ax.set_xlabel("median latency, ms (95% CI)", fontsize=8)
        ax.set_title("the same IR untuned (its untuned rank)", fontsize=10)
    return _save(fig, path)


def search_plot(search: dict, path: Path) -> Path:
    """Best-so-far latency against distinct variants measured, every candidate as a point."""
    points = [p for p in search["trajectory"] if p["median_ms"] is not None]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    steps = [(p["measured"], p["best_ms"]) for p in search["trajectory"] if p["best_ms"] is not None]
    if steps:
        ax.step([x for x, _ in steps], [y for _, y in steps], where="post", color="tab:orange", label="best so far")
    new = [p for p in points if p["new"]]
    again = [p for p in points if not p["new"]]
    ax.scatter([p["measured"] for p in new], [p["median_ms"] for p in new], s=14, label="candidate (measured)")
    if again:
        ax.scatter([p["measured"] for p in again], [p["median_ms"] for p in again], s=24, marker="x", color="gray",
                   label="equivalent IR (not measured again)")
    ax.set(xlabel="distinct variants measured", ylabel="median latency, ms" + (" (tuned)" if search["tuned"] else ""),
           title=f"{search['strategy']} search, budget {search['budget']}")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)
    return _save(fig, path)


def attribution_plot(rows: list[dict], passes: list[str], path: Path) -> Path:
    """For each pass: mean latency and mean kernel count of the variants that have it at each position."""
    passes = passes or sorted({p for r in rows for p in r["passes"]})
    fig, (ax_lat, ax_k) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name in passes:
        by_pos_lat, by_pos_k = defaultdict(list), defaultdict(list)
        for r in rows:
            weight = 1 + len(r["equivalent"])
            for pos, p in enumerate(r["passes"]):
                if p == name:
                    by_pos_lat[pos] += [r["median_ms"]] * weight
                    if r["kernels"] is not None:
                        by_pos_k[pos] += [r["kernels"]] * weight
        if by_pos_lat:
            xs = sorted(by_pos_lat)
            ax_lat.plot(xs, [np.mean(by_pos_lat[x]) for x in xs], marker="o", label=name)
        if by_pos_k:
            xs = sorted(by_pos_k)
            ax_k.plot(xs, [np.mean(by_pos_k[x]) for x in xs], marker="s", label=name)
    ax_lat.set(xlabel="position of the pass in the pipeline", ylabel="mean median latency, ms",
               title="latency by pass position")
    ax_k.set(xlabel="position of the pass in the pipeline", ylabel="mean kernel count", title="kernels by pass position")
    for ax in (ax_lat, ax_k):
        ax.xaxis.get_major_locator().set_params(integer=True)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return _save(fig, path)


def write_csv(folder: Path, rows: list[dict], failed: list[dict]) -> tuple[Path, Path]:
    import csv

    from workbench.record.store import ResultsStore

    buffer = io.StringIO()
    columns = ["rank", "class_id", "tuned", "pipeline_text", "equivalent", "grid", "repeats", "median_ms", "ci_low",
               "ci_high", "kernels", "accuracy_ok", "noise", "speedup", "members", "status", "error"]
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({**r, "equivalent": ";".join(r["equivalent"]), "grid": json.dumps(r["grid"]),
                         "speedup": json.dumps(r["speedup"]), "members": ";".join(r["members"]), "status": "done"})
    for v in failed:
        writer.writerow({"pipeline_text": v["pipeline_text"], "grid": v["grid_json"], "members": v["id"],
                         "status": "failed", "error": v["error"]})
    ranked = atomic_write_text(folder / "variants.csv", buffer.getvalue())
    meta, variants, _ = _load(folder)
    run_ids = sorted({v["run_id"] for v in variants if v["run_id"] is not None})
    with ResultsStore(folder / RESULTS_STORE) as store:
        every = store.export_csv(folder / "all_rows.csv", run_ids)
    return ranked, every


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def tuning_counts(tuning: dict) -> dict:
    """Distinct tuning tasks of the tuned classes (their union) against the sum of each class's own count."""
    keys = [key for keys in tuning.get("classes", {}).values() for key in keys]
    tasks = tuning.get("tasks", {})
    return {"classes": len(tuning.get("classes", {})), "union": len(set(keys)), "sum": len(keys),
            "trials": sum(t["trials_before"] + t["trials_run"] for t in tasks.values()),
            "tuned": sum(t["trials_before"] + t["trials_run"] > 0 for t in tasks.values()),
            "seconds": tuning.get("seconds", 0.0), "database": tuning.get("database")}


def _tuning_section(folder: Path) -> list[str]:
    counts = tuning_counts(_read_json(folder / "tuning.json"))
    if not counts["classes"]:
        return []
    return ["## Tuning",
            f"One tuning for the whole sweep: the {counts['classes']} tuned classes have {counts['sum']} tuning tasks "
            f"between them, {counts['union']} distinct by workload (a kernel shared by classes is one task); "
            f"{counts['tuned']} of those got trials, {counts['trials']} in all, in the database `{counts['database']}`; "
            f"tuning wall time {counts['seconds']:.0f} s. Each class is built once "
            "with that database and once without; the ranking is by the tuned build, the untuned rank beside it."]


def _search_section(folder: Path) -> list[str]:
    search = _read_json(folder / "search.json")
    if not search:
        return []
    plot = search_plot(search, folder / "search.png")
    best = search.get("best") or {}
    table = markdown_table(["step", "pipeline", "median ms", "best so far ms", "distinct measured", ""],
                      [[p["step"], p["pipeline"] or "(empty)", "—" if p["median_ms"] is None else f"{p['median_ms']:.3f}",
                        "—" if p["best_ms"] is None else f"{p['best_ms']:.3f}", str(p["measured"]),
                        "failed" if p["failed"] else ("" if p["new"] else "equivalent IR, not measured again")]
                       for p in search["trajectory"]])
    minutes = f", {search['elapsed_min']:.1f} of {search['minutes']:g} minutes" if search.get("minutes") else ""
    start = search.get("start") or {}
    against = (f"; the start `{start['pipeline']}` {start['median_ms']:.3f} ms, "
               f"{start['median_ms'] / best['median_ms']:.2f}x the best's time" if start.get("median_ms") and best
               else "")
    moves = [f"- moved to `{m['to']}`: {as_speedup(m['ratio'])} as fast as the pipeline it replaced, timed beside it"
             for m in search.get("moves") or []]
    if search["strategy"] == "local":
        moves = moves or ["- no move: no neighbour was faster beyond its paired interval"]
    return ["## Ordering search",
            f"{search['strategy']} search: {search['measured']} distinct variants measured (budget {search['budget']}"
            f"{minutes}); best sequence found: `{best.get('pipeline', '—')}` at "
            + (f"{best['median_ms']:.3f} ms" if best else "—") + (" (tuned)" if search["tuned"] else "") + against,
            *(["\n".join(moves)] if moves else []), f"![search trajectory]({plot.name})", table]


def _variant_rows(folder: Path) -> list[dict]:
    store = SweepStore(folder / RESULTS_STORE)
    try:
        return list(store.rows().values())
    finally:
        store.close()


def write_sweep_report(folder: Path) -> Path:
    """Write report.md, latency.png, attribution.png, variants.csv and all_rows.csv (for a search search.png, for
    a study study.png and study.csv) into the sweep folder."""
    folder = Path(folder)
    rows, failed, meta = ranked_rows(folder)
    shown = ranking(rows)
    tuned = bool(shown) and shown[0]["tuned"]
    baselines = _baselines(shown)
    latency = latency_plot(rows, folder / "latency.png")
    attribution = attribution_plot(shown, meta.get("permuted") or [], folder / "attribution.png")
    ranked_csv, all_csv = write_csv(folder, rows, failed)
    classes = "\n".join(f"- `{r['pipeline_text'] or '(empty)'}` ≡ " + ", ".join(f"`{e}`" for e in r["equivalent"])
                        + f" (structural hash {r['structural_hash']}, measured once)"
                        for r in shown if r["equivalent"]) or "(every measured variant has distinct optimized IR)"
    failures = markdown_table(["variant", "pipeline", "grid", "error"],
                         [[v["id"], v["pipeline_text"] or "(empty)", v["grid_json"], (v["error"] or "").splitlines()[0]
                           if v["error"] else ""] for v in failed]) if failed else "(none)"
    total = len(meta.get("variants", []))
    text = "\n\n".join([
        f"# Sweep {meta['name']}",
        f"- sweep file: `{meta.get('sweep_file')}`\n- variants: {total} ({len(failed)} failed), "
        f"equivalence classes measured: {len(rows)}" + (f" ({len(shown)} tuned, {len(rows) - len(shown)} untuned)"
                                                        if tuned else "")
        + f"\n- repeats per variant: {meta['section'].get('repeats')}",
        *_tuning_section(folder),
        "## Ranking" + (" (by the tuned build)" if tuned else ""),
        markdown_table(_header(baselines, tuned), [_cells(r, baselines) for r in shown]) if rows else "(nothing measured yet)",
        "*vs X* = X's median / this variant's median, in the same run (> 1: this variant is faster). "
        "*within noise of best*: its 95% CI overlaps the best one's."
        + (" *untuned rank*: the same IR's rank among the untuned builds; *kernels (N tuned)*: N of them got a "
           "schedule from the database." if tuned else ""),
        f"![latency]({latency.name})",
        *_search_section(folder),
        *write_study(folder, rows, _variant_rows(folder)),
        "## Per-pass attribution",
        f"![attribution]({attribution.name})",
        "## Equivalent orderings",
        classes,
        "## Failed variants",
        failures,
        f"Data: [{ranked_csv.name}]({ranked_csv.name}) (ranked), [{all_csv.name}]({all_csv.name}) "
        "(every measured label of every run).",
    ])
    return atomic_write_text(folder / "report.md", text + "\n")
