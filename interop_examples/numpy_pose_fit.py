"""Recover a rigid pose from noisy point correspondences by gradient descent, in NumPy,
through xform's kernels and their reverse-mode products (xform.vjp).

Prints its progress and the final pose error; exits non-zero if the pose is not found.
"""

import sys

import numpy as np

import xform

rng = np.random.default_rng(7)
true_q = rng.normal(size=4)
true_q /= np.linalg.norm(true_q)
true_t = rng.normal(size=3)
source = rng.normal(size=(2000, 3))
target = xform.transform_points(true_t, true_q, source) + 0.01 * rng.normal(size=source.shape)

t = np.zeros(3)
q = np.array([1.0, 0.0, 0.0, 0.0])
for step in range(101):
    residual = xform.transform_points(t, q, source) - target
    loss = float((residual**2).sum(-1).mean())
    grad_t, grad_q, _ = xform.vjp("transform_points", (t, q, source), 2 * residual / len(source))
    t -= 0.2 * grad_t
    q -= 0.05 * grad_q
    q /= np.linalg.norm(q)  # stay on the unit sphere: rigid motions only
    if step % 20 == 0:
        print(f"step {step:3d}  loss {loss:.6f}")

angle_error = np.degrees(2 * np.arccos(min(1.0, abs(float(q @ true_q)))))
position_error = float(np.linalg.norm(t - true_t))
print(f"rotation error {angle_error:.4f} deg, position error {position_error:.5f}")
sys.exit(0 if angle_error < 0.1 and position_error < 1e-2 else 1)
