#!/usr/bin/env bash
# Issue 46's device checks, in one call on a lent GPU (about 4 minutes expected, 560 s at
# most: each step has its own limit and writes under $OUT as it goes):
#   1. tests/test_cuda.py's dynamics tests: inverse dynamics, the mass matrix, forward
#      dynamics, a gradient and the explicit partials through PyTorch and JAX on the GPU,
#      fixed and floating base, against the CPU;
#   2. benchmarks/dynamics.py on the GPU: Panda, Solo-12 and Talos, RNEA, its derivatives,
#      ABA (forward dynamics), its derivatives and CRBA at 1, 100, 10k and 1M
#      configurations, float64, with the bytes each call moves (GB/s, against the H200's
#      4.8 TB/s) and the ratio to Pinocchio's single-thread C++ loop as measured on the CPU
#      (benchmarks/results_dynamics.json, committed).
# Before, here on the CPU (no device time):
#   bash ../shared/hooks/gpu/pack.sh                       # warp-lang, .gpu/a and .gpu/b
#   python -m benchmarks.dynamics --stash .gpu/dyn         # URDFs + sm_90 kernels (NVRTC)
#   tar -C .gpu -cJf .gpu/dyn.tar.xz dyn
# Then call 1 `bash .gpu/stash.sh` (carry .gpu/a, .gpu/stash.sh) and at once call 2
#   source .gpu/env.sh && bash benchmarks/gpu_dynamics.sh
# (carry .gpu/b, .gpu/env.sh, .gpu/dyn.tar.xz; timeout_s 600). Read $OUT/summary.txt first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DEFAULT=/tmp/xform_gpu_dynamics
source benchmarks/gpu_steps.sh
device_info

# The URDFs and the precompiled kernels (a writable copy: Warp adds what it compiles).
robots=""
if [ -f .gpu/dyn.tar.xz ]; then
    mkdir -p /tmp/xdyn && tar -C /tmp/xdyn -xJf .gpu/dyn.tar.xz
    export WARP_CACHE_PATH=/tmp/xdyn/dyn/warpcache
    robots="--robots-dir /tmp/xdyn/dyn/robots"
    echo "stash: $(ls /tmp/xdyn/dyn/warpcache/* | wc -l) kernel modules, robots $(ls /tmp/xdyn/dyn/robots)" | tee -a "$summary"
else
    echo "no .gpu/dyn.tar.xz: the benchmark needs example-robot-data here and compiles on the GPU" | tee -a "$summary"
fi

step test_cuda_dynamics 200 python3 -m pytest tests/test_cuda.py -k dynamics -q -p no:cacheprovider \
    --junitxml="$OUT/test_cuda_dynamics.xml"
# Largest first where it matters: a cut-short step keeps the rows printed so far.
step bench_dynamics 330 python3 -m benchmarks.dynamics --device cuda $robots \
    --sizes 1 100 10000 1000000 --memory 6e10 --budget 1 --out "$OUT"
python3 - "$OUT" <<'EOF' | tee -a "$summary"
import json, sys
from pathlib import Path
path = Path(sys.argv[1]) / "results_dynamics_cuda.json"
if not path.is_file():
    sys.exit("no results_dynamics_cuda.json: see bench_dynamics.log")
for r in json.loads(path.read_text())["records"]:
    if r["size"] != 1_000_000:
        continue
    cpp = r.get("pinocchio c++ ns per call")
    ratio = f"{cpp / r['xform ns per configuration']:,.0f}x Pinocchio C++" if cpp else "no C++ time"
    print(f"{r['robot']:7s} {r['function']:17s} 1M: {r['xform seconds per call'] * 1e3:8.2f} ms, "
          f"{r['GB/s']:7.1f} GB/s ({r['GB/s'] / 4800:.0%} of HBM), {ratio}")
EOF
echo "all steps in $((SECONDS - started)) s" | tee -a "$summary"
