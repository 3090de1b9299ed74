"""The partial derivatives of inverse dynamics, dtau/dq and dtau/dv, in one forward and one
backward sweep over the tree, O(n d) for n bodies of depth d (Carpentier and Mansard,
"Analytical Derivatives of Rigid Body Dynamics Algorithms", RSS 2018), with the mass
matrix on the way.

Every quantity is in the base frame (`_rnea.py`'s conventions: `S_i`, `v_i`, `a_i` with
gravity as the root's `-g`, `I_i`, `f_i = I_i a_i + v_i ×* I_i v_i`). Turning joint j by
`dq_j` moves every body of its subtree rigidly by the twist `S_j dq_j`; a torque
`tau_i = S_i . F_i` of a body in that subtree does not see that common motion, only the
change of the subtree's quantities relative to it, which is the same for every body there:
`Ψ_j = v_λ(j) × S_j` for a velocity and `Ψ̇_j + Ψ_j × v_k` for the acceleration of body k,
with `Ψ̇_j = a_λ(j) × S_j + v_λ(j) × Ψ_j` (λ: the parent). Moving `qd_j` changes `v_k` by
`S_j` and `a_k` by `2 Ψ_j + S_j × v_k`. So, with `B_k x = I_k (x × v_k) + x ×* I_k v_k
+ v_k ×* I_k x = İ_k x + x ×* h_k` (`İ_k = v_k ×* I_k - I_k v_k×`, the inertia's rate, ten
numbers as an inertia's: `_spatial.inertia_rate`) and the subtree sums `Ic_i`, `İc_i`,
`Hc_i = Σ I_k v_k` and `F_i`:

- for j an ancestor of i or i itself, with `P_i = Ic_i S_i` and `Q_i = B_c,i^T S_i =
  İc_i S_i - S_i ×* Hc_i`: `dtau_i/dq_j = P_i . Ψ̇_j + Q_i . Ψ_j`,
  `dtau_i/dqd_j = 2 P_i . Ψ_j + Q_i . S_j` and `M_ij = P_i . S_j`;
- for j a strict ancestor of i (the subtree of i moves, and its force turns with it):
  `dtau_j/dq_i = S_j . D_i`, `D_i = S_i ×* F_i + Ic_i Ψ̇_i + İc_i Ψ_i + Ψ_i ×* Hc_i`, and
  `dtau_j/dqd_i = S_j . E_i`, `E_i = 2 Ic_i Ψ_i + İc_i S_i + S_i ×* Hc_i`.

On a floating base the root is a six-dof joint with `S_0 = 1` whose velocity enters the
accelerations once (`v_0 × v_0 = 0`): its columns in v are `Ic (v_0 × e_c) + B_c e_c`
(rows of the root: the whole tree's sums; rows of a joint: `P_i . (v_0 × e_c) + Q_i . e_c`),
its rows `D_i` and `E_i`; its columns in q turn gravity alone (the rest is in its frame):
`a_0` changes by `[ω × g, 0]`. A mimic joint's terms add into its coordinate's row and
column (`S_i` carries its multiplier).

The loops have fixed bounds and no `wp.grad` runs through them: the partials are values,
not differentiated (`_dynamics.py`).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ._ops import row_parent
from ._rnea import coordinate, floating, rnea_state
from ._spatial import (
    angular,
    cross_force,
    cross_motion,
    inertia_apply,
    inertia_rate,
    linear,
    spatial,
)


@wp.func
def rnea_partials(
    q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any, with_mass: int
):  # fmt: skip
    """dtau/dq (in the tangent space), dtau/dv and M at (q, v, a), without external
    forces (`forces` and `frames`: `_dynamics.no_forces`; see the module docstring). With
    `with_mass` 0, M is left zero: forward dynamics' derivatives have it factored already."""
    n = len(bodies)
    base = floating(q, v)
    one = type(q[0])(1.0)
    # composite, momenta and rates hold each body's own until the backward sweep sums
    # them (Ic_i, Hc_i, İc_i); subtree holds the subtree forces F_i already
    (
        positions,
        quaternions,
        motions,
        composite,
        velocities,
        accelerations,
        subtree,
        g,
        momenta,
        pushes,
    ) = rnea_state(q, v, a, forces, bodies, frames, one)
    psi = type(motions)()
    psi_dot = type(motions)()
    rates = type(composite)()
    parents = wp.vector(length=len(bodies), dtype=wp.int32)
    coordinates = wp.vector(length=len(bodies), dtype=wp.int32)
    v0 = velocities[0]
    rates[0] = inertia_rate(composite[0], v0)
    for i in range(1, n):
        row = bodies[i]
        parent = row_parent(row, i)
        parents[i] = parent
        coordinates[i] = coordinate(row, v, base)
        s = motions[i]
        vp = velocities[parent]
        turn = cross_motion(vp, s)
        psi[i] = turn
        psi_dot[i] = cross_motion(accelerations[parent], s) + cross_motion(vp, turn)
        rates[i] = inertia_rate(composite[i], velocities[i])
    by_q = wp.matrix(shape=(len(v), len(v)), dtype=type(q[0]))
    by_v = wp.matrix(shape=(len(v), len(v)), dtype=type(q[0]))
    mass = wp.matrix(shape=(len(v), len(v)), dtype=type(q[0]))
    two = type(q[0])(2.0)
    for step in range(1, n):
        i = n - step
        k = coordinates[i]
        s = motions[i]
        hc = momenta[i]
        inertia = composite[i]  # Ic_i, summed by now
        rate = rates[i]
        pushed = inertia_apply(inertia, s)  # P_i
        rated = inertia_apply(rate, s)  # İc_i S_i
        spun = cross_force(s, hc)  # S_i ×* Hc_i
        pulled = rated - spun  # Q_i
        moved = (
            cross_force(s, subtree[i])
            + inertia_apply(inertia, psi_dot[i])
            + inertia_apply(rate, psi[i])
            + cross_force(psi[i], hc)
        )  # D_i
        sped = two * inertia_apply(inertia, psi[i]) + rated + spun  # E_i
        j = i
        for _up in range(1, n):
            if j > 0:
                kj = coordinates[j]
                sj = motions[j]
                by_q[k, kj] += wp.dot(pushed, psi_dot[j]) + wp.dot(pulled, psi[j])
                by_v[k, kj] += two * wp.dot(pushed, psi[j]) + wp.dot(pulled, sj)
                if with_mass != 0:
                    m_ij = wp.dot(pushed, sj)
                    mass[k, kj] += m_ij
                    if j != i:
                        mass[kj, k] += m_ij
                if j != i:
                    by_q[kj, k] += wp.dot(sj, moved)
                    by_v[kj, k] += wp.dot(sj, sped)
                j = parents[j]
        if base != 0:
            # the root's rows (D_i, E_i, P_i) and columns (its velocity, gravity's turn)
            by_v_root = pulled - cross_force(v0, pushed)
            by_q_root = wp.cross(g, linear(pushed))
            for r in range(6):
                rr = wp.min(r, len(v) - 1)
                by_q[rr, k] += moved[r]
                by_v[rr, k] += sped[r]
                by_v[k, rr] += by_v_root[r]
                if with_mass != 0:
                    mass[rr, k] += pushed[r]
                    mass[k, rr] += pushed[r]
                if r >= 3:
                    by_q[k, rr] += by_q_root[wp.min(r - 3, 2)]
        parent = parents[i]
        composite[parent] = composite[parent] + inertia
        rates[parent] = rates[parent] + rate
        momenta[parent] = momenta[parent] + hc
    if base != 0:
        inertia = composite[0]
        zero3 = type(g)()
        for c in range(6):
            unit = wp.vector(length=6, dtype=type(q[0]))
            unit[c] = one
            column_v = (
                inertia_apply(inertia, cross_motion(v0, unit))
                + inertia_apply(rates[0], unit)
                + cross_force(unit, momenta[0])
            )
            column_q = type(unit)()
            if c >= 3:
                column_q = inertia_apply(inertia, spatial(wp.cross(angular(unit), g), zero3))
            cc = wp.min(c, len(v) - 1)
            for r in range(6):
                rr = wp.min(r, len(v) - 1)
                by_q[rr, cc] = column_q[r]
                by_v[rr, cc] = column_v[r]
            if with_mass != 0:
                column_m = inertia_apply(inertia, unit)
                for r in range(6):
                    mass[wp.min(r, len(v) - 1), cc] = column_m[r]
    return by_q, by_v, mass
