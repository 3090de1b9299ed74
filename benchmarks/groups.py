"""The group objects against the functional calls they make, and against jaxlie and PyPose.

    python -m benchmarks.groups [--sizes 16 1048576] [--out DIR]

For `A @ B`, `T @ points`, `T.log()` and `SE3.exp(xi)` (SE3, float32, forward), at each
size it times, in one process:

- the object method and the same functional call, eagerly in PyTorch and under `jax.jit`
  (the object's cost over its ops: Python only, so it should vanish at large sizes);
- jaxlie under `jax.jit` and PyPose eagerly (the peers with group objects).

It prints the ratios and writes `groups.json` to the output folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxlie
import numpy as np
import pypose as pp
import torch

import xform
import xform.backends.jax as xj
import xform.backends.torch as xt
from benchmarks.report import machine

CASES = ("A @ B", "T @ points", "T.log()", "SE3.exp(xi)")


def arrays(size: int, rng) -> dict[str, np.ndarray]:
    def quaternions():
        q = rng.normal(size=(size, 4)).astype(np.float32)
        return q / np.linalg.norm(q, axis=-1, keepdims=True)

    return {
        "t1": rng.normal(size=(size, 3)).astype(np.float32),
        "q1": quaternions(),
        "t2": rng.normal(size=(size, 3)).astype(np.float32),
        "q2": quaternions(),
        "points": rng.normal(size=(size, 3)).astype(np.float32),
        "xi": (0.5 * rng.normal(size=(size, 6))).astype(np.float32),
    }


def implementations(case: str, data: dict) -> dict:
    """name -> a function of no arguments that runs `case` once, synchronised."""
    t = {k: torch.from_numpy(v) for k, v in data.items()}
    j = {k: jnp.asarray(v) for k, v in data.items()}
    a_t, b_t = xform.SE3(t["t1"], t["q1"]), xform.SE3(t["t2"], t["q2"])
    a_j, b_j = xform.SE3(j["t1"], j["q1"]), xform.SE3(j["t2"], j["q2"])
    wxyz_xyz = {k: jnp.concatenate([j[f"q{k}"], j[f"t{k}"]], -1) for k in ("1", "2")}
    xyz_xyzw = {k: torch.cat([t[f"t{k}"], t[f"q{k}"][:, [1, 2, 3, 0]]], -1) for k in ("1", "2")}
    la, lb = jaxlie.SE3(wxyz_xyz["1"]), jaxlie.SE3(wxyz_xyz["2"])
    pa, pb = pp.SE3(xyz_xyzw["1"]), pp.SE3(xyz_xyzw["2"])

    objects, functional, peer_jaxlie, peer_pypose = {
        "A @ B": (
            (lambda a, b, p, xi: a @ b),
            (lambda m, a, b, p, xi: m.pose_multiply(*a, *b)),
            (lambda a, b, p, xi: a @ b),
            (lambda: pa @ pb),
        ),
        "T @ points": (
            (lambda a, b, p, xi: a @ p),
            (lambda m, a, b, p, xi: m.pose_transform_points(*a, p)),
            (lambda a, b, p, xi: a @ p),
            (lambda: pa.Act(t["points"])),
        ),
        "T.log()": (
            (lambda a, b, p, xi: a.log()),
            (lambda m, a, b, p, xi: m.se3_log(*a)),
            (lambda a, b, p, xi: a.log()),
            (lambda: pa.Log()),
        ),
        "SE3.exp(xi)": (
            (lambda a, b, p, xi: xform.SE3.exp(xi)),
            (lambda m, a, b, p, xi: m.se3_exp(xi)),
            (lambda a, b, p, xi: jaxlie.SE3.exp(xi)),
            (lambda: pp.se3(t["xi"]).Exp()),
        ),
    }[case]
    torch_args = (a_t, b_t, t["points"], t["xi"])
    torch_fields = ((t["t1"], t["q1"]), (t["t2"], t["q2"]), t["points"], t["xi"])
    jitted_objects = jax.jit(objects)
    jitted_functional = jax.jit(lambda *args: functional(xj, *args))
    jitted_jaxlie = jax.jit(peer_jaxlie)
    jax_fields = ((j["t1"], j["q1"]), (j["t2"], j["q2"]), j["points"], j["xi"])
    return {
        "torch: object": lambda: objects(*torch_args),
        "torch: functional": lambda: functional(xt, *torch_fields),
        "pypose (eager)": peer_pypose,
        "jax.jit: object": lambda: jax.block_until_ready(
            jitted_objects(a_j, b_j, j["points"], j["xi"])
        ),
        "jax.jit: functional": lambda: jax.block_until_ready(jitted_functional(*jax_fields)),
        "jaxlie (jax.jit)": lambda: jax.block_until_ready(
            jitted_jaxlie(la, lb, j["points"], j["xi"])
        ),
    }


PAIRS = (
    ("torch: object", "torch: functional"),
    ("jax.jit: object", "jax.jit: functional"),
    ("pypose (eager)",),
    ("jaxlie (jax.jit)",),
)


def interleaved_medians(runs: dict, budget: float = 3.0, rounds: int = 200) -> dict:
    """Each implementation's median time, the implementations run in turn round after
    round, so that the machine's drift (other processes, clock) falls on both of a pair
    alike."""
    for run in runs.values():  # warm-up: compilation, caches
        run(), run()
    times = {name: [] for name in runs}
    start = time.perf_counter()
    for k in range(rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
        if k >= 4 and time.perf_counter() - start > budget:
            break
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 1048576])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    rows = []
    for size in args.sizes:
        data = arrays(size, rng)
        for case in CASES:
            runs = implementations(case, data)
            # Each pair in turn, alone: a run that follows a peer's large call pays for that
            # peer's freed memory (the object, right after jaxlie or PyPose, measured up to
            # 1.9x its functional call at 1M that way, 1.00x alone).
            times = {}
            for group in PAIRS:
                times |= interleaved_medians({name: runs[name] for name in group})
            rows.append({"case": case, "size": size, "seconds": times})
            us = {name: 1e6 * s for name, s in times.items()}
            print(
                f"{case:12s} {size:>8d}  "
                f"torch object/functional {us['torch: object'] / us['torch: functional']:.2f}x "
                f"(+{us['torch: object'] - us['torch: functional']:.1f} us), "
                f"jit object/functional "
                f"{us['jax.jit: object'] / us['jax.jit: functional']:.2f}x "
                f"(+{us['jax.jit: object'] - us['jax.jit: functional']:.1f} us); "
                f"torch object/pypose {us['torch: object'] / us['pypose (eager)']:.2f}x, "
                f"jit object/jaxlie {us['jax.jit: object'] / us['jaxlie (jax.jit)']:.2f}x",
                flush=True,
            )
            print("    " + ", ".join(f"{n}: {v:.1f} us" for n, v in us.items()), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "groups.json").write_text(
        json.dumps({"machine": machine("cpu"), "rows": rows}, indent=1)
    )
    return rows


if __name__ == "__main__":
    main()
