"""JAX: recover 1,000 rigid poses, one per scene, from noisy point correspondences, all
at once with jit(vmap(grad(...))) through xform's ops (xform.backends.jax). Under vmap
each step is one kernel launch for every scene.

Prints its progress and the final pose errors; exits non-zero if any pose is not found.
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import xform.backends.jax as xj

SCENES, POINTS, STEPS = 1000, 64, 200


def make_scenes(seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(SCENES, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    t = rng.normal(size=(SCENES, 3))
    source = rng.normal(size=(SCENES, POINTS, 3))
    target = np.array(jax.vmap(xj.transform_points)(t, q, source))
    target += 0.01 * rng.normal(size=target.shape)
    return [jnp.asarray(a, jnp.float32) for a in (t, q, source, target)]


def scene_loss(t, q, source, target):
    moved = xj.transform_points(t, q / jnp.linalg.norm(q), source)
    return ((moved - target) ** 2).sum(-1).mean()


@jax.jit
def step(t, q, source, target):
    grad_t, grad_q = jax.vmap(jax.grad(scene_loss, argnums=(0, 1)))(t, q, source, target)
    return t - 0.2 * grad_t, q - 0.2 * grad_q


def fit(source, target):
    t = jnp.zeros((SCENES, 3))
    q = jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0]), (SCENES, 1))
    for i in range(STEPS + 1):
        if i % 50 == 0:
            losses = jax.vmap(scene_loss)(t, q, source, target)
            print(f"step {i:3d}  mean loss {float(losses.mean()):.6f}")
        t, q = step(t, q, source, target)
    return t, q / jnp.linalg.norm(q, axis=-1, keepdims=True)


def pose_errors(t, q, true_t, true_q):
    """Rotation angle of q_true^-1 q (2 atan2(|v|, |w|)) and position distance, per scene."""
    _, true_inverse = xj.pose_inverse(true_t, true_q)
    _, relative = xj.pose_multiply(jnp.zeros_like(t), true_inverse, jnp.zeros_like(t), q)
    relative = np.asarray(relative)
    angles = np.degrees(
        2 * np.arctan2(np.linalg.norm(relative[:, 1:], axis=-1), np.abs(relative[:, 0]))
    )
    return angles, np.linalg.norm(np.asarray(t) - np.asarray(true_t), axis=-1)


if __name__ == "__main__":
    true_t, true_q, source, target = make_scenes()
    start = time.perf_counter()
    t, q = fit(source, target)
    angles, offsets = pose_errors(t, q, true_t, true_q)
    print(
        f"{SCENES} scenes in {time.perf_counter() - start:.1f} s: worst rotation error "
        f"{angles.max():.3f} deg, worst position error {offsets.max():.4f}"
    )
    sys.exit(0 if angles.max() < 0.5 and offsets.max() < 0.02 else 1)
