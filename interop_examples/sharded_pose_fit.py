"""The JAX example (jax_batch_pose_fit.py) split over 2 devices with jax.shard_map, the
way a user outgrowing one device would run it. Here the devices are 2 host CPU devices
(XLA_FLAGS); on a machine with GPUs the same code spreads the scenes over them.

Checks that the sharded fit finds every pose and agrees with the single-device fit.
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_batch_pose_fit import SCENES, STEPS, fit, make_scenes, pose_errors, scene_loss  # noqa: E402

devices = jax.devices()
assert len(devices) == 2, devices
mesh = Mesh(np.array(devices), ("scenes",))
by_scene = NamedSharding(mesh, P("scenes"))


def local_step(t, q, source, target):
    """One gradient step for the scenes that live on this device."""
    grad_t, grad_q = jax.vmap(jax.grad(scene_loss, argnums=(0, 1)))(t, q, source, target)
    return t - 0.2 * grad_t, q - 0.2 * grad_q


step = jax.jit(
    jax.shard_map(local_step, mesh=mesh, in_specs=(P("scenes"),) * 4, out_specs=(P("scenes"),) * 2)
)

true_t, true_q, source, target = make_scenes()
source, target = jax.device_put(source, by_scene), jax.device_put(target, by_scene)
t = jax.device_put(jnp.zeros((SCENES, 3)), by_scene)
q = jax.device_put(jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0]), (SCENES, 1)), by_scene)
for i in range(STEPS + 1):
    if i % 50 == 0:
        print(
            f"step {i:3d}  mean loss {float(jax.vmap(scene_loss)(t, q, source, target).mean()):.6f}"
        )
    t, q = step(t, q, source, target)
print(f"scenes split over {len(t.sharding.device_set)} devices")
q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)

angles, offsets = pose_errors(t, q, true_t, true_q)
single_t, single_q = fit(jax.device_put(source, devices[0]), jax.device_put(target, devices[0]))
difference = max(
    float(np.abs(np.asarray(t) - np.asarray(single_t)).max()),
    float(np.abs(np.asarray(q) - np.asarray(single_q)).max()),
)
print(
    f"worst rotation error {angles.max():.3f} deg, worst position error {offsets.max():.4f}, "
    f"sharded vs single device {difference:.1e}"
)
sys.exit(0 if angles.max() < 0.5 and offsets.max() < 0.02 and difference < 1e-5 else 1)
