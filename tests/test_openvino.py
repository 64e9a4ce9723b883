"""The `openvino` baselines: OpenVINO's CPU plugin runs the canonical model with its precision stated (f32, or bf16
where the CPU has it natively), matches ONNX Runtime, and is measured in a run beside the workbench build."""

from pathlib import Path

import numpy as np
import pytest

from workbench.compile.targets import make_target
from workbench.config import TargetConfig, validate
from workbench.errors import BaselineUnavailable
from workbench.experiment import run_experiment
from workbench.measure.factory import Bench, runner_for
from workbench.measure.openvino import has_bf16
from workbench.models import zoo
from workbench.models.inputs import canonical_model, make_inputs

openvino = pytest.importorskip("openvino", reason="OpenVINO is an optional extra: pip install -e '.[openvino]'")


def _bench(tmp_path: Path, name: str) -> Bench:
    experiment = validate({"name": name, "model": {"source": f"zoo:{name}", "inputs": zoo.default_inputs(name)}}, name)
    model = canonical_model(experiment.model, tmp_path).model
    return Bench(model, make_inputs(model, experiment.model, 0, tmp_path), make_target(TargetConfig()), tmp_path)


@pytest.mark.parametrize("name", ["convnet_small", "transformer_block"])
def test_openvino_f32_matches_onnx_runtime(tmp_path, name):
    bench = _bench(tmp_path, name)
    reference = runner_for("ort_none", bench).infer()
    ours = runner_for("openvino", bench).infer()
    assert len(ours) == len(reference)
    for got, want in zip(ours, reference):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_precision_is_set_bf16_differs_from_f32(tmp_path):
    """On a CPU with native bf16, OpenVINO's default would be bf16: the `openvino` label must still be f32 (its
    error against ONNX Runtime is fp32 rounding) and `openvino_bf16` must really run bf16 (a larger error)."""
    bench = _bench(tmp_path, "convnet_small")
    reference = runner_for("ort_none", bench).infer()[0]
    f32_error = float(np.abs(runner_for("openvino", bench).infer()[0] - reference).max())
    assert f32_error < 1e-4
    if not has_bf16():
        with pytest.raises(BaselineUnavailable, match="no native bf16"):
            runner_for("openvino_bf16", bench)
        pytest.skip("this CPU has no native bf16 (AVX512_BF16 or AMX): only the refusal is checked")
    bf16_error = float(np.abs(runner_for("openvino_bf16", bench).infer()[0] - reference).max())
    assert bf16_error > 100 * f32_error and bf16_error > 1e-4


def test_a_run_measures_openvino_beside_the_workbench(tmp_path):
    experiment = validate({"name": "ov", "model": {"source": "zoo:convnet_small", "inputs": {"x": [1, 3, 32, 32]}},
                           "baselines": ["ort_none", "openvino"], "measure": {"warmup": 1, "repeat": 3, "rounds": 2},
                           "output": str(tmp_path / "run")}, "ov")
    result = run_experiment(experiment, tmp_path, store=False)
    measured = result.measurements["openvino"]
    assert measured.median_ms > 0 and measured.repeats == 6  # two interleaved rounds of three
    assert result.accuracy["openvino"].ok and result.accuracy["workbench"].ok
    assert result.provenance["openvino"] == openvino.__version__.split("-")[0]
