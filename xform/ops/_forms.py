"""Element functions made from others, where several ops share one shape of formula."""

from typing import Any

import warp as wp


def at_negated(name: str, value, tangent, vjp=None):
    """`x -> value(-x)` with its tangent and VJP from `value`'s (`tangent(-x, -dx)` and
    `-vjp(-x, g)`; None without `vjp`): a right Jacobian from its left one, `J_r(xi) =
    J_l(-xi)`. The three are named `name`, `name_tangent` and `name_vjp`."""

    def negated(x: Any):
        return value(-x)

    def negated_tangent(x: Any, dx: Any):
        return tangent(-x, -dx)

    def negated_vjp(x: Any, g: Any):
        return -vjp(-x, g)

    return (
        warp_function(negated, name),
        warp_function(negated_tangent, f"{name}_tangent"),
        None if vjp is None else warp_function(negated_vjp, f"{name}_vjp"),
    )


def warp_function(function, name: str) -> wp.Function:
    """The Warp function of a Python function made in a factory, named `name` (a factory's
    functions would otherwise share one name)."""
    function.__name__ = function.__qualname__ = name
    return wp.func(function)
