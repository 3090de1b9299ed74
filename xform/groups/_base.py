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

import numbers
import operator
from collections.abc import Callable
from typing import ClassVar, TypeVar

import numpy as np

from .. import _frameworks, _interop
from .._random import sample_shape
from ._fields import GroupType, check_positive, pytrees_registered, register_pytrees

Self = TypeVar("Self", bound="LieGroup")

_FLOATS = _frameworks.FLOATS


def _functions(kind: str) -> dict[str, Callable]:
    """Every op as a function of `kind`'s arrays."""
    return _frameworks.FRAMEWORKS[kind].functions()


def argument(cls, method: str, name: str, array, trailing: tuple[int, ...]):
    """`array` checked as argument `name` of `cls.method`: a NumPy, PyTorch or JAX array
    whose last axes are `trailing`. Returns it, and the op functions of its framework."""
    if not _holds(array):
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
    return _frameworks.of(array).functions()


def _holds(x) -> bool:
    """Whether `x` is an array of a framework whose arrays a group may hold."""
    framework = _frameworks.of(x)
    return framework is not None and framework.holds_groups


def dtype_name(array) -> str:
    return _frameworks.float_name(array.dtype)


class LieGroup(metaclass=GroupType):
    """A batch of elements of a matrix Lie group, immutable, over NumPy, PyTorch or JAX
    arrays of float32 or float64. Subclasses: `SO2`, `SE2`, `SO3`, `SE3`, `Sim3`.

    A subclass declares its fields (`_fields.field`: arrays whose last axis is the field's
    size and whose leading axes are the batch), from which its header is made, and
    `tangent_dim`, `matrix_dim`, `space_dim`, and defines `exp`, `log`, `multiply`,
    `inverse`, `apply`, `as_matrix`, `from_matrix`, `adjoint`, `jlog` and `normalize`; the
    rest (`identity`, `interpolate`, indexing, `reshape`, conversions, `@`, pytree
    registration) comes from here.
    """

    # Made by GroupType from the declarations: (field name, size of its last axis, or None
    # for a scalar per element), in the constructor's order; the attribute of a field
    # stored under another name; the fields whose values must be positive.
    fields: ClassVar[tuple[tuple[str, int | None], ...]] = ()
    renamed: ClassVar[dict[str, str]] = {}
    positive: ClassVar[frozenset[str]] = frozenset()
    tangent_dim: ClassVar[int]
    matrix_dim: ClassVar[int]
    space_dim: ClassVar[int]
    __slots__ = ()

    def __init__(self, *arrays) -> None:
        checked = _checked(type(self), arrays)
        for (name, _), array in zip(self.fields, checked):
            object.__setattr__(self, _attribute(type(self), name), array)
        if not pytrees_registered():
            register_pytrees()

    @classmethod
    def _trusted(cls: type[Self], *arrays) -> Self:
        """An element from fields known to be right (an op's results): no checks, so that a
        method costs what its ops do, and so that JAX and PyTorch can rebuild an element
        from whatever their transforms put in its fields."""
        self = object.__new__(cls)
        for (name, _), array in zip(cls.fields, arrays):
            object.__setattr__(self, _attribute(cls, name), array)
        if not pytrees_registered():
            register_pytrees()
        return self

    def __setattr__(self, name, value):
        raise AttributeError(f"xform.{type(self).__name__} is immutable; make a new element")

    # --- the fields ---------------------------------------------------------------------

    @property
    def _arrays(self) -> tuple:
        return tuple(getattr(self, _attribute(type(self), name)) for name, _ in self.fields)

    @property
    def _kind(self) -> str:
        return _frameworks.kind(getattr(self, self.fields[0][0]))

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

    def _operand(self, array, method: str, name: str, trailing: tuple[int, ...]):
        """`array` checked as argument `name` of `method`: an array of this element's
        framework and dtype whose last axes are `trailing`."""
        argument(type(self), method, name, array, trailing)
        where = f"xform.{type(self).__name__}.{method}"
        if _frameworks.kind(array) != self._kind:
            raise TypeError(
                f"{where}: '{name}' is a {_frameworks.kind(array)} array and this element "
                f"holds {self._kind} arrays; convert one with xform.to_{self._kind}"
            )
        if dtype_name(array) != dtype_name(self._arrays[0]):
            raise TypeError(
                f"{where}: '{name}' has dtype {dtype_name(array)} and this element "
                f"{dtype_name(self._arrays[0])}; convert one"
            )
        return array

    def _points(self, points, method: str):
        """`points`: an array of this element's framework whose last axis is the space's
        dimension."""
        return self._operand(points, method, "points", (self.space_dim,))

    def _parameter(self, t, method: str, *others: LieGroup):
        """`t` of `method` (a path's parameter): a real number, or an array of this
        element's framework and dtype whose shape broadcasts with the batch shapes of this
        element and `others`. The same rule for every group, whatever its op."""
        if isinstance(t, numbers.Real) and not isinstance(t, bool):
            return float(t)
        if _frameworks.kind(t) is None:
            raise TypeError(
                f"xform.{type(self).__name__}.{method}: 't' is a {type(t).__module__}."
                f"{type(t).__qualname__}; expected a number or a {self._kind} array"
            )
        self._operand(t, method, "t", ())
        for element in (self, *others):
            try:
                np.broadcast_shapes(tuple(t.shape), element.shape)
            except ValueError:
                raise ValueError(
                    f"xform.{type(self).__name__}.{method}: 't' has shape {tuple(t.shape)}, "
                    f"which does not broadcast with the batch shape {element.shape}"
                ) from None
        return t

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
        """NumPy indexing of the batch axes, never of the fields' own (last) axis."""
        index = index if isinstance(index, tuple) else (index,)
        taken = sum(map(_axes_taken, index))
        if taken > len(self.shape):
            raise IndexError(
                f"xform.{type(self).__name__}: too many indices ({taken}) for batch shape "
                f"{self.shape}"
            )
        if any(i is Ellipsis for i in index):  # the field's own axis stays last
            return type(self)._trusted(
                *(
                    a[(*index, *(slice(None),) * len(_element(size)))]
                    for a, (_, size) in zip(self._arrays, self.fields)
                )
            )
        # The trailing Ellipsis keeps NumPy from returning a scalar for a scalar field.
        return type(self)._trusted(*(a[(*index, Ellipsis)] for a in self._arrays))

    def reshape(self: Self, *shape) -> Self:
        """The same elements in batch shape `shape` (a tuple, or ints; -1 as in NumPy)."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        shape = tuple(operator.index(n) for n in shape)
        return type(self)._trusted(
            *(
                a.reshape((*shape, *_element(size)))
                for a, (_, size) in zip(self._arrays, self.fields)
            )
        )

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={array!r}" for (name, _), array in zip(self.fields, self._arrays)
        )
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
        t = self._parameter(t, "interpolate", other)
        delta = self.inverse().multiply(other).log()
        if _frameworks.kind(t) is not None:
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
        whose framework, device and dtype it takes) or `dtype` (a NumPy, PyTorch or JAX
        float dtype, or its name) says otherwise.

        Example:
            >>> xform.SE3.identity((2,)).quaternion
            array([[1., 0., 0., 0.],
                   [1., 0., 0., 0.]])
            >>> xform.SO3.identity(like=torch.zeros(0, dtype=torch.float32)).quaternion
            tensor([1., 0., 0., 0.])
        """
        where = f"{cls.__name__}.identity"
        batch = _batch(batch_shape, where)
        _like_kind(like, where)
        dtype = _float_dtype(dtype, like, where) or "float64"
        return cls.exp(_zeros((*batch, cls.tangent_dim), like, dtype))


# --- the arguments of constructors ------------------------------------------------------------


def _element(size: int | None) -> tuple[int, ...]:
    """A field's element shape: `(size,)`, or `()` for a scalar field (size None, such as
    Sim3's scale)."""
    return () if size is None else (size,)


def _attribute(cls, field: str) -> str:
    """The attribute that holds `field`: its name, unless the class renames it (Sim3's
    scale array is `_scale`, its method `scale()`)."""
    return cls.renamed.get(field, field)


def _batch(shape, where: str) -> tuple[int, ...]:
    """Argument `batch_shape` of constructor `where`, checked."""
    return sample_shape(where, shape, "batch_shape")


def _like_kind(like, where: str) -> str:
    """The framework of argument `like` of `where` ('numpy' for None), or a TypeError."""
    if like is None:
        return "numpy"
    if not _holds(like):
        raise TypeError(
            f"xform.{where}: 'like' must be a NumPy, PyTorch or JAX array, got "
            f"{type(like).__module__}.{type(like).__qualname__}"
        )
    return _frameworks.kind(like)


def _float_dtype(dtype, like, where: str) -> str | None:
    """'float32' or 'float64': argument `dtype` of `where` (a NumPy, PyTorch or JAX dtype,
    or its name) else `like`'s dtype, whatever framework the result is of; None when
    neither is given."""
    if dtype is None and like is None:
        return None
    source = "'dtype' is" if dtype is not None else "'like' has dtype"
    name = _frameworks.float_name(like.dtype if dtype is None else dtype)
    if name not in _FLOATS:
        raise TypeError(f"xform.{where}: {source} {name}; expected float32 or float64")
    return name


def _zeros(shape: tuple[int, ...], like=None, dtype: str | None = None):
    """Zeros of `shape` in the framework of `like` (a NumPy, PyTorch or JAX array; NumPy
    when None) and on its device, of `dtype` (a name; else like's dtype, else float64)."""
    framework = _frameworks.NUMPY if like is None else _frameworks.of(like)
    if dtype is None:
        dtype = "float64" if like is None else dtype_name(like)
    return framework.zeros(shape, dtype, like)


def _axes_taken(index) -> int:
    """How many batch axes one item of an index consumes, by NumPy's rules: none for None
    and `...`, a boolean mask's dimensions for a mask (a bool scalar adds an axis), one
    for anything else."""
    if index is None or index is Ellipsis:
        return 0
    if isinstance(index, list):
        index = np.asarray(index)
    if str(getattr(index, "dtype", "")).removeprefix("torch.") == "bool":
        return len(index.shape)
    return 0 if isinstance(index, bool) else 1


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
        if not _holds(array):
            raise TypeError(
                f"xform.{name}: '{field}' is a {type(array).__module__}."
                f"{type(array).__qualname__}; expected a NumPy, PyTorch or JAX array"
            )
        if dtype_name(array) not in _FLOATS:
            raise TypeError(
                f"xform.{name}: '{field}' has dtype {dtype_name(array)}; expected float32 or "
                "float64"
            )
        if size is not None and (len(array.shape) == 0 or array.shape[-1] != size):
            raise ValueError(
                f"xform.{name}: '{field}' has shape {tuple(array.shape)}; expected (..., {size})"
            )
        kinds[field] = _frameworks.kind(array)
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
    for field, array in zip(cls.fields, arrays):
        if field[0] in cls.positive:
            check_positive(name, field[0], array)
    batches = [
        tuple(a.shape[: len(a.shape) - len(_element(size))])
        for a, (_, size) in zip(arrays, cls.fields)
    ]
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
        _broadcast_to(a, (*batch, *_element(size)), kinds[f])
        for (f, size), a in zip(cls.fields, arrays)
    )


def _broadcast_to(array, shape: tuple[int, ...], kind: str):
    if tuple(array.shape) == shape:
        return array
    return _frameworks.FRAMEWORKS[kind].broadcast_to(array, shape)
