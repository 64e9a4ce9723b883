"""Op conformance: every op of TVM's Relax ONNX frontend, at each opset where its signature changed, as small
one-op models (workbench/models/op_cases.py) built with `pipeline: default` for this CPU and compared with ONNX
Runtime (workbench/stages/conformance.py). Writes conformance.md and .csv into --out (default docs/results/): per
op x opset x case, pass / fail / refused with the one-line reason, and the total the README quotes.

    python scripts/bench_conformance.py [--only Resize TopK] [--out docs/results]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tvm.relax.frontend.onnx import onnx_frontend

from workbench.compile.targets import make_target, target_key
from workbench.config import TargetConfig
from workbench.models.op_cases import OpCase, op_cases
from workbench.record.conformance_page import CaseResult, totals, write_conformance
from workbench.record.results_page import Machine
from workbench.runtime.threads import target_threads
from workbench.stages.conformance import run_case

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = ("- each case: one ONNX node (its data inputs graph inputs, seeded; what the op needs constant an "
            "initializer), run by ONNX Runtime as exported (graph optimizations off: the reference), then by the "
            "workbench: canonicalize, import, `pipeline: default`, build for this CPU, run; outputs within "
            "rtol 1e-4 / atol 1e-4\n"
            "- *refused*: the workbench exits 2 with the reason shown; *ort cannot run*: ONNX Runtime refuses the "
            "case itself (not counted)")


def run(ops: list[str], log=print) -> list[CaseResult]:
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


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="OP", help="these ops only (default: the frontend's every op)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = parser.parse_args(argv)
    ops = args.only or sorted(onnx_frontend._get_convert_map())  # noqa: SLF001 - the frontend's own op list
    results = run(ops)
    target = make_target(TargetConfig())
    written = write_conformance(results, Machine(target_key(target), target_threads(target)), PROTOCOL, args.out)
    print(totals(results))
    print("wrote " + ", ".join(str(path) for path in written))
    return written


if __name__ == "__main__":
    main()
