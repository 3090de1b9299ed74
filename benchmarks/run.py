"""xform against what a user would write instead, in one process.

    python -m benchmarks [--device cpu|cuda] [--sizes 16 4096 1048576] [--ops ...]
                         [--no-compile] [--out DIR]

For each op, size (points or poses) and mode (forward, forward+backward) it times, as
medians of repeated runs after warm-up. Forward + backward is the forward and the VJP of
a cotangent of ones that the program cannot see: `torch.autograd.grad` (nothing added
into `.grad`), and under `jax.jit` the cotangent as an argument.

- xform through PyTorch, through `jax.jit`, and on NumPy (on CUDA: on Warp arrays);
- the PyTorch formulas (`peers.TORCH`) eagerly and under `torch.compile`;
- the jnp formulas under `jax.jit` (matrix and two-cross-product forms);
- a raw Warp launch of xform's kernel on prebuilt arrays (the floor for Warp itself);
- a copy of the same bytes (the bandwidth floor).

It writes `results.json` and `results.png` (time against size, log-log, a line per
implementation) to the output folder and prints, per row, the ratio of xform to the best
peer in its framework (below 1: xform is faster), and the bandwidth xform through torch
reaches on the least traffic the op needs: inputs read and results written (forward), plus
inputs and cotangents read again and gradients written (forward + backward).

Every timed iteration ends with the device synchronised, so on CUDA a time is the launch
overhead and the kernel together.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
import warp as wp

import xform
import xform.backends.jax as xj
import xform.backends.torch as xt
from benchmarks.peers import JAX, TORCH
from benchmarks.report import format_loop, format_table, machine, plot, ratio_rows, recorded_at
from xform import _launch
from xform._op import Product
from xform.backends import jax_native
from xform.ops import COMPOSITES

OPS = [
    "transform_points",
    "batch_transform_points",
    "pose_multiply",
    "quaternion_to_matrix",
    "matrix_to_quaternion",
    "so3_exp",
    "so3_log",
    "se3_exp",
    "se3_log",
    "quaternion_multiply",
    "so3_left_jacobian",
    "euler_to_quaternion",
    "rotation_6d_to_matrix",
    "special_procrustes",
    "rigid_registration",
]
# Static arguments of the functions over ops that take them.
STATIC = {"euler_to_quaternion": ("XYZ",)}
SIZES = [16, 256, 4096, 65536, 1048576]
MODES = ["forward", "forward+backward"]
DTYPE = np.float32


def inputs(op: str, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """float32 inputs of `size` points (or poses, or rotations)."""

    def unit_quaternions(*shape):
        q = rng.normal(size=(*shape, 4))
        return q / np.linalg.norm(q, axis=-1, keepdims=True)

    if op == "transform_points":
        arrays = [rng.normal(size=3), unit_quaternions(), rng.normal(size=(size, 3))]
    elif op == "batch_transform_points":
        poses = max(1, math.isqrt(size))
        arrays = [
            rng.normal(size=(poses, 3)),
            unit_quaternions(poses),
            rng.normal(size=(poses, size // poses, 3)),
        ]
    elif op == "pose_multiply":
        arrays = [
            rng.normal(size=(size, 3)),
            unit_quaternions(size),
            rng.normal(size=(size, 3)),
            unit_quaternions(size),
        ]
    elif op in ("quaternion_to_matrix", "so3_log"):
        arrays = [unit_quaternions(size)]
    elif op == "matrix_to_quaternion":
        arrays = [xform.quaternion_to_matrix(unit_quaternions(size))]
    elif op in ("so3_exp", "so3_left_jacobian"):
        arrays = [rng.uniform(-1.5, 1.5, size=(size, 3))]  # |omega| in [0, 2.6]
    elif op == "se3_exp":
        arrays = [
            np.concatenate([rng.normal(size=(size, 3)), rng.uniform(-1.5, 1.5, (size, 3))], -1)
        ]
    elif op == "se3_log":
        arrays = [rng.normal(size=(size, 3)), unit_quaternions(size)]
    elif op == "euler_to_quaternion":
        arrays = [rng.uniform(-np.pi, np.pi, size=(size, 3))]
    elif op == "rotation_6d_to_matrix":
        arrays = [rng.normal(size=(size, 6))]
    elif op == "special_procrustes":
        matrices = xform.quaternion_to_matrix(unit_quaternions(size))
        arrays = [matrices + 0.1 * rng.normal(size=(size, 3, 3))]
    elif op == "rigid_registration":  # point sets of 256 points (one set below that)
        sets = max(1, size // 256)
        points = rng.normal(size=(sets, size // sets, 3))
        arrays = [points, xform.transform_points(rng.normal(size=3), unit_quaternions(), points)]
    else:  # quaternion_multiply
        arrays = [unit_quaternions(size), unit_quaternions(size)]
    return [np.ascontiguousarray(a, dtype=DTYPE) for a in arrays]


def as_tuple(x):
    return x if isinstance(x, (tuple, list)) else (x,)


def function(module, op):
    """`module`'s function of `op`, its static arguments bound."""
    fn = getattr(module, op)
    static = STATIC.get(op, ())
    return (lambda *arrays: fn(*arrays, *static)) if static else fn


def single_op(op: str, arrays) -> xform.Op | None:
    """The one op that `op` runs on these arrays, or None where it chains several."""
    if op in xform.OPS:
        return xform.OPS[op]
    chosen = []

    def call(spec, *_):
        chosen.append(spec)
        return (None,) * len(spec.results)

    COMPOSITES[op].run(call, *arrays, *STATIC.get(op, ()))
    return chosen[0] if len(chosen) == 1 else None


# --- implementations: each returns a function that runs one iteration, synchronised -------


def torch_runner(fn, arrays, backward, device):
    tensors = [torch.from_numpy(a).to(device).requires_grad_(backward) for a in arrays]
    sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    if not backward:
        return lambda: (fn(*tensors), sync())
    cotangents = [torch.ones_like(r) for r in as_tuple(fn(*tensors))]

    def run():  # the gradients returned: none accumulated into `.grad` (NOTES 26)
        torch.autograd.grad(as_tuple(fn(*tensors)), tensors, cotangents, allow_unused=True)
        sync()

    return run


def jax_device(device: str):
    return jax.devices("gpu" if device.startswith("cuda") else "cpu")[0]


def jax_runner(fn, arrays, backward, device, cpu_path=None):
    """`fn` under jax.jit; xform's ops traced with `cpu_path` ("native" or "callback",
    see `xform/backends/jax_native.py`) where given."""
    values = [jax.device_put(a, jax_device(device)) for a in arrays]
    if cpu_path is not None:  # a function of its own: JAX caches traces per function
        inner = fn
        fn = lambda *args: inner(*args)  # noqa: E731
    if not backward:
        jitted = jax.jit(fn)
        run = lambda: jax.block_until_ready(jitted(*values))  # noqa: E731
    else:
        with jax_native.forced(cpu_path) if cpu_path else contextlib.nullcontext():
            outs = as_tuple(fn(*values))
        cotangents = tuple(jnp.ones_like(o) for o in outs)
        cotangents = cotangents[0] if len(outs) == 1 else cotangents

        # The cotangents as arguments, as in torch: a constant would be folded into the
        # program (NOTES 26).
        @jax.jit
        def forward_backward(cotangents, *args):
            out, pullback = jax.vjp(fn, *args)
            return out, pullback(cotangents)

        run = lambda: jax.block_until_ready(forward_backward(cotangents, *values))  # noqa: E731
    if cpu_path is not None:
        with jax_native.forced(cpu_path):
            run()  # traced and compiled here, then reused
    return run


def loop_rows(device: str, steps: int = 1000, points: int = 16) -> list[dict]:
    """Per step of a jitted `lax.fori_loop` of `steps` transform_points on `points`
    points: xform (each CPU path) against the jnp formulas."""
    rng = np.random.default_rng(1)
    q = rng.normal(size=4).astype(DTYPE)
    values = [
        jax.device_put(a, jax_device(device))
        for a in (rng.normal(size=3).astype(DTYPE) * 1e-3, q / np.linalg.norm(q),
                  rng.normal(size=(points, 3)).astype(DTYPE))
    ]  # fmt: skip
    forms = {f"jax.jit {k}": fn for k, fn in JAX["transform_points"].items()}
    paths = {"xform jax.jit": None}
    if device == "cpu":
        paths = {"xform jax.jit": "native", "xform jax.jit callback": "callback"}
    for name, path in paths.items():
        forms[name] = (lambda path: lambda t, q, p: xj.transform_points(t, q, p))(path)
    times = {}
    for name, step in forms.items():
        path = paths.get(name)

        @jax.jit
        def loop(t, q, p, step=step):
            return jax.lax.fori_loop(0, steps, lambda i, p: step(t, q, p), p)

        run = lambda loop=loop: jax.block_until_ready(loop(*values))  # noqa: E731
        with jax_native.forced(path) if path else contextlib.nullcontext():
            run()
        times[name] = median_time(run) / steps
    best = min((t, k) for k, t in times.items() if k.startswith("jax.jit "))
    return [
        {"impl": name, "step µs": t * 1e6, "ratio to best jnp": t / best[0], "best jnp": best[1]}
        for name, t in times.items()
    ]


def core_runner(op, arrays, backward, device):
    """xform's top-level API on NumPy arrays (CPU) or Warp arrays (CUDA)."""
    fn = function(xform, op)
    spec = single_op(op, arrays)
    if device != "cpu":
        arrays = [wp.array(a, dtype=wp.float32, device=device) for a in arrays]
    sync = (lambda: wp.synchronize_device(device)) if device != "cpu" else lambda: None
    if not backward:
        return lambda: (fn(*arrays), sync())
    cotangents = tuple(
        np.ones(r.shape, DTYPE) if device == "cpu" else wp.ones_like(r)
        for r in as_tuple(fn(*arrays))
    )
    return lambda: (fn(*arrays), xform.vjp(spec, arrays, cotangents), sync())


def warp_runner(op, arrays, backward, device):
    """xform's own kernel as one recorded Warp launch on fixed buffers, replayed: Warp's
    floor, without xform's per-call work (checks, planning, allocation, threads)."""
    spec = single_op(op, arrays)
    arrays = [wp.array(a, dtype=wp.float32, device=device) for a in arrays]
    operands = _launch.buffers.prepare(spec, arrays)

    def new(shape, fill=0.0):
        return wp.full(shape, fill, dtype=wp.float32, device=device)

    results = [new(operands.result_shape(k)) for k in range(len(spec.results))]
    (tile,) = _launch.tiling.tiles(operands.plan, 1)
    params = _launch.products.forward_arrays(operands, [r.ptr for r in results])
    launches = [(_launch.kernels.record(spec, Product.FORWARD, wp.float32, device, tile), params)]
    owners = [operands, results]
    if backward:
        grads = [new(s) for s in operands.shapes]
        cotangents = [new(r.shape, 1.0) for r in results]
        owners += [grads, cotangents]
        grad_buffers = [_launch.buffers.as_buffer(spec, "grad", g) for g in grads]
        read_params, grad_params = _launch.products.backward_arrays(
            operands, [c.ptr for c in cotangents], grad_buffers
        )
        launch = _launch.kernels.record(spec, Product.VJP, wp.float32, device, tile)
        launches.append((launch, read_params + grad_params))
    for launch, launch_params in launches:
        for a in launch_params:
            launch.set_param_at_index_from_ctype(
                a.index, _launch.warp_abi.array_param(a.pointer, a.element, wp.float32, 0, a.total)
            )

    def run():
        assert owners  # the launches read and write these buffers
        for launch, _ in launches:
            launch.launch()
        if device != "cpu":
            wp.synchronize_device(device)

    return run


def traffic_bytes(op, arrays, backward) -> int:
    """The least memory traffic of one iteration: inputs read and results written; with
    the backward pass, inputs and cotangents read again and gradients written."""
    read = sum(a.nbytes for a in arrays)
    written = sum(r.nbytes for r in as_tuple(function(xform, op)(*arrays)))
    return 3 * read + 2 * written if backward else read + written


def copy_runner(op, arrays, backward, device):
    """A copy of as many bytes as the op reads or writes, whichever is more."""
    out_bytes = sum(r.nbytes for r in as_tuple(function(xform, op)(*arrays)))
    count = max(sum(a.nbytes for a in arrays), out_bytes) // 4
    source = torch.ones(count, device=device)
    target = torch.empty(count, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    return lambda: (target.copy_(source), sync())


def implementations(op, arrays, backward, compiled, device):
    core = "xform numpy" if device == "cpu" else "xform warp"
    runners = {
        "xform torch": lambda: torch_runner(function(xt, op), arrays, backward, device),
        "xform jax.jit": lambda: jax_runner(function(xj, op), arrays, backward, device),
        "xform jax.jit callback": lambda: jax_runner(
            function(xj, op), arrays, backward, device, "callback"
        ),
        core: lambda: core_runner(op, arrays, backward, device),
        "warp floor": lambda: warp_runner(op, arrays, backward, device),
        "copy floor": lambda: copy_runner(op, arrays, backward, device),
    }
    if device != "cpu":  # the native handler's comparison is a CPU one
        del runners["xform jax.jit callback"]
    if single_op(op, arrays) is None:  # a chain of ops: no one kernel, no NumPy VJP
        del runners["warp floor"]
        if backward:
            del runners[core]
    for peer, fn in TORCH.get(op, {}).items():
        runners[peer] = lambda fn=fn: torch_runner(fn, arrays, backward, device)
    if compiled is not None and op in compiled:
        runners["torch.compile"] = lambda: torch_runner(compiled[op], arrays, backward, device)
    for form, fn in JAX.get(op, {}).items():
        runners[f"jax.jit {form}"] = lambda fn=fn: jax_runner(fn, arrays, backward, device)
    return runners


# Seconds of repeats per measurement (XFORM_BENCHMARK_BUDGET: 0 for a smoke run's five).
BUDGET = float(os.environ.get("XFORM_BENCHMARK_BUDGET", 0.2))


def median_time(run, budget=None, min_repeats=5, max_repeats=200) -> float:
    budget = BUDGET if budget is None else budget
    for _ in range(2):  # warm-up: compilation, caches
        run()
    times = []
    start = time.perf_counter()
    while len(times) < min_repeats or (
        time.perf_counter() - start < budget and len(times) < max_repeats
    ):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(ops, sizes, modes, compile_peers: bool, device: str) -> list[dict]:
    rng = np.random.default_rng(0)
    compiled = (
        {
            op: torch.compile(TORCH[op]["torch"], dynamic=True)
            for op in ops
            if "torch" in TORCH.get(op, {})
        }
        if compile_peers
        else None
    )
    records = []
    for op in ops:
        for mode in modes:
            backward = mode != "forward"
            for size in sizes:
                arrays = inputs(op, size, rng)
                runners = implementations(op, arrays, backward, compiled, device)
                for name, build in runners.items():
                    records.append(
                        {
                            "op": op,
                            "mode": mode,
                            "size": size,
                            "impl": name,
                            "seconds": median_time(build()),
                            "bytes": traffic_bytes(op, arrays, backward),
                        }
                    )
                print(f"measured {op:24s} {mode:17s} {size:>8d}", flush=True)
    return records


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:0)")
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--ops", nargs="+", default=OPS, choices=OPS)
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args(argv)
    device = "cuda:0" if args.device == "cuda" else args.device
    args.out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()  # the machine is shared: the figures say how busy it was
    records = measure(args.ops, args.sizes, args.modes, not args.no_compile, device)
    rows = ratio_rows(records)
    loop = loop_rows(device) if "transform_points" in args.ops else []
    (args.out / "results.json").write_text(
        json.dumps(
            {
                "machine": machine(device),
                **recorded_at(),
                "load average before, after": [load, os.getloadavg()],
                "records": records,
                "ratios": rows,
                "loop": loop,
            },
            indent=1,
        )
    )
    plot(records, args.out / "results.png", OPS, MODES)
    print(f"\n{machine(device)}\n")
    print(format_table(rows))
    if loop:
        print(format_loop(loop))
    return rows


if __name__ == "__main__":
    main()
