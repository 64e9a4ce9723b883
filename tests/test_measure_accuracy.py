"""Timing statistics and output comparison."""

import time

import numpy as np

from workbench.measure.runners import Runner
from workbench.measure.timing import interleaved, summarize, time_call
from workbench.models.accuracy import compare


def test_time_call_measures_real_time_and_counts_calls():
    calls = []
    timing = time_call(lambda: (calls.append(1), time.sleep(0.002)), warmup=2, repeat=10)
    assert len(calls) == 12 and timing.repeats == 10
    assert 2.0 <= timing.min_ms <= timing.median_ms <= timing.p90_ms
    low, high = timing.ci95_ms
    assert low <= timing.median_ms <= high


def test_summary_statistics_match_numpy():
    samples = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 100.0])
    timing = summarize(samples)
    assert timing.median_ms == 3.5 and timing.p90_ms == np.percentile(samples, 90) and timing.min_ms == 1.0


def test_compare_errors_and_tolerance_rule():
    ref = [np.array([[1.0, 2.0, -4.0]], dtype=np.float32)]
    close = [ref[0] + np.float32(5e-5)]
    far = [np.array([[1.0, 2.0, -4.1]], dtype=np.float32)]
    good = compare(close, ref, rtol=1e-3, atol=1e-4)
    assert good["ok"] and abs(good["max_abs_err"] - 5e-5) < 1e-6 and good["cosine"] > 0.9999
    bad = compare(far, ref, rtol=1e-3, atol=1e-4)
    assert not bad["ok"] and abs(bad["max_abs_err"] - 0.1) < 1e-5 and abs(bad["max_rel_err"] - 0.025) < 1e-5
    assert good["top1_agreement"] == 1.0
    swapped = compare([np.array([[3.0, 2.0, -4.0]])], ref, rtol=1e-3, atol=1e-4)
    assert swapped["top1_agreement"] == 0.0
    shape = compare([np.zeros((2, 3))], ref, rtol=1e-3, atol=1e-4)
    assert not shape["ok"] and "shape" in shape["note"]


def test_interleaved_rounds_time_every_label_in_turn_and_keep_going_past_a_failure():
    """Each round times every label once, in order; a label whose call raises is left out of the later rounds and
    the result, its exception kept, and the others are timed to the end."""
    order: list[str] = []

    def runner(label: str, fail_on: int | None = None) -> Runner:
        calls = []

        def run_once():
            calls.append(1)
            order.append(label)
            if fail_on is not None and len(calls) >= fail_on:
                raise RuntimeError(f"{label} lost its device")
        return Runner(label, run_once, lambda _: [])

    failures: dict[str, Exception] = {}
    timings = interleaved({"a": runner("a"), "b": runner("b", fail_on=5), "c": runner("c")}, warmup=1, repeat=3,
                          rounds=3, failures=failures)
    assert set(timings) == {"a", "c"} and timings["a"].repeats == 9 and timings["c"].repeats == 9
    assert list(failures) == ["b"] and "lost its device" in str(failures["b"])
    assert order[:12] == ["a"] * 4 + ["b"] * 4 + ["c"] * 4  # round 1: each label's warm-up and runs, in turn
    assert order[12:16] == ["a"] * 4 and order.count("b") == 5  # round 2: b fails on its first call, then is skipped
    try:
        interleaved({"b": runner("b", fail_on=1)}, warmup=0, repeat=1, rounds=1)
    except RuntimeError as exc:  # without `failures` the exception is the caller's
        assert "lost its device" in str(exc)
    else:
        raise AssertionError("a failing label without `failures` must raise")


def test_round_seconds_caps_a_slow_labels_runs_and_leaves_a_fast_one_its_repeat():
    """A label of 20 ms a run under a 0.1 s cap runs about 5 times a round (at least 3), a 0.1 ms one all 40."""
    def runner(label: str, seconds: float) -> Runner:
        return Runner(label, lambda: time.sleep(seconds), lambda _: [])

    timings = interleaved({"slow": runner("slow", 0.02), "fast": runner("fast", 0.0001)}, warmup=1, repeat=40,
                          rounds=2, round_seconds=0.1)
    assert 2 * 3 <= timings["slow"].repeats <= 2 * 6 and timings["fast"].repeats == 2 * 40
    assert timings["slow"].median_ms >= 20


def test_ort_runner_binds_inputs_once_and_runs_string_inputs_without_binding():
    """I/O binding (inputs placed once, outputs bound) gives session.run's outputs, call after call; OrtValues hold
    no strings, so a model with a string input runs with plain calls."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from workbench.measure.runners import ort_runner

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)
    runner = ort_runner("ort_all", model, {"x": x}, threads=1)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for _ in range(3):
        np.testing.assert_array_equal(runner.infer()[0], expected[0])
    strings = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "g",
                                [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                                [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    words = np.array(["a", "bc"], dtype=object)
    echoed = ort_runner("ort_none", helper.make_model(strings, opset_imports=[helper.make_opsetid("", 17)]),
                        {"s": words}, threads=1).infer()[0]
    assert list(echoed) == ["a", "bc"]
