"""Learning through the solver: the relative weight of two kinds of edges of a pose graph,
by gradient descent on the error of the optimised trajectory, in PyTorch and in JAX.

    python interop_examples/learn_edge_weights.py [--framework torch|jax] [--steps N]

A robot drives a loop in the plane (SE(2)); its odometry edges are precise, its loop
closures noisy, and the graph weights them alike at first. The parameter is the log of the
loop closures' weight relative to the odometry's. Each step solves the pose graph with
`xform.optim` (Levenberg-Marquardt, pose 0 fixed), measures the squared distance of the
optimised positions to the ground truth, and takes that loss's gradient with respect to the
weight *through the solution*: `optim.solve` differentiates its optimum implicitly
(`torch.autograd.Function` in PyTorch, `jax.custom_vjp` in JAX), no unrolled iterations.

Prints the loss and the weight per step; with no arguments (as CI runs it) it learns in
both frameworks and checks that the loss fell and that both agree.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from xform import SE2, SO2, optim  # noqa: E402
from xform._frameworks import FRAMEWORKS  # noqa: E402

POSES = 40
LEARNING_RATE = 0.5


def scenario(seed: int = 0):
    """Ground truth (a loop), odometry edges (i, i+1) with noise 0.01, loop closures
    between poses near each other with noise 0.3, and the odometry's chain as the start."""
    rng = np.random.default_rng(seed)
    angles = np.linspace(0.0, 2 * np.pi, POSES, endpoint=False)
    truth = SE2.from_rotation_and_translation(
        SO2.from_angle(angles + np.pi / 2),
        5.0 * np.stack([np.cos(angles), np.sin(angles)], 1),
    )
    odometry = np.arange(POSES - 1)
    closures = rng.integers(0, POSES, (25, 2))
    closures = closures[np.abs(closures[:, 0] - closures[:, 1]) > 2]
    i = np.concatenate([odometry, closures[:, 0]])
    j = np.concatenate([odometry + 1, closures[:, 1]])
    kind = np.concatenate([np.zeros(len(odometry), np.int64), np.ones(len(closures), np.int64)])
    noise = np.where(kind[:, None] == 0, 0.01, 0.3) * rng.normal(size=(len(i), 3))
    measured = truth[i].inverse() @ truth[j] @ SE2.exp(noise)
    start = [truth[0]]
    for k in odometry:
        start.append(start[-1] @ measured[k])
    start = SE2(np.stack([s.position for s in start]), np.stack([s.unit_complex for s in start]))
    return truth, i, j, kind, measured, start


def edge(ti, tj, zinv, weight):
    """The edge's residual `log(Z^-1 T_i^-1 T_j)`, scaled by its kind's weight."""
    return weight[..., None] * (zinv @ (ti.inverse() @ tj)).log()


def loss_of(log_weight, xp, arrays):
    truth, i, j, kind, measured, start = arrays
    weights = xp.exp(xp.stack([0.0 * log_weight, log_weight]))[kind]
    problem = optim.Problem()
    poses = problem.variables(start, name="poses")
    problem.fix(poses[0])
    problem.add(edge, poses[i], poses[j], data=(measured.inverse(), weights), name="edges")
    solution = optim.solve(problem).values(poses)
    return ((solution.position - truth.position) ** 2).sum()


def learn(framework: str = "torch", steps: int = 8, report=print) -> list[float]:
    """The losses of `steps` steps of gradient descent, in `framework` ("torch", "jax")."""
    return LEARNERS[framework](scenario(), steps, report)


def _report(report, step: int, loss, log_weight, gradient) -> None:
    if report:
        report(
            f"step {step} loss={float(loss):.6f} log_weight={float(log_weight):.4f} "
            f"gradient={float(gradient):.4g}"
        )


def _learn_torch(scenario_arrays, steps: int, report) -> list[float]:
    import torch

    truth, i, j, kind, measured, start = scenario_arrays
    arrays = (truth.to_torch(), i, j, torch.from_numpy(kind), measured.to_torch(),
              start.to_torch())  # fmt: skip
    log_weight = torch.zeros((), dtype=torch.float64, requires_grad=True)
    losses = []
    for step in range(steps):
        loss = loss_of(log_weight, torch, arrays)
        (gradient,) = torch.autograd.grad(loss, log_weight)
        loss = loss.detach()
        losses.append(float(loss))
        _report(report, step, loss, log_weight.detach(), gradient)
        with torch.no_grad():
            log_weight -= LEARNING_RATE * gradient
    return losses


def _learn_jax(scenario_arrays, steps: int, report) -> list[float]:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    # Each op runs eagerly here, compiled once per shape: kept on disk, however short, so
    # that a rerun compiles nothing (6 s of a first run's 10).
    FRAMEWORKS["jax"].cache_compilations(Path.home() / ".cache" / "xform" / "jax")
    truth, i, j, kind, measured, start = scenario_arrays
    arrays = (truth.to_jax(), i, j, jnp.asarray(kind), measured.to_jax(), start.to_jax())
    value_and_grad = jax.value_and_grad(lambda w: loss_of(w, jnp, arrays))
    log_weight = jnp.zeros(())
    losses = []
    for step in range(steps):
        loss, gradient = value_and_grad(log_weight)
        losses.append(float(loss))
        _report(report, step, loss, log_weight, gradient)
        log_weight = log_weight - LEARNING_RATE * gradient
    return losses


# Each framework's own way to differentiate through the solver: torch.autograd, jax.grad.
LEARNERS = {"torch": _learn_torch, "jax": _learn_jax}


def self_check() -> int:
    failures = 0
    results = {}
    for framework in ("torch", "jax"):
        print(f"== {framework}")
        results[framework] = learn(framework)
        if not results[framework][-1] < 0.5 * results[framework][0]:
            print(f"{framework}: the loss did not fall by half")
            failures += 1
    if not np.allclose(results["torch"], results["jax"], rtol=1e-6):
        print("the frameworks disagree")
        failures += 1
    print("ok" if not failures else "FAILED")
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=["torch", "jax"], default="torch")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    learn(args.framework, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main() if len(sys.argv) > 1 else self_check())
