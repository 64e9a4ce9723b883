"""Long work in a log without a terminal prints a status line on a timer and once at the end."""

import io
import time

from rich.console import Console

from workbench.runtime.heartbeat import heartbeat


def test_a_line_every_interval_and_one_at_the_end():
    out, ticks = io.StringIO(), iter(range(1000))
    console = Console(file=out, force_terminal=False, width=200)
    with heartbeat(console, lambda: f"sweep s: done [green]{next(ticks)}[/]", every_s=0.05):
        time.sleep(0.22)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4 and lines[0] == "sweep s: done [green]0[/]"  # printed as is: no markup, no colour
    assert [int(line.split()[-1].removesuffix("[/]").split("]")[-1]) for line in lines] == list(range(len(lines)))
