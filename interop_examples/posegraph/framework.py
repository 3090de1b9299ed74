"""The framework the optimiser runs in: xform's own object for it (`numpy` runs xform's
kernels on NumPy arrays, `torch` eagerly through `xform.backends.torch`, `jax` through
`xform.backends.jax` with the per-iteration functions under `jax.jit`), float64 by default
in it; and NumPy arrays and poses (xform's group objects) moved into it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xform._frameworks import FRAMEWORKS, Framework

NAMES = ("numpy", "torch", "jax")
# Where JAX keeps what it compiles for the examples: a second run of a graph of the same
# sizes compiles nothing.
COMPILATIONS = Path.home() / ".cache" / "xform" / "jax"


def framework(name: str) -> Framework:
    if name not in NAMES:
        raise ValueError(f"framework must be one of {sorted(NAMES)}, got {name!r}")
    chosen = FRAMEWORKS[name]
    chosen.enable_float64()
    chosen.cache_compilations(COMPILATIONS)
    return chosen


def array_in(fw: Framework, values, dtype=np.float64, device: str = "cpu"):
    """`values` (NumPy) as an array of `fw` on `device`, float64 unless `dtype` says
    otherwise."""
    return fw.to_device(fw.convert(np.ascontiguousarray(values, dtype=dtype)), device)


def indices_in(fw: Framework, values):
    """Integer indices (NumPy) as an array of `fw`."""
    return array_in(fw, values, np.int64)


def element_in(fw: Framework, element, device: str = "cpu"):
    """A group element over NumPy as the same element over `fw`'s arrays on `device`."""
    moved = getattr(element, f"to_{fw.name}")()
    return type(moved)(*(fw.to_device(getattr(moved, name), device) for name, _ in moved.fields))
