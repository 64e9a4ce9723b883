"""Test-only plugin for `workbench sweep`: registers `abort_now`, a pass that kills its process with os.abort(),
and `hang_now`, a pass that sleeps for ten minutes.

Sweep workers import it via `plugins: [tests.sweep_plugin_abort]`; it proves a crash or a hang inside a pass
fails only that variant.
"""

import os
import time

import tvm

from workbench.passes.registry import register


@register("abort_now", "analysis")
def abort_now(_params) -> tvm.transform.Pass:
    """Test only: abort the process (simulates a crash inside TVM)."""

    def run(mod, _ctx):
        os.abort()

    return tvm.transform.module_pass(run, opt_level=0, name="abort_now")


@register("hang_now", "analysis")
def hang_now(_params) -> tvm.transform.Pass:
    """Test only: hang (simulates a pass that never returns)."""

    def run(mod, _ctx):
        time.sleep(600)
        return mod

    return tvm.transform.module_pass(run, opt_level=0, name="hang_now")
