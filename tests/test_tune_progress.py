"""Tuning's progress where no terminal is attached: plain lines at least every interval and one at the end, naming
the elapsed time, the trials done of the budget, and the task being tuned with its best so far."""

import io
import time

from rich.console import Console

from workbench.compile.tasks import TaskResult
from workbench.stages.tuning import plain_progress


def test_plain_lines_come_at_each_interval_and_at_the_end():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    assert not console.is_terminal
    with plain_progress(console, every_s=0.05) as report:
        report(TaskResult("fused_conv2d_add_relu", weight=1, budget=16, trials_before=0, trials_run=8, best_us=115.0))
        time.sleep(0.2)
        report(TaskResult("fused_matmul_add", weight=1, budget=8, trials_before=0, trials_run=3, best_us=None,
                          rejected=1))
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3  # at least two beats and the closing line
    assert "8/16 trials, 1 tasks; fused_conv2d_add_relu: 8/16, best 115.0 µs" in lines[0]
    assert lines[-1].endswith("11/24 trials, 2 tasks; fused_matmul_add: 3/8, best — (1 wrong schedule(s) dropped)")
    assert all(line.startswith("tuning ") for line in lines)
