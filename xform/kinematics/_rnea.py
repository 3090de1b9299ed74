"""The recursive Newton-Euler algorithm over a tree of rigid bodies, with its closed-form
tangent (forward sweep) and VJP (reverse sweep), and the composite-rigid-body mass matrix,
as Warp element functions generic in the scalar and the sizes.

Every quantity is expressed in the base frame (the root body's frame) at its origin, as in
Carpentier and Mansard's derivation (RSS 2018): a joint's motion subspace `S_i` (a twist
per unit of its coordinate, mimic multiplier included), body velocities `v_i`, spatial
accelerations `a_i` (gravity enters as the root's `-g`), inertias `I_i` (`_spatial.py`),
body forces `f_i = I_i a_i + v_i ×* I_i v_i - f_ext,i` and subtree forces `F_i`; a
coordinate's torque is the sum of `S_i . F_i` over the joints it drives (`G^T tau_full`).

On a floating base (`len(q) = len(v) + 1`: q = [position, quaternion, joints], v = [the
root's twist in its own frame, joints]), the root moves with `v_0 = v[0:6]`,
`a_0 = a[0:6] - [R^T g, 0]`, and its wrench is `F_0`. The base pose enters only through
`R^T g` (dynamics does not depend on where the base is, nor on its heading about g).

Derivatives in q are taken in the tangent space (`len(v)` components: the root's right
perturbation `[rho, omega]`, then the joints). Moving coordinate k by `dq_k` turns every
body below its joint by `w_i = w_parent + S_i dq_k` (`w_0 = 0`), so that every base-frame
quantity attached to body i changes by the action of `w_i`: `dS_i = w_i × S_i`,
`dI_i x = w_i ×* (I_i x) - I_i (w_i × x)`, `d f_ext,i = w_i ×* f_ext,i`. The tangent
propagates these with the velocity's and acceleration's own; the VJP runs the transposed
sweep (the identities it uses: `<Λ, m ×* f> = <m, -(Λ ×* f)>`, `<Λ, m × x> = <x, m ×* Λ>`
and `<F, w × S> = <w, S ×* F>`), in two passes: values and `Λ_i` (the cotangent of `f_i`:
the sum of `λ_k S_j` over the joints j from the root to i) root to leaves, then every
cotangent leaves to root.

Loops run over the bodies with bounds fixed by the sizes (see `_ops.py`: second
derivatives differentiate these functions with Warp's adjoint, which needs them unrolled).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..ops.quaternion import quat_conjugate, quat_multiply
from . import _inertia
from ._ops import (
    INDEX,
    KIND,
    MULTIPLIER,
    OFFSET,
    REVOLUTE,
    joint_direction,
    joint_placement,
    rotate,
    row_parent,
    row_vector3,
)
from ._spatial import (
    angular,
    cross_force,
    cross_motion,
    force_moved,
    inertia_apply,
    inertia_moved,
    linear,
    motion_into,
    spatial,
)

# The tables' columns (`_inertia.py`), as the kernels read them.
MASS, GRAVITY, FRAME_BODY, FRAME_POSITION, FRAME_QUATERNION = (
    wp.constant(getattr(_inertia, name))
    for name in ("MASS", "GRAVITY", "FRAME_BODY", "FRAME_POSITION", "FRAME_QUATERNION")
)


@wp.func
def floating(q: Any, v: Any):
    """1 where the base floats (q has the root's pose, one number more than v), else 0."""
    return len(q) - len(v)


@wp.func
def coordinate(row: Any, v: Any, base: int):
    """The velocity coordinate of a body's joint (clamped into v, so that a malformed
    table read by hand stays in bounds): the joint's index after the root's 6."""
    return wp.clamp(wp.int32(row[INDEX]) + 6 * base, 6 * base, len(v) - 1)


@wp.func
def component(x: Any, index: int):
    """x[index], clamped into x: reads that only a floating base makes, kept in bounds
    where x is a fixed base's shorter vector."""
    return x[wp.min(index, len(x) - 1)]


@wp.func
def root_part(x: Any, base: int):
    """x[0:6] on a floating base, zero on a fixed one."""
    part = wp.vector(length=6, dtype=type(x[0]))
    if base != 0:
        part = wp.vector(
            component(x, 0),
            component(x, 1),
            component(x, 2),
            component(x, 3),
            component(x, 4),
            component(x, 5),
        )
    return part


@wp.func
def set_root_part(x: Any, part: Any, base: int):
    """x with x[0:6] = part on a floating base (unchanged on a fixed one)."""
    if base != 0:
        for r in range(6):
            x[wp.min(r, len(x) - 1)] = part[r]
    return x


@wp.func
def root_quaternion(q: Any):
    """The floating base's quaternion [w, x, y, z] (q[3:7])."""
    return wp.vector(component(q, 3), component(q, 4), component(q, 5), component(q, 6))


@wp.func
def gravity_in_base(q: Any, v: Any, bodies: Any, scale: Any):
    """scale g in the base frame: g itself on a fixed base, R^T g on a floating one (R the
    rotation of the normalised root quaternion)."""
    g = scale * row_vector3(bodies[0], GRAVITY)
    if floating(q, v) != 0:
        turn = root_quaternion(q)
        turn = turn / wp.length(turn)
        g = rotate(quat_conjugate(turn), g)
    return g


@wp.func
def row_inertia(row: Any):
    return wp.vector(
        row[MASS],
        row[MASS + 1],
        row[MASS + 2],
        row[MASS + 3],
        row[MASS + 4],
        row[MASS + 5],
        row[MASS + 6],
        row[MASS + 7],
        row[MASS + 8],
        row[MASS + 9],
    )


@wp.func
def body_state(q: Any, v: Any, bodies: Any):
    """Each body's pose in the base frame, its joint's motion subspace S_i and its
    inertia, both in the base frame (row 0: the root)."""
    n = len(bodies)
    base = floating(q, v)
    positions = wp.matrix(shape=(len(bodies), 3), dtype=type(q[0]))
    quaternions = wp.matrix(shape=(len(bodies), 4), dtype=type(q[0]))
    motions = wp.matrix(shape=(len(bodies), 6), dtype=type(q[0]))
    inertias = wp.matrix(shape=(len(bodies), 10), dtype=type(q[0]))
    one = type(q[0])(1.0)
    zero = type(q[0])(0.0)
    quaternions[0] = wp.vector(one, zero, zero, zero)
    inertias[0] = row_inertia(bodies[0])
    for i in range(1, n):
        row = bodies[i]
        parent = row_parent(row, i)
        theta = row[MULTIPLIER] * q[coordinate(row, v, base) + base] + row[OFFSET]
        offset, rotation = joint_placement(row, theta)
        frame = quaternions[parent]
        position = positions[parent] + rotate(frame, offset)
        quaternion = quat_multiply(frame, rotation)
        positions[i] = position
        quaternions[i] = quaternion
        direction = joint_direction(row, quaternion)
        if wp.int32(row[KIND]) == REVOLUTE:
            motions[i] = spatial(wp.cross(position, direction), direction)
        else:
            motions[i] = spatial(direction, type(direction)())
        inertias[i] = inertia_moved(row_inertia(row), position, quaternion)
    return positions, quaternions, motions, inertias


@wp.func
def frame_pose(frames: Any, link: int, positions: Any, quaternions: Any):
    """A link's body and its pose in the base frame."""
    row = frames[link]
    body = wp.clamp(wp.int32(row[FRAME_BODY]), 0, len(positions) - 1)
    offset = row_vector3(row, FRAME_POSITION)
    turn = wp.vector(
        row[FRAME_QUATERNION],
        row[FRAME_QUATERNION + 1],
        row[FRAME_QUATERNION + 2],
        row[FRAME_QUATERNION + 3],
    )
    frame = quaternions[body]
    return body, positions[body] + rotate(frame, offset), quat_multiply(frame, turn)


@wp.func
def nonzero(x: Any):
    """Whether any component of a 6-vector is not 0 (NaN included)."""
    return x[0] != 0 or x[1] != 0 or x[2] != 0 or x[3] != 0 or x[4] != 0 or x[5] != 0


@wp.func
def less_external_forces(f: Any, forces: Any, frames: Any, positions: Any, quaternions: Any):
    """Each body's force f minus the external forces on its links (each given in its
    link's frame), in the base frame."""
    for link in range(len(frames)):
        force = forces[link]
        if nonzero(force):
            body, position, quaternion = frame_pose(frames, link, positions, quaternions)
            f[body] = f[body] - force_moved(position, quaternion, force)
    return f


@wp.func
def rnea_state(q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any, scale: Any):
    """The forward sweep's values: each body's pose, S_i and inertia (`body_state`), its
    velocity and acceleration, its subtree's force F_i (external forces included), gravity
    in the base frame, and each body's momentum I v and I a."""
    n = len(bodies)
    base = floating(q, v)
    positions, quaternions, motions, inertias = body_state(q, v, bodies)
    velocities = type(motions)()
    accelerations = type(motions)()
    momenta = type(motions)()
    pushes = type(motions)()
    f = type(motions)()
    g = gravity_in_base(q, v, bodies, scale)
    v0 = root_part(v, base)
    a0 = root_part(a, base) - spatial(g, type(g)())
    velocities[0] = v0
    accelerations[0] = a0
    momenta[0] = inertia_apply(inertias[0], v0)
    pushes[0] = inertia_apply(inertias[0], a0)
    f[0] = pushes[0] + cross_force(v0, momenta[0])
    for i in range(1, n):
        row = bodies[i]
        parent = row_parent(row, i)
        k = coordinate(row, v, base)
        s = motions[i]
        u = v[k] * s
        vi = velocities[parent] + u
        ai = accelerations[parent] + a[k] * s + cross_motion(vi, u)
        velocities[i] = vi
        accelerations[i] = ai
        h = inertia_apply(inertias[i], vi)
        push = inertia_apply(inertias[i], ai)
        momenta[i] = h
        pushes[i] = push
        f[i] = push + cross_force(vi, h)
    f = less_external_forces(f, forces, frames, positions, quaternions)
    for step in range(1, n):
        i = n - step
        parent = row_parent(bodies[i], i)
        f[parent] = f[parent] + f[i]
    return (positions, quaternions, motions, inertias, velocities, accelerations,
            f, g, momenta, pushes)  # fmt: skip


@wp.func
def rnea(q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any, scale: Any):
    """tau = M(q) a + C(q, v) v + scale g(q) - sum J^T f_ext, for every coordinate."""
    base = floating(q, v)
    positions, quaternions, motions, inertias, velocities, accelerations, subtree, g, h, ia = (
        rnea_state(q, v, a, forces, bodies, frames, scale)
    )
    tau = type(v)()
    for i in range(1, len(bodies)):
        tau[coordinate(bodies[i], v, base)] += wp.dot(motions[i], subtree[i])
    return set_root_part(tau, subtree[0], base)


@wp.func
def rnea_tangent_at(
    q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any,
    positions: Any, quaternions: Any, motions: Any, inertias: Any, velocities: Any,
    accelerations: Any, subtree: Any, g: Any, momenta: Any, pushes: Any,
    dq: Any, dv: Any, da: Any, dforces: Any,
):  # fmt: skip
    """The tangent of `rnea` at its state (`rnea_state`) for dq in the tangent space
    (len(v) components), dv, da and dforces: the forward sweep of the module docstring.
    The body force's tangent is
    `w ×* I a + dv ×* h + v ×* (w ×* h + I (dv - w × v)) + I (da - w × a)`."""
    n = len(bodies)
    base = floating(q, v)
    turns = type(motions)()
    d_velocities = type(motions)()
    d_accelerations = type(motions)()
    df = type(motions)()
    zero3 = type(g)()
    v0 = velocities[0]
    dv0 = root_part(dv, base)
    da0 = root_part(da, base) - spatial(wp.cross(g, angular(root_part(dq, base))), zero3)
    d_velocities[0] = dv0
    d_accelerations[0] = da0
    h0 = inertia_apply(inertias[0], v0)
    df[0] = (
        inertia_apply(inertias[0], da0)
        + cross_force(dv0, h0)
        + cross_force(v0, inertia_apply(inertias[0], dv0))
    )
    for i in range(1, n):
        row = bodies[i]
        parent = row_parent(row, i)
        k = coordinate(row, v, base)
        s = motions[i]
        p = inertias[i]
        u = v[k] * s
        vi = velocities[i]
        h = momenta[i]
        ds = cross_motion(turns[parent], s)
        w = turns[parent] + dq[k] * s
        du = v[k] * ds + dv[k] * s
        dvi = d_velocities[parent] + du
        dai = (
            d_accelerations[parent]
            + a[k] * ds
            + da[k] * s
            + cross_motion(dvi, u)
            + cross_motion(vi, du)
        )
        turns[i] = w
        df[i] = (
            cross_force(w, pushes[i])
            + cross_force(dvi, h)
            + cross_force(vi, cross_force(w, h) + inertia_apply(p, dvi - cross_motion(w, vi)))
            + inertia_apply(p, dai - cross_motion(w, accelerations[i]))
        )
        d_velocities[i] = dvi
        d_accelerations[i] = dai
    for link in range(len(frames)):
        force = forces[link]
        d_force = dforces[link]
        if nonzero(force) or nonzero(d_force):
            body, position, quaternion = frame_pose(frames, link, positions, quaternions)
            df[body] = (
                df[body]
                - cross_force(turns[body], force_moved(position, quaternion, force))
                - force_moved(position, quaternion, d_force)
            )
    dtau = type(v)()
    for step in range(1, n):
        i = n - step
        row = bodies[i]
        parent = row_parent(row, i)
        ds = cross_motion(turns[parent], motions[i])
        dtau[coordinate(row, v, base)] += wp.dot(ds, subtree[i]) + wp.dot(motions[i], df[i])
        df[parent] = df[parent] + df[i]
    return set_root_part(dtau, df[0], base)


@wp.func
def rnea_tangent(
    q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any, scale: Any,
    dq: Any, dv: Any, da: Any, dforces: Any,
):  # fmt: skip
    """The tangent of `rnea` (see `rnea_tangent_at`)."""
    positions, quaternions, motions, inertias, velocities, accelerations, subtree, g, h, ia = (
        rnea_state(q, v, a, forces, bodies, frames, scale)
    )
    return rnea_tangent_at(
        q, v, a, forces, bodies, frames, positions, quaternions, motions, inertias,
        velocities, accelerations, subtree, g, h, ia, dq, dv, da, dforces,
    )  # fmt: skip


@wp.func
def rnea_vjp(q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any, scale: Any, g_tau: Any):
    """The VJP of `rnea` for the cotangent g_tau of tau: the cotangents of q (in the
    tangent space, len(v) components), v, a and the external forces."""
    n = len(bodies)
    base = floating(q, v)
    (positions, quaternions, motions, inertias, velocities, accelerations, subtree, g, momenta,
     pushes) = rnea_state(q, v, a, forces, bodies, frames, scale)  # fmt: skip
    pulls = type(motions)()  # Λ_i, the cotangent of f_i
    pulls[0] = root_part(g_tau, base)
    for i in range(1, n):
        row = bodies[i]
        pulls[i] = pulls[row_parent(row, i)] + g_tau[coordinate(row, v, base)] * motions[i]
    g_turns = type(motions)()  # cotangents of w_i
    g_forces = type(forces)()
    for link in range(len(frames)):
        body, position, quaternion = frame_pose(frames, link, positions, quaternions)
        pull = pulls[body]
        g_forces[link] = -motion_into(position, quaternion, pull)
        force = forces[link]
        if nonzero(force):
            moved = force_moved(position, quaternion, force)
            g_turns[body] = g_turns[body] + cross_force(pull, moved)
    g_accelerations = type(motions)()
    g_velocities = type(motions)()
    g_q = type(v)()
    g_v = type(v)()
    g_a = type(v)()
    for step in range(1, n):
        i = n - step
        row = bodies[i]
        parent = row_parent(row, i)
        k = coordinate(row, v, base)
        s = motions[i]
        p = inertias[i]
        vi = velocities[i]
        ai = accelerations[i]
        pull = pulls[i]
        h = momenta[i]
        i_pull = inertia_apply(p, pull)
        # f_i = I a + v ×* I v, its I turned by w_i
        ga = g_accelerations[i] + i_pull
        gv = g_velocities[i] - cross_force(pull, h) - inertia_apply(p, cross_motion(vi, pull))
        crossed = -cross_motion(vi, pull)
        gw = (
            g_turns[i]
            - cross_force(pull, pushes[i])
            - cross_force(ai, i_pull)
            - cross_force(crossed, h)
            - cross_force(vi, inertia_apply(p, crossed))
        )
        # tau_k += S . F, a = a_parent + S a_k + v × (S v_k), v = v_parent + S v_k
        gs = g_tau[k] * subtree[i] + a[k] * ga
        g_a[k] += wp.dot(s, ga)
        gv = gv + cross_force(v[k] * s, ga)
        across = gv - cross_force(vi, ga)
        gs = gs + v[k] * across
        g_v[k] += wp.dot(s, across)
        gw = gw + cross_force(s, gs)
        g_q[k] += wp.dot(s, gw)
        g_accelerations[parent] = g_accelerations[parent] + ga
        g_velocities[parent] = g_velocities[parent] + gv
        g_turns[parent] = g_turns[parent] + gw
    pull = pulls[0]
    p = inertias[0]
    v0 = velocities[0]
    ga = g_accelerations[0] + inertia_apply(p, pull)
    gv = g_velocities[0] - cross_force(pull, momenta[0]) - inertia_apply(p, cross_motion(v0, pull))
    g_root = spatial(type(g)(), wp.cross(g, linear(ga)))
    return (
        set_root_part(g_q, g_root, base),
        set_root_part(g_v, gv, base),
        set_root_part(g_a, ga, base),
        g_forces,
    )


@wp.func
def crba(q: Any, template: Any, bodies: Any):
    """The joint-space mass matrix M(q), (len(template), len(template)): composite
    inertias leaves to root, each joint's column S_j . (I_c,i S_i) up its ancestors; on a
    floating base the root's block is the whole robot's inertia."""
    n = len(bodies)
    base = floating(q, template)
    positions, quaternions, motions, inertias = body_state(q, template, bodies)
    m = wp.matrix(shape=(len(template), len(template)), dtype=type(q[0]))
    for step in range(1, n):
        i = n - step
        row = bodies[i]
        parent = row_parent(row, i)
        k = coordinate(row, template, base)
        column = inertia_apply(inertias[i], motions[i])
        m[k, k] += wp.dot(motions[i], column)
        j = parent
        for _up in range(1, n):
            if j > 0:
                above = bodies[j]
                kj = coordinate(above, template, base)
                value = wp.dot(motions[j], column)
                m[kj, k] += value
                m[k, kj] += value
                j = row_parent(above, j)
        if base != 0:
            for r in range(6):
                row6 = wp.min(r, len(template) - 1)
                m[row6, k] += column[r]
                m[k, row6] += column[r]
        inertias[parent] = inertias[parent] + inertias[i]
    if base != 0:
        one = type(q[0])(1.0)
        for c in range(6):
            unit = wp.vector(length=6, dtype=type(q[0]))
            unit[c] = one
            column = inertia_apply(inertias[0], unit)
            for r in range(6):
                m[wp.min(r, len(template) - 1), wp.min(c, len(template) - 1)] = column[r]
    return m
