"""Forward dynamics by the articulated-body algorithm (Featherstone, Rigid Body Dynamics
Algorithms, 2008, section 7.3), as a Warp element function for the kernels that Warp never
differentiates: forward dynamics' value where every joint has a coordinate of its own.

In the base frame of `_rnea.py` (every quantity there, at its origin) the algorithm needs
no transform between bodies: a body's articulated inertia `IA_i` (6x6) and bias force
`pA_i` start as its own `I_i` and `v_i ×* I_i v_i - f_ext,i`, and leaves to root each body
hands its parent `IA_i - U_i U_i^T / D_i` and `pA_i + Ia_i c_i + U_i u_i / D_i`, with
`U_i = IA_i S_i`, `D_i = S_i . U_i`, `u_i = tau_i - S_i . pA_i` and the velocity-product
acceleration `c_i = v_i × (S_i qd_i)`; root to leaves, `a_i = a_parent + c_i`,
`qdd_i = (u_i - U_i . a_i) / D_i`, `a_i += S_i qdd_i`. The root starts at `-g` on a fixed
base; a floating one solves `IA_0 a_0 = tau[0:6] - pA_0` and reports `a_0 + g`, the
convention of `rnea_state`. O(n) a configuration against the factored mass matrix's
O(n d) on top of the mass matrix itself; a mimic joint (several bodies on one coordinate)
couples branches, and those trees keep the factor (`_dynamics.py`).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ._dense import cholesky, cholesky_solve
from ._ops import row_parent
from ._rnea import (
    body_state,
    coordinate,
    floating,
    gravity_in_base,
    less_external_forces,
    root_part,
    set_root_part,
)
from ._spatial import cross_force, cross_motion, inertia_apply, spatial


@wp.func
def spatial_matrix(p: Any):
    """The inertia p (ten numbers) as its symmetric 6x6 matrix, column by column."""
    m = wp.matrix(shape=(6, 6), dtype=type(p[0]))
    for c in range(6):
        unit = wp.vector(length=6, dtype=type(p[0]))
        unit[c] = type(p[0])(1.0)
        column = inertia_apply(p, unit)
        for r in range(6):
            m[r, c] = column[r]
    return m


@wp.func
def articulated_body(q: Any, v: Any, tau: Any, forces: Any, bodies: Any, frames: Any):
    """a = M^-1 (tau - C(q, v) v - g(q) + sum J^T f_ext) by the articulated-body algorithm
    (module docstring), for trees whose joints own their coordinates."""
    n = len(bodies)
    base = floating(q, v)
    zero = type(q[0])(0.0)
    positions, quaternions, motions, inertias = body_state(q, v, bodies)
    velocities = type(motions)()
    biases = type(motions)()  # c_i
    pushes = type(motions)()  # pA_i
    handed = type(motions)()  # U_i
    pivots = wp.vector(length=len(bodies), dtype=type(zero))  # D_i
    remainders = wp.vector(length=len(bodies), dtype=type(zero))  # u_i
    articulated = wp.matrix(shape=(len(bodies), 36), dtype=type(zero))
    velocities[0] = root_part(v, base)
    for i in range(n):
        if i > 0:
            row = bodies[i]
            u = v[coordinate(row, v, base)] * motions[i]
            velocities[i] = velocities[row_parent(row, i)] + u
            biases[i] = cross_motion(velocities[i], u)
        pushes[i] = cross_force(velocities[i], inertia_apply(inertias[i], velocities[i]))
        own = spatial_matrix(inertias[i])
        for r in range(6):
            for c in range(6):
                articulated[i, 6 * r + c] = own[r, c]
    pushes = less_external_forces(pushes, forces, frames, positions, quaternions)
    for step in range(1, n):
        i = n - step
        row = bodies[i]
        parent = row_parent(row, i)
        s = motions[i]
        inertia = wp.matrix(shape=(6, 6), dtype=type(zero))
        for r in range(6):
            for c in range(6):
                inertia[r, c] = articulated[i, 6 * r + c]
        handing = inertia * s
        pivot = wp.dot(s, handing)
        remainder = tau[coordinate(row, v, base)] - wp.dot(s, pushes[i])
        handed[i] = handing
        pivots[i] = pivot
        remainders[i] = remainder
        inertia = inertia - wp.outer(handing, handing) / pivot
        handed_push = pushes[i] + inertia * biases[i] + (remainder / pivot) * handing
        pushes[parent] = pushes[parent] + handed_push
        for r in range(6):
            for c in range(6):
                articulated[parent, 6 * r + c] += inertia[r, c]
    gravity = gravity_in_base(q, v, bodies, type(zero)(1.0))
    g = spatial(gravity, type(gravity)())
    a = type(v)()
    accelerations = type(motions)()
    if base != 0:
        root = wp.matrix(shape=(6, 6), dtype=type(zero))
        for r in range(6):
            for c in range(6):
                root[r, c] = articulated[0, 6 * r + c]
        root = cholesky(root)
        accelerations[0] = cholesky_solve(root, root_part(tau, base) - pushes[0])
        a = set_root_part(a, accelerations[0] + g, base)
    else:
        accelerations[0] = -g
    for i in range(1, n):
        row = bodies[i]
        k = coordinate(row, v, base)
        ai = accelerations[row_parent(row, i)] + biases[i]
        qdd = (remainders[i] - wp.dot(handed[i], ai)) / pivots[i]
        accelerations[i] = ai + qdd * motions[i]
        a[k] = qdd
    return a
