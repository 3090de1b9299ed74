"""The frameworks the optimiser runs in: xform's ops module for each, and how arrays and
poses (xform's group objects) go between it and NumPy (where the sparse algebra runs).

`numpy` runs xform's kernels on NumPy arrays (`xform`'s dispatching functions); `torch`
goes through `xform.backends.torch`, eagerly; `jax` through `xform.backends.jax`, with the
per-iteration functions under `jax.jit` (and float64 enabled).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Framework:
    name: str
    ops: Any  # the module with xform's ops for this framework's arrays
    array: Callable[[np.ndarray], Any]  # float64 NumPy -> framework
    index: Callable[[np.ndarray], Any]  # integer NumPy -> framework
    numpy: Callable[[Any], np.ndarray]
    group: Callable[[Any], Any]  # a group element over NumPy -> over this framework's arrays
    jit: Callable[[Callable], Callable]
    ready: Callable[[Any], Any]  # waits for an asynchronous result (for timings)


def _identity(x):
    return x


def _numpy() -> Framework:
    import xform

    return Framework(
        "numpy", xform, np.asarray, np.asarray, np.asarray, _identity, _identity, _identity
    )


def _torch() -> Framework:
    import torch
    import xform.backends.torch as xt

    return Framework(
        "torch",
        xt,
        array=lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)),
        index=lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)),
        numpy=lambda t: t.detach().numpy(),
        group=lambda element: element.to_torch(),
        jit=_identity,
        ready=_identity,
    )


def _jax() -> Framework:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import xform.backends.jax as xj

    return Framework(
        "jax",
        xj,
        array=lambda a: jnp.asarray(a, dtype=jnp.float64),
        index=lambda a: jnp.asarray(a, dtype=jnp.int32),
        numpy=np.asarray,
        group=lambda element: element.to_jax(),
        jit=jax.jit,
        ready=jax.block_until_ready,
    )


FRAMEWORKS = {"numpy": _numpy, "torch": _torch, "jax": _jax}


@functools.cache
def framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {sorted(FRAMEWORKS)}, got {name!r}")
    return FRAMEWORKS[name]()
