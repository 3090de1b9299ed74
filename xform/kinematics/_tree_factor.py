"""The mass matrix factored along the tree: Featherstone's `M = L^T D L` (Rigid Body
Dynamics Algorithms, 2008, section 6.5), as Warp element functions for the kernels that Warp
never differentiates (forward dynamics' value and the partials; its closed forms keep
`_dense.py`'s fixed-bound Cholesky, which Warp's adjoint runs through).

The velocity coordinates are taken in slots, in the tables' body order: on a floating base
the root's six first, as a chain (slot s's parent is s - 1), then body i's coordinate in
slot `i - 1 + 6 base`, whose parent is the slot of body i's parent (or the root's last).
Every body comes after its parent, so a slot's ancestors come before it. `M` is zero
between two slots on different branches, and so is its factor: `L` is unit lower
triangular with entries only at (slot, ancestor), and the factor, the solves and the
inverse walk only those pairs: `O(n d^2)`, `O(n d)` and `O(n^2 d)` for n coordinates at
depth d, against a dense factor's `n^3 / 6`.

A mimic joint (several bodies on one coordinate) couples branches, so where the bodies do
not map one to one onto the coordinates the slots are the coordinates themselves as one
chain, whose factor is the dense one.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ._ops import row_parent
from ._rnea import coordinate, floating


@wp.func
def tree_slots(q: Any, template: Any, bodies: Any):
    """Each slot's coordinate and parent slot (-1 for none), len(template) of each."""
    n = len(template)
    base = floating(q, template)
    order = wp.vector(length=len(template), dtype=wp.int32)
    parents = wp.vector(length=len(template), dtype=wp.int32)
    for s in range(n):
        order[s] = s
        parents[s] = s - 1
    if len(bodies) - 1 + 6 * base == n:
        seen = wp.vector(length=len(template), dtype=wp.int32)
        tree = int(1)  # noqa: UP018 (a variable, not a constant, to Warp)
        for i in range(1, len(bodies)):
            k = coordinate(bodies[i], template, base)
            if seen[k] != 0:
                tree = 0
            seen[k] = 1
        if tree != 0:
            for i in range(1, len(bodies)):
                row = bodies[i]
                order[i - 1 + 6 * base] = coordinate(row, template, base)
                parents[i - 1 + 6 * base] = row_parent(row, i) - 1 + 6 * base
    return order, parents


@wp.func
def tree_factor_forward_only(m: Any, order: Any, parents: Any):
    """M = L^T D L in slot order, leaves to root: D on the diagonal, L's entries at (slot,
    ancestor), zero elsewhere (not differentiable by Warp's adjoint)."""
    n = len(order)
    factor = type(m)()
    for s in range(n):
        k = order[s]
        factor[s, s] = m[k, k]
        j = parents[s]
        while j >= 0:
            factor[s, j] = m[k, order[j]]
            j = parents[j]
    for r in range(n):
        k = n - 1 - r
        i = parents[k]
        while i >= 0:
            ratio = factor[k, i] / factor[k, k]
            j = i
            while j >= 0:
                factor[i, j] -= ratio * factor[k, j]
                j = parents[j]
            factor[k, i] = ratio
            i = parents[i]
    return factor


@wp.func
def tree_solve_forward_only(factor: Any, order: Any, parents: Any, b: Any):
    """x with L^T D L x = b (b and x in coordinate order; not differentiable by Warp's
    adjoint)."""
    n = len(b)
    x = type(b)()
    for s in range(n):
        x[s] = b[order[s]]
    for r in range(n):
        i = n - 1 - r
        x_i = x[i]
        j = parents[i]
        while j >= 0:
            x[j] -= factor[i, j] * x_i
            j = parents[j]
    for s in range(n):
        x[s] = x[s] / factor[s, s]
    for i in range(n):
        t = x[i]
        j = parents[i]
        while j >= 0:
            t -= factor[i, j] * x[j]
            j = parents[j]
        x[i] = t
    out = type(b)()
    for s in range(n):
        out[order[s]] = x[s]
    return out


@wp.func
def tree_inverse_forward_only(factor: Any, order: Any, parents: Any):
    """M^-1 = X D^-1 X^T in coordinate order, X = L^-1 (unit lower triangular, entries at
    (slot, ancestor) like L): entry (r, c) sums over the slots above both (not
    differentiable by Warp's adjoint)."""
    n = len(order)
    one = type(factor[0, 0])(1.0)
    x = type(factor)()
    for s in range(n):
        x[s, s] = one
        j = parents[s]
        while j >= 0:
            ratio = factor[s, j]
            t = j
            while t >= 0:
                x[s, t] -= ratio * x[j, t]
                t = parents[t]
            j = parents[j]
    lower = type(factor)()
    for r in range(n):
        t = r
        while t >= 0:
            weight = x[r, t] / factor[t, t]
            for c in range(t, r + 1):
                lower[r, c] += weight * x[c, t]
            t = parents[t]
    inverse = type(factor)()
    for r in range(n):
        for c in range(r + 1):
            inverse[order[r], order[c]] = lower[r, c]
            inverse[order[c], order[r]] = lower[r, c]
    return inverse
