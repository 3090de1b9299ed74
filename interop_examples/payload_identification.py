"""Identify the payload a Franka Panda holds, its mass and centre of mass, from the joint
torques it measures at rest, by gradient descent through xform's dynamics, in PyTorch and
in JAX.

The "real" robot is Panda's URDF with one more link, a 1.3 kg payload fixed to its hand
(example-robot-data's Panda, loaded by `Chain.from_urdf`); its gravity torques at 200
random poses, plus 1 mNm of noise, are the measurements. The model is the Panda without
the payload, holding an unknown wrench: the payload's weight `m g`, seen in the hand's
frame (its rotation from `forward_kinematics`) and applied at the centre of mass `c`, an
external force of `Chain.inverse_dynamics`. Adam fits `m` and `c` to the measured
torques; the gradients flow through the inverse
dynamics' closed-form VJP (into the external forces) and the forward kinematics'.

Prints the fitted payload and exits non-zero unless both frameworks find it to 1 g and
0.1 mm.
"""

import site
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch

import xform
from xform.kinematics import Chain

jax.config.update("jax_enable_x64", True)

MASS, CENTRE = 1.3, np.array([0.02, -0.01, 0.08])  # in the hand's frame, metres
PAYLOAD = f"""
  <link name="payload">
    <inertial><origin xyz="{CENTRE[0]} {CENTRE[1]} {CENTRE[2]}"/><mass value="{MASS}"/>
      <inertia ixx="2e-3" ixy="0" ixz="0" iyy="2e-3" iyz="0" izz="1e-3"/></inertial>
  </link>
  <joint name="payload_mount" type="fixed">
    <parent link="panda_hand"/><child link="payload"/>
  </joint>
</robot>"""


def panda_urdf() -> str:
    for base in site.getsitepackages():
        path = Path(base) / "cmeel.prefix/share/example-robot-data/robots"
        if (path / "panda_description/urdf/panda.urdf").is_file():
            return (path / "panda_description/urdf/panda.urdf").read_text()
    sys.exit("example-robot-data is not installed: pip install example-robot-data")


text = panda_urdf()
chain = Chain.from_urdf(text)
loaded = Chain.from_urdf(text.replace("</robot>", PAYLOAD))
HAND = chain.link_names.index("panda_hand")
gravity = np.array(chain.gravity)

STEPS = 600
rng = np.random.default_rng(0)
poses = rng.uniform(-2.0, 2.0, (200, chain.dof))
measured = loaded.gravity_torques(poses) + 1e-3 * rng.normal(size=(200, chain.dof))
print(f"measured torques at {len(poses)} poses of {chain.dof} coordinates")


def report(name, mass, centre) -> bool:
    centre = np.asarray(centre)
    ok = abs(float(mass) - MASS) < 1e-3 and np.abs(centre - CENTRE).max() < 1e-4
    print(
        f"{name}: mass {float(mass):.4f} kg (true {MASS}), centre {np.round(centre, 5)} m "
        f"(true {CENTRE}){'' if ok else '  FAILED'}"
    )
    return ok


# --- PyTorch ------------------------------------------------------------------------------
q = torch.from_numpy(poses)
target = torch.from_numpy(measured)
hand = chain.forward_kinematics(q, links=["panda_hand"]).quaternion[:, 0]
rotations = xform.quaternion_to_matrix(hand)  # (n, 3, 3): the hand's frame in the base's
zero = torch.zeros(len(poses), chain.dof, dtype=torch.float64)
mass = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
centre = torch.zeros(3, dtype=torch.float64, requires_grad=True)
optimizer = torch.optim.Adam([mass, centre], lr=0.02)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, STEPS)
for step in range(STEPS + 1):
    optimizer.zero_grad()
    force = torch.einsum("nji,j->ni", rotations, mass * torch.from_numpy(gravity))
    torque = torch.linalg.cross(centre.expand_as(force), force)
    wrench = torch.cat([force, torque], -1)
    forces = torch.zeros(len(poses), chain.n_links, 6, dtype=torch.float64)
    forces[:, HAND] = wrench
    loss = ((chain.inverse_dynamics(q, zero, zero, forces) - target) ** 2).mean()
    loss.backward()
    optimizer.step()
    schedule.step()
    if step % 200 == 0:
        print(f"torch step {step:4d}: loss {loss.item():.3e}")
torch_ok = report("PyTorch", mass.detach(), centre.detach().numpy())

# --- JAX ------------------------------------------------------------------------------------
q = jnp.asarray(poses)
target = jnp.asarray(measured)
hand = chain.forward_kinematics(q, links=["panda_hand"]).quaternion[:, 0]
rotations = xform.quaternion_to_matrix(hand)
zero = jnp.zeros((len(poses), chain.dof))


def loss(parameters):
    mass, centre = parameters[0], parameters[1:]
    force = jnp.einsum("nji,j->ni", rotations, mass * gravity)
    wrench = jnp.concatenate([force, jnp.cross(centre, force)], -1)
    forces = jnp.zeros((len(poses), chain.n_links, 6)).at[:, HAND].set(wrench)
    return ((chain.inverse_dynamics(q, zero, zero, forces) - target) ** 2).mean()


@jax.jit
def step(parameters, first, second, t):
    """One Adam step (the update rule written out: no optimiser library needed)."""
    value, gradient = jax.value_and_grad(loss)(parameters)
    rate = 0.02 * 0.5 * (1 + jnp.cos(jnp.pi * t / STEPS))
    first = 0.9 * first + 0.1 * gradient
    second = 0.999 * second + 0.001 * gradient**2
    corrected = first / (1 - 0.9 ** (t + 1)), second / (1 - 0.999 ** (t + 1))
    return parameters - rate * corrected[0] / (jnp.sqrt(corrected[1]) + 1e-8), first, second, value


parameters = jnp.array([1.0, 0.0, 0.0, 0.0])
first = second = jnp.zeros(4)
for t in range(STEPS + 1):
    parameters, first, second, value = step(parameters, first, second, t)
    if t % 200 == 0:
        print(f"jax step {t:4d}: loss {float(value):.3e}")
jax_ok = report("JAX", parameters[0], np.asarray(parameters[1:]))
sys.exit(0 if torch_ok and jax_ok else 1)
