"""Forward kinematics of Panda (all 13 links), xform against what a user would use instead.

    python -m benchmarks.kinematics [--sizes 1 100 10000 1000000] [--no-compile] [--out DIR]

Per batch size (configurations) and mode (forward; forward + backward: the forward and the
VJP of a cotangent the program cannot see, as in `benchmarks/run.py`), medians of repeated
runs after warm-up, float32 but for Pinocchio (float64 only):

- xform through PyTorch, through `jax.jit`, and on NumPy (the VJP through `xform.vjp`);
- pytorch_kinematics (`build_chain_from_urdf`, every frame's 4x4 matrix), eagerly and
  under `torch.compile`;
- a jnp FK under `jax.jit` (`peers.jnp_forward_kinematics`, unit quaternions as xform's);
- Pinocchio looped over configurations in Python: `forwardKinematics` +
  `updateFramePlacements`, and for forward + backward also `computeJointJacobians` (what
  its derivatives start from: a lower bound, as it leaves the gradient uncomputed);
- for forward + backward, Pinocchio's gradient of the same cotangents, as its user gets
  one (`PinocchioGradient`: the loop above, the poses and Jacobians read out, and the
  contraction vectorised in NumPy);
- a copy of as many bytes as the call reads or writes (the bandwidth floor).

Peers that take seconds per call at a size are capped (`CAPS`), and say so. Writes
`kinematics.json` to the output folder and prints a table: ns per configuration, the
least bytes per configuration (q read and poses written; forward + backward adds q and the
cotangents read again and the gradient written), and each peer's time over xform's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import site
from pathlib import Path

import numpy as np
import torch

import xform
from benchmarks.peers import jnp_forward_kinematics
from benchmarks.report import machine
from benchmarks.run import jax_runner, median_time, torch_runner

SIZES = [1, 100, 10_000, 1_000_000]
MODES = ["forward", "forward+backward"]
DTYPE = np.float32
# The largest batch each slow peer runs at (seconds or more per call above it).
CAPS = {
    "pytorch_kinematics": 10_000,
    "pytorch_kinematics torch.compile": 10_000,
    "pinocchio loop": 10_000,
    "pinocchio gradient": 10_000,
}


def panda_urdf() -> Path:
    for base in site.getsitepackages():
        path = Path(base) / "cmeel.prefix/share/example-robot-data/robots"
        path = path / "panda_description/urdf/panda.urdf"
        if path.is_file():
            return path
    raise SystemExit("example-robot-data is not installed (pip install example-robot-data)")


def pytorch_kinematics_fk(text: bytes):
    """pytorch_kinematics' FK as a function of q (its 9 joints: the mimic finger is one
    more coordinate there) returning every frame's 4x4 matrix, (..., 13, 4, 4)."""
    import pytorch_kinematics as pk

    logging.disable(logging.WARNING)  # its URDF parser warns about Panda's <dynamics>
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        chain = pk.build_chain_from_urdf(text).to(dtype=torch.float32)
    names = chain.get_frame_names()

    def fk(q):
        frames = chain.forward_kinematics(q)
        return torch.stack([frames[name].get_matrix() for name in names], -3)

    return fk, len(chain.get_joint_parameter_names())


def with_mimic_finger(q: np.ndarray) -> np.ndarray:
    """Panda's coordinates as pytorch_kinematics and Pinocchio take them, `(..., 9)`: both
    ignore `<mimic>`, so the mimic finger is a coordinate of its own, here the master's."""
    return np.concatenate([q, q[..., -1:]], -1)


def pinocchio_runner(path: Path, q: np.ndarray, backward: bool):
    import pinocchio as pin

    model = pin.buildModelFromUrdf(str(path))
    data = model.createData()
    configurations = list(with_mimic_finger(q.astype(np.float64)))

    def run():
        for c in configurations:
            pin.forwardKinematics(model, data, c)
            pin.updateFramePlacements(model, data)
            if backward:
                pin.computeJointJacobians(model, data, c)

    return run


class PinocchioGradient:
    """Pinocchio's gradient of `<g_position, p> + <g_rotation, R>` over the `links`' poses
    (position p, rotation matrix R) at each configuration, `(batch, nv)`: Pinocchio has no
    VJP, so this is how its user gets one. A Python loop over the configurations runs
    `computeJointJacobians` (the joints' poses and their Jacobian in the world frame, at the
    world origin) and `updateFramePlacements`, and reads the frames' placements and that
    Jacobian out; then, vectorised over the batch in NumPy, each frame's cotangents become a
    wrench at the world origin `(f, τ + p × f)` (`f = g_position`, `τ` the axial part of
    `g_rotation Rᵀ`), summed over the frames each joint supports and contracted with its
    Jacobian column. The model, its frames and their supports are made once, as a user's
    setup."""

    def __init__(self, path: Path, links):
        import pinocchio as pin

        self.pin = pin
        self.model = pin.buildModelFromUrdf(str(path))
        self.data = self.model.createData()
        self.frames = [self.model.getFrameId(name, pin.BODY) for name in links]
        self.support = np.zeros((len(self.frames), self.model.nv))  # frame x velocity
        for row, frame in enumerate(self.frames):
            for joint in self.model.supports[self.model.frames[frame].parentJoint][1:]:
                self.support[row, self.model.joints[joint].idx_v] = 1.0

    def __call__(self, configurations, g_position, g_rotation) -> np.ndarray:
        pin, model, data, frames = self.pin, self.model, self.data, self.frames
        batch = len(configurations)
        placements = np.empty((batch, len(frames), 4, 4))
        jacobians = np.empty((batch, 6, model.nv))
        for b, configuration in enumerate(configurations):
            pin.computeJointJacobians(model, data, configuration)
            pin.updateFramePlacements(model, data)
            placements[b] = [data.oMf[f].homogeneous for f in frames]
            jacobians[b] = data.J
        position, rotation = placements[..., :3, 3], placements[..., :3, :3]
        m = g_rotation @ np.swapaxes(rotation, -1, -2)
        torque = np.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                           m[..., 1, 0] - m[..., 0, 1]], -1)  # fmt: skip
        wrench = np.concatenate([g_position, torque + np.cross(position, g_position)], -1)
        return np.einsum("bkv,bfk,fv->bv", jacobians, wrench, self.support)


def pinocchio_gradient_runner(path: Path, links, q: np.ndarray):
    """`PinocchioGradient` of every link's pose, for cotangents of ones (as xform's)."""
    gradient = PinocchioGradient(path, links)
    configurations = list(with_mimic_finger(q.astype(np.float64)))
    g_position = np.ones((len(q), len(links), 3))
    g_rotation = np.ones((len(q), len(links), 3, 3))
    return lambda: gradient(configurations, g_position, g_rotation)


def core_runner(chain, q: np.ndarray, backward: bool):
    if not backward:
        return lambda: chain.forward_kinematics(q)
    poses = chain.forward_kinematics(q)
    cotangents = (np.ones_like(poses.position), np.ones_like(poses.quaternion))
    operands = chain.op_arguments(q)

    def run():
        chain.forward_kinematics(q)
        xform.vjp(chain.forward_kinematics_op, operands, cotangents)

    return run


def copy_runner(count: int):
    source = torch.ones(max(1, count // 4))
    target = torch.empty_like(source)
    return lambda: target.copy_(source)


def traffic_bytes(chain, size: int, backward: bool) -> int:
    read = size * chain.dof * 4
    written = size * chain.n_links * 7 * 4
    return 3 * read + 2 * written if backward else read + written


def implementations(chain, path, q, backward, compile_peers):
    def fk(q):  # the SE3's fields: the runners take functions of arrays to arrays
        poses = chain.forward_kinematics(q)
        return poses.position, poses.quaternion

    pk_fk, pk_dof = pytorch_kinematics_fk(path.read_bytes())
    q_pk = with_mimic_finger(q)
    runners = {
        "xform torch": lambda: torch_runner(fk, [q], backward, "cpu"),
        "xform jax.jit": lambda: jax_runner(fk, [q], backward, "cpu"),
        "xform numpy": lambda: core_runner(chain, q, backward),
        "pytorch_kinematics": lambda: torch_runner(pk_fk, [q_pk], backward, "cpu"),
        "jax.jit jnp": lambda: jax_runner(
            jnp_forward_kinematics(chain.model.table), [q], backward, "cpu"
        ),
        "pinocchio loop": lambda: pinocchio_runner(path, q, backward),
        "pinocchio gradient": lambda: pinocchio_gradient_runner(path, chain.link_names, q),
        "copy floor": lambda: copy_runner(traffic_bytes(chain, len(q), backward)),
    }
    if not backward:
        del runners["pinocchio gradient"]
    if compile_peers:
        compiled = torch.compile(pk_fk, dynamic=False)
        runners["pytorch_kinematics torch.compile"] = lambda: torch_runner(
            compiled, [q_pk], backward, "cpu"
        )
    assert pk_dof == q_pk.shape[-1]
    return runners


def measure(sizes, modes, compile_peers: bool, budget: float) -> list[dict]:
    path = panda_urdf()
    chain = xform.kinematics.Chain.from_urdf(path)
    rng = np.random.default_rng(0)
    records = []
    for mode in modes:
        backward = mode != "forward"
        for size in sizes:
            q = rng.uniform(-2.0, 2.0, (size, chain.dof)).astype(DTYPE)
            for name, build in implementations(chain, path, q, backward, compile_peers).items():
                if size > CAPS.get(name, size):
                    continue
                seconds = median_time(build(), budget=budget)
                records.append(
                    {
                        "mode": mode,
                        "size": size,
                        "impl": name,
                        "seconds": seconds,
                        "ns per configuration": seconds / size * 1e9,
                        "bytes per configuration": traffic_bytes(chain, 1, backward),
                    }
                )
                print(f"measured {mode:17s} {size:>8d} {name}", flush=True)
    return records


def format_table(records) -> str:
    impls = list(dict.fromkeys(r["impl"] for r in records))
    lines = [
        "| mode | batch | bytes/config | "
        + " | ".join(f"{name} ns/config (x xform torch)" for name in impls)
        + " |",
        "|---|---:|---:|" + "---:|" * len(impls),
    ]
    table, measured = {}, {(r["mode"], r["impl"]) for r in records}
    for r in records:
        table.setdefault((r["mode"], r["size"]), {})[r["impl"]] = r
    for (mode, size), row in table.items():
        reference = row["xform torch"]["seconds"]
        cells = []
        for name in impls:
            if name not in row:
                capped = (mode, name) in measured and size > CAPS.get(name, size)
                cells.append(f"capped at {CAPS[name]:,}" if capped else "-")
                continue
            r = row[name]
            cells.append(f"{r['ns per configuration']:,.0f} ({r['seconds'] / reference:.2f})")
        bytes_per = next(iter(row.values()))["bytes per configuration"]
        lines.append(f"| {mode} | {size:,} | {bytes_per} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per measurement")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    records = measure(args.sizes, args.modes, not args.no_compile, args.budget)
    (args.out / "kinematics.json").write_text(
        json.dumps({"machine": machine("cpu"), "records": records}, indent=1)
    )
    print(f"\n{machine('cpu')}\n")
    print(format_table(records))
    return records


if __name__ == "__main__":
    main()
