"""NumPy: the core runs on its arrays directly."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .base import Framework, kind


class NumPy(Framework):
    name, functions_module, described = "numpy", "xform._functions", "a NumPy array"

    def owns(self, x) -> bool:
        return isinstance(x, np.ndarray)

    def function(self, op) -> Callable:
        return op  # the core's dispatch

    def namespace(self):
        return np

    def zeros(self, shape, dtype, like=None):
        return np.zeros(shape, dtype=dtype)

    def constant(self, value, like, dtype=None):
        return np.asarray(value, dtype=dtype or like.dtype)

    def broadcast_to(self, x, shape):
        return np.broadcast_to(x, shape)

    def concatenate(self, arrays, axis=-1):
        return np.concatenate(arrays, axis)

    source_described = "an int >= 0, a numpy.random.SeedSequence or a numpy.random.Generator"

    def is_source(self, x) -> bool:
        return isinstance(x, np.random.Generator)

    def seeded_source(self, seed, like=None):
        return np.random.default_rng(seed)

    def normal(self, shape, dtype, source, like=None):
        return source.standard_normal(shape, dtype=np.dtype(dtype or np.float64))

    def uniform(self, shape, dtype, source, low, high, like=None):
        return source.uniform(low, high, shape).astype(dtype or np.float64)

    def convert(self, x):
        name = kind(x)
        if name == "warp":
            return x.numpy()
        if name == "torch":
            x = x.detach()
            return x.numpy() if x.is_cpu else x.cpu().numpy()
        if name == "jax":
            if all(device.platform == "cpu" for device in x.devices()):
                return np.from_dlpack(x)
            return np.asarray(x)
        return x

    def indices(self, values, like=None):
        return np.ascontiguousarray(values, dtype=np.int64)

    def segment_sum(self, values, segments, count):
        out = np.zeros((values.shape[0], count, *values.shape[2:]), values.dtype)
        np.add.at(out, (slice(None), segments), values)
        return out

    def cholesky_solve(self, a, b):
        x = np.full(b.shape, np.nan, np.result_type(a, b))
        for index in np.ndindex(a.shape[:-2]):
            try:
                factor = np.linalg.cholesky(a[index])
            except np.linalg.LinAlgError:
                continue
            y = np.linalg.solve(factor, b[index])
            x[index] = np.linalg.solve(factor.T, y)
        return x
