"""What bounds xform's GPU kernels, measured on a lent GPU (issue 47; NOTES 44).

    python -m benchmarks.roofline [--device cuda|cpu] [--size 16777216]
                                  [--configurations 1000000] [--parts ...] [--out DIR]

Writes `roofline.json` to `--out`: each a median of repeated runs, float32.

- `copy`: a device-to-device copy of 1 GiB (`--size` floats on the CPU): the bandwidth
  a kernel can reach, against the device's nominal peak (`acceptance.PEAK`);
- `stores`: a kernel that writes one N-scalar element per thread (N = 3, 4, 7, 9, 16:
  a point, a quaternion, a pose, a 3x3 and a 4x4 matrix) at `--size` elements, storing
  it plainly (N scalar stores, lanes N scalars apart) and through xform's staged store
  (`indexing.STORE`), against a kernel writing the same bytes one scalar per thread:
  whether strided stores bound the kernels that write large elements;
- `sums`: batch_transform_points (4,096 poses, each over its own points) and
  transform_points (one pose) forward + backward through torch at `--size` points, with
  the broadcast pose's gradient summed in blocks (`_launch/blocks.py`) and with the
  strided runs and atomic adds it replaced (`tiling.SUM_IN_BLOCKS`), each run five times:
  the time and whether the five gradients are the same bits;
- `kinematics`: Panda's forward kinematics (13 links) and one link's Jacobian through
  torch at `--configurations`, forward and forward + backward, per configuration and as
  a share of the peak on the least traffic (q read, the results written; backward: q and
  the cotangents read again, the gradient written).

`python -m benchmarks.acceptance` turns a GPU run's files into issue 47's acceptance table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import numpy as np
import torch
import warp as wp

import xform
import xform.backends.torch as xt
from benchmarks.acceptance import PEAK
from benchmarks.report import machine, recorded_at
from benchmarks.run import median_time
from xform import _launch

ELEMENTS = (3, 4, 7, 9, 16)


def peak_of(device: str) -> float | None:
    if device == "cpu":
        return None
    name = wp.get_device(device).name
    return next((bw for key, bw in PEAK.items() if key in name), None)


def synchronizer(device: str):
    return (lambda: wp.synchronize_device(device)) if device != "cpu" else (lambda: None)


def copy_floor(device: str, floats: int) -> dict:
    source = torch.ones(floats, device=device)
    target = torch.empty_like(source)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    seconds = median_time(lambda: (target.copy_(source), sync()))
    return {
        "bytes": 2 * source.nbytes,
        "seconds": seconds,
        "GB/s": 2 * source.nbytes / seconds / 1e9,
    }


@contextlib.contextmanager
def sums_in_blocks(enabled: bool):
    """The GPU's VJP of broadcast operands in blocks or, as before, strided runs and atomic
    adds (and this thread's remembered repeats dropped: they keep their launch)."""
    previous = _launch.tiling.SUM_IN_BLOCKS
    _launch.tiling.SUM_IN_BLOCKS = enabled
    vars(_launch.repeats._local).pop("repeats", None)
    try:
        yield
    finally:
        _launch.tiling.SUM_IN_BLOCKS = previous
        vars(_launch.repeats._local).pop("repeats", None)


# --- stores ---------------------------------------------------------------------------------

STORE_KERNELS = """
@wp.kernel(enable_backward=False)
def plain(out: wp.array(dtype=T)):
    i = wp.tid()
    out[i] = T(wp.float32(i))


@wp.kernel(enable_backward=False)
def staged(out: wp.array(dtype=T)):
    i = wp.tid()
    ST(out, i, T(wp.float32(i)))


@wp.kernel(enable_backward=False)
def flat(out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = wp.float32(i)
"""


def store_kernels(n: int) -> dict:
    from xform._launch import codegen, source

    namespace = {
        "T": wp.types.vector(n, wp.float32),
        "ST": codegen._native("store", (n,), wp.float32),
    }
    return source.build(STORE_KERNELS, f"xform_benchmarks.stores_{n}", namespace)


def stores(device: str, size: int) -> list[dict]:
    sync, rows = synchronizer(device), []
    for n in ELEMENTS:
        kernels = store_kernels(n)
        out = wp.empty(size, dtype=wp.types.vector(n, wp.float32), device=device)
        flat = wp.empty(size * n, dtype=wp.float32, device=device)
        row = {"scalars per element": n, "bytes": size * n * 4}
        for name in ("plain", "staged"):
            launch = wp.launch(
                kernels[name], dim=size, inputs=[out], device=device, record_cmd=True
            )
            row[f"{name} s"] = median_time(lambda launch=launch: (launch.launch(), sync()))
        launch = wp.launch(
            kernels["flat"], dim=size * n, inputs=[flat], device=device, record_cmd=True
        )
        row["one scalar per thread s"] = median_time(
            lambda launch=launch: (launch.launch(), sync())
        )
        # What the staged store wrote (it ran last): element i is i in every component.
        staged = out.numpy()
        expected = np.arange(size, dtype=np.float32)[:, None]
        row["staged store correct"] = bool(
            np.array_equal(staged, np.broadcast_to(expected, staged.shape))
        )
        rows.append(row)
        times = [row[f"{name} s"] * 1e6 for name in ("plain", "staged", "one scalar per thread")]
        print(f"stores {n}: plain, staged, one scalar per thread: "
              + ", ".join(f"{t:,.1f} µs" for t in times), flush=True)  # fmt: skip
    return rows


# --- broadcast gradients --------------------------------------------------------------------


def sums(device: str, size: int) -> list[dict]:
    rng = np.random.default_rng(0)
    poses = min(4096, max(size // 4096, 1))
    cases = {
        "batch_transform_points": [(poses, 3), (poses, 4), (poses, size // poses, 3)],
        "transform_points": [(3,), (4,), (size, 3)],
    }
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    rows = []
    for name, shapes in cases.items():
        arrays = [torch.from_numpy(rng.normal(size=s).astype(np.float32)).to(device)
                  for s in shapes]  # fmt: skip
        arrays[1] = arrays[1] / arrays[1].norm(dim=-1, keepdim=True)
        inputs = [a.requires_grad_(True) for a in arrays]
        cotangent = torch.from_numpy(rng.normal(size=shapes[2]).astype(np.float32)).to(device)
        fn = getattr(xt, name)

        def run(fn=fn, inputs=inputs, cotangent=cotangent):
            grads = torch.autograd.grad(fn(*inputs), inputs, cotangent)
            sync()
            return grads

        for blocks in (True, False):
            with sums_in_blocks(blocks):
                seconds = median_time(run)
                runs = [[g.cpu().numpy() for g in run()] for _ in range(5)]
            same = all(np.array_equal(a, b) for r in runs[1:] for a, b in zip(r, runs[0]))
            rows.append({"op": name, "points": size, "poses": shapes[0][0] if len(shapes[0]) > 1
                         else 1, "in blocks": blocks, "seconds": seconds,
                         "five runs the same bits": same})  # fmt: skip
            print(f"{name} forward+backward, {'blocks' if blocks else 'atomics'}: "
                  f"{seconds * 1e6:,.1f} µs, deterministic: {same}", flush=True)  # fmt: skip
    return rows


# --- kinematics ------------------------------------------------------------------------------


def kinematics(device: str, configurations: int, peak: float | None) -> list[dict]:
    from benchmarks.kinematics import panda_urdf

    chain = xform.kinematics.Chain.from_urdf(panda_urdf())
    rng = np.random.default_rng(0)
    q = torch.from_numpy(rng.uniform(-2, 2, (configurations, chain.dof)).astype(np.float32))
    q = q.to(device)
    link = chain.link_names[-1]

    def forward_kinematics(q):
        poses = chain.forward_kinematics(q)
        return poses.position, poses.quaternion

    functions = {"forward kinematics": forward_kinematics,
                 "jacobian": lambda q: (chain.jacobian(q, link),)}  # fmt: skip
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    rows = []
    for name, fn in functions.items():
        read, written = chain.dof * 4, sum(r.numel() for r in fn(q[:1])) * 4
        for mode in ("forward", "forward+backward"):
            backward = mode != "forward"
            x = q.clone().requires_grad_(backward)
            cotangents = [torch.ones_like(o) for o in fn(x)]

            def run(fn=fn, x=x, cotangents=cotangents, backward=backward):
                if backward:
                    torch.autograd.grad(fn(x), x, cotangents)
                else:
                    fn(x)
                sync()

            seconds = median_time(run)
            per = 3 * read + 2 * written if backward else read + written
            row = {"op": name, "mode": mode, "configurations": configurations,
                   "ns per configuration": seconds / configurations * 1e9,
                   "bytes per configuration": per,
                   "GB/s": per * configurations / seconds / 1e9}  # fmt: skip
            if peak:
                row["share of peak"] = row["GB/s"] * 1e9 / peak
            rows.append(row)
            print(f"{name} {mode}: {row['ns per configuration']:.2f} ns a configuration, "
                  f"{row['GB/s']:,.0f} GB/s", flush=True)  # fmt: skip
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (cuda:0) or cpu")
    parser.add_argument("--size", type=int, default=1 << 24, help="points (elements)")
    parser.add_argument("--configurations", type=int, default=1_000_000)
    parser.add_argument("--parts", nargs="+", default=["copy", "stores", "sums", "kinematics"])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "roofline")
    args = parser.parse_args(argv)
    device = "cuda:0" if args.device == "cuda" else args.device
    wp.config.quiet = True
    peak = peak_of(device)
    saved = {"machine": machine(device), **recorded_at(), "peak bytes/s": peak}
    if "copy" in args.parts:
        saved["copy"] = copy_floor(device, (1 << 28) if device != "cpu" else args.size)
    if "stores" in args.parts:
        saved["stores"] = stores(device, args.size)
    if "sums" in args.parts:
        saved["sums"] = sums(device, args.size)
    if "kinematics" in args.parts:
        saved["kinematics"] = kinematics(device, args.configurations, peak)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "roofline.json").write_text(json.dumps(saved, indent=1))
    return saved


if __name__ == "__main__":
    main()
