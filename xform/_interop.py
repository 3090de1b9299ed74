"""Zero-copy conversions between NumPy, Warp, PyTorch and JAX arrays (each framework's own
`convert`, in `_frameworks/`).

A framework is imported only when an array of it is passed in: `import xform` loads
neither PyTorch nor JAX.

What shares memory (CPU; on CUDA the same through DLPack, which orders the producer's
pending work before the consumer's stream):

- Every conversion of a contiguous array shares its memory, with two exceptions that
  copy: JAX aliases only buffers aligned to 64 bytes (PyTorch and Warp allocate so;
  NumPy arrays often are not), and `to_numpy` of a CUDA array (NumPy is host-only).
- A non-contiguous input: PyTorch, Warp and NumPy results keep its strides (still shared);
  JAX accepts only compact layouts, so `to_jax` copies it.
- A PyTorch tensor that requires grad is converted detached (the data, not the graph).
- A JAX array is immutable and owns its buffer: the views made from it keep it alive,
  but writing through them is undefined, and once the array is donated to a jitted call
  (`donate_argnums`) or deleted, its views must not be used again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp

from . import _frameworks
from ._frameworks import JAX, NUMPY, TORCH, WARP, Framework


def _converted(x: Any, framework: Framework, function: str):
    if _frameworks.of(x) is None:
        raise TypeError(
            f"xform.{function}: expected a NumPy, Warp, PyTorch or JAX array, "
            f"got {type(x).__module__}.{type(x).__qualname__}"
        )
    return framework.convert(x)


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy array sharing `x`'s memory (copied only from a CUDA device)."""
    return _converted(x, NUMPY, "to_numpy")


def to_torch(x: Any):
    """A PyTorch tensor sharing `x`'s memory."""
    import torch  # noqa: F401 (the conversion needs it imported)

    return _converted(x, TORCH, "to_torch")


def to_jax(x: Any):
    """A JAX array sharing `x`'s memory where JAX can alias it (a compact, writable buffer
    aligned to 64 bytes); otherwise a copy."""
    import jax  # noqa: F401 (the conversion needs it imported)

    return _converted(x, JAX, "to_jax")


def to_warp(x: Any) -> wp.array:
    """A Warp array sharing `x`'s memory."""
    return _converted(x, WARP, "to_warp")
