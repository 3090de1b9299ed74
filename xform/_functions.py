"""The top-level API: every op of the table as a function of NumPy, Warp, PyTorch or
JAX arrays, returning the caller's array type (through the dispatch, `_api.py`), and the
core's own `vjp` and `jvp` of NumPy and Warp arrays.

The functions are generated from the op table, so each has the op's own argument names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _launch
from ._api import ALLOCATORS, _core_kind, _unpack, numbers_as_arrays
from ._op import Op, OpFamily
from .ops import FAMILY_FUNCTIONS, OPS


def resolve(op: Op | str) -> Op:
    """An op, given itself or a built-in's name."""
    if isinstance(op, Op):
        return op
    if isinstance(op, str):
        if op in OPS:
            return OPS[op]
        raise ValueError(f"xform: no op named {op!r}; the built-in ops are {', '.join(OPS)}")
    raise TypeError(f"xform: expected an xform.Op or a built-in op's name, got {type(op).__name__}")


def vjp(op: Op | str, args: Sequence[Any], cotangents) -> tuple:
    """Reverse-mode product of `op` (an `xform.Op` or a built-in's name) at `args`.

    `cotangents` is one array for a one-result op, or a tuple with one array (or None,
    for zero) per result. Returns one gradient per argument, shaped like that argument,
    with broadcast dimensions summed; None for arguments that are not differentiable.
    """
    op = resolve(op)
    args = numbers_as_arrays(op, args)
    kind = _core_kind(op, args, "vjp")
    if len(op.results) == 1 and not isinstance(cotangents, (tuple, list)):
        cotangents = (cotangents,)
    if len(cotangents) != len(op.results):
        raise ValueError(f"{op.name}: expected {len(op.results)} cotangents, got {len(cotangents)}")
    operands = _launch.prepare(op, args)
    empty, zeros = ALLOCATORS[kind]
    return tuple(_launch.vjp(operands, cotangents, zeros, allocate=empty))


def jvp(op: Op | str, args: Sequence[Any], tangents: Sequence[Any]):
    """Forward-mode product of `op` (an `xform.Op` or a built-in's name) at `args`: the
    results' tangents for one tangent per argument (None for zero), each shaped like its
    argument. Returns one array for a one-result op, else a tuple."""
    op = resolve(op)
    args = numbers_as_arrays(op, args)
    kind = _core_kind(op, args, "jvp")
    if len(tangents) != len(op.operands):
        raise ValueError(f"{op.name}: expected {len(op.operands)} tangents, got {len(tangents)}")
    operands = _launch.prepare(op, args)
    empty, zeros = ALLOCATORS[kind]
    return _unpack(op, _launch.jvp(operands, tangents, empty, zeros))


def _make_function(op: Op):
    def function(*args, **kwargs):
        return op(*args, **kwargs)

    function.__name__ = function.__qualname__ = op.name
    function.__signature__ = op.signature
    function.__doc__ = op.docstring("none (not differentiable)")
    return function


def family_function(family: OpFamily, call):
    """The function of an op family, whose ops run through `call(op, *arrays)`."""

    def function(*args, **kwargs):
        return family.run(call, *args, **kwargs)

    function.__name__ = function.__qualname__ = family.name
    function.__signature__ = family.signature
    function.__doc__ = family.doc
    return function


FUNCTIONS = {name: _make_function(op) for name, op in OPS.items()}
FUNCTIONS |= {
    name: family_function(family, lambda op, *arrays: op(*arrays))
    for name, family in FAMILY_FUNCTIONS.items()
}
