"""PyTorch: recover a rigid pose from noisy point correspondences by gradient descent
through xform's ops (xform.backends.torch), with torch.optim.

Prints its progress and the final pose error; exits non-zero if the pose is not found.
"""

import sys

import torch

import xform.backends.torch as xt

torch.manual_seed(0)
true_q = torch.nn.functional.normalize(torch.randn(4), dim=0)
true_t = torch.randn(3)
source = torch.randn(5000, 3)
target = xt.transform_points(true_t, true_q, source) + 0.01 * torch.randn(5000, 3)

t = torch.zeros(3, requires_grad=True)
q = torch.tensor([1.0, 0.0, 0.0, 0.0], requires_grad=True)
optimizer = torch.optim.Adam([t, q], lr=0.05)
for step in range(301):
    optimizer.zero_grad()
    unit_q = q / q.norm()  # a rotation, whatever the optimiser does to q
    loss = ((xt.transform_points(t, unit_q, source) - target) ** 2).sum(-1).mean()
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step:3d}  loss {loss.item():.6f}")

with torch.no_grad():
    # The rotation between the two, q_true^-1 q, has angle 2 atan2(|v|, |w|).
    _, true_inverse = xt.pose_inverse(true_t, true_q)
    _, relative = xt.pose_multiply(torch.zeros(3), true_inverse, torch.zeros(3), q / q.norm())
    angle = torch.rad2deg(2 * torch.atan2(relative[1:].norm(), relative[0].abs()))
    position_error = (t - true_t).norm()
print(f"rotation error {angle.item():.4f} deg, position error {position_error.item():.5f}")
sys.exit(0 if angle < 0.1 and position_error < 1e-2 else 1)
