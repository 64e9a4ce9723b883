"""The op-conformance page (`workbench bench conformance`): per op x opset x variant, pass / fail / refused with the
one-line reason, and the totals the README quotes; a CSV beside it for tools."""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal

from workbench.atomic import atomic_write_text
from workbench.record.results_page import Machine, write_results_page

Status = Literal["pass", "fail", "refused", "ort cannot run", "no case"]


@dataclass(frozen=True)
class CaseResult:
    """One conformance case's outcome (workbench/stages/conformance.py runs it)."""

    op: str
    opset: int
    variant: str
    status: Status
    reason: str = ""

    @property
    def counted(self) -> bool:
        """Does the case count toward the pass rate (ONNX Runtime runs it)?"""
        return self.status in ("pass", "fail", "refused")


def totals(results: list[CaseResult]) -> str:
    """'658 of 663 cases ONNX Runtime runs pass (99.2%); 5 refused with exit 2 and their reason, 0 fail; ...'."""
    counts = Counter(result.status for result in results)
    counted = sum(1 for result in results if result.counted)
    share = 100 * counts["pass"] / counted if counted else 0.0
    return (f"{counts['pass']} of {counted} cases ONNX Runtime runs pass ({share:.1f}%); {counts['refused']} refused "
            f"with exit 2 and their reason, {counts['fail']} fail; {counts['ort cannot run']} cases ONNX Runtime "
            f"itself cannot run and {counts['no case']} op versions without a valid case are not counted")


def write_conformance(results: list[CaseResult], machine: Machine, protocol: str, out_dir: Path,
                      stem: str = "conformance") -> list[Path]:
    """`<stem>.md` (the totals, then the failures and refusals first, then every case) and `<stem>.csv`."""
    order = {"fail": 0, "refused": 1, "pass": 2, "ort cannot run": 3, "no case": 4}
    rows = [[r.op, str(r.opset), r.variant or "—", r.status, r.reason.replace("|", "/") or "—"]
            for r in sorted(results, key=lambda r: (order[r.status], r.op, r.opset, r.variant))]
    page = write_results_page(out_dir, stem, "ONNX op conformance", machine, protocol,
                              ("op", "opset", "case", "result", "reason"), rows, f"**Total:** {totals(results)}.")
    text = io.StringIO()
    writer = csv.DictWriter(text, [f.name for f in fields(CaseResult)])
    writer.writeheader()
    writer.writerows(asdict(result) for result in results)
    return [page, atomic_write_text(Path(out_dir) / f"{stem}.csv", text.getvalue())]
