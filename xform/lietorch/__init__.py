"""A LieTorch-compatible layer: `import xform.lietorch as lietorch` runs code written for
LieTorch (princeton-vl/lietorch) unchanged, on xform's kernels, on CPU and CUDA, with
nothing to compile.

`SO3`, `RxSO3`, `SE3`, `Sim3`, `LieGroupParameter`, `cat` and `stack` keep LieTorch's
names, `.data` layouts (quaternions `[x, y, z, w]`; SE3 `[t, q]`; Sim3 `[t, q, s]` with a
linear scale; RxSO3 `[q, s]`), tangent orders (`[tau, phi]`, `[tau, phi, sigma]`,
`[phi, sigma]`), broadcasting and gradients: with respect to a Euclidean tensor the
ordinary gradient, with respect to a group element's data the tangent of a left
perturbation, padded with zeros to the data's width. The differences, each on purpose
(exact Sim3 Jacobians, errors where LieTorch is silently wrong, every `torch.optim`
optimiser), are listed in the documentation's LieTorch page.

Importing this module imports PyTorch (`import xform` does not).
"""

from ._groups import SE3, SO3, LieGroup, LieGroupParameter, RxSO3, Sim3, cat, stack

__all__ = ["LieGroup", "LieGroupParameter", "SO3", "RxSO3", "SE3", "Sim3", "cat", "stack"]
