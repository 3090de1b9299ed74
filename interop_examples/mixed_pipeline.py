"""A mixed PyTorch-JAX pipeline: a small PyTorch model predicts a pose per scene, an xform
op written for JAX moves the scene's points, and the loss goes back in PyTorch.

The JAX op is bridged into PyTorch with xform.jax_to_torch (zero-copy through DLPack),
so torch autograd differentiates through JAX's reverse mode end to end. The script checks
those gradients against the pure-PyTorch path (xform.backends.torch), then trains the
model and checks that it learned the poses.

Prints its progress and the final figures; exits non-zero if either check fails.
"""

import sys

import jax
import torch
import xform.backends.jax as xj
import xform.backends.torch as xt

import xform

jax.config.update("jax_enable_x64", True)  # float64 in both frameworks, for a tight check
torch.manual_seed(0)
SCENES, POINTS, FEATURES = 64, 32, 8


class PoseHead(torch.nn.Module):
    """Scene features -> (position, unit quaternion [w, x, y, z])."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 64), torch.nn.Tanh(), torch.nn.Linear(64, 7)
        )

    def forward(self, features):
        out = self.body(features)
        quaternion = torch.nn.functional.normalize(
            out[:, 3:] + torch.tensor([1.0, 0, 0, 0]), dim=-1
        )
        return out[:, :3], quaternion


# Ground truth: each scene's pose is a fixed (unknown) function of its features.
features = torch.randn(SCENES, FEATURES, dtype=torch.float64)
teacher = PoseHead().double()
with torch.no_grad():
    true_t, true_q = teacher(features)
source = torch.randn(SCENES, POINTS, 3, dtype=torch.float64)
target = xt.batch_transform_points(true_t, true_q, source).detach()

model = PoseHead().double()
move_in_jax = xform.jax_to_torch(jax.jit(xj.batch_transform_points))


def loss_through(move):
    t, q = model(features)
    return ((move(t, q, source) - target) ** 2).sum(-1).mean()


# 1. Gradients through the JAX op equal those of the pure-PyTorch path.
bridged = torch.autograd.grad(loss_through(move_in_jax), list(model.parameters()))
native = torch.autograd.grad(loss_through(xt.batch_transform_points), list(model.parameters()))
gradient_error = max(
    ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item() for a, b in zip(bridged, native)
)
print(f"gradients through JAX vs PyTorch: max relative difference {gradient_error:.2e}")

# 2. Train through the bridge.
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
first = None
for step in range(301):
    optimizer.zero_grad()
    loss = loss_through(move_in_jax)
    loss.backward()
    optimizer.step()
    first = first if first is not None else loss.item()
    if step % 50 == 0:
        print(f"step {step:3d}  loss {loss.item():.6f}")
print(f"loss {first:.4f} -> {loss.item():.6f} ({first / loss.item():.0f}x lower)")
sys.exit(0 if gradient_error < 1e-10 and loss.item() < first / 100 else 1)
