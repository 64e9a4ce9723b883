"""Test only: a sweep plugin that holds each worker at its second "run" task
(`pause_points.hold_sweep_worker_at_second_run`), so a test kills the sweep with exactly one variant done.

It acts only where `pause_points.PAUSE_ENV` is set (the sweep started by `pause_points.held`): a sweep that lists
it without that runs as usual.
"""

import os

from tests.pause_points import PAUSE_ENV, hold_sweep_worker_at_second_run

if PAUSE_ENV in os.environ:
    hold_sweep_worker_at_second_run()
