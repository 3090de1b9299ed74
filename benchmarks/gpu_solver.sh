#!/usr/bin/env bash
# The solver's device check, in one call on a lent GPU (H100/H200), 8 minutes at most:
# each step has its own time limit inside one budget (GPU_SOLVER_BUDGET_S, 480 s), runs in
# its own process (so that each peak memory is its own) and packs its log and results into
# $OUT/results.tgz as it goes (four files come back: at most eight may); a step cut short
# leaves the steps before it. Read $OUT/summary.txt, then $OUT/verdict.txt.
#   1. Ladybug-49, 30 LM iterations: xform through torch and JAX on CUDA, then jaxls on the
#      same GPU (benchmarks/bundle_adjustment.py; first run apart: compilation), and the
#      example's own final line with --device cuda;
#   2. sphere2500 on CUDA (benchmarks/gpu_solver.py pose-graph): GTSAM's best, time;
#   3. the synthetic 2,000 cameras / 500k points / ~5M observations, 30 iterations: xform
#      torch, jaxls, xform JAX, each with its peak memory;
#   4. a synthetic 100k-pose graph on the GPU; 5. the verdict against the targets.
# `bash benchmarks/gpu_solver.sh --device cpu --small` runs the same steps here at tiny
# sizes (a synthetic problem for Ladybug, smallGrid3D, 2,000 poses), as a check of the
# script itself. `bash benchmarks/gpu_solver.sh --prepare` (here) packs jaxls's source and
# the data (Ladybug-49, sphere2500: ../shared does not travel) into .gpu/solver.tar.xz.
#
# How (../shared/hooks/gpu/README.md), from the project root, with jaxls fetched into
# peers/jaxls (benchmarks/bundle_adjustment.py's docstring):
#   here (in this order: pack.sh empties .gpu/ first):
#           bash ../shared/hooks/gpu/pack.sh             # warp-lang: .gpu/a, .gpu/b, ...
#           bash ../shared/hooks/gpu/pack-wheels.sh --no-deps jaxlie==1.5.0 \
#               jax_dataclasses==1.6.3 loguru==0.7.3 termcolor==3.3.0   # .gpu/w_00
#           bash benchmarks/gpu_solver.sh --prepare      # .gpu/solver.tar.xz: jaxls, data
#   call 1: command `bash .gpu/stash.sh && bash .gpu/stash-part.sh .gpu/w_00`,
#           carry [".gpu/a", ".gpu/stash.sh", ".gpu/w_00", ".gpu/stash-part.sh"], timeout_s 120
#   call 2 (at once): command `source .gpu/env.sh && source .gpu/env-wheels.sh &&
#           bash benchmarks/gpu_solver.sh`, carry [".gpu/b", ".gpu/env.sh",
#           ".gpu/env-wheels.sh", ".gpu/solver.tar.xz"], timeout_s 560; then give the machine
#           back. With the machine's start and call 1, about 10 minutes of device time.
# Warp's kernel cache saves NVRTC's minutes on the first use of each op's module: here
# `python -m benchmarks.gpu_kernel_cache .gpu` (cache_00, cache_01); call 1 also carries
# ".gpu/cache_00" and runs `cp .gpu/cache_00 /tmp/xgpu/`; call 2 also carries
# ".gpu/cache_01" and begins `mkdir -p /tmp/warpcache && cat /tmp/xgpu/cache_00
# .gpu/cache_01 | xz -d | tar -x -C /tmp/warpcache && export WARP_CACHE_PATH=/tmp/warpcache
# && ...` (the solver's own new kernels, if any, still compile there).
# The machine has torch, JAX 0.11.2 (CUDA), NumPy and SciPy; no network, no GTSAM (its
# best errors come from benchmarks/results_pose_graph.json), no pypardiso.
set -uo pipefail
cd "$(dirname "$0")/.."
device=cuda small=0
while (( $# )); do
    case $1 in
        --device) device=$2; shift 2 ;;
        --small) small=1; shift ;;
        --prepare)
            [ -d peers/jaxls/src/jaxls ] || { echo "no peers/jaxls: fetch jaxls first" >&2; exit 1; }
            exclude=$(git rev-parse --git-path info/exclude)
            grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
            staging=$(mktemp -d) && mkdir -p "$staging/jaxls" .gpu
            cp -r peers/jaxls/src/jaxls peers/jaxls/COMMIT "$staging/jaxls/"
            cp ../shared/data/bal/problem-49-7776-pre.txt ../shared/data/pose_graphs/sphere2500.g2o "$staging/"
            tar -C "$staging" -cf - . | xz -9 > .gpu/solver.tar.xz && rm -rf "$staging"
            ls -la .gpu/solver.tar.xz; exit 0 ;;
        *) echo "usage: gpu_solver.sh [--device cpu|cuda] [--small] | --prepare" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-/tmp/xform_gpu_solver}
work=${GPU_SOLVER_WORK:-/tmp/xgpu/solver_out}  # the logs and results, packed into $OUT
rm -rf "$work" && mkdir -p "$OUT" "$work"
summary="$OUT/summary.txt"
: > "$summary"
started=$SECONDS
budget=${GPU_SOLVER_BUDGET_S:-480}
data=${GPU_SOLVER_DATA:-/tmp/xgpu/solver}
if [ -f .gpu/solver.tar.xz ] && [ ! -d "$data" ]; then
    mkdir -p "$data" && xz -d < .gpu/solver.tar.xz | tar -x -C "$data"
fi
export PYTHONPATH="$data/jaxls${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[ -d peers/site ] && PYTHONPATH="$PYTHONPATH:$PWD/peers/site"  # here: jaxls's dependencies
cache=/tmp/xgpu/bal
if (( small )); then
    ladybug=10x300 large=20x1000 sphere=data/pose_graphs/smallGrid3D.g2o poses=2000 repeats=1
    cache="$work/cache"
else
    ladybug=$data/problem-49-7776-pre.txt large=2000x500000 sphere=$data/sphere2500.g2o
    poses=100000 repeats=3
fi

step() {  # step NAME LIMIT_S COMMAND...: within the budget left, output to $work/NAME.log
    local name=$1 limit=$2
    shift 2
    local left=$((budget - (SECONDS - started)))
    (( left < limit )) && limit=$left
    if (( limit < 15 )); then
        echo "$name: skipped, the budget is spent" | tee -a "$summary"
        return
    fi
    local begun=$SECONDS
    timeout "$limit" "$@" > "$work/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $((SECONDS - begun)) s (limit $limit); $(grep -E '^(xform|jaxls|final)|rror:' "$work/$name.log" | tail -1)" | tee -a "$summary"
    tar -czf "$OUT/results.tgz" -C "$work" --exclude cache .
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    python3 -c "import sys, numpy, torch, jax, warp; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'jax', jax.__version__, 'warp', warp.config.version, jax.devices())"
    python3 -c "import jaxls; print('jaxls from', jaxls.__file__)" || echo "jaxls is missing: its steps will skip it"
    git log -1 --format='commit %h %s' 2>/dev/null || true
} > "$OUT/device.txt" 2>&1
tee -a "$summary" < "$OUT/device.txt"

ba=(python3 -m benchmarks.bundle_adjustment --device "$device" --iterations 30 --cache "$cache")
pg=(python3 -m benchmarks.gpu_solver pose-graph --device "$device")
step ladybug_xform 110 "${ba[@]}" --problems "$ladybug" --peers --repeats "$repeats" \
    --out "$work/ladybug_xform.json"
step ladybug_jaxls 80 "${ba[@]}" --problems "$ladybug" --frameworks --peers jaxls \
    --repeats "$repeats" --out "$work/ladybug_jaxls.json"
step sphere_torch 45 "${pg[@]}" "$sphere" --framework torch --repeats "$repeats" \
    --out "$work/pose_graph_sphere_torch.json"
step large_make 60 python3 -c "from pathlib import Path
from benchmarks.bundle_adjustment import load_problem
name, bal = load_problem('$large', 0, Path('$cache')); print(name, len(bal.observations), 'observations')"
for who in torch jaxls jax; do
    if [ "$who" = jaxls ]; then chosen=(--frameworks --peers jaxls); else chosen=(--frameworks "$who" --peers); fi
    step "large_$who" 100 "${ba[@]}" --problems "$large" "${chosen[@]}" --repeats 1 \
        --out "$work/bal_large_$who.json"
done
step poses_100k 90 "${pg[@]}" "synthetic:$poses" --framework torch --init chordal --repeats 0 \
    --out "$work/pose_graph_synthetic_torch.json"
step sphere_jax 60 "${pg[@]}" "$sphere" --framework jax --repeats "$repeats" \
    --out "$work/pose_graph_sphere_jax.json"
if (( small )); then ba_file=$work/ladybug_small.txt; python3 -m benchmarks.synthetic bal 10 300 "$ba_file" > /dev/null
else ba_file=$ladybug; fi
step ladybug_example 45 python3 interop_examples/bundle_adjustment.py "$ba_file" --framework torch \
    --iterations 30 --device "$device"
python3 -m benchmarks.gpu_solver verdict "$work" $( (( small )) && echo --small) > "$OUT/verdict.txt" 2>&1
cat "$OUT/verdict.txt"
echo "all steps in $((SECONDS - started)) s" | tee -a "$summary"
