"""`workbench bench conformance`: every op of TVM's Relax ONNX frontend, at each opset where its signature changed,
as small one-op models (models/op_cases.py) built with `pipeline: default` for this CPU and compared with ONNX
Runtime (stages/conformance.py). Writes conformance.md and .csv: per op x opset x case, pass / fail / refused with
the one-line reason, and the totals.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from tvm.relax.frontend.onnx import onnx_frontend

from workbench.bench.output import RESULTS, flushed
from workbench.compile.targets import make_target, target_key
from workbench.config import TargetConfig
from workbench.models.op_cases import OpCase, op_cases
from workbench.record.conformance_page import CaseResult, totals, write_conformance
from workbench.record.results_page import Machine
from workbench.runtime.threads import target_threads
from workbench.stages.conformance import run_case

PROTOCOL = ("- each case: one ONNX node (its data inputs graph inputs, seeded; what the op needs constant an "
            "initializer), run by ONNX Runtime as exported (graph optimizations off: the reference), then by the "
            "workbench: canonicalize, import, `pipeline: default`, build for this CPU, run; outputs within "
            "rtol 1e-4 / atol 1e-4\n"
            "- *refused*: the workbench exits 2 with the reason shown; *ort cannot run*: ONNX Runtime refuses the "
            "case itself (not counted)")


def frontend_ops() -> list[str]:
    """Every op TVM's Relax ONNX frontend converts."""
    return sorted(onnx_frontend._get_convert_map())  # noqa: SLF001 - the frontend's own op list


def run_cases(ops: list[str], log: Callable[[str], None] = flushed) -> list[CaseResult]:
    """Every case of `ops`, in order, one line logged per case."""
    results = []
    with tempfile.TemporaryDirectory(prefix="conformance_") as work:
        for case in op_cases(ops):
            if isinstance(case, OpCase):
                result = run_case(case, Path(work))
            else:
                op, opset, reason = case
                result = CaseResult(op, opset, "", "no case", reason)
            results.append(result)
            log(f"{result.op}-{result.opset} {result.variant}: {result.status}"
                + (f" ({result.reason})" if result.reason else ""))
    return results


def run_conformance(only: list[str] | None = None, out: Path = RESULTS,
                    log: Callable[[str], None] = flushed) -> list[Path]:
    """The cases of `only` (default: every op of the frontend); return the page's files."""
    results = run_cases(only or frontend_ops(), log)
    target = make_target(TargetConfig())
    written = write_conformance(results, Machine(target_key(target), target_threads(target)), PROTOCOL, out)
    log(totals(results))
    log("wrote " + ", ".join(str(path) for path in written))
    return written
