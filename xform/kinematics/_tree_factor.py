"""The mass matrix factored along the tree: Featherstone's `M = L^T D L` (Rigid Body
Dynamics Algorithms, 2008, section 6.5), as Warp element functions for the kernels that Warp
never differentiates (forward dynamics' value and the partials; its closed forms keep
`_dense.py`'s fixed-bound Cholesky, which Warp's adjoint runs through).

The velocity coordinates are taken in slots, in the tables' body order: on a floating base
the root's six first, as a chain (slot s's parent is s - 1), then body i's coordinate in
slot `i - 1 + 6 base`, whose parent is the slot of body i's parent (or the root's last).
Every body comes after its parent, so a slot's ancestors come before it. `M` is zero
between two slots on different branches, and so is its factor: `L` is unit lower
triangular with entries only at (slot, ancestor). The solve walks those pairs (`p <= n d`
of them, for n coordinates at depth d); the factor and the inverse take one row update
per pair, each over a whole row (`p n` steps, a loop of constant length, which the CPU
vectorises), against a dense factor's `n^3 / 6` to `n^3 / 2` and inverse's `n^3`.
Talos: p = 331, n = 38 (benchmarks/NOTES.md, 47, has what it bought).

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
def joints_own_coordinates(q: Any, template: Any, bodies: Any):
    """Whether the joints map one to one onto the coordinates after the root's (no mimic
    joint): the trees the articulated-body recursion and the tree factor take."""
    base = floating(q, template)
    own = int(1)  # noqa: UP018 (a variable, not a constant, to Warp)
    if len(bodies) - 1 + 6 * base != len(template):
        own = 0
    seen = wp.vector(length=len(template), dtype=wp.int32)
    for i in range(1, len(bodies)):
        k = coordinate(bodies[i], template, base)
        if seen[k] != 0:
            own = 0
        seen[k] = 1
    return own != 0


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
    if joints_own_coordinates(q, template, bodies):
        for i in range(1, len(bodies)):
            row = bodies[i]
            order[i - 1 + 6 * base] = coordinate(row, template, base)
            parents[i - 1 + 6 * base] = row_parent(row, i) - 1 + 6 * base
    return order, parents


@wp.func
def tree_factor_forward_only(m: Any, order: Any, parents: Any):
    """M = L^T D L in slot order, leaves to root: D on the diagonal, L's entries at (slot,
    ancestor), zero elsewhere (not differentiable by Warp's adjoint). Each (slot,
    ancestor) pair updates the ancestor's whole row: a loop of constant length, which the
    CPU vectorises (one of variable length runs some 5x slower a step here); the upper
    triangle it fills is cleared at the end."""
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
            for c in range(n):
                factor[i, c] -= ratio * factor[k, c]
            factor[k, i] = ratio
            i = parents[i]
    for s in range(n):
        for c in range(s + 1, n):
            factor[s, c] = type(m[0, 0])(0.0)
    return factor


@wp.func
def tree_solve_forward_only(factor: Any, order: Any, parents: Any, b: Any):
    """x with L^T D L x = b (b and x in coordinate order; not differentiable by Warp's
    adjoint), over the (slot, ancestor) pairs."""
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
    """M^-1 = Y^T D^-1 Y in coordinate order, Y = L^-T (unit upper triangular, entries at
    (ancestor, slot)), both in place in one matrix: Y's rows from the leaves (each
    ancestor's row takes its descendant's), then M^-1's row r as the sum of Y's rows at r
    and its ancestors, from the last row (which no later row reads). Whole rows, as in the
    factor (not differentiable by Warp's adjoint)."""
    n = len(order)
    y = type(factor)()
    for s in range(n):
        y[s, s] = type(factor[0, 0])(1.0)
    for r in range(n):
        i = n - 1 - r
        t = parents[i]
        while t >= 0:
            ratio = factor[i, t]
            for c in range(n):
                y[t, c] -= ratio * y[i, c]
            t = parents[t]
    for step in range(n):
        r = n - 1 - step
        row = type(factor[0])()
        t = r
        while t >= 0:
            weight = y[t, r] / factor[t, t]
            for c in range(n):
                row[c] += weight * y[t, c]
            t = parents[t]
        for c in range(n):
            y[r, c] = row[c]
    inverse = type(factor)()  # exactly symmetric: each row's part from its diagonal on
    for r in range(n):
        for c in range(r, n):
            inverse[order[r], order[c]] = y[r, c]
            inverse[order[c], order[r]] = y[r, c]
    return inverse
