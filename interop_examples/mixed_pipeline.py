"""A mixed PyTorch-JAX pipeline: a small PyTorch model predicts a pose per scene, an xform
op written for JAX moves the scene's points, and the loss goes back in PyTorch.

The JAX op is bridged into PyTorch with xform.jax_to_torch (zero-copy through DLPack),
so torch autograd differentiates through JAX's reverse mode end to end. The script checks
those gradients against the pure-PyTorch path (xform.backends.torch), then trains the
model and checks that it learned the poses.

Prints its progress and the final figures; exits non-zero if either check fails. Its
pieces are importable (docs/tutorials/mixed_pipeline.py builds on them).
"""

import sys

import jax
import torch

import xform
import xform.backends.jax as xj
import xform.backends.torch as xt

SCENES, POINTS, FEATURES = 64, 32, 8


class PoseHead(torch.nn.Module):
    """Scene features `(scenes, FEATURES)` -> a position `(scenes, 3)` and a unit
    quaternion `(scenes, 4)` `[w, x, y, z]` (an offset from the identity, normalised)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 64), torch.nn.Tanh(), torch.nn.Linear(64, 7)
        )

    def forward(self, features):
        out = self.body(features)
        identity = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=out.dtype, device=out.device)
        quaternion = torch.nn.functional.normalize(out[:, 3:] + identity, dim=-1)
        return out[:, :3], quaternion


def make_scenes(seed: int = 0):
    """Scenes whose true poses are a fixed, unknown function of their features: those of
    a second, randomly initialised `PoseHead` (float64). Returns the features, the true
    positions and quaternions, the points and the moved points."""
    torch.manual_seed(seed)
    features = torch.randn(SCENES, FEATURES, dtype=torch.float64)
    teacher = PoseHead().double()
    with torch.no_grad():
        true_position, true_quaternion = teacher(features)
    source = torch.randn(SCENES, POINTS, 3, dtype=torch.float64)
    target = xt.batch_transform_points(true_position, true_quaternion, source)
    return features, true_position, true_quaternion, source, target


def loss_through(move, model, features, source, target):
    """The mean squared distance between the model's poses applied to the points by
    `move(position, quaternion, points)` and the targets."""
    position, quaternion = model(features)
    return ((move(position, quaternion, source) - target) ** 2).sum(-1).mean()


def main() -> int:
    jax.config.update("jax_enable_x64", True)  # float64 in both frameworks: a tight check
    features, _, _, source, target = make_scenes()
    model = PoseHead().double()
    move_in_jax = xform.jax_to_torch(jax.jit(xj.batch_transform_points))
    data = (features, source, target)

    # 1. Gradients through the JAX op equal those of the pure-PyTorch path.
    parameters = list(model.parameters())
    bridged = torch.autograd.grad(loss_through(move_in_jax, model, *data), parameters)
    native = torch.autograd.grad(loss_through(xt.batch_transform_points, model, *data), parameters)
    gradient_error = max(
        ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()
        for a, b in zip(bridged, native)
    )
    print(f"gradients through JAX vs PyTorch: max relative difference {gradient_error:.2e}")

    # 2. Train through the bridge.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for step in range(301):
        optimizer.zero_grad()
        loss = loss_through(move_in_jax, model, *data)
        loss.backward()
        optimizer.step()
        first = first if first is not None else loss.item()
        if step % 50 == 0:
            print(f"step {step:3d}  loss {loss.item():.6f}")
    print(f"loss {first:.4f} -> {loss.item():.6f} ({first / loss.item():.0f}x lower)")
    return 0 if gradient_error < 1e-10 and loss.item() < first / 100 else 1


if __name__ == "__main__":
    sys.exit(main())
