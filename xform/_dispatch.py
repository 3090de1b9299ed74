"""The dispatch: an op called on NumPy, Warp, PyTorch or JAX arrays, returning the
caller's array type.

NumPy and Warp arrays run on the core directly; PyTorch tensors and JAX arrays (tracers
included) go through their framework's adapter, so they keep its autodiff and
transforms. The adapters sit above the core (they import it, never the reverse): the
dispatch finds an adapter by its module's name, imported on first use. Results are
always new arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import warp as wp

from . import _frameworks, _op
from ._launch import buffers, products, repeats
from ._op import Composite, Op, Product


def _numpy_allocator(fill):
    def allocate(shape, scalar, device):
        array = fill(shape, dtype=wp.dtype_to_numpy(scalar))
        return array, array.ctypes.data

    return allocate


def _warp_allocator(fill):
    def allocate(shape, scalar, device):
        # Warp has no 0-d arrays: a 0-d result is one element of shape (1,), a batch of one.
        array = fill(shape or (1,), dtype=scalar, device=device)
        return array, array.ptr or 0

    return allocate


ALLOCATORS = {
    "numpy": (_numpy_allocator(np.empty), _numpy_allocator(np.zeros)),
    "warp": (_warp_allocator(wp.empty), _warp_allocator(wp.zeros)),
}


@dataclass(frozen=True)
class ArrayArguments:
    """The array arguments that a front end (xform itself, or a framework's adapter) takes:
    the one type check of every op's and every op family's array arguments, run before
    anything else reads them, with one message."""

    module: str  # where the front end's functions live: "xform", "xform.backends.torch"
    wanted: str  # what it takes, in words
    accepts: Callable[[Any], bool]

    def check(self, function: str, argument: str, x: Any) -> None:
        if not self.accepts(x):
            raise TypeError(
                f"{self.module}.{function}: argument '{argument}' is a {type(x).__module__}."
                f"{type(x).__qualname__}; expected {self.wanted}"
            )

    def check_family(self, family: Composite, args: Sequence[Any], kwargs: dict) -> None:
        """A family's array arguments (`Composite.arrays`; an optional one may be None)."""
        bound = family.signature.bind(*args, **kwargs)  # a wrong call raises as Python's does
        parameters = family.signature.parameters
        for name in family.arrays:
            default = parameters[name].default
            x = bound.arguments.get(name, default)
            if not (x is None and default is None):
                self.check(family.name, name, x)


ARRAYS = ArrayArguments(
    "xform", "a NumPy, Warp, PyTorch or JAX array", lambda x: _frameworks.kind(x) is not None
)


def array_kind(op: Op, args: Sequence[Any]) -> str:
    """The one array kind ('numpy', 'warp', 'torch' or 'jax') of all arguments."""
    kinds = {}
    for operand, x in zip(op.operands, args):
        if isinstance(x, buffers.Buffer):  # a number made an array (numbers_as_arrays)
            continue
        ARRAYS.check(op.name, operand.name, x)
        kinds[operand.name] = _frameworks.kind(x)
    if len(set(kinds.values())) > 1:
        raise TypeError(
            f"xform.{op.name}: arguments mix array types "
            + ", ".join(f"'{name}': {kind}" for name, kind in kinds.items())
            + "; pass one array type (xform.to_torch / to_jax / ... convert without copying)"
        )
    return next(iter(kinds.values()))


def _core_kind(op: Op, args: Sequence[Any], what: str) -> str:
    kind = array_kind(op, args)
    if kind not in ALLOCATORS:
        raise TypeError(
            f"xform.{what} takes NumPy or Warp arrays; for {kind}, use the framework's own "
            "autodiff through xform.backends." + kind
        )
    return kind


def _unpack(op: Op, results: list):
    return results[0] if len(op.results) == 1 else tuple(results)


def array_like(value: np.ndarray, like: Any) -> Any:
    """`value` as a new array of `like`'s kind (NumPy, Warp, PyTorch or JAX), float dtype
    and device: how a layer above the ops passes constants of its own (a kinematic model)
    beside its caller's arrays. Under a JAX trace the result is a constant of the trace."""
    framework = _frameworks.of(like)
    if framework is None:
        raise TypeError(
            f"xform: expected a NumPy, Warp, PyTorch or JAX array, got {type(like).__module__}."
            f"{type(like).__qualname__}"
        )
    return framework.constant(value, like)


def numbers_as_arrays(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    """Numbers given for scalar operands (their natural spelling) as 0-d arrays of the other
    arguments' kind, on their device. A Python number or a NumPy integer takes the other
    arguments' float dtype (as a weakly typed scalar does in NumPy, PyTorch and JAX); a
    NumPy float keeps its own. With Warp arrays, the number becomes a core Buffer (Warp has
    no 0-d arrays), which the dispatch treats as being of the other arguments' kind."""
    scalars = [buffers.is_number(x) and o.element == () for o, x in zip(op.operands, args)]
    if not any(scalars):
        return args
    # The first array of any framework: a non-array (a list) is left for the front end's
    # type check, which names it.
    framework, like = next(
        ((_frameworks.of(x), x) for x, scalar in zip(args, scalars) if not scalar
         and _frameworks.of(x) is not None),
        (_frameworks.NUMPY, None),
    )  # fmt: skip

    def convert(x):
        # A NumPy float keeps its dtype; other numbers take like's (float64 without one).
        dtype = x.dtype.name if isinstance(x, np.floating) else None
        if like is None or (framework is _frameworks.NUMPY and like.dtype.kind != "f"):
            dtype = dtype or "float64"
        if framework is _frameworks.WARP:
            array = framework.constant([x], like, dtype)
            return buffers.Buffer(array.ptr, (), _frameworks.float_name(array.dtype),
                                  str(like.device), array)  # fmt: skip
        return framework.constant(x, like, dtype) if like is not None else np.asarray(x, dtype)

    return [convert(x) if scalar else x for x, scalar in zip(args, scalars)]


def _repeat_key(arrays: Sequence[Any]) -> tuple | None:
    """The key under which a call on NumPy arrays repeats an earlier one's launch
    (`_launch.repeats.repeat`): each array's shape and dtype, where all are C-contiguous and of
    native byte order; None otherwise."""
    key = []
    for x in arrays:
        if not isinstance(x, np.ndarray) or not x.flags.c_contiguous or not x.dtype.isnative:
            return None
        key.append((x.shape, x.dtype))
    return tuple(key)


def apply(op: Op, args: Sequence[Any]):
    """Run `op` on NumPy, Warp, PyTorch or JAX arrays, returning the same array type.
    Scalar operands may also be numbers (`numbers_as_arrays`)."""
    args = numbers_as_arrays(op, args)
    kind = array_kind(op, args)
    if kind in ALLOCATORS:
        key = _repeat_key(args)  # None but for NumPy arrays
        if key is not None:
            pointers = [x.ctypes.data for x in args]
            results = repeats.repeat(op, Product.FORWARD, key, pointers, *ALLOCATORS[kind])
            if results is not None:
                return _unpack(op, results)
        operands = buffers.prepare(op, args)
        return _unpack(op, products.forward(operands, *ALLOCATORS[kind], repeat_key=key))
    return _frameworks.FRAMEWORKS[kind].function(op)(*args)


_op.install_dispatch(apply)
