"""Information matrices as whitening factors: `r -> U r` with `U^T U = Omega`, so that
`|U r|^2 = r^T Omega r`."""

from __future__ import annotations

import numpy as np

from .. import _frameworks
from .._interop import to_numpy
from ._problem import framework_of, is_concrete


def sqrt_information(information, *, name: str = "information"):
    """The upper Cholesky factor `U (..., d, d)` of symmetric positive definite information
    matrices `(..., d, d)` (`U^T U = Omega`), in their framework. A matrix that is not
    symmetric (to 1e-9 of its largest entry) or not positive definite raises ValueError
    naming its index and smallest eigenvalue. Factorised once, in NumPy with the checks,
    where nothing differentiates through `information`; in its framework where something
    does (autograd, forward mode, a JAX transform)."""
    kind = framework_of(information)
    if kind is None:
        raise TypeError(
            f"xform.optim.sqrt_information: {name} is a {type(information).__name__}; expected "
            "a NumPy, PyTorch or JAX array"
        )
    shape = tuple(information.shape)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(
            f"xform.optim.sqrt_information: {name} has shape {shape}; expected (..., d, d)"
        )
    if is_concrete(information):
        values = to_numpy(information).reshape(-1, shape[-1], shape[-1])
        scale = np.abs(values).max(axis=(1, 2))
        asymmetric = np.abs(values - np.swapaxes(values, 1, 2)).max(axis=(1, 2)) > 1e-9 * scale
        if asymmetric.any():
            k = int(np.flatnonzero(asymmetric)[0])
            raise ValueError(f"xform.optim.sqrt_information: {name}[{k}] is not symmetric")
        lower = _lower_cholesky(values)  # batched: ~10x cheaper than the eigenvalues
        if lower is None:
            k = next(k for k in range(len(values)) if _lower_cholesky(values[k]) is None)
            smallest = np.linalg.eigvalsh(values[k])[0] if np.isfinite(values[k]).all() else np.nan
            raise ValueError(
                f"xform.optim.sqrt_information: {name}[{k}] is not positive definite "
                f"(smallest eigenvalue {smallest:.3g})"
            )
        framework = _frameworks.of(information)
        if framework.constant_now(information):  # its factor is at hand, no gradient to keep
            # contiguous: an op's repeated launch takes contiguous operands alone
            upper = np.ascontiguousarray(np.swapaxes(lower.reshape(shape), -1, -2))
            if framework is _frameworks.NUMPY:
                return upper
            return framework.constant(upper, information)
    xp = _frameworks.of(information).namespace()
    return xp.linalg.cholesky(information).mT


def _lower_cholesky(matrices: np.ndarray) -> np.ndarray | None:
    """The lower Cholesky factors, or None where a matrix is not finite and positive
    definite (NumPy's Cholesky passes NaN through without an error)."""
    if not np.isfinite(matrices).all():
        return None
    try:
        return np.linalg.cholesky(matrices)
    except np.linalg.LinAlgError:
        return None
