"""What a definition computes, as a hashable value: how `define_op` knows a definition
it has seen (a notebook cell run twice) from a new one under the same name.

Cheap: no source is read. A Warp function's fingerprint is its key and compiled code
(bytecode and constants, not line numbers or comments), and the fingerprints of the
Warp functions and the values it names, captures and defaults to: a helper edited and
run again changes the fingerprint of the functions that call it, and a factory's
functions with the same code and different constants differ.
"""

from __future__ import annotations

import dataclasses
import inspect

import warp as wp

from ._op import Operand, Result


def function_print(function: wp.Function | None, seen: frozenset = frozenset()) -> tuple:
    """The fingerprint of a Warp function (or of None)."""
    if function is None:
        return ()
    python = getattr(function, "func", None)
    if python is None or function.key in seen:
        return (function.key, id(function) if python is None else "recursive")
    seen = seen | {function.key}

    def value_print(value):
        if isinstance(value, wp.Function):
            return function_print(value, seen)
        if isinstance(value, (bool, int, float, str)):
            return repr(value)
        return id(value)

    named = [
        (name, value_print(value))
        for name in sorted(_names(python.__code__))
        if (value := python.__globals__.get(name)) is not None
        and not inspect.ismodule(value)
        and (isinstance(value, wp.Function) or not callable(value))
    ]
    # What a function made in a loop or a factory captures (a robot's constants, say).
    captured = tuple(value_print(cell.cell_contents) for cell in python.__closure__ or ())
    defaults = tuple(value_print(v) for v in python.__defaults__ or ())
    return (function.key, _code(python.__code__), tuple(named), captured, defaults)


def spec_print(spec: Operand | Result) -> tuple:
    """The fingerprint of an operand's or a result's spec (a preparing op by identity)."""
    fields = (
        dataclasses.astuple(dataclasses.replace(spec, prepare=None))
        if isinstance(spec, Operand)
        else dataclasses.astuple(spec)
    )
    prepare = getattr(spec, "prepare", None)
    return (type(spec).__name__, fields, None if prepare is None else id(prepare))


def _code(code) -> tuple:
    """A code object's instructions and constants (nested code objects in turn)."""
    constants = tuple(_code(c) if inspect.iscode(c) else repr(c) for c in code.co_consts)
    return (code.co_code, constants, code.co_names, code.co_varnames)


def _names(code) -> set[str]:
    """The global names a function's code (nested code included) reads."""
    names = set(code.co_names)
    for c in code.co_consts:
        if inspect.iscode(c):
            names |= _names(c)
    return names
