"""The op-conformance suite, fast subset: the cases of the op forms that once failed (wrong numbers, internal errors)
and the attribute-to-input changes, run as a user's model would be and compared with ONNX Runtime; the refusals
that remain exit 2 with their reason; the page is written and read back. `workbench bench conformance`
runs every op of the frontend (docs/results/conformance.md)."""

import csv

import onnx
import pytest

from workbench.cli import main
from workbench.models.canonicalize import CONVERTED_OPSET, InputSpec, canonicalize
from workbench.models.op_cases import OpCase, op_cases
from workbench.record.conformance_page import write_conformance
from workbench.record.results_page import Machine
from workbench.stages.conformance import run_case

# op forms TVM's frontend got wrong or refused before canonicalize raised them (OLD_FORMS), and attribute forms
FIXED = {("Upsample", 7), ("Upsample", 9), ("Resize", 10), ("Slice", 7), ("TopK", 10), ("ArgMin", 7), ("ArgMax", 7)}
SUBSET = ["Upsample", "Resize", "Slice", "TopK", "ArgMin", "ArgMax", "ReduceSum", "Squeeze", "Unsqueeze", "Split", "Clip",
          "Pad", "Shape"]


def cases(ops: list[str]) -> list[OpCase]:
    return [case for case in op_cases(ops) if isinstance(case, OpCase)]


@pytest.fixture(scope="module")
def subset(tmp_path_factory):
    work = tmp_path_factory.mktemp("conformance")
    return [(case, run_case(case, work)) for case in cases(SUBSET)]


def test_every_case_onnxruntime_runs_passes_in_the_subset(subset):
    counted = [(case, result) for case, result in subset if result.counted]
    assert len(counted) >= 60
    assert [(case.name, result.reason) for case, result in counted if result.status != "pass"] == []
    assert FIXED <= {(case.op, case.opset) for case, result in counted if result.status == "pass"}


def test_an_old_op_form_is_raised_to_an_opset_the_frontend_converts_right():
    (upsample,) = [case for case in cases(["Upsample"]) if case.opset == 7]
    canonical = canonicalize(upsample.model, {"in0": InputSpec((1, 2, 6, 6))})
    assert canonical.converted_from == 7
    assert [node.op_type for node in canonical.model.graph.node if node.op_type != "Constant"] == ["Resize"]
    assert max(o.version for o in canonical.model.opset_import if o.domain in ("", "ai.onnx")) == CONVERTED_OPSET


@pytest.mark.parametrize(("op", "opset", "message"), [
    ("SequenceConstruct", 11, "graph output 'out0' is a sequence (made by node '', SequenceConstruct), opset 11: the "
                              "workbench runs models whose outputs are tensors"),
    ("SplitToSequence", 24, "graph output 'out0' is a sequence (made by node '', SplitToSequence), opset 24"),
    ("OptionalHasElement", 18, "node '' (OptionalHasElement, opset 18): OptionalHasElement expects one input"),
])
def test_the_remaining_refusals_exit_2_naming_the_op_and_opset(tmp_path, capsys, op, opset, message):
    (case,) = [case for case in cases([op]) if case.opset == opset]
    path = tmp_path / "case.onnx"
    onnx.save(case.model, path)
    inputs = [f"{value.name}=" + "x".join(str(d.dim_value) for d in value.type.tensor_type.shape.dim)
              for value in case.model.graph.input]
    assert main(["run", "--model", str(path), *[arg for given in inputs for arg in ("--input", given)],
                 "--set", f"output={tmp_path / 'out'}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err and "Traceback" not in err


def test_the_page_lists_every_case_with_its_result_and_the_total(subset, tmp_path):
    results = [result for _case, result in subset]
    page, table = write_conformance(results, Machine("llvm-test", 2), "- protocol", tmp_path)
    text = page.read_text()
    assert text.startswith("# ONNX op conformance on ") and "| op | opset | case | result | reason |" in text
    passed = sum(result.status == "pass" for result in results)
    counted = sum(result.counted for result in results)
    assert f"**Total:** {passed} of {counted} cases ONNX Runtime runs pass" in text
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == len(results) and {row["status"] for row in rows} <= {"pass", "refused", "ort cannot run"}
    assert rows[0].keys() == {"op", "opset", "variant", "status", "reason"}
