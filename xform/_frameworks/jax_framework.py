"""JAX, through the adapter `xform.backends.jax`, imported on first use."""

from __future__ import annotations

import sys

import numpy as np

from .base import FRAMEWORKS, Framework, kind, of


class Jax(Framework):
    name, functions_module, described = "jax", "xform.backends.jax", "a JAX array"

    def owns(self, x) -> bool:
        jax = sys.modules.get("jax")
        return jax is not None and isinstance(x, (jax.Array, jax.core.Tracer))

    def namespace(self):
        import jax.numpy as jnp

        return jnp

    def device(self, x):
        if not self.concrete(x):
            return None  # a trace's constants are placed where its computation runs
        platforms = {d.platform for d in x.devices()}
        return "cpu" if platforms == {"cpu"} else ",".join(sorted(map(str, x.devices())))

    def placement(self, x):
        return x.sharding if self.concrete(x) else None

    def concrete(self, x) -> bool:
        import jax

        return not isinstance(x, jax.core.Tracer)

    def _placed(self, array, like):
        """`array` where `like` lies (its sharding), for a concrete `like`; under a trace,
        a constant of the trace, which JAX places where the computation needs it."""
        import jax

        if isinstance(like, jax.Array) and self.concrete(like):
            return jax.device_put(array, like.sharding)
        return array

    def zeros(self, shape, dtype, like=None):
        import jax.numpy as jnp

        return self._placed(jnp.zeros(shape, dtype=dtype), like)

    def constant(self, value, like, dtype=None):
        import jax
        import jax.numpy as jnp

        dtype = dtype or like.dtype
        if isinstance(like, jax.Array) and self.concrete(like) and not self.owns(value):
            # one transfer, straight to like's placement (jnp.asarray, then device_put
            # again, is two: 170 us against 90 for a small array here)
            return jax.device_put(np.asarray(value, dtype=dtype), like.sharding)
        return self._placed(jnp.asarray(value, dtype=dtype), like)

    def broadcast_to(self, x, shape):
        import jax.numpy as jnp

        return jnp.broadcast_to(x, shape)

    def concatenate(self, arrays, axis=-1):
        import jax.numpy as jnp

        return jnp.concatenate(arrays, axis)

    source_argument, source_described = "key", "a JAX PRNG key"

    def is_source(self, x) -> bool:
        return self.owns(x)

    def seeded_source(self, seed, like=None):
        import jax

        if seed is None:
            raise TypeError("JAX draws need a PRNG 'key' or a 'seed'")
        return jax.random.key(seed)

    def split_source(self, source):
        import jax

        source, draw = jax.random.split(source)
        return draw, source

    def normal(self, shape, dtype, source, like=None):
        import jax
        import jax.numpy as jnp

        return self._placed(
            jax.random.normal(source, shape, dtype=dtype or jnp.zeros(0).dtype), like
        )

    def uniform(self, shape, dtype, source, low, high, like=None):
        import jax
        import jax.numpy as jnp

        dtype = dtype or jnp.zeros(0).dtype
        return self._placed(jax.random.uniform(source, shape, dtype, low, high), like)

    def convert(self, x):
        import jax

        name = kind(x)
        if name == "torch":
            x = x.detach()
            if not x.is_contiguous():
                x = x.contiguous()
        elif name == "numpy" and not (x.flags.c_contiguous and x.flags.writeable):
            # DLPack exports neither strides JAX takes nor a read-only buffer (as NumPy's
            # view of a JAX array is): a copy
            x = np.array(x, order="C")
        elif name == "warp" and not x.is_contiguous:
            x = x.contiguous()
        return x if name == "jax" else jax.dlpack.from_dlpack(x)

    differentiates = True

    def enable_float64(self) -> None:
        import jax

        jax.config.update("jax_enable_x64", True)

    traces = True
    integer = "int32"  # JAX's default integer (int64 only with jax_enable_x64)

    def jit(self, f):
        import jax

        return jax.jit(f)

    def cache_compilations(self, folder):
        import jax

        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

    def ready(self, x):
        import jax

        return jax.block_until_ready(x)

    def value_and_grad(self, f, has_aux):
        import jax

        return jax.value_and_grad(f, has_aux=has_aux)

    def differentiates_at(self, x) -> bool:
        # as jax.grad: NumPy arrays and numbers too
        return of(x) in (None, self, FRAMEWORKS["numpy"])

    def register_pytree(self, cls, flatten, unflatten):
        import jax

        jax.tree_util.register_pytree_node(
            cls, lambda x: (flatten(x), None), lambda _, leaves: unflatten(leaves)
        )

    def pytree_children(self, x):
        import jax

        children, spec = jax.tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)
        return None if jax.tree_util.treedef_is_leaf(spec) else (children, spec)

    def indices(self, values, like=None):
        # int32 indices: JAX's default integer, and constants of a trace as they are
        return np.ascontiguousarray(values, dtype=np.int32)

    def segment_sum(self, values, segments, count):
        import jax.numpy as jnp

        out = jnp.zeros((values.shape[0], count, *values.shape[2:]), values.dtype)
        return out.at[:, segments].add(values)

    def cholesky_solve(self, a, b):
        import jax.numpy as jnp
        import jax.scipy.linalg as jsl

        factor = jsl.cho_factor(a, lower=True)
        x = jsl.cho_solve(factor, b[..., None])[..., 0]
        # cho_factor leaves NaN in the factor of a matrix that is not positive definite
        return jnp.where(jnp.isfinite(factor[0]).all((-2, -1))[..., None], x, jnp.nan)

    def while_loop(self, cond, body, state):
        import jax

        return jax.lax.while_loop(cond, body, state)

    def pushforward(self, f, primals, directions):
        import jax

        return jax.vmap(lambda *t: jax.jvp(f, primals, t)[1])(*directions)

    def gradient(self, f, argnums):
        import jax

        return jax.grad(f, argnums=argnums)

    def pullback(self, f, primal, cotangent):
        import jax

        _, pull = jax.vjp(f, primal)
        return pull(cotangent)[0]

    def custom_vjp(self, forward, backward, differentiable):
        import jax

        @jax.custom_vjp
        def function(*leaves):
            return forward(*leaves)

        def function_forward(*leaves):
            outputs = forward(*leaves)
            return outputs, (leaves, outputs)

        def function_backward(saved, cotangents):
            leaves, outputs = saved
            return tuple(backward(list(leaves), list(outputs), list(cotangents[:differentiable])))

        function.defvjp(function_forward, function_backward)
        return function

    def to_device(self, x, device):
        import jax

        platform, _, number = device.partition(":")
        devices = jax.devices("gpu" if platform == "cuda" else platform)
        return jax.device_put(x, devices[int(number or 0)])

    def put_rows(self, whole, rows, part):
        return whole.at[rows].set(part)
