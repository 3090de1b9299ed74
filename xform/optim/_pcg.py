"""Conjugate gradients on a batch of block-sparse systems, preconditioned by the inverses
of their diagonal blocks (block Jacobi: on the reduced system of a Schur complement, Ceres'
`ITERATIVE_SCHUR` with `SCHUR_JACOBI`), in the framework's arrays and loops.

Each problem of the batch stops updating once its residual is within `tolerance` of its
right-hand side; the loop ends when all have, or at `max_iterations`. The default tolerance
is near the arrays' rounding (1e-13 in float64): LM's damping falls towards 1e-9 of diag(H)
near an optimum with a free gauge, where the system's condition grows past 1e9, and a
step solved only to 1e-10 there took the LM to another cost (1e-6 of it, in 20 iterations
on a small bundle adjustment). So PCG gives the step a direct solve gives: it may not stop
the LM short of the optimum.
"""

from __future__ import annotations

import numpy as np

from ._blocks import BlockMatrix


def block_jacobi(matrix: BlockMatrix):
    """`z = M^-1 r` with M the matrix's diagonal blocks (a block that cannot be inverted is
    left out: its part of r passes unchanged)."""
    xp = matrix.framework.namespace()
    inverses = []
    for i in range(len(matrix.pattern.sets)):
        blocks = matrix.diagonal_blocks(i)
        inverse = xp.linalg.inv(blocks)
        finite = xp.isfinite(inverse).all(-1).all(-1)[..., None, None]
        eye = matrix.framework.constant(np.eye(blocks.shape[-1]), blocks)
        inverses.append(xp.where(finite, inverse, eye))

    def apply(r):
        parts = matrix.split(r)
        return matrix.join([(m @ p[..., None])[..., 0] for m, p in zip(inverses, parts)])

    return apply


def pcg(matrix: BlockMatrix, rhs, tolerance: float | None = None,
        max_iterations: int | None = None):  # fmt: skip
    """x with `matrix x = rhs` for each problem of the batch (`rhs (B, N)`)."""
    framework = matrix.framework
    xp = framework.namespace()
    precondition = block_jacobi(matrix)
    if tolerance is None:
        tolerance = max(1e-13, 1e3 * float(xp.finfo(rhs.dtype).eps))
    limit = max_iterations if max_iterations is not None else 10 * rhs.shape[-1] + 10
    bound = tolerance * tolerance * (rhs * rhs).sum(-1)

    def cond(state):
        count, _, r, _, _ = state
        return (count < limit) & xp.any((r * r).sum(-1) > bound)

    def body(state):
        count, x, r, p, rz = state
        active = (r * r).sum(-1) > bound
        ap = matrix.matvec(p)
        denominator = (p * ap).sum(-1)
        ok = active & (denominator > 0)
        alpha = xp.where(ok, rz / xp.where(ok, denominator, 1.0), 0.0)
        x = x + alpha[:, None] * p
        r = r - alpha[:, None] * ap
        z = precondition(r)
        rz_next = (r * z).sum(-1)
        beta = xp.where(ok & (rz > 0), rz_next / xp.where(rz > 0, rz, 1.0), 0.0)
        p = xp.where(ok[:, None], z + beta[:, None] * p, p)
        return count + 1, x, r, p, xp.where(ok, rz_next, rz)

    x = 0.0 * rhs
    z = precondition(rhs)
    count = framework.zeros((), "int32", rhs)
    state = framework.while_loop(cond, body, (count, x, rhs, z, (rhs * z).sum(-1)))
    return state[1]
