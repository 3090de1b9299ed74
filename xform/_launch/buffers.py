"""An op's operands, checked: contiguous memory of one float dtype on one device, with the
launch plan of their shapes. Everything is checked before any kernel runs.

Operands arrive as `Buffer`s: a pointer to contiguous memory with its shape, dtype and
device, and the object that owns the memory. `as_buffer` makes one from a NumPy array, a
Warp array or any DLPack-capable array (non-contiguous ones are copied once, on their
own device, after every check); the adapters make them straight from their tensors,
which is cheaper.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import warp as wp

from .._op import Op
from .layout import LaunchPlan, plan_launch

FLOAT_TYPES = {"float32": wp.float32, "float64": wp.float64}

# Once, at import: DLPack views need the runtime, and no call should pay for starting it.
wp.init()


@dataclass(frozen=True)
class Buffer:
    """An operand's memory: `ptr` to contiguous elements, kept alive by `owner`. A
    non-contiguous operand comes with `contiguous`, which makes the copy; it is called
    only once the operand has passed every check (a huge broadcast view is refused before
    anything is copied)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: str
    device: str
    owner: Any
    contiguous: Callable[[], tuple[int, Any]] | None = None

    def materialised(self) -> Buffer:
        if self.contiguous is None:
            return self
        ptr, owner = self.contiguous()
        return Buffer(ptr, self.shape, self.dtype, self.device, owner)


@dataclass(frozen=True)
class Operands:
    """An op's operands, validated: contiguous buffers on one device with one float
    dtype, and the launch plan for their shapes."""

    op: Op
    buffers: tuple[Buffer, ...]
    scalar: type
    device: str
    plan: LaunchPlan

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(b.shape for b in self.buffers)

    def result_shape(self, index: int) -> tuple[int, ...]:
        like = self.op.like[index]
        if like is not None:
            return self.shapes[like]
        return self.plan.batch_shape + self.op.results[index].element


def _warp_buffer(a: wp.array, shape: tuple[int, ...] | None = None) -> Buffer:
    """A Buffer of a Warp array (copied once, later, if not contiguous). A Warp array of
    vec3 with shape (N,) has shape (N, 3)."""
    dtype = getattr(a.dtype, "_wp_scalar_type_", a.dtype)
    if shape is None:
        shape = tuple(a.shape) + tuple(getattr(a.dtype, "_shape_", ()))
    if a.is_contiguous:
        return Buffer(a.ptr or 0, shape, dtype.__name__, str(a.device), a)

    def copy():
        c = a.contiguous()
        return c.ptr or 0, c

    return Buffer(0, shape, dtype.__name__, str(a.device), a, copy)


def is_number(x: Any) -> bool:
    """A Python or NumPy number (not a bool)."""
    return isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))


def as_buffer(op: Op, name: str, x: Any) -> Buffer:
    """A Buffer of a NumPy, Warp or DLPack-capable array, read in place if contiguous."""
    if isinstance(x, Buffer):
        return x
    if is_number(x):
        x = np.asarray(x)  # a number: a 0-d array of its own dtype (a Python float: float64)
    if isinstance(x, np.ndarray):
        if x.flags.c_contiguous and x.dtype.isnative:
            return Buffer(x.ctypes.data, x.shape, x.dtype.name, "cpu", x)

        def copy():  # non-contiguous or of non-native byte order: read once, natively
            c = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
            return c.ctypes.data, c

        return Buffer(0, x.shape, x.dtype.name, "cpu", x, copy)
    if isinstance(x, wp.array):
        if wp.types.type_is_quaternion(x.dtype):
            raise TypeError(
                f"{op.name}: argument '{name}' is a Warp array of {x.dtype.__name__}, which "
                "Warp stores as [x, y, z, w]; xform's quaternions are [w, x, y, z]. Pass an "
                "array of vec4 (or of floats with a last axis of 4) in xform's order"
            )
        return _warp_buffer(x)
    if hasattr(x, "__dlpack__"):
        try:
            view = wp.from_dlpack(x)
        except Exception as exc:  # an unsupported dtype is the usual cause
            raise TypeError(
                f"{op.name}: argument '{name}' ({type(x).__name__}) could not be viewed "
                f"through DLPack: {exc}"
            ) from exc
        # Keep the caller's shape: a 0-d array stays 0-d, which Warp cannot express.
        return _warp_buffer(view, tuple(x.shape) if hasattr(x, "shape") else None)
    raise TypeError(
        f"{op.name}: argument '{name}' must be an array (NumPy, Warp, or DLPack-capable), "
        f"got {type(x).__name__}"
    )


def check_dtypes(op: Op, dtypes: Sequence[str]) -> str:
    """The one float dtype ("float32" or "float64") of all operands, given their names;
    TypeError naming the first operand that breaks the rule."""
    for operand, dtype in zip(op.operands, dtypes):
        if dtype not in FLOAT_TYPES:
            raise TypeError(
                f"{op.name}: argument '{operand.name}' has dtype {dtype}; "
                "expected float32 or float64"
            )
        if dtype != dtypes[0]:
            raise TypeError(
                f"{op.name}: argument '{operand.name}' has dtype {dtype} but "
                f"'{op.operands[0].name}' has {dtypes[0]}; all arguments must share one float dtype"
            )
    return dtypes[0]


@functools.lru_cache(maxsize=1024)
def cached_plan(op: Op, shapes: tuple[tuple[int, ...], ...], prefix: int) -> LaunchPlan:
    return plan_launch(op, list(shapes), prefix)


def prepare(op: Op, args: Sequence[Any], prefix: int = 0) -> Operands:
    """Validate `args` against `op` (dtype, shape, device) and make them contiguous.
    `prefix` leading dimensions of every argument come from a vectorising transform."""
    if len(args) != len(op.operands):
        raise TypeError(f"{op.name}: takes {len(op.operands)} arrays, got {len(args)}")
    buffers = tuple(as_buffer(op, o.name, x) for o, x in zip(op.operands, args))
    dtype = check_dtypes(op, [b.dtype for b in buffers])
    plan = cached_plan(op, tuple(b.shape for b in buffers), prefix)
    device = buffers[0].device
    for operand, b in zip(op.operands, buffers):
        if b.device != device:
            raise ValueError(
                f"{op.name}: argument '{operand.name}' is on {b.device} but "
                f"'{op.operands[0].name}' is on {device}; all arguments must be on one device"
            )
    buffers = tuple(b.materialised() for b in buffers)
    return Operands(op, buffers, FLOAT_TYPES[dtype], device, plan)


def checked_like(operands: Operands, what: str, x: Any | None, expected, allocate_zeros) -> Buffer:
    """`x` (a tangent or a cotangent) as a contiguous buffer of the operands' dtype and
    device and of shape `expected` (zeros when `x` is None)."""
    op = operands.op
    if x is None:
        native, ptr = allocate_zeros(expected, operands.scalar, operands.device)
        return Buffer(ptr, tuple(expected), operands.scalar.__name__, operands.device, native)
    b = as_buffer(op, what, x)
    if b.dtype != operands.scalar.__name__:
        raise TypeError(
            f"{op.name}: {what} has dtype {b.dtype}; expected {operands.scalar.__name__}"
        )
    if isinstance(x, wp.array) and _ones_dropped(b.shape) == _ones_dropped(expected):
        # Warp has no 0-d arrays: where a 0-d array (or a scalar operand's batch) would
        # have been, a Warp array has a leading 1 (as xform's own Warp results do).
        b = dataclasses.replace(b, shape=tuple(expected))
    if b.shape != tuple(expected):
        raise ValueError(f"{op.name}: {what} has shape {b.shape}; expected {tuple(expected)}")
    if b.device != operands.device:
        raise ValueError(f"{op.name}: {what} is on {b.device}; expected {operands.device}")
    return b.materialised()


def _ones_dropped(shape) -> tuple[int, ...]:
    """`shape` without its leading ones."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape
