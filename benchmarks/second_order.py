"""Hessian-vector products, forward over reverse, at 1M points or poses.

    python -m benchmarks.second_order [--size 1048576] [--budget SECONDS] [--out DIR]

For `transform_points` (one pose, 1M points), `pose_multiply` (1M pose pairs) and
`se3_log` (1M poses), float32, CPU: the product `H v` of the loss `0.5 |f(x)|^2` over
every argument, as `jvp(grad(loss))` (`jax.jvp` of `jax.grad` under `jax.jit`;
`torch.func.jvp` of `torch.func.grad`), through xform and through the peers' formulas
(`peers.JAX`'s jnp forms, jaxlie for `se3_log`; `peers.FORMULAS` in torch, PyPose for
`se3_log`). And xform's HVP against its own forward: the ratio of their times, next to the
ratio of the least memory traffic each needs (the byte floor): the forward reads the
arguments and writes the results; the HVP reads the arguments and the direction and
writes one array shaped like the arguments.

It writes `results_second_order.json` to the output folder and prints the table.
Medians of repeated runs after warm-up, on a machine that may be shared: read ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from pathlib import Path

import numpy as np

from . import peers
from .run import as_tuple, inputs, median_time

OPS = ("transform_points", "pose_multiply", "se3_log")


def _loss(f):
    def loss(args):
        return sum(0.5 * (r * r).sum() for r in as_tuple(f(*args)))

    return loss


def jax_hvp(f, arrays, directions):
    import jax

    loss = _loss(f)
    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(loss), (x,), (v,))[1])
    x = tuple(jax.numpy.asarray(a) for a in arrays)
    v = tuple(jax.numpy.asarray(d) for d in directions)
    return lambda: jax.block_until_ready(hvp(x, v))


def jax_forward(f, arrays):
    import jax

    compiled = jax.jit(f)
    x = [jax.numpy.asarray(a) for a in arrays]
    return lambda: jax.block_until_ready(compiled(*x))


def torch_hvp(f, arrays, directions):
    import torch

    loss = _loss(f)
    x = tuple(torch.from_numpy(a) for a in arrays)
    v = tuple(torch.from_numpy(d) for d in directions)
    return lambda: torch.func.jvp(torch.func.grad(loss), (x,), (v,))[1]


def torch_forward(f, arrays):
    import torch

    x = [torch.from_numpy(a) for a in arrays]

    def run():
        with torch.no_grad():
            return f(*x)

    return run


def _peer(framework: str, op: str):
    """The peers' function of `op` in `framework` (the first form), with its name."""
    if framework == "jax":
        if op == "se3_log":
            forms = peers._jaxlie_peers()
            return ("jaxlie", forms[op]) if op in forms else (None, None)
        name, form = next(iter(peers.JAX[op].items()))
        return f"jnp {name}", form
    if op == "se3_log":
        forms = peers._pypose_peers()
        return ("pypose", forms[op]) if op in forms else (None, None)
    return "torch formula", peers.FORMULAS[op]


def byte_floors(arrays, results) -> tuple[int, int]:
    """(forward, HVP): the least bytes each reads and writes."""
    arguments = sum(a.nbytes for a in arrays)
    return arguments + sum(r.nbytes for r in results), 3 * arguments


def measure(size: int, budget: float = 1.0) -> list[dict]:
    import xform.backends.jax as xj
    import xform.backends.torch as xt

    rng = np.random.default_rng(0)
    rows = []
    for op in OPS:
        arrays = inputs(op, size, rng)
        directions = [rng.normal(size=a.shape).astype(a.dtype) for a in arrays]
        forward_bytes, hvp_bytes = byte_floors(arrays, as_tuple(getattr(xt, op)(
            *[__import__("torch").from_numpy(a) for a in arrays])))  # fmt: skip
        for framework, module, hvp, forward in (
            ("jax", xj, jax_hvp, jax_forward),
            ("torch", xt, torch_hvp, torch_forward),
        ):
            xform_fn = getattr(module, op)
            t_hvp = median_time(hvp(xform_fn, arrays, directions), budget=budget)
            t_forward = median_time(forward(xform_fn, arrays), budget=budget)
            name, peer_fn = _peer(framework, op)
            t_peer = math.nan
            if peer_fn is not None:
                try:
                    t_peer = median_time(hvp(peer_fn, arrays, directions), budget=budget)
                except Exception as exc:  # a peer without forward mode (PyPose's Functions)
                    name = f"{name} (fails: {type(exc).__name__})"
            rows.append(
                {
                    "op": op,
                    "framework": framework,
                    "size": size,
                    "xform hvp ms": 1e3 * t_hvp,
                    "peer": name,
                    "peer hvp ms": 1e3 * t_peer,
                    "xform / peer": t_hvp / t_peer,
                    "xform forward ms": 1e3 * t_forward,
                    "hvp / forward": t_hvp / t_forward,
                    "byte floor hvp / forward": hvp_bytes / forward_bytes,
                }
            )
            print(_format(rows[-1]), flush=True)
    return rows


COLUMNS = (
    "op", "framework", "xform hvp ms", "peer", "peer hvp ms", "xform / peer",
    "xform forward ms", "hvp / forward", "byte floor hvp / forward",
)  # fmt: skip


def _format(row: dict) -> str:
    return " | ".join(
        f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS
    )


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per timing")
    options = parser.parse_args(argv)
    print(" | ".join(COLUMNS))
    rows = measure(options.size, options.budget)
    options.out.mkdir(parents=True, exist_ok=True)
    record = {"machine": f"{platform.processor() or platform.machine()}", "rows": rows}
    (options.out / "results_second_order.json").write_text(json.dumps(record, indent=1))
    return rows


if __name__ == "__main__":
    main()
