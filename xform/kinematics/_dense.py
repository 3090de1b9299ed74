"""Dense symmetric positive definite solves for the dynamics, by Cholesky, as Warp element
functions generic in the scalar and the size, and a product with a sparse matrix.

The factor and the solve run loops of a fixed bound with a test per step: Warp's adjoint
(which the second derivatives of forward dynamics run through them) is right only for
loops it unrolls, and it unrolls only fixed bounds (see `_rnea.py`). Kernels that Warp
never differentiates (the values of forward dynamics and the partials) factor M along the
tree instead (`_tree_factor.py`).
"""

from __future__ import annotations

from typing import Any

import warp as wp


@wp.func
def cholesky(m: Any):
    """The lower factor L of m = L L^T (loops of fixed bound)."""
    n = len(m)
    lower = type(m)()
    for j in range(n):
        d = m[j, j]
        for k in range(n):
            if k < j:
                d -= lower[j, k] * lower[j, k]
        d = wp.sqrt(d)
        lower[j, j] = d
        for i in range(n):
            if i > j:
                t = m[i, j]
                for k in range(n):
                    if k < j:
                        t -= lower[i, k] * lower[j, k]
                lower[i, j] = t / d
    return lower


@wp.func
def cholesky_solve(lower: Any, b: Any):
    """x with L L^T x = b (loops of fixed bound)."""
    n = len(b)
    y = type(b)()
    for i in range(n):
        t = b[i]
        for k in range(n):
            if k < i:
                t -= lower[i, k] * y[k]
        y[i] = t / lower[i, i]
    x = type(b)()
    for r in range(n):
        i = n - 1 - r
        t = y[i]
        for k in range(n):
            if k > i:
                t -= lower[k, i] * x[k]
        x[i] = t / lower[i, i]
    return x


@wp.func
def symmetric_times_sparse_forward_only(symmetric: Any, b: Any):
    """symmetric @ b, skipping b's zero entries (the partials of a tree are zero between
    bodies on different branches): its transpose b^T symmetric row by row, transposed."""
    out = type(b)()
    for c in range(len(b)):
        for k in range(len(b)):
            factor = b[k, c]
            if factor != type(factor)(0.0):
                for r in range(len(b)):
                    out[c, r] += factor * symmetric[k, r]
    return wp.transpose(out)
