#!/usr/bin/env bash
# Issue 33's device checks, in one call on a lent GPU (about 5 minutes expected, 580 s at
# most: each step has its own time limit and writes under $OUT as it goes, so a step cut
# short still leaves the steps before it):
#   1. tests/test_cuda.py: every op, the groups and a kinematic chain through Warp, PyTorch
#      and JAX on the GPU (and the CPU's walk of the GPU's routes);
#   2. the native CUDA JAX path's self-test (XFORM_JAX_CUDA=native), against the Python path;
#   3. per jitted JAX call at 16, 4k, 64k and 1M points, both JAX paths against the best jnp
#      formula, forward and forward + backward (benchmarks/jax_calls.py);
#   4. the kernels at 16M points, float32, against eager torch, jnp and HBM bandwidth
#      (python -m benchmarks), on the eight ops of issue 33's table.
# How: ../shared/hooks/gpu/README.md (pack.sh here; call 1 `bash .gpu/stash.sh`; call 2
# `source .gpu/env.sh && bash benchmarks/gpu_check.sh`, timeout_s 600). Read $OUT/summary.txt
# first. Carry Warp's kernel cache too (`python -m benchmarks.gpu_kernel_cache .gpu`, its
# docstring says how): on 2026-11-26 on an H100 the whole script then took 313 s.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DEFAULT=/tmp/xform_gpu_check
source benchmarks/gpu_steps.sh

device_info
cuda_checks 240 60
step jax_calls 150 $PYTHON -m benchmarks.jax_calls --device cuda --out "$OUT"
step hbm_16M 130 $PYTHON -m benchmarks --device cuda --sizes 16777216 --no-compile \
    --ops transform_points batch_transform_points pose_multiply quaternion_to_matrix \
    matrix_to_quaternion se3_log so3_exp quaternion_multiply --out "$OUT/hbm_16M"
echo "all steps in $((SECONDS - started)) s" | tee -a "$summary"
