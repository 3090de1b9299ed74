"""A mixed PyTorch and JAX pipeline.

A PyTorch model predicts one pose per scene; an xform op called through JAX moves each
scene's points by its pose; the loss is computed, and the model trained, in PyTorch.
`xform.jax_to_torch` turns the JAX function into a PyTorch one, zero-copy through
DLPack, so PyTorch's autograd differentiates through JAX's reverse mode. Then the other
way round: `xform.torch_to_jax` runs the trained PyTorch model inside `jax.jit` and
`jax.grad`.

It builds on `interop_examples/mixed_pipeline.py`, the README's flagship example, whose
model, data and loss it imports.
"""

# %% Set up
# Both frameworks compute in float64 here, so that the two paths can be compared to
# rounding. JAX needs `jax_enable_x64` for that: without it, float64 inputs silently
# become float32. The model, the data and the loss are those of the README's example,
# `interop_examples/mixed_pipeline.py`, imported from it.
import copy
import sys
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np
import torch
import xform
import xform.backends.jax as xj
import xform.backends.torch as xt
from torch.func import functional_call

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "interop_examples"))
from mixed_pipeline import PoseHead, loss_through, make_scenes  # noqa: E402

jax.config.update("jax_enable_x64", True)

# %% A model and its data
# `PoseHead` maps a scene's features to a position and a unit quaternion `[w, x, y, z]`.
# The true poses come from a second, randomly initialised `PoseHead`: a pose that is a
# fixed, unknown function of the features, which the model must learn from point
# correspondences alone.
#| include: interop_examples/mixed_pipeline.py PoseHead make_scenes
features, true_position, true_quaternion, source, target = make_scenes()
print("features", tuple(features.shape), "points", tuple(source.shape))

# %% A JAX op as a PyTorch function
# `jax.jit(xj.batch_transform_points)` is a compiled JAX function; `jax_to_torch` makes
# it a function of PyTorch tensors whose backward is JAX's VJP. Its gradients match
# those of the same op called in PyTorch directly (`xform.backends.torch`): one kernel
# behind both.
#| include: interop_examples/mixed_pipeline.py loss_through
model = PoseHead().double()
move_in_jax = xform.jax_to_torch(jax.jit(xj.batch_transform_points))
data = (features, source, target)

parameters = list(model.parameters())
bridged = torch.autograd.grad(loss_through(move_in_jax, model, *data), parameters)
native = torch.autograd.grad(
    loss_through(xt.batch_transform_points, model, *data), parameters
)
difference = max(
    float((a - b).abs().max() / b.abs().max()) for a, b in zip(bridged, native)
)
print(f"gradients through JAX against PyTorch: largest difference {difference:.1e}")
assert difference < 1e-10

# %% Train through the bridge
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
losses = []
for step in range(201):
    optimizer.zero_grad()
    loss = loss_through(move_in_jax, model, *data)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 50 == 0:
        print(f"step {step:3d}  loss {loss.item():.6f}")
print(f"loss {losses[0]:.4f} -> {losses[-1]:.6f}")
assert losses[-1] < losses[0] / 100

# %% The other way round: the PyTorch model inside `jax.jit`
# `torch_to_jax` makes a PyTorch function a JAX one, which `jax.jit` compiles into an
# XLA call and `jax.grad` differentiates with PyTorch's autograd. It finds the
# function's output shapes by running it once on meta tensors, so the function must take
# every tensor it uses as an argument: `torch.func.functional_call` passes the model's
# parameters in, as JAX arrays. It swaps them into the module while it runs, and JAX
# runs the call on its own thread, maybe while Python goes on: so it gets a copy of the
# model to itself.
weights = {name: xform.to_jax(p.detach()) for name, p in model.named_parameters()}
jax_side = copy.deepcopy(model)
pose_in_jax = xform.torch_to_jax(lambda w, x: functional_call(jax_side, w, (x,)))


@jax.jit
def jax_loss(weights, features, source, target):
    position, quaternion = pose_in_jax(weights, features)
    moved = xj.batch_transform_points(position, quaternion, source)
    return ((moved - target) ** 2).sum(-1).mean()


inputs = [xform.to_jax(x) for x in (features, source, target)]
value, jax_grads = jax.value_and_grad(jax_loss)(weights, *inputs)
torch_loss = loss_through(xt.batch_transform_points, model, *data)
torch_grads = dict(
    zip(weights, torch.autograd.grad(torch_loss, list(model.parameters())))
)
worst = max(
    float(np.abs(np.asarray(jax_grads[name]) - g.numpy()).max() / g.abs().max())
    for name, g in torch_grads.items()
)
print(f"loss in JAX {float(value):.6f}, in PyTorch {torch_loss.item():.6f}")
print(f"JAX's gradient against PyTorch's: largest relative difference {worst:.1e}")
assert worst < 1e-10

# %% How well the model learned the poses
# The angle of `q_true^-1 q` for each scene, through the `quaternion_geodesic_distance`
# op.
with torch.no_grad():
    position, quaternion = model(features)
angles = np.degrees(
    xt.quaternion_geodesic_distance(true_quaternion, quaternion).numpy()
)
offsets = (position - true_position).norm(dim=-1).numpy()
print(
    f"rotation error: median {np.median(angles):.2f} deg, worst {angles.max():.2f} deg"
)
print(f"position error: median {np.median(offsets):.4f}, worst {offsets.max():.4f}")

figure, (curve, spread) = plt.subplots(1, 2, figsize=(10, 3.6))
curve.semilogy(losses)
curve.set(
    title="training loss (through JAX)", xlabel="step", ylabel="mean squared distance"
)
spread.hist(angles, bins=20)
spread.set(title="rotation error per scene", xlabel="degrees", ylabel="scenes")
figure.tight_layout()
plt.show()
