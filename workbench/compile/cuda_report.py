"""CUDA builds without a GPU: find nvcc, write each build's CUDA source and PTX, and a static kernel report.

The report makes fusion's claim visible before anything runs on a GPU: per build the number of
kernels, the launches one inference makes (kernel calls in the lowered Relax functions), the bytes
of intermediate tensors written by one kernel for the next (a lower bound on the memory traffic
between kernels), and per kernel its threads per block (`.maxntid` in the PTX) and the registers
and static shared memory ptxas reports (`ptxas -v`, run through nvcc).

All nvcc lookups go through `find_nvcc`: `$WORKBENCH_NVCC` (a path; set it to an empty or missing
file to hide nvcc), else `$CUDA_HOME/bin/nvcc`, else `nvcc` on PATH, else /usr/local/cuda/bin/nvcc.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from workbench.atomic import atomic_write_text
from workbench.errors import UserError

NVCC_ENV = "WORKBENCH_NVCC"
NVCC_FLAGS = ("-O3", "-w", "--expt-relaxed-constexpr", "--use_fast_math")


def find_nvcc() -> Path | None:
    """The nvcc to use, or None when there is none (see the module doc for the lookup order)."""
    if NVCC_ENV in os.environ:
        configured = Path(os.environ[NVCC_ENV])
        return configured if configured.is_file() and os.access(configured, os.X_OK) else None
    candidates = [Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"] if os.environ.get("CUDA_HOME") else []
    on_path = shutil.which("nvcc")
    candidates += [Path(on_path)] if on_path else []
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    return next((path for path in candidates if path.is_file() and os.access(path, os.X_OK)), None)


def require_nvcc() -> Path:
    """nvcc, or a UserError that says how to provide it."""
    nvcc = find_nvcc()
    if nvcc is None:
        where = f"${NVCC_ENV}={os.environ[NVCC_ENV]!r} is not an executable" if NVCC_ENV in os.environ else \
            "not in $CUDA_HOME/bin, on PATH or in /usr/local/cuda/bin"
        raise UserError(f"target.kind cuda: nvcc (the CUDA toolkit's compiler) was not found ({where}); install "
                        f"the CUDA toolkit, or point {NVCC_ENV} or CUDA_HOME at it, or build for target: llvm")
    return nvcc


def cuda_source(executable: tvm.runtime.Executable) -> str:
    """The generated CUDA source of a build (every kernel in one translation unit)."""
    pending, sources = [executable.mod], []
    while pending:
        module = pending.pop()
        if module.kind == "cuda":
            sources.append(module.inspect_source())
        pending.extend(module.imports)
    if not sources:
        raise ValueError("the build holds no CUDA module (was it built for a cuda target?)")
    return "\n".join(sources)


def _run_nvcc(args: list[str]) -> str:
    done = subprocess.run([str(require_nvcc()), *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout + done.stderr


def compile_ptx(source_path: Path, arch: str) -> tuple[Path, str]:
    """nvcc the CUDA source to PTX next to it; return the PTX path and ptxas's verbose report of it."""
    ptx = source_path.with_suffix(".ptx")
    _run_nvcc(["--ptx", f"-arch={arch}", *NVCC_FLAGS, "-o", str(ptx), str(source_path)])
    ptxas_log = _run_nvcc(["-cubin", f"-arch={arch}", "--ptxas-options=-v", "-o", os.devnull, str(ptx)])
    return ptx, ptxas_log


def parse_kernels(ptx_text: str, ptxas_log: str) -> dict[str, dict]:
    """Per kernel (PTX entry): threads per block, registers and static shared memory bytes."""
    kernels: dict[str, dict] = {}
    for match in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\)\s*((?:\.\w+[^\n]*\n\s*)*)\{", ptx_text, re.S):
        threads = re.search(r"\.(?:maxntid|reqntid)\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", match.group(3))
        count = int(np.prod([int(t) for t in threads.groups() if t])) if threads else None
        kernels[match.group(1)] = {"threads_per_block": count, "registers": None, "shared_bytes": 0}
    current = None
    for line in ptxas_log.splitlines():
        if entry := re.search(r"Compiling entry function '(\w+)'", line):
            current = kernels.setdefault(entry.group(1), {"threads_per_block": None, "registers": None,
                                                          "shared_bytes": 0})
        elif current is not None and (used := re.search(r"Used (\d+) registers", line)):
            current["registers"] = int(used.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            current["shared_bytes"] = int(smem.group(1)) if smem else 0
    return kernels


def _relax_functions(mod: tvm.IRModule) -> list[relax.Function]:
    return [func for func in mod.functions.values() if isinstance(func, relax.Function)]


def launches(lowered: tvm.IRModule, kernel_names: list[str]) -> int:
    """Kernel launches per inference: each call of a PrimFunc launches the device kernels split out of it
    (`<name>_kernel`, `<name>_kernel_1`, ...; PTX entries)."""
    calls: Counter[str] = Counter()

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.GlobalVar) \
                and isinstance(lowered[expr.op], tvm.tirx.PrimFunc):
            calls[expr.op.name_hint] += 1

    for func in _relax_functions(lowered):
        relax.analysis.post_order_visit(func.body, visit)
    return sum(n * sum(bool(re.fullmatch(rf"{re.escape(name)}_kernel(_\d+)?", k)) for k in kernel_names)
               for name, n in calls.items())


def intermediate_bytes(lowered: tvm.IRModule) -> int:
    """Bytes of the tensors one kernel writes for another: every `vm.alloc_tensor` except main's outputs."""
    alloc = tvm.ir.Op.get("relax.vm.alloc_tensor")
    returned: set[relax.Var] = set()

    def collect(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Var):
            returned.add(expr)

    relax.analysis.post_order_visit(lowered["main"].body.body, collect)
    total = 0
    for func in _relax_functions(lowered):
        for block in func.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and value.op.same_as(alloc) and binding.var not in returned:
                    shape, dtype = value.args[2], value.args[3]
                    dims = [int(v) for v in shape.values] if all(isinstance(v, tvm.tirx.IntImm) for v in
                                                                 shape.values) else None
                    if dims is not None:
                        total += int(np.prod(dims)) * np.dtype(str(dtype.value)).itemsize
    return total


def kernel_report(label: str, built, arch: str, out_dir: Path) -> dict:
    """Write `<label>.cu` and `<label>.ptx` under `out_dir`; return the build's static kernel report."""
    source = atomic_write_text(out_dir / f"{label}.cu", cuda_source(built.executable))
    ptx, ptxas_log = compile_ptx(source, arch)
    kernels = parse_kernels(ptx.read_text(), ptxas_log)
    return {
        "arch": arch,
        "kernels": len(kernels),
        "launches": launches(built.lowered, list(kernels)),
        "intermediate_bytes": intermediate_bytes(built.lowered),
        "per_kernel": kernels,
        "files": {"cu": source.name, "ptx": ptx.name},
    }
