# Sourced by the device-check scripts (gpu_check.sh, gpu_dynamics.sh) after they set OUT:
# the summary file, `step`, and the device's description at the summary's top.
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
started=$SECONDS

step() {  # step NAME LIMIT_S COMMAND...: run it, its output to $OUT/NAME.log, a line to the summary
    local name=$1 limit=$2
    shift 2
    local begun=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $((SECONDS - begun)) s; $(grep -E 'passed|failed|error' "$OUT/$name.log" | tail -1)" | tee -a "$summary"
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import sys, numpy, torch, jax, warp; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'jax', jax.__version__, 'warp', warp.config.version, jax.devices())"
    git log -1 --format='commit %h %s' 2>/dev/null || true
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt" | tee -a "$summary"
