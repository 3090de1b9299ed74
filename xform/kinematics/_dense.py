"""Dense symmetric positive definite solves for the dynamics, by Cholesky, as Warp element
functions generic in the scalar and the size.

Two forms of each. The plain ones run loops of a fixed bound with a test per step: Warp's
adjoint (which the second derivatives of forward dynamics run through them) is right only
for loops it unrolls, and it unrolls only fixed bounds (see `_rnea.py`). The
`_forward_only` ones run each loop over the steps it needs (half the steps, no test), for
kernels that Warp never differentiates: the values of forward dynamics and the partials.
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
def cholesky_upper_forward_only(m: Any):
    """The upper factor U of m = U^T U (U = L^T), by rank-one updates of whole rows (not
    differentiable by Warp's adjoint)."""
    n = len(m)
    upper = m
    for j in range(n):
        scale = type(m[0, 0])(1.0) / wp.sqrt(upper[j, j])
        for c in range(n):
            upper[j, c] = upper[j, c] * scale
        for i in range(j + 1, n):
            factor = upper[j, i]
            for c in range(n):
                upper[i, c] -= factor * upper[j, c]
    for j in range(n):
        for c in range(j):
            upper[j, c] = type(m[0, 0])(0.0)
    return upper


@wp.func
def cholesky_solve_forward_only(upper: Any, b: Any):
    """x with U^T U x = b (not differentiable by Warp's adjoint)."""
    n = len(b)
    y = b
    for i in range(n):
        y_i = y[i] / upper[i, i]
        y[i] = type(y_i)(0.0)
        for c in range(n):
            y[c] -= y_i * upper[i, c]
        y[i] = y_i
    x = y
    for r in range(n):
        i = n - 1 - r
        x_i = x[i] / upper[i, i]
        x[i] = type(x_i)(0.0)
        for c in range(n):
            x[c] -= x_i * upper[c, i]
        x[i] = x_i
    return x


@wp.func
def cholesky_inverse_forward_only(upper: Any):
    """(U^T U)^-1 = Z^T Z with Z = U^-T, lower triangular, row by row (not differentiable
    by Warp's adjoint)."""
    n = len(upper)
    one = type(upper[0, 0])(1.0)
    z = type(upper)()
    for i in range(n):
        z[i, i] = one
        for k in range(i):
            factor = upper[k, i]
            for c in range(n):
                z[i, c] -= factor * z[k, c]
        scale = one / upper[i, i]
        for c in range(n):
            z[i, c] = z[i, c] * scale
    inverse = type(upper)()
    for k in range(n):
        for r in range(k + 1):
            factor = z[k, r]
            for c in range(n):
                inverse[r, c] += factor * z[k, c]
    return inverse


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
