"""IREE as a baseline: the canonical ONNX model imported by IREE, compiled for the run's target, run in-process.

IREE decides fusion on its own (into "dispatches"), so its dispatch count next to TVM's kernel
count shows how much each compiler fuses. The artifacts stay in the run folder: `iree.mlir` (the
importer's output), `iree.vmfb` (the compiled module) and `iree_executables/` (one source listing
per dispatch executable, dumped by the compiler before code generation).

The `iree` packages are an optional extra; when they are missing, or IREE cannot import or
compile a model, `BaselineUnavailable` carries one short readable reason and the run goes on.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
from onnx import version_converter

from workbench.errors import BaselineUnavailable
from workbench.measure.runners import Runner
from workbench.runtime.threads import cpu_threads

LABEL = "iree"
INSTALL_HINT = "install with pip install -e '.[iree]'"
SOURCES_DIR = "iree_executables"

# IREE 3.13 has no built-in details for Hopper: `--iree-cuda-target=sm_90` fails with "missing GPU
# target" (iree-org/iree#22147). For these archs the GPU target is given in the module itself,
# with Ampere-class limits (mma.sync and WMMA, no wgmma) and a PTX version the arch requires.
_EXPLICIT_CUDA_PTX = {"sm_90": "+ptx80", "sm_90a": "+ptx80"}
_AMPERE_CLASS_WGP = (
    "<compute = fp64|fp32|fp16|int64|int32|int16|int8, storage = b64|b32|b16|b8, subgroup = shuffle|arithmetic, "
    "dot = dp4xi8toi32, mma = [<NV_MMA_SYNC_F32_16x8x16_F16>, <NV_MMA_SYNC_F16_16x8x16_F16>, "
    "<NV_MMA_SYNC_F32_16x8x16_BF16>, <NV_WMMA_F32_16x16x16_F16>, <NV_WMMA_F16_16x16x16_F16>], "
    "subgroup_size_choices = [32], max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024, "
    "max_workgroup_memory_bytes = 232448, max_workgroup_counts = [2147483647, 65535, 65535]>"
)
_DRIVERS = {"llvm": "local-task", "cuda": "cuda"}
# IREE lowers some ONNX ops only in their newer versions (BatchNormalization-9, as in opset-12 models like
# rapidocr's, is refused), so older models are upgraded first, as `iree-import-onnx --opset-version 17` would.
IMPORT_OPSET = 17


@dataclass
class IreeBuild:
    vmfb: bytes
    dispatches: int
    driver: str


def _require_iree():
    """The IREE compiler and runtime modules, or a "not available" with the install hint."""
    try:
        import iree.compiler.tools as compiler_tools
        import iree.runtime as runtime
        from iree.compiler import ir
        from iree.compiler.extras import onnx_importer
    except ImportError as exc:
        raise BaselineUnavailable(INSTALL_HINT) from exc
    return compiler_tools, runtime, ir, onnx_importer


def iree_version() -> str | None:
    """The installed IREE compiler version (for provenance), None without the extra."""
    try:
        return metadata.version("iree-base-compiler")
    except metadata.PackageNotFoundError:
        return None


def short_reason(message: str) -> str:
    """The first `error:` line of IREE's diagnostics, without its location; a crash says so."""
    lines = message.splitlines()
    error = next((line for line in lines if "error:" in line), None)
    if error is None:
        code = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Error code:")), None)
        return f"iree-compile crashed (exit code {code})" if code else (lines[0] if lines else "unknown error")
    text = error.split("error:", 1)[1].strip()
    op = re.search(r'name = "onnx\.(\w+)"', text)
    if "torch.operator" in text and op:
        return f"IREE cannot lower ONNX op {op.group(1)} ({text.split(':', 1)[0]})"
    return text if len(text) <= 200 else text[:197] + "..."


def _cuda_device_targets(ir, arch: str, context) -> object:
    """The `hal.device.targets` attribute for a CUDA arch IREE does not know itself."""
    target = (f'#iree_gpu.target<arch = "{arch}", features = "{_EXPLICIT_CUDA_PTX[arch]}", '
              f'wgp = {_AMPERE_CLASS_WGP}>')
    text = (f'[#hal.device.target<"cuda", [#hal.executable.target<"cuda", "cuda-nvptx-fb", '
            f'{{iree_codegen.target_info = {target}}}>]>]')
    return ir.Attribute.parse(text, context)


def target_options(kind: str, arch: str | None = None, cpu: str | None = None) -> tuple[list[str], list[str]]:
    """(target backends, extra iree-compile flags) for a target kind ("llvm" or "cuda") and its arch/cpu."""
    if kind == "llvm":
        return ["llvm-cpu"], [f"--iree-llvmcpu-target-cpu={cpu or 'host'}"]
    if kind == "cuda":
        if not arch:
            raise BaselineUnavailable("a CUDA target needs its arch (e.g. sm_90) for IREE")
        if arch in _EXPLICIT_CUDA_PTX:
            return [], []  # the target is written into the module (see import_onnx)
        return ["cuda"], [f"--iree-cuda-target={arch}"]
    raise BaselineUnavailable(f"IREE baseline supports targets llvm and cuda, not {kind!r}")


def _upgraded(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model at IMPORT_OPSET when it is older; the model as given if the converter cannot do it."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), IMPORT_OPSET)
    if opset >= IMPORT_OPSET:
        return model
    try:
        return version_converter.convert_version(model, IMPORT_OPSET)
    except Exception:  # noqa: BLE001 - IREE then reports the op it cannot lower, a better reason than this
        return model


def import_onnx(model: onnx.ModelProto, kind: str, arch: str | None = None) -> str:
    """IREE's ONNX importer (what `iree-import-onnx` runs), in-process; returns the module's MLIR text."""
    _, _, ir, onnx_importer = _require_iree()
    context = ir.Context()
    try:
        inferred = onnx.shape_inference.infer_shapes(_upgraded(model), data_prop=True)  # the importer needs shapes
        info = onnx_importer.ModelInfo(inferred)
        module = info.create_module(context=context).operation
        onnx_importer.NodeImporter.define_function(info.main_graph, module).import_all()
        module.verify()
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise BaselineUnavailable(f"IREE cannot import the model: {first_line}") from exc
    if kind == "cuda" and arch in _EXPLICIT_CUDA_PTX:
        module.attributes["hal.device.targets"] = _cuda_device_targets(ir, arch, context)
    return module.get_asm(assume_verified=True)


def count_dispatches(sources_dir: Path) -> int:
    """Distinct dispatch entry points the compiler produced (after its deduplication, before codegen).

    Counted from the per-executable source listings `--iree-hal-dump-executable-sources-to` writes:
    the same notion as TVM's kernel count (distinct TIR functions), not launches per inference.
    """
    return sum(path.read_text().count("hal.executable.export ") for path in sources_dir.glob("*.mlir"))


def compile_onnx(model: onnx.ModelProto, out_dir: Path, kind: str, arch: str | None = None,
                 cpu: str | None = None) -> IreeBuild:
    """Import and compile `model` for the target; keep iree.mlir, iree.vmfb and the executable sources."""
    compiler_tools, *_ = _require_iree()
    backends, flags = target_options(kind, arch, cpu)
    out_dir.mkdir(parents=True, exist_ok=True)
    mlir = import_onnx(model, kind, arch)
    (out_dir / "iree.mlir").write_text(mlir)
    sources = out_dir / SOURCES_DIR
    shutil.rmtree(sources, ignore_errors=True)
    try:
        vmfb = compiler_tools.compile_str(
            mlir, target_backends=backends, output_mlir_debuginfo=False,
            extra_args=[*flags, f"--iree-hal-dump-executable-sources-to={sources}"])
    except compiler_tools.CompilerToolError as exc:
        raise BaselineUnavailable(short_reason(str(exc))) from exc
    (out_dir / "iree.vmfb").write_bytes(vmfb)
    return IreeBuild(vmfb, count_dispatches(sources), _DRIVERS[kind])


def _to_numpy(result: object) -> list[np.ndarray]:
    items = result if isinstance(result, (tuple, list)) else [result]
    return [np.asarray(item.to_host() if hasattr(item, "to_host") else item) for item in items]


def iree_runner(model: onnx.ModelProto, inputs: dict[str, np.ndarray], out_dir: Path, kind: str,
                arch: str | None = None, cpu: str | None = None, threads: int | None = None) -> Runner:
    """Compile, load the module in IREE's runtime on the target's driver, inputs placed on the device once; on the
    CPU its task pool `threads` wide (default: runtime/threads.py's count, the one TVM's kernels run on)."""
    _, runtime, _, _ = _require_iree()
    built = compile_onnx(model, out_dir, kind, arch, cpu)
    if kind == "llvm":  # read when the device is created, below
        runtime.flags.parse_flags(f"--task_topology_group_count={threads or cpu_threads()}")
    try:
        config = runtime.Config(built.driver)
    except Exception as exc:
        raise BaselineUnavailable(f"IREE runtime driver {built.driver!r}: {str(exc).splitlines()[0]}") from exc
    context = runtime.SystemContext(config=config)
    module = runtime.VmModule.copy_buffer(context.instance, built.vmfb)
    context.add_vm_module(module)
    # The importer names the entry after the ONNX graph; IREE adds `name$async` and `__init` beside it.
    entry = next(name for name in module.function_names if "$" not in name and not name.startswith("__"))
    function = context.modules[module.name][entry]
    arrays = [runtime.asdevicearray(config.device, array) for array in inputs.values()]
    return Runner(LABEL, lambda: function(*arrays), _to_numpy, built.dispatches)
