"""Draws for the groups' `sample_uniform`: one source of randomness (a seed, a torch
generator or a JAX key) in one framework, checked once."""

from __future__ import annotations

import sys

import numpy as np

from .. import _frameworks
from .._random import haar_quaternions
from ._base import _float_dtype, _like_kind


class Random:
    """Draws in one framework, from one source of randomness: a torch `generator`, a JAX
    `key`, or a `seed` (an int, a SeedSequence or a Generator, as NumPy takes it), drawn
    in `like`'s framework (NumPy by default; torch and JAX draw from a generator or key
    seeded from it, so that one seed gives the same draws). With none of them, torch's
    global generator, or NumPy's fresh entropy; JAX needs one. float64 unless `dtype` or
    `like` says otherwise (a generator or key without either: torch's and JAX's default
    float). Arguments that disagree (two sources, or a source of another framework than
    `like`) are a TypeError."""

    def __init__(self, where: str, seed, generator, key, like, dtype) -> None:
        self.where = where
        given = (("seed", seed), ("generator", generator), ("key", key))
        sources = [name for name, value in given if value is not None]
        if len(sources) > 1:
            raise TypeError(
                f"xform.{where}: got both '{sources[0]}' and '{sources[1]}'; pass one "
                "source of randomness"
            )
        like_kind = _like_kind(like, where) if like is not None else None
        if generator is not None:
            torch = sys.modules.get("torch")
            if torch is None or not isinstance(generator, torch.Generator):
                raise TypeError(
                    f"xform.{where}: 'generator' must be a torch.Generator, got "
                    f"{type(generator).__module__}.{type(generator).__qualname__}"
                )
            self.kind = "torch"
        elif key is not None:
            if _frameworks.kind(key) != "jax":
                raise TypeError(
                    f"xform.{where}: 'key' must be a JAX PRNG key, got "
                    f"{type(key).__module__}.{type(key).__qualname__}"
                )
            self.kind = "jax"
        else:
            self.kind = like_kind or "numpy"
        if like_kind is not None and like_kind != self.kind:
            raise TypeError(
                f"xform.{where}: '{sources[0]}' draws {self.kind} arrays and 'like' is a "
                f"{like_kind} array; pass a 'like' of {self.kind}, or a 'seed'"
            )
        self.rng = None
        if self.kind == "numpy":
            self.rng = _numpy_generator(seed, where)
        elif self.kind == "torch" and seed is not None:
            import torch

            generator = torch.Generator(device=like.device)
            generator.manual_seed(_derived_seed(seed, where))
        elif self.kind == "jax" and key is None:
            if seed is None:
                raise TypeError(f"xform.{where}: JAX draws need a PRNG 'key' or a 'seed'")
            import jax

            key = jax.random.key(_derived_seed(seed, where))
        self.key, self.generator, self.like = key, generator, like
        self.dtype = _float_dtype(dtype, like, where)

    def _source(self):
        """This draw's source: the NumPy Generator, the torch Generator, a fresh JAX key."""
        if self.kind == "jax":
            import jax

            self.key, key = jax.random.split(self.key)
            return key
        return self.rng if self.kind == "numpy" else self.generator

    def quaternions(self, batch: tuple[int, ...]):
        """Uniform (Haar) unit quaternions, `batch + (4,)`."""
        framework = _frameworks.FRAMEWORKS[self.kind]
        return haar_quaternions(framework, batch, self.dtype, self._source(), self.like)

    def uniform(self, shape: tuple[int, ...], low: float, high: float):
        framework = _frameworks.FRAMEWORKS[self.kind]
        return framework.uniform(shape, self.dtype, self._source(), low, high, self.like)


def _numpy_generator(seed, where: str) -> np.random.Generator:
    """`np.random.default_rng(seed)`, its errors naming argument `seed` of `where`."""
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"xform.{where}: 'seed' must be an int >= 0, a numpy.random.SeedSequence or a "
            f"numpy.random.Generator, got {seed!r} ({exc})"
        ) from None


def _derived_seed(seed, where: str) -> int:
    """A seed for torch's or JAX's generator, drawn from NumPy's for `seed`: the same seed
    gives the same draws in every framework's own stream, and a Generator advances."""
    return int(_numpy_generator(seed, where).integers(2**63))
