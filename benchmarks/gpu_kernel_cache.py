"""Warp's kernel cache for a lent GPU, made here on the CPU: every kernel module of the
ops (tests/test_cuda_compile.py's list; of the Panda's, the first-order ones) compiled by
NVRTC to sm_90 PTX with the options the GPU loads them with, packed as two xz parts for
the two calls of
../shared/hooks/gpu/README.md. On the GPU the module hashes are the same, so Warp loads
them instead of compiling: on an H100, tests/test_cuda.py took 145 s with them, where a
cold cache costs minutes of NVRTC per large module, out of a 15-minute device budget.

    python -m benchmarks.gpu_kernel_cache .gpu      # makes .gpu/cache_00, .gpu/cache_01

Call 1 carries cache_00 and copies it to /tmp/xgpu/; call 2 carries cache_01 and runs
`cat /tmp/xgpu/cache_00 .gpu/cache_01 | xz -d | tar -x -C /tmp/warpcache` with
WARP_CACHE_PATH=/tmp/warpcache before benchmarks/gpu_check.sh (or gpu_roofline.sh).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import warp as wp

import xform

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_cuda_compile import ARCH, build, kernel_modules, panda_ops  # noqa: E402


def compiled(op, kind, scalar) -> Path:
    """The cache folder of one module, compiled to sm_90 PTX first if it is not there."""
    from warp._src.context import get_module

    name = build(op, kind, scalar)
    module = get_module(name)
    identifier = module.get_module_identifier(block_dim=module.options.get("block_dim"))
    folder = Path(wp.config.kernel_cache_dir) / identifier
    if not (folder / f"{identifier}.sm{ARCH}.ptx").exists():
        wp.compile_aot_module(name, arch=ARCH, use_ptx=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for cache_00 and cache_01")
    args = parser.parse_args()
    wp.config.quiet = True
    wp.init()
    modules = kernel_modules([xform.OPS[name] for name in sorted(xform.OPS)])
    # Panda's first-order kernels, which gpu_roofline.sh times at 1M configurations.
    modules += kernel_modules(panda_ops(), second_order=False)
    with ThreadPoolExecutor(os.cpu_count()) as pool:  # NVRTC releases the GIL
        folders = list(pool.map(lambda m: compiled(*m), modules))
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / wp.config.version
        for folder in folders:
            (tree / folder.name).mkdir(parents=True)
            for f in folder.iterdir():
                if f.suffix in (".ptx", ".meta"):
                    shutil.copy2(f, tree / folder.name)
        packed = Path(tmp) / "cache.tar.xz"
        subprocess.run(f"tar -C {tmp} -cf - {wp.config.version} | xz -6 -T0 > {packed}",
                       shell=True, check=True)  # fmt: skip
        args.out.mkdir(parents=True, exist_ok=True)
        parts = str(args.out / "cache_")
        subprocess.run(["split", "-n", "2", "-d", str(packed), parts], check=True)
    print(f"{len(folders)} modules packed into {args.out}/cache_00 and cache_01")


if __name__ == "__main__":
    main()
