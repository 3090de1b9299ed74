"""Warp: the core's own arrays (no groups hold them)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import warp as wp

from .base import Framework, float_name, kind


class Warp(Framework):
    name, functions_module, described = "warp", "xform._functions", "a Warp array"
    holds_groups = False  # the ops' arrays, not the groups'

    def device(self, x) -> str:
        return str(x.device)

    def owns(self, x) -> bool:
        return isinstance(x, wp.array)

    def function(self, op) -> Callable:
        return op  # the core's dispatch

    def zeros(self, shape, dtype, like=None):
        return wp.zeros(shape, dtype=getattr(wp, dtype), device=like.device if like else None)

    def constant(self, value, like, dtype=None):
        dtype = dtype or float_name(like.dtype)
        return wp.array(np.asarray(value, dtype=dtype), device=like.device)

    def convert(self, x):
        name = kind(x)
        if name == "numpy":
            return wp.array(x, dtype=wp.dtype_from_numpy(x.dtype), copy=False, device="cpu")
        if name == "torch":
            return wp.from_torch(x.detach())
        if name == "jax":
            return wp.from_dlpack(x)
        return x
