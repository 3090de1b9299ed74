"""Every kernel xform launches compiles for CUDA, with no GPU: Warp's NVRTC builds sm_90
code here. Each op's forward, tangent and VJP, the tangent and VJP of each of its first
derivatives made an op (the second-order products), and the kinematic ops of a real robot
(example-robot-data's Panda; their second-order products where XFORM_TESTS=full), in
float32 and float64. The CPU suite never sees the code
that only the GPU compiles (`#if defined(__CUDA_ARCH__)`: the warp shuffles that sum a
shared gradient), so without this a CUDA-only compile error would first show on a GPU.

To PTX (ptxas, which turns it into machine code, doubles the time and catches no error
of ours), at optimization level 0 (Warp takes 1 with NVRTC 13.1 and newer): NVVM's
optimizer catches no error of ours either, and on the largest modules, the second-order
products of Sim(3)'s and the Panda's Jacobians, takes 8 times as long (442 s against 55 s
for one). Into Warp's kernel cache, where a module whose source is unchanged is not
compiled again: on a cold cache the whole check is some 35 minutes of CPU (more than a
CI run's whole budget), on a warm one about a minute. So outside XFORM_TESTS=full a run
compiles the ops the op tables take (one in four, from the seed: they rotate from run to
run, tests/conftest.py), each in one precision drawn from the seed, and the Panda's
first-order kernels; `python tests/test_cuda_compile.py` runs it all in one process, on
every core, and prints the time.
"""

import os
import re
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
import warp as wp

import xform
from xform import _launch, _second_order
from xform._launch import blocks, codegen, source
from xform._op import Product

# The GPU's VJP of broadcast operands summed in blocks (`_launch/blocks.py`): a module of
# its own, for the ops that neither sum over groups nor scatter.
BLOCKS = "vjp_blocks"

SCALARS = (wp.float32, wp.float64)
ARCH = 90


def panda_ops() -> list:
    """The kinematic ops of example-robot-data's Panda (a mimic finger), if installed."""
    from test_kinematics import ROBOTS, ROBOTS_DIR

    if ROBOTS_DIR is None:
        return []
    chain = xform.kinematics.Chain.from_urdf(ROBOTS_DIR / ROBOTS["panda"])
    return [chain.forward_kinematics_op, chain.jacobian_op]


def products(op, second_order: bool = True) -> list[tuple]:
    """(op, product) for every kernel of `op` that a first (or second) derivative runs."""
    if not op.differentiable:
        return [(op, Product.FORWARD)]
    made = [(op, Product.FORWARD), (op, Product.TANGENT), (op, Product.VJP)]
    if not op.reduced and not op.scatters:
        made.append((op, BLOCKS))
    if not second_order:
        return made
    try:
        second = [_second_order.product_op(op, p) for p in (Product.TANGENT, Product.VJP)]
    except _second_order.HigherDerivativeError:  # no closed forms: no second derivatives
        second = []
    return made + [(p, kind) for p in second for kind in (Product.TANGENT, Product.VJP)]


def kernel_modules(ops, second_order: bool = True) -> list[tuple]:
    return [
        (op, kind, scalar)
        for o in ops
        for op, kind in products(o, second_order)
        for scalar in SCALARS
    ]


# A kernel's static shared memory (`__shared__`: STORE's staging buffers, tile sums) may not
# pass 48 KB: past it the module fails to load on the GPU (ptxas, not NVRTC, says so).
STATIC_SHARED_LIMIT = 48 * 1024
_SHARED = re.compile(r"^\.shared(?:\s+\.align\s+\d+)?\s+\.[a-z]+(\d+)\s+\S+?(?:\[(\d+)\])?;", re.M)


def static_shared_bytes(ptx_text: str) -> int:
    """The static shared memory a module's PTX declares, all its kernels' together (a bound
    on any one kernel's)."""
    return sum(int(bits) // 8 * int(count or 1) for bits, count in _SHARED.findall(ptx_text))


def compile_for_cuda(op, kind, scalar) -> str | None:
    """Build the module of `kind` of `op` and compile it for sm_90; the error, or None."""
    try:
        shared = static_shared_bytes(ptx(op, kind, scalar))
    except Exception as exc:
        return f"{op.name} {kind} {scalar.__name__}: {type(exc).__name__}: {exc}"
    if shared > STATIC_SHARED_LIMIT:
        return f"{op.name} {kind} {scalar.__name__}: {shared} bytes of static shared memory"
    return None


def build(op, kind, scalar) -> str:
    """Generate the Warp module of `kind` of `op` for `scalar`; its name."""
    if kind == BLOCKS:
        blocks.kernels(op, scalar)
    else:
        codegen.kernels(op, kind, scalar)
    return source.module_name(op, kind, scalar)


def ptx(op, kind, scalar, optimization_level: int | None = 0) -> str:
    """The PTX of the module of `kind` of `op` for sm_90 (Warp's kernel cache keeps it),
    at `optimization_level` (None: Warp's own for CUDA, -O3, as a GPU compiles it)."""
    module = build(op, kind, scalar)
    wp.set_module_options({"optimization_level": optimization_level}, module=module)
    (path,) = wp.compile_aot_module(module, arch=ARCH, use_ptx=True)
    return open(path).read()


def compile_all(modules, threads: int | None = None) -> list[str]:
    """Compile the kernel modules `modules` (NVRTC releases the GIL: `threads` at once);
    the errors."""
    with ThreadPoolExecutor(threads or _launch.threads.THREADS) as pool:
        return [e for e in pool.map(lambda m: compile_for_cuda(*m), modules) if e is not None]


PARTS = 4


@pytest.mark.parametrize("part", range(PARTS))
def test_every_kernel_compiles_for_sm90_through_nvrtc(part):
    """A quarter of the ops (and the Panda) per test, each in a child process: pytest-xdist
    spreads them, and the compiler's memory (and any crash of it) goes with the child."""
    done = subprocess.run(
        [sys.executable, __file__, str(part), str(PARTS)],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]


# Compiles for the CPU, not for the GPU: what the test of the check plants.
GPU_ONLY_ERROR = """
#if defined(__CUDA_ARCH__)
    return no_such_device_function(x);
#else
    return x;
#endif
"""


@wp.func_native(GPU_ONLY_ERROR)
def broken_on_the_gpu(x: wp.float32) -> wp.float32: ...


@wp.func
def probe(x: wp.float32):
    return broken_on_the_gpu(x)


def test_a_kernel_that_does_not_compile_for_cuda_is_reported():
    """The check can fail: an op whose CUDA branch calls a function that does not exist
    runs on the CPU, and is reported here (NVRTC's log, on stderr, names the line)."""
    op = xform.define_op("cuda_compile_probe", probe, {"x": ()}, {"y": ()}, differentiable=())
    assert float(op(wp.array([2.0], dtype=wp.float32)).numpy()[0]) == 2.0
    failure = compile_for_cuda(op, "forward", wp.float32)
    assert failure is not None and failure.startswith("cuda_compile_probe forward float32")


def test_the_gpu_sums_broadcast_gradients_in_order_and_stores_results_whole_lines(monkeypatch):
    """What the GPU's code does, read from its PTX (benchmarks/NOTES.md, 44): the VJP of
    a broadcast pose sums it in blocks with no atomic add (so the same bits on every run),
    where the strided runs it replaces add atomically; and a 3x3 result goes through
    shared memory, to be stored 32 consecutive floats per instruction."""
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.cuda_code import count, entries

    op = xform.OPS["transform_points"]
    summed = entries(ptx(op, BLOCKS, wp.float32, None))
    assert {name.split("_")[2] for name in summed} >= {"flatgrid", "grid"}
    for name, lines in summed.items():
        counts = count(lines)
        assert counts["atomics"] == 0, name
        assert counts["bar"] > 0 and counts["shfl"] > 0, name  # tile_sum's warps and block
    strided = entries(ptx(op, Product.VJP, wp.float32, None))
    assert all(count(s)["atomics"] > 0 for n, s in strided.items() if n.startswith("vjp"))
    stored = entries(ptx(xform.OPS["quaternion_to_matrix"], Product.FORWARD, wp.float32, None))
    assert len(stored) == 2
    for name, lines in stored.items():
        staged = [line.split()[0] for line in lines if line.startswith(("st.", "ld.shared"))]
        assert "st.shared.f32" in staged and "ld.shared.f32" in staged, name
        # the staged store: a shared load, then the global store of what it loaded
        assert any(
            a == "ld.shared.f32" and b == "st.global.f32" for a, b in zip(staged, staged[1:])
        ), name


def main(argv) -> int:
    """Compile part `argv[0]` of `argv[1]` (by default all) of the ops' kernels."""
    part, parts = (int(argv[0]), int(argv[1])) if argv else (0, 1)
    wp.config.quiet = True
    start = time.perf_counter()
    from conftest import FULL, SEED, taken

    full = FULL or not argv
    names = [*sorted(xform.OPS), "panda"][part::parts]
    modules = []
    for name in names:
        if name == "panda" or not (full or taken(name)):
            continue
        made = kernel_modules([xform.OPS[name]])
        if not full:  # one precision, drawn: the other's code differs in its types only
            drawn = SCALARS[zlib.crc32(repr((SEED, name)).encode()) % len(SCALARS)]
            made = [module for module in made if module[2] is drawn]
        modules += made
    if "panda" in names:
        # The Panda's second-order products (its whole chain differentiated twice) are
        # NVRTC's largest modules, minutes each even at -O1: its first-order kernels
        # here, all of them where XFORM_TESTS=full.
        modules += kernel_modules(panda_ops(), second_order=FULL)
    errors = compile_all(modules, threads=1 if parts > 1 else None)
    print(f"{len(modules)} modules for sm_{ARCH} in {time.perf_counter() - start:.1f} s")
    print("\n".join(errors) or "all compiled")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main(sys.argv[1:]))
