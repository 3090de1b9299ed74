"""Inverse kinematics of a Panda, step by step.

Inverse kinematics finds the joint angles `q` that put a robot's tool at a target pose.
Here a Franka Panda (example-robot-data's URDF, read by
[`xform.kinematics`](../kinematics.md)) reaches many targets at once, position and
orientation, within its joint limits, as one batched least-squares problem on
[`xform.optim`](../optim.md). The code is `interop_examples/inverse_kinematics.py`
(imported and shown here); [inverse kinematics against the
peers](../inverse_kinematics.md) has its measured comparison with pytorch_kinematics and
Pinocchio.
"""

# %% The robot
# `Chain.from_urdf` reads the kinematic part of a URDF; the example keeps the chain,
# the seven arm joints' limits and a way to draw reachable targets (the tool's poses at
# random configurations within the limits).
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "interop_examples"))
import inverse_kinematics as ik  # noqa: E402

panda = ik.Panda(ik.panda_urdf())
print(panda.chain.dof, "coordinates; the arm's limits, rad:")
print(np.round(panda.lower, 4), np.round(panda.upper, 4), sep="\n")

# %% The residual and its Jacobian
# The residual of one target is `log(T_target^-1 T_tool(q))`: six numbers, zero at the
# target. Its Jacobian comes from the chain's own (`chain.jacobian`, velocities in the
# base frame), turned into the tool frame's right perturbation and through `J_r^-1`:
#| include: interop_examples/inverse_kinematics.py residual_of
_, target = panda.targets(4, seed=0)  # reachable targets: an xform.SE3 of shape (4,)
print(target.shape, target.position.round(3), sep="\n")

# %% One solve, mapped over the targets
# In JAX, one target's problem is a Levenberg–Marquardt solve with the joint limits as
# bounds (each step is projected onto them); `jax.vmap` makes it a batch and `jax.jit`
# compiles the whole loop once:
#| include: interop_examples/inverse_kinematics.py jax_solver
solve = ik.jax_solver(panda)
middle = 0.5 * (panda.lower + panda.upper)
_, goals = panda.targets(64, seed=1)
solved = solve(np.tile(middle, (64, 1)), goals)
position_error, rotation_error = ik.errors(panda, solved, goals)
reached = (position_error <= 1e-6) & (rotation_error <= 1e-6)
print(f"from the middle of the limits: {reached.sum()} of 64 reached")

# %% Restarts
# A redundant arm with joint limits has local minima: a start from which the projected
# steps end on a limit, away from the target. The example's `run` solves each target
# from several starts in one batch, keeps the best, and solves the targets not reached
# again from random configurations until every one is reached.
lines = []  # what `run` reports: a line per round, then a summary
reached, position_error, rotation_error, _ = ik.run(
    "jax", count=64, seed=1, report=lines.append
)
print(*(line for line in lines if line.startswith("round")), sep="\n")
print(f"worst: {position_error.max():.1e} m, {rotation_error.max():.1e} rad")
assert reached.all()

# %% In PyTorch
# The same residual serves PyTorch, where the targets are a leading batch axis of one
# problem (`optim.Problem(batch=N)`):
#| include: interop_examples/inverse_kinematics.py torch_solver
reached, *_ = ik.run("torch", count=64, seed=1, report=None)
print(f"PyTorch: {reached.sum()} of 64 reached")
assert reached.all()

# %% Gradient descent instead
# `interop_examples/kinematics_reach.py` reaches 256 targets with plainer tools: Adam on
# the joint angles through `forward_kinematics`'s autograd in PyTorch, and damped
# least squares with `chain.jacobian` under `jax.jit` and `jax.vmap` in JAX, without
# `xform.optim`. Run it with `python interop_examples/kinematics_reach.py`.
