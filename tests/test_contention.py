"""The core contention probe at the head of every results page (measure/contention.py): threads made to share one
core take about twice as long each as one alone, and the figure a page prints is the one it measured."""

import os

import pytest

from workbench.measure.contention import Contention, thread_contention
from workbench.record.results_page import Machine, contention_line


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no thread affinity on this OS")
def test_two_threads_sharing_one_core_take_about_twice_as_long_each():
    """Pinned to one CPU (the probe's threads inherit the pin), two threads share it; one thread is the reference."""
    assert thread_contention(1) == 1.0
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        shared = thread_contention(2)
    finally:
        os.sched_setaffinity(0, allowed)
    assert 1.6 <= shared <= 2.6


def test_a_page_prints_the_figures_it_measured():
    line = contention_line(Contention(2, 1.04, 1.71))
    assert "2 threads" in line and "1.04× (start)" in line and "1.71× (end)" in line
    assert "1.04× (start)" in Machine("llvm-test", 2, contention=Contention(2, 1.04, 1.71)).lines()
    assert contention_line(None) == "" and "cores:" not in Machine("llvm-test", 2).lines()
