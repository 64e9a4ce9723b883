"""Target specs from the config -> `tvm.target.Target` and the device to run on.

An llvm target means this machine's CPU unless it says otherwise: without `mcpu` (or with
`mcpu: host`) the CPU is LLVM's name for the host (e.g. znver3), so the code uses its vector
units (AVX2, AVX-512, FMA) as ONNX Runtime's run-time kernel selection does; `mcpu: generic` opts
out (baseline x86-64: SSE2 only) and any other LLVM CPU name cross-compiles for that CPU.
`target_key` names the resolved target (`llvm-znver3`, `cuda-sm_90`): tuning databases are kept
per key, since schedules tuned for one CPU are not the best for another.

A cuda target takes its limits (max_threads_per_block, max_shared_memory_per_block,
thread_warp_size, registers_per_block, L2 size), which dlight and MetaSchedule schedule against,
from TVM's tag of a representative GPU of that compute capability (`CUDA_TAGS`); `arch` stays the
configured one (the H100 tag says sm_90a, which the other sm_90 parts lack).
"""

from __future__ import annotations

import tvm
from tvm.target import codegen

from workbench.config import CudaArch, TargetConfig
from workbench.errors import UserError
from workbench.runtime.threads import target_threads, use_tvm_threads

GENERIC_CPU = "generic"
HOST_CPU = "host"
# The LLVM CPU features that decide how fast the kernels can be (vector width, FMA, int8/fp16 dot products).
# sse4a: AMD only (LLVM emits its insertq for znver targets), so a znver build does not run on an Intel CPU with AVX2
VECTOR_FEATURES = ("sse4.2", "sse4a", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni",
                   "avxvnni", "avx512bf16", "avx512fp16", "amx-int8", "neon", "dotprod", "i8mm", "sve")

CUDA_TAGS: dict[str, str] = {
    "sm_80": "nvidia/nvidia-a100",
    "sm_86": "nvidia/geforce-rtx-3090",
    "sm_89": "nvidia/geforce-rtx-4090",
    "sm_90": "nvidia/nvidia-h100",
}
assert set(CUDA_TAGS) == set(CudaArch.__args__), "every configurable arch needs a tag"


def make_target(spec: TargetConfig) -> tvm.target.Target:
    """Build the TVM target (0.27 takes dicts; keys with dashes as TVM spells them).

    An llvm target also sizes TVM's thread pool for this process: its kernels run on the target's `num_cores`,
    by default this machine's physical cores, as ONNX Runtime's and IREE's do (runtime/threads.py).
    A cuda target needs nvcc (to write the PTX and the kernel report): checked here, before any long work."""
    if spec.kind == "cuda":
        from workbench.compile.cuda_report import require_nvcc

        require_nvcc()
        limits = dict(tvm.target.Target(CUDA_TAGS[spec.arch]).attrs)
        return tvm.target.Target({**limits, "kind": "cuda", "arch": spec.arch}, host={"kind": spec.host or "llvm"})
    options: dict[str, object] = {"kind": spec.kind}
    mcpu = resolve_mcpu(spec.mcpu)
    if mcpu is not None:
        options["mcpu"] = mcpu
    if spec.num_cores:
        options["num-cores"] = spec.num_cores
    target = tvm.target.Target(options)
    use_tvm_threads(target_threads(target))
    return target


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (what `-mcpu=native` would pick), e.g. znver3, skylake-avx512."""
    return str(codegen.llvm_get_system_cpu())


def resolve_mcpu(mcpu: str | None) -> str | None:
    """The LLVM CPU an llvm target compiles for: the host's by default, none for `generic`, or the one named
    (checked against LLVM's list, so a typo fails here and not deep inside code generation)."""
    if mcpu in (None, HOST_CPU):
        return host_cpu()
    if mcpu == GENERIC_CPU:
        return None
    if not codegen.llvm_is_valid_cpu(mcpu, codegen.llvm_get_system_triple()):
        raise UserError(f"target.mcpu {mcpu!r}: LLVM does not know this CPU; use a name such as "
                        f"{host_cpu()!r} (this machine), 'generic' (baseline x86-64), or leave mcpu out for the host")
    return mcpu


def target_key(target: tvm.target.Target) -> str:
    """The resolved target in one word, the name of its tuning database folder: llvm-znver3, llvm-generic,
    cuda-sm_90."""
    if target.kind.name == "cuda":
        return f"cuda-{target.attrs['arch']}"
    return f"{target.kind.name}-{target.attrs.get('mcpu', GENERIC_CPU)}"


def cpu_features(target: tvm.target.Target) -> list[str]:
    """The vector features (VECTOR_FEATURES) the llvm target's code may use; empty for other kinds."""
    if target.kind.name != "llvm":
        return []
    available = set(codegen.llvm_get_cpu_features(target))
    return [feature for feature in VECTOR_FEATURES if feature in available]


def missing_features(target: tvm.target.Target) -> list[str]:
    """The vector features an llvm target's code may use that this machine's CPU lacks."""
    host = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu()})
    return sorted(set(cpu_features(target)) - set(cpu_features(host)))


def runs_here(target: tvm.target.Target) -> bool:
    """Whether code built for `target` runs on this machine: an llvm target whose vector features this CPU has."""
    return target.kind.name == "llvm" and not missing_features(target)


def resolved(target: tvm.target.Target) -> dict:
    """What result.json records of the target actually built for: its key, CPU (llvm) or arch (cuda), the vector
    features the code may use, and the host's CPU."""
    llvm = target.kind.name == "llvm"
    return {"key": target_key(target), "kind": target.kind.name,
            "mcpu": str(target.attrs.get("mcpu", GENERIC_CPU)) if llvm else None,
            "arch": None if llvm else str(target.attrs.get("arch")),
            "features": cpu_features(target), "host_cpu": host_cpu()}


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
