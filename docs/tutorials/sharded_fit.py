"""A sharded JAX fit.

A thousand rigid poses, one per scene, recovered from noisy point correspondences, all
at once: `jax.vmap(jax.grad(...))` through xform's ops, with the scenes split over two
devices by `jax.shard_map`. Here the two devices are host CPU devices; on a machine with
several GPUs the same code spreads the scenes over them.

It builds on `interop_examples/jax_batch_pose_fit.py` and
`interop_examples/sharded_pose_fit.py`.
"""

# %% Two devices
# XLA makes two CPU devices when asked before JAX starts. Everything stays in float32,
# JAX's default.
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xform.backends.jax as xj  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

devices = jax.devices()
mesh = Mesh(np.array(devices), ("scenes",))
by_scene = NamedSharding(mesh, P("scenes"))
print(devices)

# %% The scenes
# Each scene has a random pose and 64 points; the targets are the moved points plus
# noise. `random_quaternion` draws uniform rotations, here with a JAX key.
SCENES, POINTS, STEPS = 1000, 64, 100
key_q, key_t, key_p, key_noise = jax.random.split(jax.random.key(0), 4)
true_q = xj.random_quaternion((SCENES,), key_q)
true_t = jax.random.normal(key_t, (SCENES, 3))
source = jax.random.normal(key_p, (SCENES, POINTS, 3))
target = jax.vmap(xj.transform_points)(true_t, true_q, source)
target = target + 0.01 * jax.random.normal(key_noise, target.shape)
source, target = jax.device_put(source, by_scene), jax.device_put(target, by_scene)
print(source.shape, source.dtype, "on", len(source.sharding.device_set), "devices")

# %% One scene's loss, every scene's step
# `scene_loss` is written for one scene; `jax.vmap(jax.grad(...))` makes it a step for a
# batch of scenes (one kernel launch for all of them), and `jax.shard_map` runs that
# step on each device's share of the scenes.


def scene_loss(t, q, source, target):
    moved = xj.transform_points(t, q / jnp.linalg.norm(q), source)
    return ((moved - target) ** 2).sum(-1).mean()


def local_step(t, q, source, target):
    grad_t, grad_q = jax.vmap(jax.grad(scene_loss, argnums=(0, 1)))(
        t, q, source, target
    )
    return t - 0.2 * grad_t, q - 0.2 * grad_q


step = jax.jit(
    jax.shard_map(
        local_step, mesh=mesh, in_specs=(P("scenes"),) * 4, out_specs=(P("scenes"),) * 2
    )
)
mean_loss = jax.jit(lambda *args: jax.vmap(scene_loss)(*args).mean())

# %% Fit
t = jax.device_put(jnp.zeros((SCENES, 3)), by_scene)
q = jax.device_put(jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0]), (SCENES, 1)), by_scene)
losses = []
for i in range(STEPS + 1):
    losses.append(float(mean_loss(t, q, source, target)))
    if i % 50 == 0:
        print(f"step {i:3d}  mean loss {losses[-1]:.6f}")
    t, q = step(t, q, source, target)
q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
print("the result is split too:", len(t.sharding.device_set), "devices")

# %% How close the poses are
# The rotation error is the angle between the true and the fitted rotation
# (`quaternion_geodesic_distance`); the same fit on one device gives the same poses.
angles = np.degrees(np.asarray(xj.quaternion_geodesic_distance(true_q, q)))
offsets = np.linalg.norm(np.asarray(t - true_t), axis=-1)
print(
    f"rotation error: median {np.median(angles):.3f} deg, worst {angles.max():.3f} deg"
)
print(f"position error: median {np.median(offsets):.4f}, worst {offsets.max():.4f}")
assert angles.max() < 0.5 and offsets.max() < 0.02

single = jax.jit(local_step)
t1 = jnp.zeros((SCENES, 3))
q1 = jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0]), (SCENES, 1))
source1, target1 = (jax.device_put(x, devices[0]) for x in (source, target))
for _ in range(STEPS + 1):
    t1, q1 = single(t1, q1, source1, target1)
q1 = q1 / jnp.linalg.norm(q1, axis=-1, keepdims=True)
difference = max(
    np.abs(np.asarray(t) - np.asarray(t1)).max(),
    np.abs(np.asarray(q) - np.asarray(q1)).max(),
)
print(f"sharded against one device: largest difference {difference:.1e}")
assert difference < 1e-5

figure, (curve, spread) = plt.subplots(1, 2, figsize=(10, 3.6))
curve.semilogy(losses)
curve.set(
    title=f"{SCENES} scenes on {len(devices)} devices",
    xlabel="step",
    ylabel="mean loss",
)
spread.hist(angles, bins=30)
spread.set(title="rotation error per scene", xlabel="degrees", ylabel="scenes")
figure.tight_layout()
plt.show()
