"""The top-level API: every op of the table as a function of NumPy, Warp, PyTorch or
JAX arrays, returning the caller's array type (through the dispatch, `_dispatch.py`), and the
core's own `vjp` and `jvp` of NumPy and Warp arrays.

The functions are generated from the op table, so each has the op's own argument names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from . import _second_order
from ._dispatch import ALLOCATORS, ARRAYS, ArrayArguments, _core_kind, _unpack, numbers_as_arrays
from ._launch import buffers, products
from ._op import Composite, Op
from .ops import COMPOSITES, OPS


def resolve(op: Op | Composite | str) -> Op | Composite:
    """An op or a function over ops (`Composite`), given itself or a built-in's name."""
    if isinstance(op, (Op, Composite)):
        return op
    if isinstance(op, str):
        if op in OPS:
            return OPS[op]
        if op in COMPOSITES:
            return COMPOSITES[op]
        raise ValueError(
            f"xform: no op named {op!r}; the built-in ops are {', '.join([*OPS, *COMPOSITES])}"
        )
    raise TypeError(f"xform: expected an xform.Op or a built-in op's name, got {type(op).__name__}")


def _record(family: Composite, args: Sequence[Any]) -> tuple[tuple, list]:
    """Run a function over ops on NumPy or Warp arrays, recording each op it calls with
    its arrays and results: (the results, the record)."""
    tape = []

    def call(op: Op, *arrays):
        results = op(*arrays)
        tape.append((op, arrays, results if isinstance(results, tuple) else (results,)))
        return results

    results = family.run(call, *args)
    return (results if isinstance(results, tuple) else (results,)), tape


def _sum(a, b):
    """a + b for two NumPy or two Warp arrays (None is zero)."""
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, np.ndarray):
        return a + b
    return wp.array(a.numpy() + b.numpy(), dtype=a.dtype, device=a.device)


def _family_vjp(family: Composite, args: Sequence[Any], cotangents) -> tuple:
    """The chain rule through the ops a function over ops called, last op first: each
    array's cotangent is the sum of those its uses give it."""
    results, tape = _record(family, args)
    if not isinstance(cotangents, (tuple, list)):
        cotangents = (cotangents,)
    if len(cotangents) != len(results):
        raise ValueError(
            f"{family.name}: expected {len(results)} cotangents, got {len(cotangents)}"
        )
    held = {id(r): g for r, g in zip(results, cotangents) if g is not None}
    for op, arrays, outs in reversed(tape):
        given = [held.get(id(r)) for r in outs]
        if all(g is None for g in given):
            continue
        for x, g in zip(arrays, vjp(op, arrays, tuple(given))):
            if g is not None:
                held[id(x)] = _sum(held.get(id(x)), g)
    return tuple(held.get(id(x)) if _is_array(x) else None for x in args)


def _family_jvp(family: Composite, args: Sequence[Any], tangents: Sequence[Any]):
    """The chain rule through the ops a function over ops called, first op first."""
    if len(tangents) != len(args):
        raise ValueError(f"{family.name}: expected {len(args)} tangents, got {len(tangents)}")
    results, tape = _record(family, args)
    moving = {id(x): t for x, t in zip(args, tangents) if t is not None and _is_array(x)}
    for op, arrays, outs in tape:
        given = [moving.get(id(x)) for x in arrays]
        if all(t is None for t in given):
            continue
        out = jvp(op, arrays, given)
        for r, t in zip(outs, out if isinstance(out, tuple) else (out,)):
            moving[id(r)] = t
    out = [moving.get(id(r)) for r in results]
    return out[0] if len(out) == 1 else tuple(out)


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, wp.array))


def vjp(op: Op | str, args: Sequence[Any], cotangents) -> tuple:
    """Reverse-mode product of `op` (an `xform.Op` or a built-in's name) at `args`.

    `cotangents` is one array for a one-result op, or a tuple with one array (or None,
    for zero) per result. Returns one gradient per argument, shaped like that argument,
    with broadcast dimensions summed; None for arguments that are not differentiable.
    A function over ops (`quaternion_to_euler`, `rigid_registration`, ...) takes its own
    arguments, static ones included (a convention string, a flag): None for those.
    """
    op = resolve(op)
    if isinstance(op, Composite):
        return _family_vjp(op, args, cotangents)
    _second_order.refuse_if_not_differentiable(op)
    args = numbers_as_arrays(op, args)
    kind = _core_kind(op, args, "vjp")
    if len(op.results) == 1 and not isinstance(cotangents, (tuple, list)):
        cotangents = (cotangents,)
    if len(cotangents) != len(op.results):
        raise ValueError(f"{op.name}: expected {len(op.results)} cotangents, got {len(cotangents)}")
    operands = buffers.prepare(op, args)
    empty, zeros = ALLOCATORS[kind]
    return tuple(products.vjp(operands, cotangents, zeros, allocate=empty))


def jvp(op: Op | str, args: Sequence[Any], tangents: Sequence[Any]):
    """Forward-mode product of `op` (an `xform.Op` or a built-in's name) at `args`: the
    results' tangents for one tangent per argument (None for zero), each shaped like its
    argument. Returns one array for a one-result op, else a tuple. A function over ops
    takes its own arguments, static ones included (their tangents None)."""
    op = resolve(op)
    if isinstance(op, Composite):
        return _family_jvp(op, args, tangents)
    _second_order.refuse_if_not_differentiable(op)
    args = numbers_as_arrays(op, args)
    kind = _core_kind(op, args, "jvp")
    if len(tangents) != len(op.operands):
        raise ValueError(f"{op.name}: expected {len(op.operands)} tangents, got {len(tangents)}")
    operands = buffers.prepare(op, args)
    empty, zeros = ALLOCATORS[kind]
    return _unpack(op, products.jvp(operands, tangents, empty, zeros))


def _make_function(op: Op):
    def function(*args, **kwargs):
        return op(*args, **kwargs)

    function.__name__ = function.__qualname__ = op.name
    function.__signature__ = op.signature
    function.__doc__ = op.docstring("none (not differentiable)")
    return function


def family_function(family: Composite, call, arrays: ArrayArguments):
    """The function of an op family, whose ops run through `call(op, *arrays)`, and whose
    array arguments `arrays` checks first (as each op checks its own)."""

    def function(*args, **kwargs):
        arrays.check_family(family, args, kwargs)
        return family.run(call, *args, **kwargs)

    function.__name__ = function.__qualname__ = family.name
    function.__signature__ = family.signature
    function.__doc__ = family.doc
    return function


FUNCTIONS = {name: _make_function(op) for name, op in OPS.items()}
FUNCTIONS |= {
    name: family_function(family, lambda op, *arrays: op(*arrays), ARRAYS)
    for name, family in COMPOSITES.items()
}
