"""Zero-copy conversions between NumPy, Warp, PyTorch and JAX arrays, and the array-kind
detection that the top-level API dispatches on.

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

import sys
from typing import Any

import numpy as np
import warp as wp

KINDS = ("numpy", "warp", "torch", "jax")


def array_kind(x: Any) -> str | None:
    """'numpy', 'warp', 'torch' or 'jax' (tracers included); None for anything else."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if isinstance(x, wp.array):
        return "warp"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, (jax.Array, jax.core.Tracer)):
        return "jax"
    return None


def _kind_or_error(x: Any, function: str) -> str:
    kind = array_kind(x)
    if kind is None:
        raise TypeError(
            f"xform.{function}: expected a NumPy, Warp, PyTorch or JAX array, "
            f"got {type(x).__module__}.{type(x).__qualname__}"
        )
    return kind


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy array sharing `x`'s memory (copied only from a CUDA device)."""
    kind = _kind_or_error(x, "to_numpy")
    if kind == "numpy":
        return x
    if kind == "warp":
        return x.numpy()
    if kind == "torch":
        x = x.detach()
        return x.numpy() if x.device.type == "cpu" else x.cpu().numpy()
    if all(device.platform == "cpu" for device in x.devices()):
        return np.from_dlpack(x)
    return np.asarray(x)


def to_torch(x: Any):
    """A PyTorch tensor sharing `x`'s memory."""
    import torch

    kind = _kind_or_error(x, "to_torch")
    if kind == "torch":
        return x
    if kind == "numpy":
        return torch.from_numpy(x)
    if kind == "warp":
        return wp.to_torch(x)
    return torch.from_dlpack(x)


def to_jax(x: Any):
    """A JAX array sharing `x`'s memory where JAX can alias it (a compact, writable buffer
    aligned to 64 bytes); otherwise a copy."""
    import jax

    kind = _kind_or_error(x, "to_jax")
    if kind == "jax":
        return x
    if kind == "torch":
        x = x.detach()
        if not x.is_contiguous():
            x = x.contiguous()
    elif kind == "numpy" and not (x.flags.c_contiguous and x.flags.writeable):
        # DLPack exports neither strides JAX takes nor a read-only buffer (as NumPy's view
        # of a JAX array is): a copy
        x = np.array(x, order="C")
    elif kind == "warp" and not x.is_contiguous:
        x = x.contiguous()
    return jax.dlpack.from_dlpack(x)


def to_warp(x: Any) -> wp.array:
    """A Warp array sharing `x`'s memory."""
    kind = _kind_or_error(x, "to_warp")
    if kind == "warp":
        return x
    if kind == "numpy":
        return wp.array(x, dtype=wp.dtype_from_numpy(x.dtype), copy=False, device="cpu")
    if kind == "torch":
        return wp.from_torch(x.detach())
    return wp.from_dlpack(x)
