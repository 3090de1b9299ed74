"""What every group shares: fields over one framework's arrays, batches, conversions, the
`@` operator, and registration as a pytree with JAX and PyTorch.

A group element is a handful of arrays ("fields": a quaternion, a position, ...) whose
last axis is the field's size and whose leading axes are the batch. The maths lives in
xform's ops; a method here resolves the op for the fields' framework (`_functions`) and
wraps its results in a new element, so that a method costs what its ops cost.

Conventions, stated once: an element's fields are the functional API's arrays (SO3's
quaternion is `[w, x, y, z]`, SE3 is `(position, quaternion)`); tangents are right
perturbations as jaxlie's (`T @ G.exp(delta)`), SE tangents translation first; `A @ B`
applies B first.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import ClassVar, TypeVar

import numpy as np

from .. import _interop
from .._functions import FUNCTIONS as _CORE_FUNCTIONS

Self = TypeVar("Self", bound="LieGroup")

# The frameworks a group may hold, and each one's functions of the ops.
FRAMEWORKS = ("numpy", "torch", "jax")
_FUNCTIONS: dict[str, dict[str, Callable]] = {"numpy": _CORE_FUNCTIONS}
_FLOATS = ("float32", "float64")


def _functions(kind: str) -> dict[str, Callable]:
    """Every op as a function of `kind`'s arrays, through that framework's adapter."""
    functions = _FUNCTIONS.get(kind)
    if functions is None:
        if kind == "torch":
            from ..backends import torch as adapter
        else:
            from ..backends import jax as adapter
        functions = _FUNCTIONS[kind] = {name: getattr(adapter, name) for name in _CORE_FUNCTIONS}
    return functions


def argument(cls, method: str, name: str, array, trailing: tuple[int, ...]):
    """`array` checked as argument `name` of `cls.method`: a NumPy, PyTorch or JAX array
    whose last axes are `trailing`. Returns it, and the op functions of its framework."""
    kind = _interop.array_kind(array)
    if kind not in FRAMEWORKS:
        raise TypeError(
            f"xform.{cls.__name__}.{method}: '{name}' is a {type(array).__module__}."
            f"{type(array).__qualname__}; expected a NumPy, PyTorch or JAX array"
        )
    shape = tuple(array.shape)
    if shape[len(shape) - len(trailing) :] != trailing or len(shape) < len(trailing):
        expected = ", ".join(["...", *map(str, trailing)])
        raise ValueError(
            f"xform.{cls.__name__}.{method}: '{name}' has shape {shape}; expected ({expected})"
        )
    return _functions(kind)


def dtype_name(array) -> str:
    return str(array.dtype).removeprefix("torch.")


class LieGroup:
    """A batch of elements of a matrix Lie group, immutable, over NumPy, PyTorch or JAX
    arrays of float32 or float64. Subclasses: `SO2`, `SE2`, `SO3`, `SE3`.

    A subclass names its `fields` (arrays whose last axis is the field's size and whose
    leading axes are the batch) and `tangent_dim`, `matrix_dim`, `space_dim`, and
    defines `exp`, `log`, `multiply`, `inverse`, `apply`, `as_matrix`, `from_matrix`,
    `adjoint`, `jlog` and `normalize`; the rest (`identity`, `interpolate`, indexing,
    `reshape`, conversions, `@`, pytree registration) comes from here.
    """

    # (field name, size of its last axis), in the constructor's order.
    fields: ClassVar[tuple[tuple[str, int], ...]] = ()
    tangent_dim: ClassVar[int]
    matrix_dim: ClassVar[int]
    space_dim: ClassVar[int]
    __slots__ = ()

    def __init__(self, *arrays) -> None:
        checked = _checked(type(self), arrays)
        for (name, _), array in zip(self.fields, checked):
            object.__setattr__(self, name, array)
        if len(_registered) < 2:
            _register_pytrees()

    @classmethod
    def _trusted(cls: type[Self], *arrays) -> Self:
        """An element from fields known to be right (an op's results): no checks, so that a
        method costs what its ops do, and so that JAX and PyTorch can rebuild an element
        from whatever their transforms put in its fields."""
        self = object.__new__(cls)
        for (name, _), array in zip(cls.fields, arrays):
            object.__setattr__(self, name, array)
        if len(_registered) < 2:
            _register_pytrees()
        return self

    def __setattr__(self, name, value):
        raise AttributeError(f"xform.{type(self).__name__} is immutable; make a new element")

    # --- the fields ---------------------------------------------------------------------

    @property
    def _arrays(self) -> tuple:
        return tuple(getattr(self, name) for name, _ in self.fields)

    @property
    def _kind(self) -> str:
        return _interop.array_kind(getattr(self, self.fields[0][0]))

    @property
    def _ops(self) -> dict[str, Callable]:
        return _functions(self._kind)

    def _same_group(self, other, method: str) -> None:
        """`other` must be an element of this group over the same framework."""
        if type(other) is not type(self):
            got = (
                f"an xform.{type(other).__name__}"
                if isinstance(other, LieGroup)
                else f"a {type(other).__module__}.{type(other).__qualname__}"
            )
            raise TypeError(
                f"xform.{type(self).__name__}.{method}: 'other' is {got}; expected an "
                f"xform.{type(self).__name__} (elements of different groups do not compose)"
            )
        if other._kind != self._kind:
            raise TypeError(
                f"xform.{type(self).__name__}.{method}: 'other' holds {other._kind} arrays and "
                f"this element {self._kind} arrays; convert one with .to_{self._kind}()"
            )

    def _points(self, points, method: str):
        """`points` must be an array of this element's framework whose last axis is the
        space's dimension."""
        functions = argument(type(self), method, "points", points, (self.space_dim,))
        if functions is not self._ops:
            raise TypeError(
                f"xform.{type(self).__name__}.{method}: 'points' is a "
                f"{_interop.array_kind(points)} array and this element holds {self._kind} "
                f"arrays; convert one with xform.to_{self._kind}"
            )
        return points

    # --- batches ------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The batch shape."""
        return tuple(getattr(self, self.fields[0][0]).shape[:-1])

    @property
    def dtype(self):
        """The fields' dtype (float32 or float64), as their framework spells it."""
        return getattr(self, self.fields[0][0]).dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(f"len() of an unbatched xform.{type(self).__name__}")
        return self.shape[0]

    def __iter__(self):
        """The elements along the first batch axis (bounded by `len`: JAX clamps an index
        out of range rather than raising, so Python's fallback through `__getitem__` would
        never end)."""
        return (self[i] for i in range(len(self)))

    def __getitem__(self: Self, index) -> Self:
        """NumPy indexing of the batch axes."""
        index = index if isinstance(index, tuple) else (index,)
        taken = sum(i is not None and i is not Ellipsis for i in index)
        if taken > len(self.shape):
            raise IndexError(
                f"xform.{type(self).__name__}: too many indices ({taken}) for batch shape "
                f"{self.shape}"
            )
        if any(i is Ellipsis for i in index):  # the field's own axis stays last
            index = (*index, slice(None))
        return type(self)._trusted(*(a[index] for a in self._arrays))

    def reshape(self: Self, *shape) -> Self:
        """The same elements in batch shape `shape` (a tuple, or ints; -1 as in NumPy)."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        shape = tuple(operator.index(n) for n in shape)
        return type(self)._trusted(
            *(a.reshape((*shape, size)) for a, (_, size) in zip(self._arrays, self.fields))
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self.fields)
        return f"xform.{type(self).__name__}({fields})"

    # --- frameworks -----------------------------------------------------------------------

    def to_numpy(self: Self) -> Self:
        """The same elements over NumPy arrays (zero-copy where `xform.to_numpy` is)."""
        return type(self)(*map(_interop.to_numpy, self._arrays))

    def to_torch(self: Self) -> Self:
        """The same elements over PyTorch tensors (zero-copy where `xform.to_torch` is).

        Example:
            >>> T = xform.SE3.identity((2,)).to_torch()
            >>> T.position.dtype, T.shape
            (torch.float64, (2,))
        """
        return type(self)(*map(_interop.to_torch, self._arrays))

    def to_jax(self: Self) -> Self:
        """The same elements over JAX arrays (zero-copy where `xform.to_jax` is)."""
        return type(self)(*map(_interop.to_jax, self._arrays))

    # --- operators -------------------------------------------------------------------------

    def __matmul__(self, other):
        """`A @ B` composes (B applied first); `T @ points` applies T to points."""
        if isinstance(other, LieGroup):
            return self.multiply(other)
        return self.apply(other)

    # --- what every group defines -------------------------------------------------------

    def multiply(self: Self, other: Self) -> Self:
        """`self @ other`, the group product: `other` applied first; batches broadcast."""
        raise NotImplementedError

    def apply(self, points):
        """`self @ points`: the elements applied to points `(..., space_dim)`."""
        raise NotImplementedError

    def inverse(self: Self) -> Self:
        """The inverse of each element: `T @ T.inverse()` is the identity."""
        raise NotImplementedError

    def log(self):
        """The tangent `(..., tangent_dim)` whose `exp` is the element."""
        raise NotImplementedError

    @classmethod
    def exp(cls: type[Self], tangent) -> Self:
        """The elements `exp(tangent)` of tangents `(..., tangent_dim)`."""
        raise NotImplementedError

    def interpolate(self: Self, other: Self, t) -> Self:
        """The geodesic `self exp(t log(self^-1 other))`, `t` a number or an array of the
        batch shape; 0 gives self, 1 other, any real t allowed.

        Example:
            >>> a, b = xform.SO2.from_angle(np.array(0.0)), xform.SO2.from_angle(np.array(1.0))
            >>> float(a.interpolate(b, 0.25).as_angle())
            0.25
        """
        self._same_group(other, "interpolate")
        delta = self.inverse().multiply(other).log()
        if _interop.array_kind(t) is not None:
            t = t[..., None]
        return self.multiply(type(self).exp(delta * t))

    @classmethod
    def _tangent(cls, tangent, method: str = "exp") -> dict[str, Callable]:
        return argument(cls, method, "tangent", tangent, (cls.tangent_dim,))

    @classmethod
    def _matrix(cls, matrix, method: str = "from_matrix") -> dict[str, Callable]:
        return argument(cls, method, "matrix", matrix, (cls.matrix_dim, cls.matrix_dim))

    # --- constructors shared by every group -----------------------------------------------

    @classmethod
    def identity(cls: type[Self], batch_shape=(), *, like=None, dtype=None) -> Self:
        """The identity, of batch shape `batch_shape`: NumPy float64 unless `like` (an array
        whose framework, device and dtype it takes) or `dtype` says otherwise.

        Example:
            >>> xform.SE3.identity((2,)).quaternion
            array([[1., 0., 0., 0.],
                   [1., 0., 0., 0.]])
            >>> xform.SO3.identity(like=torch.zeros(0, dtype=torch.float32)).quaternion
            tensor([1., 0., 0., 0.])
        """
        zeros = _zeros(
            _batch(batch_shape, f"{cls.__name__}.identity"), cls.tangent_dim, like, dtype
        )
        return cls.exp(zeros)


def _batch(shape, where: str) -> tuple[int, ...]:
    try:
        return (operator.index(shape),) if not hasattr(shape, "__iter__") else tuple(
            operator.index(n) for n in shape
        )  # fmt: skip
    except TypeError:
        raise TypeError(f"xform.{where}: the batch shape must be ints, got {shape!r}") from None


def _zeros(batch: tuple[int, ...], size: int, like, dtype):
    """Zeros of shape batch + (size,) in `like`'s framework and device (NumPy by default),
    of `dtype` (like's, else float64)."""
    kind = "numpy" if like is None else _interop.array_kind(like)
    if kind in (None, "warp"):
        raise TypeError(
            f"xform: 'like' must be a NumPy, PyTorch or JAX array, got {type(like).__name__}"
        )
    if kind == "torch":
        import torch

        dtype = like.dtype if dtype is None else getattr(torch, np.dtype(dtype).name)
        return torch.zeros((*batch, size), dtype=dtype, device=like.device)
    if kind == "jax":
        import jax
        import jax.numpy as jnp

        zeros = jnp.zeros((*batch, size), dtype=like.dtype if dtype is None else dtype)
        if isinstance(like, jax.Array) and not isinstance(like, jax.core.Tracer):
            zeros = jax.device_put(zeros, like.sharding)
        return zeros
    dtype = np.float64 if dtype is None and like is None else (dtype or like.dtype)
    return np.zeros((*batch, size), dtype=dtype)


def _checked(cls: type[LieGroup], arrays) -> tuple:
    """The fields of a new `cls` element: arrays of one framework and one float dtype,
    with their last axes of the right size and their batch shapes broadcast."""
    name = cls.__name__
    if len(arrays) != len(cls.fields):
        expected = ", ".join(field for field, _ in cls.fields)
        raise TypeError(
            f"xform.{name} takes {len(cls.fields)} arrays ({expected}), got {len(arrays)}"
        )
    kinds = {}
    for (field, size), array in zip(cls.fields, arrays):
        kind = _interop.array_kind(array)
        if kind not in FRAMEWORKS:
            raise TypeError(
                f"xform.{name}: '{field}' is a {type(array).__module__}."
                f"{type(array).__qualname__}; expected a NumPy, PyTorch or JAX array"
            )
        if dtype_name(array) not in _FLOATS:
            raise TypeError(
                f"xform.{name}: '{field}' has dtype {dtype_name(array)}; expected float32 or "
                "float64"
            )
        if len(array.shape) == 0 or array.shape[-1] != size:
            raise ValueError(
                f"xform.{name}: '{field}' has shape {tuple(array.shape)}; expected (..., {size})"
            )
        kinds[field] = kind
    if len(set(kinds.values())) > 1:
        raise TypeError(
            f"xform.{name}: fields mix frameworks ("
            + ", ".join(f"'{f}': {k}" for f, k in kinds.items())
            + "); convert with xform.to_numpy / to_torch / to_jax"
        )
    dtypes = {field: dtype_name(a) for (field, _), a in zip(cls.fields, arrays)}
    if len(set(dtypes.values())) > 1:
        raise TypeError(
            f"xform.{name}: fields mix dtypes ("
            + ", ".join(f"'{f}': {d}" for f, d in dtypes.items())
            + ")"
        )
    batches = [tuple(a.shape[:-1]) for a in arrays]
    if len(set(batches)) == 1:
        return tuple(arrays)
    try:
        batch = np.broadcast_shapes(*batches)
    except ValueError:
        raise ValueError(
            f"xform.{name}: the fields' batch shapes "
            + ", ".join(f"'{f}': {b}" for (f, _), b in zip(cls.fields, batches))
            + " do not broadcast"
        ) from None
    return tuple(
        _broadcast_to(a, (*batch, size), kinds[f]) for (f, size), a in zip(cls.fields, arrays)
    )


def _broadcast_to(array, shape: tuple[int, ...], kind: str):
    if tuple(array.shape) == shape:
        return array
    if kind == "torch":
        return array.expand(shape)
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.broadcast_to(array, shape)
    return np.broadcast_to(array, shape)


# --- pytrees -------------------------------------------------------------------------------

GROUPS: list[type[LieGroup]] = []
_registered: set[str] = set()


def _register_pytrees() -> None:
    """Make every group a pytree of each framework imported so far, once: JAX's (`jit`,
    `vmap`, `grad`, `scan` take and return elements; a gradient with respect to an element
    is an element-shaped tree of its fields' cotangents, as jaxlie) and PyTorch's
    (`torch.func` and `torch.compile`). Called by every element made from user arrays, so
    a framework imported after xform is still registered before its first element."""
    for framework in ("jax", "torch"):
        if framework in _registered or framework not in sys.modules:
            continue
        _registered.add(framework)
        for cls in GROUPS:
            _register(cls, framework)


def _register(cls: type[LieGroup], framework: str) -> None:
    def flatten(element):
        return element._arrays, None

    def unflatten(arrays):
        return cls._trusted(*arrays)

    if framework == "jax":
        import jax

        jax.tree_util.register_pytree_node(cls, flatten, lambda _, arrays: unflatten(arrays))
    else:
        import torch.utils._pytree as pytree

        pytree.register_pytree_node(
            cls,
            flatten,
            lambda arrays, _: unflatten(arrays),
            serialized_type_name=f"xform.{cls.__name__}",
        )


def group(cls: type[Self]) -> type[Self]:
    """Class decorator of every group: slots for its fields, and pytree registration."""
    GROUPS.append(cls)
    for framework in _registered:
        _register(cls, framework)
    return cls


# --- randomness ------------------------------------------------------------------------------


class Random:
    """Draws in one framework, chosen as `random_quaternion`'s conventions: a JAX `key`, a
    torch `generator`, else `like`'s framework (a torch or NumPy `seed`... as their own),
    NumPy by default (`seed`: an int, a SeedSequence or a Generator). float64 unless
    `dtype` or `like` says otherwise (torch and JAX: their default float)."""

    def __init__(self, where: str, seed, generator, key, like, dtype) -> None:
        self.where = where
        if key is not None:
            self.kind = "jax"
        elif generator is not None:
            self.kind = "torch"
        elif like is not None:
            self.kind = _interop.array_kind(like)
            if self.kind not in FRAMEWORKS:
                raise TypeError(
                    f"xform.{where}: 'like' must be a NumPy, PyTorch or JAX array, got "
                    f"{type(like).__name__}"
                )
            if self.kind == "jax":
                raise TypeError(f"xform.{where}: JAX draws need a PRNG 'key'")
        else:
            self.kind = "numpy"
        self.key, self.generator, self.like = key, generator, like
        self.rng = np.random.default_rng(seed) if self.kind == "numpy" else None
        if dtype is None and like is not None:
            dtype = like.dtype
        self.dtype = dtype

    def _next_key(self):
        import jax

        self.key, key = jax.random.split(self.key)
        return key

    def normal(self, shape: tuple[int, ...]):
        if self.kind == "jax":
            import jax
            import jax.numpy as jnp

            return jax.random.normal(
                self._next_key(), shape, dtype=self.dtype or jnp.zeros(0).dtype
            )
        if self.kind == "torch":
            import torch

            return torch.randn(shape, generator=self.generator, **self._torch())
        return self.rng.standard_normal(shape, dtype=np.dtype(self.dtype or np.float64))

    def uniform(self, shape: tuple[int, ...], low: float, high: float):
        if self.kind == "jax":
            import jax
            import jax.numpy as jnp

            dtype = self.dtype or jnp.zeros(0).dtype
            return jax.random.uniform(self._next_key(), shape, dtype, low, high)
        if self.kind == "torch":
            import torch

            unit = torch.rand(shape, generator=self.generator, **self._torch())
            return unit * (high - low) + low
        return self.rng.uniform(low, high, shape).astype(self.dtype or np.float64)

    def _torch(self) -> dict:
        import torch

        dtype = self.dtype
        if dtype is not None and not isinstance(dtype, torch.dtype):
            dtype = getattr(torch, np.dtype(dtype).name)
        device = (
            self.like.device
            if self.like is not None
            else (self.generator.device if self.generator is not None else None)
        )
        return {"dtype": dtype, "device": device}
