"""xform.lietorch against LieTorch's own CPU kernels, side by side in one process.

    python -m benchmarks.lietorch [--groups SE3 Sim3] [--sizes 1 100 10000 1000000]
                                  [--repeats 5] [--out benchmarks/results_lietorch.json]

writes the JSON and, beside it, the tables that docs/lietorch.md includes (`--document`
rewrites those from the JSON alone).

For exp, log, inv, mul, act, adj and adjT of each group and each batch size: the largest
difference of the values (float64), the time of the forward pass and of forward plus
backward (the minimum over `--repeats` runs, the two libraries interleaved), and their
ratio xform / LieTorch (below 1: xform faster). Then float32 accuracy near the identity:
the relative error of exp and log, and of exp's gradient, at tangents of norm 1e-7 to
1e-2, against float64 (xform's float64 agrees with 40-digit closed forms, see
tests/test_sim3.py). LieTorch is built here by `benchmarks/lietorch_peer.py` (skipped,
with the reason, where it cannot be). Timings on a shared machine are noisy: compare the
ratios, and re-run on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

import xform.lietorch as ours

from . import lietorch_peer

OPS = ("exp", "log", "inv", "mul", "act", "adj", "adjT")
SIZES = (1, 100, 10_000, 1_000_000)


def inputs(G, n: int, generator):
    """The arguments of every op: an element's data, tangents and points, float64."""
    a = 0.5 * torch.randn(n, G.manifold_dim, dtype=torch.float64, generator=generator)
    b = torch.randn(n, G.manifold_dim, dtype=torch.float64, generator=generator)
    x = ours.__dict__[G.group_name].exp(a).data.contiguous()
    y = ours.__dict__[G.group_name].exp(b.flip(0)).data.contiguous()
    p = torch.randn(n, 3, dtype=torch.float64, generator=generator)
    return {"a": a, "b": b, "x": x, "y": y, "p": p}


def operation(module, name: str, op: str):
    """The op as a function of the tensors of `inputs`, through `module`'s classes."""
    G = getattr(module, name)
    return {
        "exp": (lambda a, **_: G.exp(a).data, ("a",)),
        "log": (lambda x, **_: G(x).log(), ("x",)),
        "inv": (lambda x, **_: G(x).inv().data, ("x",)),
        "mul": (lambda x, y, **_: (G(x) * G(y)).data, ("x", "y")),
        "act": (lambda x, p, **_: G(x) * p, ("x", "p")),
        "adj": (lambda x, b, **_: G(x).adj(b), ("x", "b")),
        "adjT": (lambda x, b, **_: G(x).adjT(b), ("x", "b")),
    }[op]


def _best(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def compare(peer, name: str, op: str, n: int, repeats: int, generator) -> dict:
    args = inputs(ours.__dict__[name], n, generator)
    (mine, used), (theirs, _) = operation(ours, name, op), operation(peer, name, op)
    values = [f(**args) for f in (mine, theirs)]
    difference = float((values[0] - values[1]).abs().max())
    grad = torch.randn_like(values[0])

    def backward(f):
        leaves = {k: v.clone().requires_grad_(True) for k, v in args.items() if k in used}
        out = f(**{**args, **leaves})
        torch.autograd.grad(out, list(leaves.values()), grad)

    row = {"group": name, "op": op, "n": n, "max_difference": difference}
    for mode, make in (
        ("forward", lambda f: lambda: f(**args)),
        ("backward", lambda f: lambda: backward(f)),
    ):
        runs = {"xform": make(mine), "lietorch": make(theirs)}
        for run in runs.values():  # warm: compiles, caches
            run()
        best = {k: float("inf") for k in runs}
        for _ in range(repeats):  # interleaved, so that both see the same load
            for k, run in runs.items():
                best[k] = min(best[k], _best(run, 1))
        row[f"{mode}_xform_s"], row[f"{mode}_lietorch_s"] = best["xform"], best["lietorch"]
        row[f"{mode}_ratio"] = best["xform"] / best["lietorch"]
    return row


def float32_accuracy(peer) -> list[dict]:
    """float32 errors near the identity (`float32_errors`), xform's and LieTorch's."""
    rows = []
    generator = torch.Generator().manual_seed(3)
    for name in ("SO3", "SE3", "Sim3"):
        for norm in (1e-7, 2e-6, 1e-4, 1e-2):
            row = {"group": name, "norm": norm}
            errors = float32_errors(name, norm, generator, {"xform": ours, "lietorch": peer})
            for label, (exp_parts, log, exp_grad) in errors.items():
                row[f"exp_{label}"] = max(exp_parts)
                row[f"log_{label}"] = log
                row[f"exp_grad_{label}"] = exp_grad
            rows.append(row)
    return rows


def float32_errors(name: str, norm: float, generator, modules: dict) -> dict:
    """Per module (label: a LieTorch-like module), float32 errors at 256 tangents of norm
    `norm` against float64 (xform's), each relative to the size of what it measures:
    (exp's data part by part: translation, the quaternion's vector part, the scale; log of
    the float32 data, against the exact log of that very data, so that the input's
    rounding does not count; exp's gradient)."""
    G = getattr(ours, name)
    direction = torch.randn(256, G.manifold_dim, dtype=torch.float64, generator=generator)
    a = (norm * direction / direction.norm(dim=-1, keepdim=True)).float().double()
    exact = G.exp(a).data
    weights = torch.randn(exact.shape, dtype=torch.float64, generator=generator)
    leaf = a.clone().requires_grad_(True)
    (exact_grad,) = torch.autograd.grad((G.exp(leaf).data * weights).sum(), leaf)
    data32 = exact.float()
    exact_log = G(data32.double()).log()
    errors = {}
    for label, module in modules.items():
        H = getattr(module, name)
        single = a.float().requires_grad_(True)
        value = H.exp(single).data
        (gradient,) = torch.autograd.grad((value * weights.float()).sum(), single)
        errors[label] = (
            [_relative(value[..., cols], exact[..., cols]) for cols in _parts(name)],
            _relative(H(data32).log(), exact_log),
            _relative(gradient, exact_grad),
        )
    return errors


def _parts(name: str) -> list[slice]:
    """The data's parts: translation, the quaternion's vector part, the scale."""
    return {
        "SO3": [slice(0, 3)],
        "SE3": [slice(0, 3), slice(3, 6)],
        "Sim3": [slice(0, 3), slice(3, 6), slice(7, 8)],
    }[name]


def _relative(value, exact) -> float:
    """The worst over the batch of |value - exact|_inf / |exact|_inf."""
    value = value.detach().double()
    scale = exact.abs().amax(-1).clamp_min(1e-300)
    return float(((value - exact).abs().amax(-1) / scale).max())


def row(r: dict) -> str:
    return (
        f"{r['group']} {r['op']} {r['n']:,}: max difference {r['max_difference']:.1e}, "
        f"forward {r['forward_ratio']:.2f}x, forward + backward {r['backward_ratio']:.2f}x"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", nargs="+", default=["SO3", "RxSO3", "SE3", "Sim3"])
    parser.add_argument("--ops", nargs="+", default=list(OPS))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).with_name("results_lietorch.json")
    )
    args = parser.parse_args(argv)
    peer = lietorch_peer.load()
    if peer is None:
        print(f"skipped: {lietorch_peer.REASON}")
        return 0
    generator = torch.Generator().manual_seed(0)
    load = os.getloadavg()  # the machine is shared: the results say how busy it was
    rows = []
    for name in args.groups:
        for op in args.ops:
            for n in args.sizes:
                rows.append(compare(peer, name, op, n, args.repeats, generator))
                print(row(rows[-1]), flush=True)
    accuracy = float32_accuracy(peer)
    machine = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": {"torch": torch.__version__, "torch threads": torch.get_num_threads()},
        "load average before, after": [load, os.getloadavg()],
    }
    results = {"machine": machine, "rows": rows, "float32": accuracy}
    args.out.write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}; the documentation draws its tables (docs/figures.py)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
