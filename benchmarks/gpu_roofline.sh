#!/usr/bin/env bash
# Issue 47's device checks, in one call on a lent GPU (an H200: about 8 minutes expected,
# each step under a time limit of its own and all under DEADLINE, writing under $OUT as
# they go, so that a step cut short leaves the steps before it). In order of what the
# issue needs first:
#   1. tests/test_cuda.py (every op, the groups, kinematics, through Warp, PyTorch and
#      JAX on the GPU; the bit-for-bit repeat of results and broadcast gradients);
#   2. the native CUDA JAX path's self-test;
#   3. every benchmarked op at 16M points, forward and forward + backward, float32,
#      against eager torch and the best jnp, with the copy floor (python -m benchmarks);
#   4. what bounds the kernels (python -m benchmarks.roofline): a device copy against
#      the nominal HBM bandwidth, strided against staged stores of 3- to 16-float
#      elements, the broadcast pose's gradient summed in blocks against atomic adds (time
#      and run-to-run bits), Panda's forward kinematics and Jacobian at 1M configurations;
#   5. per jitted JAX call at 16, 4k, 64k and 1M points (python -m benchmarks.jax_calls);
#   6. 16 to 1M points for the docs' CUDA figure (python -m benchmarks, five ops);
#   7. the acceptance table ($OUT/acceptance.md, python -m benchmarks.acceptance --summary).
# How (../shared/hooks/gpu/README.md): pack warp-lang and Warp's kernel cache here
# (pack.sh; python -m benchmarks.gpu_kernel_cache .gpu), then in call 2
# `source .gpu/env.sh && XFORM_COMMIT=<commit> bash benchmarks/gpu_roofline.sh`,
# timeout_s 600. Read $OUT/summary.txt and $OUT/acceptance.md first; back here,
# `python -m benchmarks.acceptance --install <the fetched $OUT>` puts the results into
# benchmarks/ and redraws the docs' figures.
#
#   bash benchmarks/gpu_roofline.sh --dry-run    # here, on the CPU, at tiny sizes: every
#                                                # Python step (tests/test_benchmarks.py)
set -uo pipefail
cd "$(dirname "$0")/.."

OPS="transform_points batch_transform_points pose_multiply quaternion_to_matrix
matrix_to_quaternion se3_log so3_exp quaternion_multiply"
FIGURE_OPS="transform_points batch_transform_points pose_multiply quaternion_to_matrix
matrix_to_quaternion"
if [ "${1:-}" = "--dry-run" ]; then
    DEVICE=cpu POINTS=4096 CONFIGURATIONS=64 CALL_SIZES="16 256" FIGURE_SIZES="16 256"
    OPS="batch_transform_points" FIGURE_OPS="quaternion_to_matrix"
    CALL_OPS="--ops quaternion_to_matrix" PARTS="--parts copy stores sums"
else
    DEVICE=cuda POINTS=16777216 CONFIGURATIONS=1000000 CALL_SIZES="16 4096 65536 1048576"
    FIGURE_SIZES="16 256 4096 65536 1048576" CALL_OPS="" PARTS=""
    # The measuring steps share 560 s (the call's 600 less the start and the acceptance
    # table): a step gets at most what is left of them.
    DEADLINE=${DEADLINE:-560}
fi
OUT_DEFAULT=/tmp/xform_gpu_roofline
source benchmarks/gpu_steps.sh

device_info
if [ "$DEVICE" = cuda ]; then
    cuda_checks 200 45
fi
# shellcheck disable=SC2086  # the op and size lists split into arguments
step hbm_16M 140 $PYTHON -m benchmarks --device $DEVICE --sizes $POINTS --no-compile \
    --ops $OPS --out "$OUT/hbm_16M"
# shellcheck disable=SC2086
step roofline 120 $PYTHON -m benchmarks.roofline --device $DEVICE --size $POINTS \
    --configurations $CONFIGURATIONS $PARTS --out "$OUT/roofline"
# shellcheck disable=SC2086
step jax_calls 130 $PYTHON -m benchmarks.jax_calls --device $DEVICE --sizes $CALL_SIZES \
    $CALL_OPS --out "$OUT"
# shellcheck disable=SC2086
step sizes 100 $PYTHON -m benchmarks --device $DEVICE --sizes $FIGURE_SIZES --no-compile \
    --ops $FIGURE_OPS --out "$OUT/sizes"
step acceptance 60 $PYTHON -m benchmarks.acceptance --summary "$OUT"
echo "all steps in $((SECONDS - started)) s" | tee -a "$summary"
