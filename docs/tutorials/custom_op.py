"""Your own op, end to end.

One Warp function and one `xform.define_op` call make an op that runs on NumPy, PyTorch
and JAX arrays, with exact derivatives in both modes. The op here is a pinhole camera:
a world point seen from a camera at pose `(t, q)`, in pixels. We check its derivatives
against finite differences, then use it to find a camera's pose from the pixels where it
sees known points (a small perspective-n-point problem).

Its op is the one of `interop_examples/custom_op.py` (imported, shown here), which runs
in CI with tighter checks.
"""

# %% The element function
# An op's maths is a `@wp.func` over one element of each operand: here a position
# `(3,)`, a quaternion `(4,)`, a point `(3,)` and a focal length `()`. It is generic in
# the scalar type (`typing.Any`), so that float32 and float64 kernels come from it, and
# it may call xform's own element functions, such as `quat_to_matrix`. This tutorial
# imports it from the example, `interop_examples/custom_op.py`:
#| include: interop_examples/custom_op.py project
import sys
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np
import torch
import xform

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "interop_examples"))
from custom_op import PROJECT  # noqa: E402

jax.config.update("jax_enable_x64", True)  # float64 in JAX too, for the checks below

# %% The op
# `define_op` names the operands and results with their element shapes, in order. The
# kernels (forward, VJP, tangent; float32 and float64), the shape checks and
# broadcasting, and each framework's function come from this.
#| include: interop_examples/custom_op.py PROJECT
print(PROJECT)

# %% One op, every array type
# The leading dimensions broadcast by NumPy's rules: one camera, 50 points.
rng = np.random.default_rng(0)
points = rng.uniform(-1, 1, size=(50, 3)) + np.array([0.0, 0.0, 6.0])
position = np.array([0.05, -0.1, 0.02])
quaternion = np.array([1.0, 0.05, -0.03, 0.02])
quaternion /= np.linalg.norm(quaternion)
focal = np.array(500.0)
args = [position, quaternion, points, focal]

pixels = PROJECT(*args)  # NumPy in, NumPy out
in_torch = PROJECT(*[torch.from_numpy(a) for a in args])
in_jax = jax.jit(PROJECT)(*args)
print(
    type(pixels).__name__, pixels.shape, type(in_torch).__name__, type(in_jax).__name__
)
print(
    "same values:",
    np.array_equal(pixels, in_torch.numpy()),
    np.allclose(pixels, in_jax),
)

# %% Exact derivatives
# Without closed forms, the VJP is Warp's adjoint of `project` and the tangent one
# reverse sweep per result component: exact, never finite differences. On NumPy arrays,
# `xform.vjp` and `xform.jvp` give them directly; here against central differences.
cotangent = rng.normal(size=pixels.shape)
grads = xform.vjp(PROJECT, args, cotangent)
tangents = [rng.normal(size=a.shape) for a in args]
forward = xform.jvp(PROJECT, args, tangents)

step = 1e-6
up = PROJECT(*[a + step * t for a, t in zip(args, tangents)])
down = PROJECT(*[a - step * t for a, t in zip(args, tangents)])
central = (up - down) / (2 * step)
print(f"jvp against central differences: {np.abs(forward - central).max():.1e}")
# The two modes agree: <g, J t> = <J^T g, t>
lhs = float((cotangent * forward).sum())
rhs = sum(float((g * t).sum()) for g, t in zip(grads, tangents))
print(f"<g, J t> = {lhs:.10f}, <J^T g, t> = {rhs:.10f}")
assert np.abs(forward - central).max() < 1e-5 * np.abs(central).max()

# PyTorch's autograd and JAX's grad run the same kernels.
tensors = [torch.tensor(a, requires_grad=True) for a in args]
(PROJECT(*tensors) * torch.from_numpy(cotangent)).sum().backward()
jax_grads = jax.grad(lambda *a: (PROJECT(*a) * cotangent).sum(), argnums=(0, 1, 2, 3))(
    *args
)
for name, g, t, j in zip(
    ["position", "quaternion", "point", "focal"], grads, tensors, jax_grads
):
    same = np.allclose(g, t.grad.numpy(), rtol=1e-12) and np.allclose(g, j, rtol=1e-12)
    print(f"{name:10s} gradient {g.shape}: NumPy, PyTorch and JAX agree: {same}")
    assert same

# %% Find the camera from what it sees
# The observed pixels are the true camera's, with half a pixel of noise. Start from a
# perturbed pose and minimise the reprojection error with PyTorch's L-BFGS; the
# quaternion is normalised inside the loss, so the optimiser may leave the unit sphere.
observed = pixels + rng.normal(scale=0.5, size=pixels.shape)
t = torch.tensor(position + np.array([0.3, -0.2, 0.2]), requires_grad=True)
q = torch.tensor(quaternion + np.array([0.0, 0.1, 0.1, 0.0]), requires_grad=True)
p, f, y = (torch.from_numpy(a) for a in (points, focal, observed))
start = PROJECT(t, q / q.norm(), p, f).detach().numpy()


def reprojection():
    return ((PROJECT(t, q / q.norm(), p, f) - y) ** 2).mean()


history = []


def closure():
    optimiser.zero_grad()
    loss = reprojection()
    loss.backward()
    history.append(loss.item())
    return loss


optimiser = torch.optim.LBFGS([t, q], max_iter=100, line_search_fn="strong_wolfe")
optimiser.step(closure)
fitted = PROJECT(t, q / q.norm(), p, f).detach().numpy()
print(f"mean squared reprojection error {history[0]:.1f} -> {history[-1]:.3f} px^2")
print(f"position error {np.linalg.norm(t.detach().numpy() - position):.4f}")
assert history[-1] < 1.0 < history[0]

figure, (image, curve) = plt.subplots(1, 2, figsize=(10, 4))
image.scatter(*observed.T, s=12, label="observed")
image.scatter(*start.T, s=12, marker="x", label="start")
image.scatter(*fitted.T, s=40, facecolors="none", edgecolors="k", label="fitted")
image.set(title="the camera's image", xlabel="u (px)", ylabel="v (px)", aspect="equal")
image.legend(loc="lower left")
curve.semilogy(history)
curve.set(title="L-BFGS", xlabel="evaluation", ylabel="mean squared error (px^2)")
figure.tight_layout()
plt.show()
