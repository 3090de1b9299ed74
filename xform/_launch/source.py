"""The source text that generated Warp code is written from: an element's Warp type, its
components and inner products as expressions, and a module of generated source built
and registered where Warp can read it."""

from __future__ import annotations

import functools
import linecache
from typing import Any

import warp as wp

from .._op import Op


@functools.cache
def value_type(element: tuple[int, ...], scalar: type):
    """The Warp type of one element: a scalar, a vector or a matrix."""
    if element == ():
        return scalar
    if len(element) == 1:
        return wp.types.vector(element[0], scalar)
    return wp.types.matrix(element, scalar)


def zero_source(type_name: str, element: tuple[int, ...]) -> str:
    return f"{type_name}()" if element else f"{type_name}(0.0)"


def inner(a: str, b: str, element: tuple[int, ...]) -> str:
    """Source of the sum of the products of two elements' components."""
    if element == ():
        return f"{a} * {b}"
    return f"wp.dot({a}, {b})" if len(element) == 1 else f"wp.ddot({a}, {b})"


def component(name: str, c: int | str, element: tuple[int, ...]) -> str:
    """Source of component `c` of an element, as an assignable expression: `c` a flat
    index, a number or the source of one (a loop variable)."""
    if element == ():
        return name
    if len(element) == 1:
        return f"{name}[{c}]"
    if isinstance(c, int):
        return f"{name}[{c // element[1]}, {c % element[1]}]"
    return f"{name}[{c} // {element[1]}, {c} % {element[1]}]"


def tuple_source(names: list[str]) -> str:
    return ", ".join(names)


def module_name(op: Op, part: str, scalar: type) -> str:
    """The Python (and Warp) module name of one generated part of an op."""
    return f"xform_ops.{op.key}.{part}.{scalar.__name__}"


def build(source: str, module: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Run generated source as the Python module `module`. Warp reads a function's source
    to compile it, so the text is registered with linecache under its own file name."""
    filename = f"<xform generated: {module}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": module, "wp": wp, "Any": Any, **namespace}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def types(op: Op, scalar: type) -> dict[str, Any]:
    """Type names the generated source uses: A<k> an operand's stored element, X<k> the
    value the function receives (after prepare), Y<j> a result, S the scalar."""
    names: dict[str, Any] = {"S": scalar}
    for k, o in enumerate(op.operands):
        names[f"A{k}"] = value_type(o.element, scalar)
        names[f"X{k}"] = value_type(o.value_element, scalar)
    for j, r in enumerate(op.results):
        names[f"Y{j}"] = value_type(r.element, scalar)
    return names


# --- element functions ------------------------------------------------------------------
