"""Manifold tools over trees whose leaves may be group elements: right perturbations with
jaxlie's semantics, in every framework.

A tree is a JAX pytree, or nested dicts, lists and tuples (PyTorch, NumPy). Its leaves
are group elements (`xform.SO3`, ...), which move on their group, and plain arrays, which
move by `+` and `-`:

- `rplus(T, delta) = T @ G.exp(delta)`; `rminus(a, b) = (a.inverse() @ b).log()`, so that
  `rplus(a, rminus(a, b)) == b`;
- `grad(f)`: the gradient of `f` at `rplus(T, delta)` in delta at 0, a tree of tangents
  (through `jax.grad` for JAX arrays, `torch.func.grad` for PyTorch tensors).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import _interop
from .groups import LieGroup
from .groups._base import _zeros

__all__ = ["rplus", "rminus", "zero_tangents", "normalize_all", "grad", "value_and_grad"]


def _is_group(x) -> bool:
    return isinstance(x, LieGroup)


def _framework(tree) -> str:
    """'jax', 'torch' or 'numpy': the framework of the first array in `tree`."""
    for leaf in _leaves(tree):
        arrays = leaf._arrays if _is_group(leaf) else (leaf,)
        for array in arrays:
            kind = _interop.array_kind(array)
            if kind is not None:
                return kind
    return "numpy"


def _leaves(tree):
    if _is_group(tree):
        yield tree
    elif isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _leaves(value)
    elif "jax" in sys.modules and _interop.array_kind(tree) is None and tree is not None:
        import jax

        yield from jax.tree_util.tree_leaves(tree, is_leaf=_is_group)
    else:
        yield tree


def _map(function: Callable, tree, *rest):
    """`function` over the leaves (group elements and arrays) of `tree` and the trees of
    the same structure in `rest`."""
    if "jax" in sys.modules and _framework(tree) == "jax":
        import jax

        return jax.tree_util.tree_map(function, tree, *rest, is_leaf=_is_group)
    return _map_containers(function, tree, *rest)


def _map_containers(function: Callable, tree, *rest):
    if _is_group(tree) or tree is None:
        return function(tree, *rest)
    if isinstance(tree, dict):
        return type(tree)(
            (k, _map_containers(function, v, *(r[k] for r in rest))) for k, v in tree.items()
        )
    if isinstance(tree, (list, tuple)):
        items = [_map_containers(function, *parts) for parts in zip(tree, *rest)]
        if hasattr(tree, "_fields"):  # a namedtuple
            return type(tree)(*items)
        return type(tree)(items)
    return function(tree, *rest)


def rplus(tree, delta):
    """`T @ G.exp(delta)` for every group element `T` of `tree`, `T + delta` for arrays."""

    def plus(x, d):
        if _is_group(x):
            return x.multiply(type(x).exp(d))
        return x + d

    return _map(plus, tree, delta)


def rminus(a, b):
    """`(a.inverse() @ b).log()` for group elements, `b - a` for arrays: the tangent that
    takes `a` to `b` (`rplus(a, rminus(a, b)) == b`)."""

    def minus(x, y):
        if _is_group(x):
            return x.inverse().multiply(y).log()
        return y - x

    return _map(minus, a, b)


def zero_tangents(tree):
    """Zero tangents shaped for `tree`: `(..., tangent_dim)` for elements, like arrays."""

    def zeros(x):
        if _is_group(x):
            return _zeros((*x.shape, x.tangent_dim), x._arrays[0])
        return x * 0

    return _map(zeros, tree)


def normalize_all(tree):
    """Every group element of `tree` normalised (`T.normalize()`); arrays unchanged."""
    return _map(lambda x: x.normalize() if _is_group(x) else x, tree)


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """`f`'s value and its gradient on the manifold: the gradient of `f` at
    `rplus(args[i], delta_i)` in each `delta_i` at 0, a tree of tangents shaped like
    `zero_tangents(args[i])` (one tree, or a tuple of trees for a sequence `argnums`).
    JAX arrays go through `jax.value_and_grad`, PyTorch tensors through
    `torch.func.grad_and_value`; `has_aux` as theirs."""
    single = isinstance(argnums, int)
    positions = (argnums,) if single else tuple(argnums)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        framework = _framework([args[i] for i in positions])

        def on_deltas(*deltas):
            moved = list(args)
            for i, delta in zip(positions, deltas):
                moved[i] = rplus(args[i], delta)
            return f(*moved, **kwargs)

        zeros = [zero_tangents(args[i]) for i in positions]
        delta_argnums = 0 if single else tuple(range(len(positions)))
        if framework == "jax":
            import jax

            return jax.value_and_grad(on_deltas, delta_argnums, has_aux=has_aux)(*zeros)
        if framework == "torch":
            import torch

            gradient, value = torch.func.grad_and_value(on_deltas, delta_argnums, has_aux=has_aux)(
                *zeros
            )
            return value, gradient
        raise TypeError(
            f"xform.manifold: {f.__name__ if hasattr(f, '__name__') else f!r} takes "
            f"{framework} arrays; gradients need JAX arrays or PyTorch tensors"
        )

    return wrapped


def grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """The gradient of `f` on the manifold (see `value_and_grad`); with `has_aux`, the
    pair (gradient, aux)."""
    both = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args, **kwargs) -> Any:
        value, gradient = both(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient

    return wrapped
