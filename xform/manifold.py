"""Manifold tools over trees whose leaves may be group elements: right perturbations with
jaxlie's semantics, in every framework.

A tree is nested dicts, lists, tuples and None, or any pytree of JAX or PyTorch, the same
in every framework (None is an empty subtree, as in JAX). Its leaves are group elements
(`xform.SO3`, ...), which move on their group, and plain arrays, which move by `+` and
`-`; trees that go together (a tree and its tangents) must have one structure:

- `rplus(T, delta) = T @ G.exp(delta)`; `rminus(a, b) = (a.inverse() @ b).log()`, so that
  `rplus(a, rminus(a, b)) == b`;
- `grad(f)`: the gradient of `f` at `rplus(T, delta)` in delta at 0, a tree of tangents
  (through `jax.grad` for JAX arrays, `torch.func.grad` for PyTorch tensors).
"""

from __future__ import annotations

import collections
import functools
import numbers
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from . import _frameworks
from .groups import LieGroup
from .groups._base import _holds, _zeros

__all__ = ["rplus", "rminus", "zero_tangents", "normalize_all", "grad", "value_and_grad"]


def _is_group(x) -> bool:
    return isinstance(x, LieGroup)


# --- the one tree walk ------------------------------------------------------------------------
#
# Every tool walks its trees here, whatever their framework: a tree's nodes are dicts, lists,
# tuples (namedtuples too), None (a node without leaves, as in JAX), and the nodes registered
# with JAX's or PyTorch's pytrees; its leaves are group elements, arrays and numbers. Trees
# walked together must have one structure: a difference is a ValueError naming the place.


class _Node(NamedTuple):
    kind: str  # "None", "mapping", "sequence", or the name of the framework of its pytree
    signature: Any  # equal for two nodes of one structure (children aside)
    children: dict  # name (a key, or an index) -> child
    rebuild: Callable[[list], Any]  # the node, from new children in the same order


def _node(x) -> _Node | None:
    """`x` as a node of a tree, or None for a leaf."""
    if _is_group(x) or _frameworks.kind(x) is not None or isinstance(x, (numbers.Number, str)):
        return None
    if x is None:
        return _Node("None", None, {}, lambda _: None)
    if isinstance(x, dict):
        return _Node("mapping", frozenset(x), dict(x), functools.partial(_rebuild_mapping, x))
    if isinstance(x, (list, tuple)):
        cls = type(x)
        rebuild = (lambda c: cls(*c)) if hasattr(x, "_fields") else cls
        return _Node("sequence", len(x), dict(enumerate(x)), rebuild)
    for framework in _frameworks.imported():
        flat = framework.pytree_children(x)
        if flat is not None:
            children, spec = flat
            return _Node(framework.name, spec, dict(enumerate(children)), spec.unflatten)
    return None


def _rebuild_mapping(template: dict, children: list) -> dict:
    pairs = zip(template, children)
    if isinstance(template, collections.defaultdict):
        return type(template)(template.default_factory, pairs)
    return type(template)(pairs)


def _walk(function: Callable, trees: Sequence, names: Sequence[str], where: str):
    """`function(path, *leaves)` at every leaf of `trees[0]`, with the leaves in the same
    place of the other trees; the results in `trees[0]`'s structure."""

    def walk(path: tuple, parts: list):
        node = _node(parts[0])
        for name, part in zip(names[1:], parts[1:]):
            other = _node(part)
            if (other and other[:2]) != (node and node[:2]):  # leaves, or kind and signature
                raise ValueError(
                    f"xform.manifold.{where}: '{name}' does not have the structure of "
                    f"'{names[0]}': at {_path(path)}, "
                    + _difference(names[0], parts[0], name, part)
                )
        if node is None:
            return function(path, *parts)
        others = [_node(part).children for part in parts[1:]]
        return node.rebuild(
            [
                walk((*path, key), [child, *(o[key] for o in others)])
                for key, child in node.children.items()
            ]
        )

    return walk((), list(trees))


def _map(function: Callable, *trees, names: Sequence[str], where: str):
    """`function` over the leaves of `trees`, which must share one structure."""
    return _walk(lambda _, *leaves: function(*leaves), trees, names, where)


def _leaves(tree) -> list[tuple[tuple, Any]]:
    """The leaves of `tree` and their paths, in the walk's order."""
    leaves: list = []
    _walk(lambda path, leaf: leaves.append((path, leaf)), [tree], ["tree"], "tree")
    return leaves


def _unflatten(template, leaves):
    """The tree of `template`'s structure whose leaves are `leaves`, in the walk's order."""
    remaining = iter(leaves)
    return _walk(lambda *_: next(remaining), [template], ["tree"], "tree")


def _path(path: tuple) -> str:
    return "".join(f"[{key!r}]" for key in path) or "the top level"


def _difference(name, x, other_name, other) -> str:
    if isinstance(x, dict) and isinstance(other, dict):
        missing = [key for key in x if key not in other]
        extra = [key for key in other if key not in x]
        return "; ".join(
            [f"'{other_name}' lacks the keys {missing}"] * bool(missing)
            + [f"'{other_name}' has the keys {extra}, which '{name}' lacks"] * bool(extra)
        )
    return f"'{name}' has {_describe(x)} and '{other_name}' {_describe(other)}"


def _describe(x) -> str:
    if x is None:
        return "None"
    if _is_group(x):
        return f"an xform.{type(x).__name__} of batch shape {x.shape}"
    kind = _frameworks.kind(x)
    if kind is not None:
        return f"a {kind} array of shape {tuple(x.shape)}"
    cls = type(x)
    name = cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    if isinstance(x, dict):
        return f"a {name} with keys {list(x)}"
    node = _node(x)
    if node is not None:
        count = len(node.children)
        return f"a {name} of {count} item{'s' * (count != 1)}"
    return f"a {name}"


# --- the tools --------------------------------------------------------------------------------


def rplus(tree, delta):
    """`T @ G.exp(delta)` for every group element `T` of `tree`, `T + delta` for arrays;
    `delta` has `tree`'s structure (None where it has None)."""

    def plus(x, d):
        if _is_group(x):
            return x.multiply(type(x).exp(d))
        return x + d

    return _map(plus, tree, delta, names=("tree", "delta"), where="rplus")


def rminus(a, b):
    """`(a.inverse() @ b).log()` for group elements, `b - a` for arrays: the tangent that
    takes `a` to `b` (`rplus(a, rminus(a, b)) == b`); `a` and `b` of one structure."""

    def minus(x, y):
        if _is_group(x):
            return x.inverse().multiply(y).log()
        return y - x

    return _map(minus, a, b, names=("a", "b"), where="rminus")


def zero_tangents(tree):
    """Zero tangents shaped for `tree`: `(..., tangent_dim)` for elements, like arrays
    (zeros, not `x * 0`: an infinite leaf has a zero tangent too)."""

    def zeros(path, x):
        if _is_group(x):
            return _zeros((*x.shape, x.tangent_dim), x._arrays[0])
        if _holds(x):
            return _zeros(tuple(x.shape), x)
        if isinstance(x, numbers.Number):
            return type(x)(0)
        raise TypeError(
            f"xform.manifold.zero_tangents: the leaf at {_path(path)} is {_describe(x)}; "
            "expected a group element, a NumPy, PyTorch or JAX array, or a number"
        )

    return _walk(zeros, [tree], ["tree"], "zero_tangents")


def normalize_all(tree):
    """Every group element of `tree` normalised (`T.normalize()`); arrays unchanged."""
    return _map(
        lambda x: x.normalize() if _is_group(x) else x, tree, names=("tree",), where="normalize_all"
    )


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """`f`'s value and its gradient on the manifold: the gradient of `f` at
    `rplus(args[i], delta_i)` in each `delta_i` at 0, a tree of tangents shaped like
    `zero_tangents(args[i])` (one tree, or a tuple of trees for a sequence `argnums`).
    JAX arrays go through `jax.value_and_grad`, PyTorch tensors through
    `torch.func.grad_and_value`; `has_aux` as theirs. A None in an argument has None for
    gradient, as in JAX."""
    single = isinstance(argnums, int)
    positions = (argnums,) if single else tuple(argnums)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        points = tuple(args[i] for i in positions)
        zeros = zero_tangents(points)
        located = _leaves(zeros)  # differentiated flat: None has no leaf, as in JAX
        framework = _gradient_framework(located, positions, f)
        leaves = [leaf for _, leaf in located]

        def on_leaves(deltas):
            moved = list(args)
            for i, point, delta in zip(positions, points, _unflatten(zeros, deltas)):
                moved[i] = rplus(point, delta)
            return f(*moved, **kwargs)

        both = framework.value_and_grad(on_leaves, has_aux)
        value, gradient = both(leaves)
        gradients = _unflatten(zeros, gradient)
        return value, gradients[0] if single else gradients

    return wrapped


def _gradient_framework(
    located: list, positions: tuple[int, ...], f
) -> _frameworks.Framework:
    """The framework that differentiates at the zero tangents `located` (paths and leaves
    of the arguments at `positions`): of those of the leaves that differentiate, the one
    that takes the most leaves (JAX takes NumPy arrays and numbers too, as `jax.grad` does;
    `torch.func` only tensors); or a TypeError naming a leaf that it does not take."""
    name = getattr(f, "__name__", repr(f))
    present = {_frameworks.of(leaf) for _, leaf in located}
    candidates = [g for g in _frameworks.FRAMEWORKS.values() if g in present and g.differentiates]
    framework = max(
        candidates,
        key=lambda g: sum(g.differentiates_at(leaf) for _, leaf in located),
        default=None,
    )
    if framework is None:
        raise TypeError(
            f"xform.manifold: the arguments of {name} hold no JAX or PyTorch array; gradients "
            "need JAX arrays or PyTorch tensors"
        )
    def place(path) -> str:
        return f"at {_path(path[1:])} of argument {positions[path[0]]}"

    # both places: with as many leaves of each framework, either one is the odd one
    first = next(path for path, leaf in located if _frameworks.of(leaf) is framework)
    for path, leaf in located:
        if not framework.differentiates_at(leaf):
            raise TypeError(
                f"xform.manifold: the arguments of {name} mix frameworks: {framework.name} "
                f"arrays (the first {place(first)}), and {place(path)} {_describe(leaf)}; "
                f"convert with xform.to_{framework.name}"
            )
    return framework


def grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """The gradient of `f` on the manifold (see `value_and_grad`); with `has_aux`, the
    pair (gradient, aux)."""
    both = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args, **kwargs) -> Any:
        value, gradient = both(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient

    return wrapped
