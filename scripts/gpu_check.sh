#!/usr/bin/env bash
# GPU check: on a machine with a CUDA GPU (and the CUDA toolkit), install the workbench, run the GPU-only
# tests and the CUDA example run. Takes about 5 minutes on an H100/H200 host; exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
python -m pip install -q -e ".[test]"
# This TVM wheel ships CUDA source in the exported library and compiles it when it is loaded on the GPU:
# with nvcc unless cuda-bindings (NVRTC) is installed.
python -c "import cuda.bindings" 2>/dev/null || export TVM_CUDA_COMPILE_MODE="${TVM_CUDA_COMPILE_MODE:-nvcc}"
python -c "import tvm, sys; d = tvm.cuda(0); sys.exit(0 if d.exist else 'no CUDA device: run this on a GPU host')"
timeout 360 python -m pytest -q -x tests/test_cuda.py -m "not slow" -rs
timeout 240 workbench run configs/convnet_cuda.yaml --set output=runs/gpu_check \
    --set "target.arch=sm_$(python -c 'import tvm; print(tvm.cuda(0).compute_version.replace(".", ""))')"
echo "gpu_check: done in $((SECONDS - started)) s"
