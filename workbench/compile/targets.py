"""Target specs from the config -> `tvm.target.Target` and the device to run on.

A cuda target takes its limits (max_threads_per_block, max_shared_memory_per_block,
thread_warp_size, registers_per_block, L2 size), which dlight and MetaSchedule schedule against,
from TVM's tag of a representative GPU of that compute capability (`CUDA_TAGS`); `arch` stays the
configured one (the H100 tag says sm_90a, which the other sm_90 parts lack).
"""

from __future__ import annotations

import tvm

from workbench.config import CudaArch, TargetConfig

CUDA_TAGS: dict[str, str] = {
    "sm_80": "nvidia/nvidia-a100",
    "sm_86": "nvidia/geforce-rtx-3090",
    "sm_89": "nvidia/geforce-rtx-4090",
    "sm_90": "nvidia/nvidia-h100",
}
assert set(CUDA_TAGS) == set(CudaArch.__args__), "every configurable arch needs a tag"


def make_target(spec: TargetConfig) -> tvm.target.Target:
    """Build the TVM target (0.27 takes dicts; keys with dashes as TVM spells them).

    A cuda target needs nvcc (to write the PTX and the kernel report): checked here, before any long work."""
    if spec.kind == "cuda":
        from workbench.compile.cuda_report import require_nvcc

        require_nvcc()
        limits = dict(tvm.target.Target(CUDA_TAGS[spec.arch]).attrs)
        return tvm.target.Target({**limits, "kind": "cuda", "arch": spec.arch}, host={"kind": spec.host or "llvm"})
    options: dict[str, object] = {"kind": spec.kind}
    if spec.mcpu:
        options["mcpu"] = spec.mcpu
    if spec.num_cores:
        options["num-cores"] = spec.num_cores
    return tvm.target.Target(options)


def is_cuda(target: tvm.target.Target) -> bool:
    return target.kind.name == "cuda"


def device_for(target: tvm.target.Target, session=None) -> tvm.runtime.Device:
    """The device a build for `target` runs on (llvm builds run on the host CPU), local or in an RPC session."""
    kind = "cpu" if target.kind.name == "llvm" else target.kind.name
    return session.device(kind, 0) if session is not None else tvm.device(kind, 0)


def describe(spec: TargetConfig) -> str | dict:
    """The target as result.json records it: a plain kind string when nothing else is set."""
    options = spec.model_dump(exclude_none=True)
    return options["kind"] if set(options) == {"kind"} else options
