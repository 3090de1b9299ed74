# What benchmarks/gpu_check.sh and gpu_roofline.sh share, sourced by them from the project
# root: $OUT made (its default given as OUT_DEFAULT), $summary started, and
#   step NAME LIMIT_S COMMAND...  run it, its output to $OUT/NAME.log, a line to the
#                                 summary; at most what is left of DEADLINE seconds (from
#                                 the start) for a measuring step, none once 10 s are left
#   device_info                   the GPU, the versions and the commit, to $OUT/device.txt
#   cuda_checks                   tests/test_cuda.py and the native CUDA JAX self-test
OUT=${OUT:-$OUT_DEFAULT}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
started=$SECONDS
PYTHON=${PYTHON:-python3}
DEADLINE=${DEADLINE:-100000}

step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - (SECONDS - started)))
    if [ "$name" != acceptance ] && [ "$left" -lt 10 ]; then
        echo "$name: skipped, no time left" | tee -a "$summary"
        return
    fi
    [ "$name" != acceptance ] && [ "$left" -lt "$limit" ] && limit=$left
    local begun=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $((SECONDS - begun)) s; $(grep -E 'passed|failed|error' "$OUT/$name.log" | tail -1)" | tee -a "$summary"
}

device_info() {
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
        $PYTHON -c "import sys, numpy, torch, jax, warp; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'jax', jax.__version__, 'warp', warp.config.version, jax.devices())"
        echo "commit ${XFORM_COMMIT:-$(git log -1 --format='%h %s' 2>/dev/null || echo unknown)}; $(date -u +%Y-%m-%d)"
    } > "$OUT/device.txt" 2>&1
    tee -a "$summary" < "$OUT/device.txt"
}

cuda_checks() {  # cuda_checks TEST_LIMIT_S SELF_TEST_LIMIT_S
    step test_cuda "$1" env XFORM_TESTS=full XLA_PYTHON_CLIENT_PREALLOCATE=false $PYTHON -m pytest \
        tests/test_cuda.py -n 12 -q -p no:cacheprovider --junitxml="$OUT/test_cuda.xml"
    step native_self_test "$2" env XFORM_JAX_CUDA=native $PYTHON -c "
import warnings
warnings.simplefilter('error')
from xform.backends import jax_native
assert jax_native.cuda_library() is not None
print('native CUDA self-test passed')"
}
