"""Inverse kinematics of a Franka Panda on many targets: xform.optim (PyTorch, JAX) against
pytorch_kinematics' IK and a Pinocchio CLIK loop, on the same targets.

    python -m benchmarks.inverse_kinematics [--targets 1000] [--repeats 2] [--out FILE.json]

The targets are the tool poses (`panda_hand_tcp`) of configurations drawn uniformly within
the joint limits (`interop_examples/inverse_kinematics.py`), so each is reachable. A target
counts as reached when the tool is within 1e-6 m and 1e-6 rad of it, the same test for
every method:

- xform: the example's `run` (one batched LM problem, joint limits as bounds, restarts from
  random configurations for the targets not reached, in batches).
- pytorch_kinematics: `PseudoInverseIK` (batched damped least squares, its own retries
  from random configurations, joint limits), tolerances 1e-6, 10 retries per target.
- Pinocchio: the closed-loop IK of its documentation (`log6` error in the local frame,
  `Jlog6`, a damped pseudo-inverse step), one target at a time in a Python loop, the
  step clipped to the limits, restarted from random configurations when it stalls.

Times exclude building the models; each is the median of `--repeats` runs after a warm-up.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "interop_examples"))

import inverse_kinematics as example  # noqa: E402


def xform_run(framework: str, count: int, seed: int) -> dict:
    reached, position, rotation, seconds = example.run(framework, count, seed, report=None)
    return {"reached": int(reached.sum()), "seconds": seconds}


def pytorch_kinematics_runner(panda, count: int, seed: int):
    import pytorch_kinematics as pk
    import torch

    path = example.panda_urdf()
    chain = pk.build_serial_chain_from_urdf(path.read_bytes(), example.TOOL).to(dtype=torch.float64)
    limits = torch.from_numpy(np.stack([panda.lower, panda.upper], 1))
    _, target = panda.targets(count, seed)
    goal = pk.Transform3d(
        pos=torch.from_numpy(target.position),
        rot=torch.from_numpy(target.quaternion),
        dtype=torch.float64,
    )

    def run() -> dict:
        solver = pk.PseudoInverseIK(
            chain, max_iterations=100, num_retries=10, joint_limits=limits,
            early_stopping_any_converged=True, early_stopping_no_improvement="all",
            pos_tolerance=1e-6, rot_tolerance=1e-6, lr=1.0, debug=False,
        )  # fmt: skip
        start = time.perf_counter()
        solution = solver.solve(goal)
        seconds = time.perf_counter() - start
        # the best retry per target, scored by the common test
        q = solution.solutions.detach().numpy()  # (count, retries, 7)
        best = np.zeros((count, 7))
        reached = np.zeros(count, bool)
        for r in range(q.shape[1]):
            p, w = example.errors(panda, q[:, r], target)
            ok = (p <= example.POSITION_TOLERANCE) & (w <= example.ROTATION_TOLERANCE)
            best[ok & ~reached] = q[ok & ~reached, r]
            reached |= ok
        return {"reached": int(reached.sum()), "seconds": seconds}

    return run


def pinocchio_runner(panda, count: int, seed: int, rounds: int = example.ROUNDS):
    import pinocchio as pin

    model = pin.buildModelFromUrdf(str(example.panda_urdf()))
    data = model.createData()
    frame = model.getFrameId(example.TOOL)
    _, target = panda.targets(count, seed)
    goals = [pin.SE3(m[:3, :3], m[:3, 3]) for m in target.as_matrix()]
    lower = model.lowerPositionLimit.copy()
    upper = model.upperPositionLimit.copy()
    middle = np.concatenate([0.5 * (panda.lower + panda.upper), [example.FINGER] * (model.nq - 7)])

    def clik(q, goal):
        for _ in range(example.ITERATIONS):
            pin.forwardKinematics(model, data, q)
            pin.updateFramePlacement(model, data, frame)
            error = goal.actInv(data.oMf[frame])
            e = pin.log6(error).vector
            if np.linalg.norm(e[:3]) < 1e-7 and np.linalg.norm(e[3:]) < 1e-7:
                return q, True
            jacobian = pin.computeFrameJacobian(model, data, q, frame, pin.LOCAL)
            jacobian = pin.Jlog6(error) @ jacobian
            step = -jacobian.T @ np.linalg.solve(jacobian @ jacobian.T + 1e-10 * np.eye(6), e)
            q = np.clip(pin.integrate(model, q, step), lower, upper)
        return q, False

    def run() -> dict:
        rng = np.random.default_rng(seed + 1)
        start = time.perf_counter()
        reached = 0
        for goal in goals:
            q, ok = clik(middle.copy(), goal)
            attempt = 0
            while not ok and attempt < rounds * 16:  # as many starts as xform's rounds allow
                q0 = middle.copy()
                q0[:7] = rng.uniform(panda.lower, panda.upper)
                q, ok = clik(q0, goal)
                attempt += 1
            reached += ok
        return {"reached": int(reached), "seconds": time.perf_counter() - start}

    return run


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--peers", nargs="*", default=["pytorch_kinematics", "pinocchio"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    panda = example.Panda(example.panda_urdf())
    runners = {
        "xform torch": lambda: xform_run("torch", args.targets, args.seed),
        "xform jax": lambda: xform_run("jax", args.targets, args.seed),
    }
    if "pytorch_kinematics" in args.peers:
        runners["pytorch_kinematics PseudoInverseIK"] = pytorch_kinematics_runner(
            panda, args.targets, args.seed
        )
    if "pinocchio" in args.peers:
        runners["Pinocchio CLIK loop"] = pinocchio_runner(panda, args.targets, args.seed)
    load = os.getloadavg()
    runs: dict[str, list] = {name: [] for name in runners}
    for name, runner in runners.items():
        print(f"warm-up {name}", flush=True)
        runner()
    for repeat in range(args.repeats):
        for name, runner in runners.items():
            row = runner()
            runs[name].append(row)
            print(
                f"  {repeat}: {name}: reached {row['reached']}/{args.targets}, "
                f"{row['seconds']:.3f} s",
                flush=True,
            )
    summary = {
        name: {
            "reached": rows[-1]["reached"],
            "targets": args.targets,
            "seconds median": statistics.median(r["seconds"] for r in rows),
            "seconds min": min(r["seconds"] for r in rows),
        }
        for name, rows in runs.items()
    }
    for name, row in summary.items():
        print(f"{name}: reached {row['reached']}/{row['targets']}, {row['seconds median']:.3f} s")
    if args.out:
        machine = {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load average before, after": [load, os.getloadavg()],
        }
        args.out.write_text(json.dumps({"machine": machine, "summary": summary}, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
