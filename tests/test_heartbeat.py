"""Long work in a log without a terminal prints a status line on a timer and once at the end."""

import io
import threading

from rich.console import Console

from workbench.runtime.heartbeat import heartbeat


def test_a_line_every_interval_and_one_at_the_end():
    out, ticks, beaten = io.StringIO(), iter(range(1000)), threading.Event()
    console = Console(file=out, force_terminal=False, width=200)

    def line() -> str:
        tick = next(ticks)
        if tick == 2:  # the third beat ends the block: a fixed sleep would hold fewer beats on a loaded machine
            beaten.set()
        return f"sweep s: done [green]{tick}[/]"

    with heartbeat(console, line, every_s=0.05):
        assert beaten.wait(30)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4 and lines[0] == "sweep s: done [green]0[/]"  # printed as is: no markup, no colour
    assert [int(line.split()[-1].removesuffix("[/]").split("]")[-1]) for line in lines] == list(range(len(lines)))
