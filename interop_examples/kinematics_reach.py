"""Inverse kinematics through xform.kinematics, in PyTorch and in JAX: a Franka Panda
(from example-robot-data) reaches 256 targets at once.

- PyTorch: Adam on the joint angles, the loss the squared distance of the hand's tool
  point to its target; gradients by torch autograd through `forward_kinematics` (one
  kernel for all links, with its closed-form VJP).
- JAX: damped least squares (Levenberg-Marquardt) on position and orientation, with
  `chain.jacobian`, under `jax.jit` and `jax.vmap`.

The targets are the poses of random configurations, so each is reachable. Prints the
errors; exits non-zero unless every target is reached.
"""

import site
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch

from xform.kinematics import Chain

jax.config.update("jax_enable_x64", True)


def panda_urdf() -> Path:
    for base in site.getsitepackages():
        path = Path(base) / "cmeel.prefix/share/example-robot-data/robots"
        if (path / "panda_description/urdf/panda.urdf").is_file():
            return path / "panda_description/urdf/panda.urdf"
    sys.exit("example-robot-data is not installed: pip install example-robot-data")


chain = Chain.from_urdf(panda_urdf())
TOOL = "panda_hand_tcp"
rng = np.random.default_rng(0)
start = np.zeros((256, chain.dof))
start[:, 3] = -1.5  # Panda's elbow: bent, away from its joint limit at 0
# Targets: the tool's poses at configurations up to 0.8 rad per joint away from the start
# (farther, some would need a path around a joint limit or a singularity, which descent
# from the start does not find).
solution = start + rng.uniform(-0.8, 0.8, start.shape)
solution[:, 7] = 0.02  # the finger opening does not move the tool point
target = chain.forward_kinematics(solution, links=[TOOL])  # an SE3 of shape (256, 1)
target_position, target_quaternion = target.position, target.quaternion

# --- PyTorch: Adam on the positions --------------------------------------------------------
q = torch.tensor(start, requires_grad=True)
goal = torch.from_numpy(target_position[:, 0])
optimizer = torch.optim.Adam([q], lr=0.1)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 600)
for step in range(601):
    optimizer.zero_grad()
    position = chain.forward_kinematics(q, links=[TOOL]).position
    loss = ((position[:, 0] - goal) ** 2).sum(-1)
    loss.sum().backward()
    optimizer.step()
    schedule.step()
    if step % 200 == 0:
        print(f"torch step {step:3d}: mean distance {loss.sqrt().mean().item() * 1e3:.2e} mm")
torch_error = loss.sqrt().max().item()

# --- JAX: Levenberg-Marquardt on positions and orientations -------------------------------


def pose_error(q, position, quaternion):
    """[position error; rotation error as an angle-axis vector], in the base frame."""
    tool = chain.forward_kinematics(q, links=[TOOL])
    p, r = tool.position, tool.quaternion
    w, v = r[0, 0], r[0, 1:]
    w_goal, v_goal = quaternion[0], quaternion[1:]
    # the vector part of goal * r^-1, sign chosen so that its angle is at most pi
    relative = w * v_goal - w_goal * v - jnp.cross(v_goal, v)
    relative = relative * jnp.sign(w * w_goal + v @ v_goal)
    return jnp.concatenate([position - p[0], 2.0 * relative])


@jax.jit
@jax.vmap
def solve(q, position, quaternion):
    def step(_, q):
        error = pose_error(q, position, quaternion)
        jacobian = chain.jacobian(q, TOOL)
        damping = jnp.minimum(error @ error, 1e-3) * jnp.eye(6)  # vanishing at the goal
        move = jacobian.T @ jnp.linalg.solve(jacobian @ jacobian.T + damping, error)
        return q + move * jnp.minimum(1.0, 0.3 / jnp.linalg.norm(move))  # at most 0.3 rad

    return jax.lax.fori_loop(0, 30, step, q)


fitted = solve(jnp.asarray(start), jnp.asarray(target_position[:, 0]), target_quaternion[:, 0])
errors = jax.vmap(pose_error)(fitted, target_position[:, 0], target_quaternion[:, 0])
position_error = float(jnp.linalg.norm(errors[:, :3], axis=-1).max())
angle_error = float(jnp.linalg.norm(errors[:, 3:], axis=-1).max())
print(f"jax LM: max position error {position_error * 1e3:.2e} mm, max angle {angle_error:.2e} rad")
print(f"torch Adam: max distance {torch_error * 1e3:.2e} mm")
sys.exit(0 if torch_error < 1e-4 and position_error < 1e-6 and angle_error < 1e-6 else 1)
