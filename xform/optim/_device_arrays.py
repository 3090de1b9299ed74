"""Array helpers of the batched device loop, in the problem's framework (PyTorch or JAX):
per-problem and per-variable selection, batched transposes, diagonals and Cholesky solves."""

from __future__ import annotations

import numpy as np

from ..groups import LieGroup


def _select_columns(mask: np.ndarray, a, b, kind):
    """`a` where mask over the variables' axis (axis 1), else `b`."""
    if isinstance(a, LieGroup):
        return type(a)._trusted(
            *(_select_columns(mask, x, y, kind) for x, y in zip(a._arrays, b._arrays))
        )
    m = mask.reshape((1, -1) + (1,) * (a.ndim - 2))
    if kind == "torch":
        import torch

        return torch.where(torch.from_numpy(np.array(m)).to(a.device), a, b)
    import jax.numpy as jnp

    return jnp.where(m, a, b)


def _transpose(j, kind):
    if kind == "torch":
        return j.transpose(-1, -2)
    import jax.numpy as jnp

    return jnp.swapaxes(j, -1, -2)


def _choose(mask, new, old, kind):
    """Per problem (axis 0) of every array of a tuple: `new` where mask, else `old`."""
    return tuple(_select_values(mask, a, b, kind) for a, b in zip(new, old))


def _diag_embed(diagonal, kind):
    if kind == "torch":
        import torch

        return torch.diag_embed(diagonal)
    import jax.numpy as jnp

    return diagonal[..., :, None] * jnp.eye(diagonal.shape[-1], dtype=diagonal.dtype)


def _cholesky_solve(a, b, kind):
    """x with a x = b (a symmetric positive definite, batched); NaN where not."""
    if kind == "torch":
        import torch

        factor, info = torch.linalg.cholesky_ex(a)
        x = torch.cholesky_solve(b[..., None], factor)[..., 0]
        return torch.where((info == 0)[:, None], x, torch.full_like(x, float("nan")))
    import jax.scipy.linalg as jsl

    factor = jsl.cho_factor(a, lower=True)
    return jsl.cho_solve(factor, b[..., None])[..., 0]


def _select_values(mask, a, b, kind):
    """Per problem (axis 0): `a` where mask, else `b`."""
    if isinstance(a, LieGroup):
        return type(a)._trusted(
            *(_select_values(mask, x, y, kind) for x, y in zip(a._arrays, b._arrays))
        )
    m = mask.reshape((-1,) + (1,) * (a.ndim - 1))
    if kind == "torch":
        import torch

        return torch.where(m, a, b)
    import jax.numpy as jnp

    return jnp.where(m, a, b)
