"""The run report's rows: each section of a result (latency and accuracy per label, passes, CUDA kernels, the
per-kernel profile) as the display cells every form of the report shows, so the console tables
(record/tables.py) and report.md (record/markdown.py) always agree. The column headers and captions are here too.
"""

from __future__ import annotations

import json

from workbench.config.baselines import WORKBENCH_LABEL
from workbench.record.result import Accuracy, CudaReport, PassEntry, Profile, RunResult
from workbench.record.tuning_notes import tuning_note

COLUMNS = ("label", "median ms", "p90 ms", "workbench speedup vs this", "kernels", "max abs err", "accuracy", "note")
PASS_COLUMNS = ("pass", "seconds", "ops before → after", "changes")
CUDA_COLUMNS = ("label", "kernels (PTX)", "launches / inference", "intermediate MB", "max threads/block",
                "max registers", "max smem bytes")
KERNEL_COLUMNS = ("kernel", "threads/block", "registers", "smem bytes")
PROFILE_COLUMNS = ("#", "workbench kernel", "µs", "share", "ort_all node", "µs ", "share ")
SPEEDUP_NOTE = "workbench speedup vs this = that label's median / the workbench median (> 1: the workbench is faster)"


def number_text(value, fmt: str = "") -> str:
    """A table cell: `value` formatted, or a dash where there is none."""
    return "—" if value is None else format(value, fmt)


def summary_rows(result: RunResult) -> list[dict]:
    """One row per label, workbench first then the baselines in measured order: latency, the
    workbench's speedup vs that label (label median / workbench median), kernels, accuracy, note."""
    measurements = result.measurements
    ours = measurements[WORKBENCH_LABEL].median_ms if WORKBENCH_LABEL in measurements else None
    rows = []
    for label in sorted(measurements, key=lambda name: name != WORKBENCH_LABEL):  # stable: baselines keep their order
        figures = measurements[label]
        accuracy = result.accuracy.get(label) or Accuracy()
        median = figures.median_ms
        rows.append({
            "label": label, "median_ms": median, "p90_ms": figures.p90_ms,
            "speedup": median / ours if median and ours else None,
            "kernels": result.kernels.get(label),
            "max_abs_err": accuracy.max_abs_err,
            "ok": accuracy.ok,
            "reference": label == result.reference,
            "note": figures.note or accuracy.note
                    or (tuning_note(result.tuning) if label == WORKBENCH_LABEL and result.tuning else None),
        })
    return rows


def summary_cells(row: dict) -> list[str]:
    """A summary row as display strings."""
    accuracy = "reference" if row["reference"] else {True: "ok", False: "FAIL"}.get(row["ok"], "—")
    speedup = "—" if row["speedup"] is None else f"{row['speedup']:.2f}×"
    return [row["label"], number_text(row["median_ms"], ".3f"), number_text(row["p90_ms"], ".3f"), speedup,
            number_text(row["kernels"], "d"), number_text(row["max_abs_err"], ".2e"), accuracy, row["note"] or ""]


def changed_ops(before: dict[str, int], after: dict[str, int]) -> dict[str, tuple[int, int]]:
    """op -> (count before, count after), for the ops whose count a pass changed, by name."""
    return {op: (before.get(op, 0), after.get(op, 0)) for op in sorted({*before, *after})
            if before.get(op, 0) != after.get(op, 0)}


def _op_changes(record: PassEntry) -> str:
    """The op counts a pass moved, e.g. 'nn.batch_norm 5→0, add 0→5'."""
    moved = [f"{op.removeprefix('relax.')} {was}→{now}"
             for op, (was, now) in changed_ops(record.ops_before, record.ops_after).items()]
    return ", ".join(moved) or "no op-count change"


def pass_cells(record: PassEntry) -> list[str]:
    """One pipeline step: its name, wall time, total op count before → after, the op counts it moved."""
    before, after = record.ops_before, record.ops_after
    return [record.name, number_text(record.seconds, ".3f"), f"{sum(before.values())} → {sum(after.values())}",
            _op_changes(record)]


def target_text(result: RunResult) -> str:
    """The target as configured: its name, or its settings as JSON."""
    target = result.target
    return target if isinstance(target, str) else json.dumps(target, sort_keys=True)


def resolved_text(result: RunResult) -> str:
    """'llvm-znver3 (sse4.2, avx, avx2, fma, f16c; host CPU znver3; 2 threads for every runtime)': what the configured
    target resolved to, and the threads TVM's, ONNX Runtime's and IREE's kernels ran on."""
    resolved = result.target_resolved
    if not resolved:
        return "—"
    features = ", ".join(resolved.get("features") or []) or "no vector extensions"
    threads = f"; {result.threads} threads for every runtime" if result.threads else ""
    return f"{resolved['key']} ({features}; host CPU {resolved.get('host_cpu')}{threads})"


def heading(result: RunResult) -> str:
    """'quickstart: fold_constant,fuse on llvm-znver3': the run, its pipeline and the target it was built for."""
    target = (result.target_resolved or {}).get("key") or target_text(result)
    return f"{result.name}: {result.pipeline_text or '(empty pipeline)'} on {target}"


def cuda_cells(label: str, report: CudaReport) -> list[str]:
    """One build's static CUDA figures: kernels, launches, intermediate bytes, the largest per-kernel figures."""
    kernels = report.per_kernel.values()

    def most(key: str) -> str:
        return number_text(max((getattr(k, key) for k in kernels if getattr(k, key) is not None), default=None), "d")

    return [label, str(report.kernels), str(report.launches), f"{report.intermediate_bytes / 1e6:.2f}",
            most("threads_per_block"), most("registers"), most("shared_bytes")]


def kernel_cells(report: CudaReport) -> list[list[str]]:
    """Every kernel of one CUDA build: threads per block, registers, static shared memory."""
    return [[name, number_text(k.threads_per_block, "d"), number_text(k.registers, "d"), number_text(k.shared_bytes, "d")]
            for name, k in report.per_kernel.items()]


def profile_note(result: RunResult) -> str:
    """The profile table's caption; it gives the instrument cost taken off each workbench call."""
    ours = (result.profile or {}).get(WORKBENCH_LABEL)
    less = f", less the instrument's own {ours.instrument_us:.1f} µs per call" if ours and ours.instrument_us else ""
    return ("mean time per inference of each kernel (workbench: timed around each VM call" + less +
            "; ort_all: ONNX Runtime's node trace), largest first; share: of the kernels' summed time")


def _profile_side(profile: Profile | None, rows: int) -> list[list[str]]:
    """One side of the profile table: name, µs, share per kernel, then 'other' and the total; padded to `rows`."""
    if profile is None:
        return [["", "", ""]] * rows
    cells = [[k.name, f"{k.us:.1f}", f"{k.share:.0%}"] for k in profile.kernels]
    other = profile.other
    if other.kernels:
        cells.append([f"other ({other.kernels})", f"{other.us:.1f}", f"{other.share:.0%}"])
    cells += [["", "", ""]] * (rows - 1 - len(cells))
    return cells + [["total", f"{profile.total_us:.1f}", "100%"]]


def profile_rows(result: RunResult) -> list[list[str]]:
    """The workbench's top kernels beside ort_all's top nodes, row by row (rank, then each side's cells)."""
    sides = result.profile or {}
    ours, theirs = sides.get(WORKBENCH_LABEL), sides.get("ort_all")
    length = max(len(side.kernels) + (1 if side.other.kernels else 0) + 1 for side in (ours, theirs) if side)
    left, right = _profile_side(ours, length), _profile_side(theirs, length)
    return [[str(i + 1) if i < length - 1 else "", *a, *b] for i, (a, b) in enumerate(zip(left, right))]
