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
        given = {"seed": seed, "generator": generator, "key": key}
        sources = [name for name, value in given.items() if value is not None]
        if len(sources) > 1:
            raise TypeError(
                f"xform.{where}: got both '{sources[0]}' and '{sources[1]}'; pass one "
                "source of randomness"
            )
        if like is not None:
            _like_kind(like, where)
        self.framework = _frameworks.NUMPY if like is None else _frameworks.of(like)
        if sources and sources[0] != "seed":  # a framework's own source: that framework
            self.framework = _source_framework(sources[0], given[sources[0]], where)
            self.source = given[sources[0]]
            if like is not None and _frameworks.of(like) is not self.framework:
                raise TypeError(
                    f"xform.{where}: '{sources[0]}' draws {self.framework.name} arrays and "
                    f"'like' is a {_frameworks.kind(like)} array; pass a 'like' of "
                    f"{self.framework.name}, or a 'seed'"
                )
        elif self.framework is _frameworks.NUMPY:
            self.source = _numpy_generator(seed, where)
        else:
            derived = None if seed is None else _derived_seed(seed, where)
            try:
                self.source = self.framework.seeded_source(derived, like)
            except TypeError as exc:
                raise TypeError(f"xform.{where}: {exc}") from None
        self.like = like
        self.dtype = _float_dtype(dtype, like, where)

    def _draw_source(self):
        """This draw's source (a JAX key is split; a generator advances by itself)."""
        draw, self.source = self.framework.split_source(self.source)
        return draw

    def quaternions(self, batch: tuple[int, ...]):
        """Uniform (Haar) unit quaternions, `batch + (4,)`."""
        return haar_quaternions(self.framework, batch, self.dtype, self._draw_source(), self.like)

    def uniform(self, shape: tuple[int, ...], low: float, high: float):
        return self.framework.uniform(
            shape, self.dtype, self._draw_source(), low, high, self.like
        )


def _source_framework(argument: str, source, where: str) -> _frameworks.Framework:
    """The framework whose source of randomness argument `argument` gives, checked."""
    framework = next(
        f for f in _frameworks.FRAMEWORKS.values() if f.source_argument == argument
    )
    if not (framework.name in sys.modules and framework.is_source(source)):
        raise TypeError(
            f"xform.{where}: '{argument}' must be {framework.source_described}, got "
            f"{type(source).__module__}.{type(source).__qualname__}"
        )
    return framework


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
