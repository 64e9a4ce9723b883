"""Timing statistics and output comparison."""

import time

import numpy as np

from workbench.measure.timing import summarize, time_call
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
