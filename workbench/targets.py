"""Target specs from the config -> `tvm.target.Target` and the device to run on."""

from __future__ import annotations

import tvm

from workbench.config import TargetConfig


def make_target(spec: TargetConfig) -> tvm.target.Target:
    """Build the TVM target (0.27 takes dicts; keys with dashes as TVM spells them)."""
    options: dict[str, object] = {"kind": spec.kind}
    if spec.mcpu:
        options["mcpu"] = spec.mcpu
    if spec.num_cores:
        options["num-cores"] = spec.num_cores
    return tvm.target.Target(options)


def device_for(target: tvm.target.Target) -> tvm.runtime.Device:
    """The device a build for `target` runs on (llvm builds run on the host CPU)."""
    return tvm.device("cpu" if target.kind.name == "llvm" else target.kind.name, 0)


def describe(spec: TargetConfig) -> str | dict:
    """The target as result.json records it: a plain kind string when nothing else is set."""
    options = spec.model_dump(exclude_none=True)
    return options["kind"] if set(options) == {"kind"} else options
