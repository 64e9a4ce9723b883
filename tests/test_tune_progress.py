"""Tuning's progress where no terminal is attached: plain lines at least every interval and one at the end, naming
the elapsed time, the trials done of the budget, and the task being tuned with its best so far."""

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

from workbench.compile.tasks import TaskResult
from workbench.runtime.heartbeat import heartbeat
from workbench.stages.tuning import plain_progress


def test_plain_lines_come_at_each_interval_and_at_the_end(monkeypatch):
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    assert not console.is_terminal
    beats: list[Callable[[], None]] = []

    @contextmanager
    def beat_by_hand(console: Console, line: Callable[[], str], every_s: float) -> Iterator[None]:
        """The real heartbeat with a timer too slow to fire: the test beats between reports, so which lines come
        does not depend on how fast the machine runs."""
        assert every_s == 0.05  # plain_progress's interval reaches the heartbeat
        beats.append(lambda: console.print(line(), highlight=False, markup=False))
        with heartbeat(console, line, every_s=3600):
            yield

    monkeypatch.setattr("workbench.stages.tuning.heartbeat", beat_by_hand)
    with plain_progress(console, every_s=0.05) as report:
        report(TaskResult("fused_conv2d_add_relu", weight=1, budget=16, trials_before=0, trials_run=8, best_us=115.0))
        beats[0]()
        report(TaskResult("fused_matmul_add", weight=1, budget=8, trials_before=0, trials_run=3, best_us=None,
                          rejected=1))
        beats[0]()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # the two beats and the closing line
    assert lines[0].endswith("8/16 trials, 1 tasks; fused_conv2d_add_relu: 8/16, best 115.0 µs")
    assert all(line.endswith("11/24 trials, 2 tasks; fused_matmul_add: 3/8, best — (1 wrong schedule(s) dropped)")
               for line in lines[1:])
    assert all(line.startswith("tuning ") for line in lines)
