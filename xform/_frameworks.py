"""What xform asks of an array framework, in one place per framework: NumPy, Warp, PyTorch
and JAX, each one `Framework` object.

The core's dispatch, the groups, the manifold tools, the kinematics and the random draws
reach a framework only through its object: whether an array is its, zeros and constants
on an array's device (and, under a JAX trace, in the trace), broadcasting, random normals
from its source of randomness, the functions of the ops in it, the gradient, pytree
registration and the zero-copy conversions. A new framework is one class here and its
adapter in `backends/`.

A framework's module is imported only when an array of it is passed in (`sys.modules`
says whether it is): `import xform` loads neither PyTorch nor JAX.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import warp as wp

FLOATS = ("float32", "float64")


def float_name(dtype) -> str:
    """The name ('float32', ...) of a NumPy, PyTorch, JAX or Warp dtype, or of a name."""
    if type(dtype).__module__ == "torch":  # torch.float64 -> "float64"
        return str(dtype).removeprefix("torch.")
    scalar = getattr(dtype, "_wp_scalar_type_", dtype)
    if isinstance(scalar, type) and scalar in (wp.float32, wp.float64, wp.float16):
        return scalar.__name__
    try:
        return np.dtype(dtype).name
    except TypeError:
        return repr(dtype)


class Framework:
    """One array framework, as xform's core and layers use it."""

    name: str
    # Where its functions of the ops live (every op and function over ops by name, in
    # `FUNCTIONS`): imported by name, on first use, so the core depends on no adapter.
    functions_module: str
    described: str  # what its arrays are called in messages

    def owns(self, x) -> bool:
        raise NotImplementedError

    def functions(self) -> dict[str, Callable]:
        """Every built-in op and function over ops by name, on this framework's arrays."""
        module = sys.modules.get(self.functions_module)  # which torch.compile traces
        if module is None:
            module = importlib.import_module(self.functions_module)
        return module.FUNCTIONS

    def function(self, op) -> Callable:
        """`op` (an `xform.Op`) as a function of this framework's arrays, with its autodiff."""
        made = op.adapters.get(self.name)  # a plain lookup, which torch.compile traces
        if made is None:
            made = importlib.import_module(self.functions_module).function(op)
        return made

    def zeros(self, shape: tuple[int, ...], dtype: str, like=None):
        """Zeros of `shape` and dtype name `dtype`, on `like`'s device."""
        raise NotImplementedError

    def constant(self, value, like, dtype: str | None = None):
        """`value` (a NumPy array or a number) as a new array of `like`'s device and of
        `dtype` (by default `like`'s): how a layer passes constants of its own (a
        kinematic model, a number for a scalar operand) beside its caller's arrays."""
        raise NotImplementedError

    def broadcast_to(self, x, shape: tuple[int, ...]):
        raise NotImplementedError

    def concatenate(self, arrays, axis: int = -1):
        raise NotImplementedError

    def normal(self, shape: tuple[int, ...], dtype: str | None, source, like=None):
        """Standard normals from `source`, this framework's randomness (a NumPy Generator,
        a torch Generator or None for torch's global one, a JAX key), on `like`'s device
        (else the source's); `dtype` None: the framework's default float."""
        raise NotImplementedError

    def uniform(self, shape: tuple[int, ...], dtype: str | None, source, low, high, like=None):
        """Uniform draws in [low, high), as `normal` draws normals."""
        raise NotImplementedError

    def convert(self, x):
        """`x` (an array of any framework) as an array of this one, sharing its memory
        where the devices allow."""
        raise NotImplementedError

    def value_and_grad(self, f: Callable, has_aux: bool) -> Callable:
        """`f`'s value and gradient in its (only) argument, by this framework's autodiff."""
        raise TypeError(f"xform: gradients need JAX arrays or PyTorch tensors, not {self.name}")

    def register_pytree(self, cls: type, flatten: Callable, unflatten: Callable) -> None:
        """Make `cls` a pytree node of this framework (nothing where it has none)."""


class NumPy(Framework):
    name, functions_module, described = "numpy", "xform._functions", "a NumPy array"

    def owns(self, x) -> bool:
        return isinstance(x, np.ndarray)

    def function(self, op) -> Callable:
        return op  # the core's dispatch

    def zeros(self, shape, dtype, like=None):
        return np.zeros(shape, dtype=dtype)

    def constant(self, value, like, dtype=None):
        return np.asarray(value, dtype=dtype or like.dtype)

    def broadcast_to(self, x, shape):
        return np.broadcast_to(x, shape)

    def concatenate(self, arrays, axis=-1):
        return np.concatenate(arrays, axis)

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
            return x.numpy() if x.device.type == "cpu" else x.cpu().numpy()
        if name == "jax":
            if all(device.platform == "cpu" for device in x.devices()):
                return np.from_dlpack(x)
            return np.asarray(x)
        return x


class Warp(Framework):
    name, functions_module, described = "warp", "xform._functions", "a Warp array"

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


class Torch(Framework):
    name, functions_module, described = "torch", "xform.backends.torch", "a torch.Tensor"

    def owns(self, x) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(x, torch.Tensor)

    def zeros(self, shape, dtype, like=None):
        import torch

        device = None if like is None else like.device
        return torch.zeros(shape, dtype=getattr(torch, dtype), device=device)

    def constant(self, value, like, dtype=None):
        import torch

        dtype = like.dtype if dtype is None else getattr(torch, dtype)
        return torch.tensor(value, dtype=dtype, device=like.device)

    def broadcast_to(self, x, shape):
        return x.expand(shape)

    def concatenate(self, arrays, axis=-1):
        import torch

        return torch.cat(arrays, axis)

    def _placement(self, dtype, source, like) -> dict:
        import torch

        device = like.device if like is not None else source.device if source is not None else None
        return {"dtype": None if dtype is None else getattr(torch, dtype), "device": device}

    def normal(self, shape, dtype, source, like=None):
        import torch

        return torch.randn(shape, generator=source, **self._placement(dtype, source, like))

    def uniform(self, shape, dtype, source, low, high, like=None):
        import torch

        unit = torch.rand(shape, generator=source, **self._placement(dtype, source, like))
        return unit * (high - low) + low

    def convert(self, x):
        import torch

        name = kind(x)
        if name == "numpy":
            return torch.from_numpy(x)
        if name == "warp":
            return wp.to_torch(x)
        if name == "jax":
            return torch.from_dlpack(x)
        return x

    def value_and_grad(self, f, has_aux):
        import torch

        def both(x):
            gradient, value = torch.func.grad_and_value(f, has_aux=has_aux)(x)
            return value, gradient

        return both

    def register_pytree(self, cls, flatten, unflatten):
        import torch.utils._pytree as pytree

        pytree.register_pytree_node(
            cls,
            lambda x: (flatten(x), None),
            lambda leaves, _: unflatten(leaves),
            serialized_type_name=f"xform.{cls.__name__}",
        )


class Jax(Framework):
    name, functions_module, described = "jax", "xform.backends.jax", "a JAX array"

    def owns(self, x) -> bool:
        jax = sys.modules.get("jax")
        return jax is not None and isinstance(x, (jax.Array, jax.core.Tracer))

    def _placed(self, array, like):
        """`array` where `like` lies (its sharding), for a concrete `like`; under a trace,
        a constant of the trace, which JAX places where the computation needs it."""
        import jax

        if (
            like is not None
            and isinstance(like, jax.Array)
            and not isinstance(like, jax.core.Tracer)
        ):
            return jax.device_put(array, like.sharding)
        return array

    def zeros(self, shape, dtype, like=None):
        import jax.numpy as jnp

        return self._placed(jnp.zeros(shape, dtype=dtype), like)

    def constant(self, value, like, dtype=None):
        import jax.numpy as jnp

        return self._placed(jnp.asarray(value, dtype=dtype or like.dtype), like)

    def broadcast_to(self, x, shape):
        import jax.numpy as jnp

        return jnp.broadcast_to(x, shape)

    def concatenate(self, arrays, axis=-1):
        import jax.numpy as jnp

        return jnp.concatenate(arrays, axis)

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

    def value_and_grad(self, f, has_aux):
        import jax

        return jax.value_and_grad(f, has_aux=has_aux)

    def register_pytree(self, cls, flatten, unflatten):
        import jax

        jax.tree_util.register_pytree_node(
            cls, lambda x: (flatten(x), None), lambda _, leaves: unflatten(leaves)
        )


NUMPY, WARP, TORCH, JAX = NumPy(), Warp(), Torch(), Jax()
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (NUMPY, WARP, TORCH, JAX)}


def of(x: Any) -> Framework | None:
    """The framework of array `x` (tracers included), or None for anything else."""
    for framework in (NUMPY, WARP, TORCH, JAX):
        if framework.owns(x):
            return framework
    return None


def kind(x: Any) -> str | None:
    """'numpy', 'warp', 'torch' or 'jax': the name of `x`'s framework, or None."""
    framework = of(x)
    return None if framework is None else framework.name


def imported() -> list[Framework]:
    """The frameworks whose modules this process has imported (NumPy and Warp always)."""
    return [f for f in FRAMEWORKS.values() if f.name in ("numpy", "warp") or f.name in sys.modules]
