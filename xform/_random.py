"""Uniform random rotations, drawn with each framework's own randomness.

A 4-vector of independent standard normals, normalised, is uniform on the unit sphere
S^3, and the unit quaternions' Haar measure is that uniform measure (Shoemake's
subgroup algorithm gives the same law). One path for every framework (`haar_quaternions`):
its own normals (a NumPy Generator, a torch `Generator`, a JAX key), then the
`quaternion_normalize` op in it.
"""

from __future__ import annotations

import operator

import numpy as np

from . import _frameworks
from ._frameworks import Framework


def sample_shape(function: str, shape, name: str = "shape") -> tuple[int, ...]:
    """`shape` (an int or a sequence of ints), argument `name` of `function`, as a tuple of
    dimensions, or a clear error: every batch shape that xform makes arrays of is read here."""
    try:
        dims = (operator.index(shape),) if not hasattr(shape, "__iter__") else tuple(
            operator.index(n) for n in shape
        )  # fmt: skip
    except TypeError:
        raise TypeError(
            f"xform.{function}: '{name}' must be an int or a sequence of ints, got {shape!r}"
        ) from None
    if any(n < 0 for n in dims):
        raise ValueError(f"xform.{function}: '{name}' {dims} has a negative dimension")
    return dims


def random_quaternion(shape, seed=None, dtype=np.float64) -> np.ndarray:
    """Unit quaternions [w, x, y, z], uniform over rotations (Haar), as a NumPy array.

    Arguments:
        shape: int or sequence of ints; the result has shape `shape + (4,)`.
        seed: None, an int, a `numpy.random.SeedSequence` or a `numpy.random.Generator`
            (as `numpy.random.default_rng` takes): the same int gives the same samples;
            a Generator is advanced.
        dtype: float32 or float64.
    Both signs of w occur (q and -q are one rotation); `quaternion_standardize` picks
    w >= 0.
    """
    dims = sample_shape("random_quaternion", shape)
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise TypeError(f"xform.random_quaternion: dtype {dtype} must be float32 or float64")
    rng = np.random.default_rng(seed)
    return haar_quaternions(_frameworks.NUMPY, dims, np.dtype(dtype).name, rng)


def haar_quaternions(framework: Framework, dims: tuple[int, ...], dtype, source, like=None):
    """Uniform unit quaternions of shape `dims + (4,)` in `framework`, drawn from `source`
    (its randomness, as `Framework.normal` takes it) on `like`'s device."""
    normals = framework.normal((*dims, 4), dtype, source, like)
    return framework.functions()["quaternion_normalize"](normals)
