#!/usr/bin/env bash
# The gpu backend's device check (issue 32), as one script for the `device` tool's GPU machine:
# the GPU tests for real (Triton compiled and launched, no interpreter), then the case study
# and its peers (benchmarks/gpu/bench.py). Installs nothing (the image has torch, Triton, jax
# with CUDA, CuPy); hlofuse runs from the sources. Finishes in under 8 minutes; results go to
# $OUT (the device tool's folder) or /tmp/hlofuse-gpu.
#
#   run(command="bash benchmarks/gpu/run.sh", timeout_s=540)
set -u
cd "$(dirname "$0")/../.."
OUT_DIR=${OUT:-/tmp/hlofuse-gpu}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src:$PWD/tests"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # (jax and torch share the GPU)
export HLOFUSE_CACHE_DIR="$OUT_DIR/cache"
unset TRITON_INTERPRET
{ nvidia-smi; $PY -c "import torch, triton, jax; print(torch.__version__, torch.version.cuda,
triton.__version__, jax.__version__, jax.devices())"; } 2>&1 | tee "$OUT_DIR/machine.txt"
timeout 200 $PY -m pytest -q -p no:cacheprovider tests/test_gpu_triton.py \
    tests/test_gpu_driver.py 2>&1 | tail -40 | tee "$OUT_DIR/tests.txt"
timeout 320 $PY benchmarks/gpu/bench.py --out "$OUT_DIR" --budget 1.5 2>&1 \
    | tee "$OUT_DIR/bench.log" | tail -60
