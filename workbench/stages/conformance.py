"""One op-conformance case (models/op_cases.py) run as a user's model would be: ONNX Runtime runs it as exported
(the reference; a case ONNX Runtime cannot run is not counted), then the workbench prepares it, runs `pipeline:
default`, builds it for this CPU and runs it on the same seeded inputs. A case passes when the outputs agree; one
the workbench refuses with a readable error (exit 2: a UserError naming the op) is `refused`; an internal error or
wrong numbers fail it."""

from __future__ import annotations

from pathlib import Path

import onnx

from workbench.compile.targets import make_target
from workbench.config import validate
from workbench.errors import UserError, one_line
from workbench.measure.factory import Bench, runner_for
from workbench.models.accuracy import compare
from workbench.models.inputs import make_inputs
from workbench.models.op_cases import OpCase
from workbench.record.conformance_page import CaseResult
from workbench.stages import build, optimize, prepare

RTOL, ATOL = 1e-4, 1e-4


def run_case(case: OpCase, work_dir: Path) -> CaseResult:
    """The case's outcome (see the module doc); never raises for the case's own failure."""
    path = work_dir / f"{case.name.replace(' ', '_').replace('/', '_')}.onnx"
    onnx.save(case.model, path)
    inputs = {value.name: {"shape": [d.dim_value for d in value.type.tensor_type.shape.dim],
                           "dtype": onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name,
                           "range": list(case.ranges[value.name])}
              for value in case.model.graph.input}
    result = lambda status, reason="": CaseResult(case.op, case.opset, case.variant, status, reason)  # noqa: E731
    try:
        experiment = validate({"name": "conformance", "model": {"source": str(path), "inputs": inputs},
                               "pipeline": "default", "output": str(work_dir / "out")}, case.name)
    except UserError as exc:  # inputs a config cannot describe: a user's model like it is refused the same way
        return result("refused", one_line(exc))
    try:
        feeds = make_inputs(case.model, experiment.model, experiment.seed, work_dir)
    except Exception as exc:  # noqa: BLE001 - the workbench's own step: a failure, not excused as ONNX Runtime's
        return result("fail", f"inputs: {one_line(exc)}")
    bench = Bench(case.model, feeds, make_target(experiment.target), work_dir, threads=1)
    try:
        reference = runner_for("ort_none", bench).infer()
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own non-exported classes
        return result("ort cannot run", one_line(exc))
    try:
        prepared = prepare(experiment, work_dir)
        built = build(optimize(prepared, experiment.pipeline, stats=False), prepared.target)
        ours = runner_for("workbench", Bench(prepared.canonical, prepared.inputs, prepared.target, work_dir),
                          built).infer()
    except UserError as exc:
        return result("refused", one_line(exc))
    except Exception as exc:  # noqa: BLE001 - any internal error is the case's failure, with its reason
        return result("fail", one_line(exc))
    accuracy = compare(ours, reference, RTOL, ATOL)
    if accuracy["ok"]:
        return result("pass")
    return result("fail", accuracy["note"] or f"wrong numbers: max abs err {accuracy['max_abs_err']:.2e}")
