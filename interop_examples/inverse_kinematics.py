"""Inverse kinematics on `xform.optim`: a Franka Panda (example-robot-data) reaches many
targets at once, position and orientation, within its joint limits, in PyTorch or JAX.

    python interop_examples/inverse_kinematics.py [--framework torch|jax] [--device cpu|cuda]
        [--targets N] [--seed S]

Each target is the pose of the tool frame at a configuration drawn uniformly within the
joint limits, so every target is reachable. One batched problem solves them all: the seven
arm joints of each target are one Euclidean variable with the URDF's limits as bounds
(each step is projected onto them), the residual `log(T_target^-1 T_tool(q))` (SE(3):
translation and rotation), its Jacobian by forward mode through `chain.forward_kinematics`.
In PyTorch the targets are a leading batch axis (`optim.Problem(batch=N)`); in JAX one
target's solve is mapped with `jax.vmap` under `jax.jit`. The targets not reached from the
start configuration are solved again from random configurations (the same batched solve
on the rest), up to `ROUNDS` times. With `--device cuda` the solves run on the GPU.

Prints last `final reached=<int>/<int> max_position_error=<float>
max_rotation_error=<float> seconds=<float>` (seconds: the solves, not building or
compiling; the errors over the targets reached, a target being reached when its tool
position is within 1e-6 m and its orientation within 1e-6 rad). With no arguments (as CI
runs it) it solves 1,000 targets in both frameworks and checks every one is reached.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import functools  # noqa: E402
import site  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import xml.etree.ElementTree as ElementTree  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from xform import SE3, optim  # noqa: E402
from xform._frameworks import FRAMEWORKS, of  # noqa: E402
from xform.kinematics import Chain  # noqa: E402

TOOL = "panda_hand_tcp"
ARM = 7  # the arm's joints; the finger (Panda's eighth coordinate) does not move the tool
FINGER = 0.02
POSITION_TOLERANCE = 1e-6  # m
ROTATION_TOLERANCE = 1e-6  # rad
ROUNDS = 12  # restarts from random configurations for the targets not yet reached
# LM iterations per round: a start that converges does in about 10, and one still
# converging goes on from its best in the next round (benchmarks/NOTES.md, 38)
ITERATIONS = 20
FIRST_STARTS = 4  # the middle of the limits and 3 random configurations per target
STARTS = 16  # random starts per target left, in each round after the first, at least
BATCH = 4096  # problems in a later round's batch, when few targets are left


def panda_urdf() -> Path | None:
    for base in site.getsitepackages():
        path = Path(base) / "cmeel.prefix/share/example-robot-data/robots"
        if (path / "panda_description/urdf/panda.urdf").is_file():
            return path / "panda_description/urdf/panda.urdf"
    return None


def joint_limits(path: Path, names) -> tuple[np.ndarray, np.ndarray]:
    """The `<limit lower upper>` of each named joint, from the URDF."""
    joints = {j.get("name"): j for j in ElementTree.parse(path).getroot().iter("joint")}
    lower = [float(joints[n].find("limit").get("lower")) for n in names]
    upper = [float(joints[n].find("limit").get("upper")) for n in names]
    return np.array(lower), np.array(upper)


class Panda:
    def __init__(self, path: Path):
        self.chain = Chain.from_urdf(path)
        self.lower, self.upper = joint_limits(path, self.chain.joint_names[:ARM])

    def targets(self, count: int, seed: int) -> tuple[np.ndarray, SE3]:
        """`count` configurations uniform within the limits, and their tool poses."""
        rng = np.random.default_rng(seed)
        q = rng.uniform(self.lower, self.upper, (count, ARM))
        return q, self.tool(np.concatenate([q, np.full((count, 1), FINGER)], -1))

    def tool(self, q):
        return self.chain.forward_kinematics(q, links=[TOOL])[..., 0]


def residual_of(chain: Chain):
    def residual(q, finger, target):
        """`log(T_target^-1 T_tool(q))`, (..., 6): q the arm's joints, (..., 7)."""
        full = _concatenate([q, finger], -1)
        tool = chain.forward_kinematics(full, links=[TOOL])[..., 0]
        return (target.inverse() @ tool).log()

    def jacobian(q, finger, target):
        """The residual and its Jacobian in q from the chain's own: `chain.jacobian`
        gives the tool's velocity in the base frame ([v; w]); its right-perturbation
        tangent is that velocity in the tool's frame (`R^T v`, `R^T w`), and the
        residual moves by `J_r^-1(r)` of it (`error.jlog()`)."""
        full = _concatenate([q, finger], -1)
        tool = chain.forward_kinematics(full, links=[TOOL])[..., 0]
        error = target.inverse() @ tool
        velocity = chain.jacobian(full, TOOL)[..., :ARM]  # (..., 6, 7)
        rotation_t = tool.rotation().as_matrix().mT
        body = _concatenate(
            [rotation_t @ velocity[..., :3, :], rotation_t @ velocity[..., 3:, :]], -2
        )
        return error.log(), [error.jlog() @ body]

    return residual, jacobian


def _concatenate(arrays, axis):
    return of(arrays[0]).concatenate(arrays, axis)


def errors(panda: Panda, q: np.ndarray, target: SE3) -> tuple[np.ndarray, np.ndarray]:
    """Position (m) and rotation (rad) errors of the tool at q against the targets, in
    NumPy, float64."""
    count = len(q)
    reached = panda.tool(np.concatenate([q, np.full((count, 1), FINGER)], -1))
    position = np.linalg.norm(reached.position - target.position, axis=-1)
    rotation = np.linalg.norm((target.inverse() @ reached).rotation().log(), axis=-1)
    return position, rotation


# --- the solves ------------------------------------------------------------------------------


def torch_solver(panda: Panda, device: str = "cpu"):
    import torch

    residual, jacobian = residual_of(panda.chain)
    lower = torch.from_numpy(panda.lower).to(device)
    upper = torch.from_numpy(panda.upper).to(device)

    def solve(start: np.ndarray, target: SE3) -> np.ndarray:
        count = len(start)
        problem = optim.Problem(batch=count)
        q = problem.variables(
            torch.from_numpy(start[:, None, :]).to(device),
            lower=lower,
            upper=upper,
        )
        finger = torch.full((count, 1, 1), FINGER, dtype=torch.float64, device=device)
        goal = target.reshape(count, 1).to_torch()
        goal = type(goal)(goal.position.to(device), goal.quaternion.to(device))
        problem.add(
            residual,
            q[:],
            data=(finger, goal),
            jacobian_fn=jacobian,
            name="tool pose",
        )
        result = optim.solve(problem, max_iterations=ITERATIONS, damping=1e-3)
        return result.values(q)[:, 0].cpu().numpy()

    return solve


def jax_solver(panda: Panda, device: str = "cpu"):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    FRAMEWORKS["jax"].cache_compilations(Path.home() / ".cache" / "xform" / "jax")
    place = functools.partial(FRAMEWORKS["jax"].to_device, device=device)
    residual, jacobian = residual_of(panda.chain)
    lower, upper = jnp.asarray(panda.lower), jnp.asarray(panda.upper)

    def one(start, goal):
        problem = optim.Problem()
        q = problem.variables(start[None], lower=lower, upper=upper)
        finger = jnp.full((1, 1), FINGER)
        problem.add(
            residual,
            q[:],
            data=(finger, goal.reshape(1)),
            jacobian_fn=jacobian,
            name="tool pose",
        )
        return optim.solve(problem, max_iterations=ITERATIONS, damping=1e-3).values(q)[0]

    batched = jax.jit(jax.vmap(one))

    def solve(start: np.ndarray, target: SE3) -> np.ndarray:
        # batches padded to a power of two (repeating the first problem), so that the
        # rounds' shrinking batches reuse a few compiled sizes
        count = len(start)
        size = 1 << max(count - 1, 0).bit_length()
        pad = np.concatenate([np.arange(count), np.zeros(size - count, np.int64)])
        goal = target[pad].to_jax()
        goal = type(goal)(place(goal.position), place(goal.quaternion))
        solved = batched(place(jnp.asarray(start[pad])), goal)
        return np.asarray(solved)[:count]

    return solve


@functools.cache
def _panda(path: Path) -> Panda:
    return Panda(path)


@functools.cache
def _solver(framework: str, path: Path, device: str = "cpu"):
    """One solver per framework, robot and device: JAX's compiled functions are kept with
    it."""
    panda = _panda(path)
    return {"torch": torch_solver, "jax": jax_solver}[framework](panda, device)


def run(framework: str = "torch", count: int = 1000, seed: int = 0, report=print,
        device: str = "cpu"):  # fmt: skip
    """Solve `count` targets; returns (reached mask, position errors, rotation errors,
    seconds)."""
    path = panda_urdf()
    if path is None:
        raise RuntimeError("example-robot-data is not installed: pip install example-robot-data")
    panda = _panda(path)
    _, target = panda.targets(count, seed)
    solve = _solver(framework, path, device)
    middle = 0.5 * (panda.lower + panda.upper)
    rng = np.random.default_rng(seed + 1)
    start = time.perf_counter()
    q = np.tile(middle, (count, 1))
    todo = np.arange(count)
    position = np.full(count, np.inf)
    rotation = np.full(count, np.inf)
    for round_ in range(ROUNDS + 1):
        # round 0: every target from the middle of the limits and FIRST_STARTS - 1 random
        # configurations; then its best so far and STARTS - 1 random ones for each target
        # not yet reached; each round one batch, the best start of each target kept
        # later rounds: as many starts as keep the batch near BATCH problems, at least
        # STARTS (few targets left: many starts each, for targets whose solutions lie in a
        # small basin near the joint limits)
        copies = FIRST_STARTS if round_ == 0 else max(STARTS, min(512, BATCH // len(todo)))
        starts = rng.uniform(panda.lower, panda.upper, (copies * len(todo), ARM))
        # the first start of each target: the middle of the limits, then its best so far
        # (a start still converging, slowly near a singular configuration, goes on)
        starts[: len(todo)] = middle if round_ == 0 else q[todo]
        goals = target[np.tile(todo, copies)]
        solved = solve(starts, goals)
        p, r = errors(panda, solved, goals)
        score = (np.maximum(p / POSITION_TOLERANCE, r / ROTATION_TOLERANCE)).reshape(copies, -1)
        best = np.argmin(score, axis=0)
        pick = best * len(todo) + np.arange(len(todo))
        q[todo] = solved[pick]
        position[todo], rotation[todo] = p[pick], r[pick]
        reached = (position <= POSITION_TOLERANCE) & (rotation <= ROTATION_TOLERANCE)
        if report:
            report(f"round {round_}: {int(reached.sum())}/{count} reached")
        todo = np.flatnonzero(~reached)
        if not len(todo):
            break
    seconds = time.perf_counter() - start
    inside = np.all((q >= panda.lower - 1e-12) & (q <= panda.upper + 1e-12))
    if not inside:
        raise RuntimeError("a solution left the joint limits")
    reached = (position <= POSITION_TOLERANCE) & (rotation <= ROTATION_TOLERANCE)
    if report:
        report(
            f"final reached={int(reached.sum())}/{count} "
            f"max_position_error={position[reached].max(initial=0.0)!r} "
            f"max_rotation_error={rotation[reached].max(initial=0.0)!r} seconds={seconds:.6f}"
        )
    return reached, position, rotation, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=["torch", "jax"], default="torch")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.targets < 1:
        parser.error(f"--targets must be positive, got {args.targets}")
    try:
        reached, *_ = run(args.framework, args.targets, args.seed, device=args.device)
    except (ValueError, RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0 if reached.all() else 1


def self_check() -> int:
    """CI's run: 1,000 targets in both frameworks, every one reached."""
    if panda_urdf() is None:
        print("skipped: example-robot-data is not installed")
        return 0
    failures = 0
    for framework in ("torch", "jax"):
        print(f"== {framework}")
        reached, *_ = run(framework, 1000, 0)
        failures += int(not reached.all())
    print("ok" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main() if len(sys.argv) > 1 else self_check())
