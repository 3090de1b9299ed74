"""Rigid-body dynamics of a kinematic tree as xform ops: inverse dynamics (RNEA), the mass
matrix (CRBA), forward dynamics, and the explicit partial derivatives, one kernel launch
per call, each thread running its configuration through `_rnea.py`'s sweeps.

Operands: `q (nq,)`, `v (nv,)` (and `a` or `tau`), the external forces `(n_links, 6)`
(zeros, broadcast, where none are given), and the constant tables `bodies` and `frames`
(`_inertia.py`), whose leading shape is `()`. Ops are made once per (bodies, links, nq,
nv): the sizes fix the element shapes and every loop bound.

Closed forms (every derivative in q below is in the tangent space; `ambient_tangent` and
`ambient_cotangent` map it to and from q's own coordinates, the root quaternion's
included, which is read normalised):

- inverse dynamics: tangent and VJP are `_rnea.py`'s sweeps;
- mass matrix: column l is the RNEA of `a = e_l` without velocity or gravity, so its
  tangent and VJP are that RNEA's, one sweep per column;
- forward dynamics: `a = M^-1 (tau - b)`. Its value runs the articulated-body algorithm
  (`_articulated.py`), or, where a mimic joint couples its master's branches (which that
  recursion cannot take), factors M; its closed forms factor `M = L L^T` by Cholesky; its
  tangent is `M^-1 (dtau - dRNEA(q, v, a)[dq, dv, df])`, its VJP `λ = M^-1 g` and then
  `-RNEA_vjp(λ)` for q, v and the forces, `λ` for tau;
- the partials: `dtau/dq`, `dtau/dv` and `M` in one pass of Carpentier and Mansard's
  algorithm (`_rnea_partials.py`), and `da/dq = -M^-1 dtau/dq`, `da/dv = -M^-1 dtau/dv`
  at `a = FD(q, v, tau)`, `M^-1` from the factor below. They are not differentiable
  (see `dynamics_op`).

The partials (and forward dynamics' value on a tree with a mimic joint) factor M along
the tree, `M = L^T D L`
(`_tree_factor.py`: the pairs of a coordinate and its ancestors only); the closed forms,
which the second derivatives differentiate with Warp's adjoint, run a dense Cholesky over
loops of fixed bound (`_dense.py`).
"""

from __future__ import annotations

import functools
from typing import Any

import warp as wp

from .._define import define_op
from .._op import Op, Operand
from ..ops.quaternion import quat_conjugate, quat_multiply, vector_part
from . import _inertia
from ._articulated import articulated_body
from ._dense import cholesky, cholesky_solve, symmetric_times_sparse_forward_only
from ._rnea import (
    component,
    crba,
    rnea,
    rnea_tangent,
    rnea_vjp,
    root_quaternion,
)
from ._rnea_partials import rnea_partials
from ._tree_factor import (
    joints_own_coordinates,
    tree_factor_forward_only,
    tree_inverse_forward_only,
    tree_slots,
    tree_solve_forward_only,
)


@wp.func
def shifted(out: Any, x: Any, shift: int):
    """out with out[j] = x[j + shift] (clamped into x) for every j."""
    for j in range(len(out)):
        out[j] = component(x, wp.max(j + shift, 0))
    return out


@wp.func
def ambient_tangent(q: Any, dq: Any, template: Any):
    """A tangent of q in its own coordinates as one in the tangent space (len(template)):
    the same on a fixed base; on a floating base the root's [R^T dp, ω] with
    ω = 2 vec(q* dq) / |q|^2 (the rotation of the normalised quaternion), then the joints."""
    base = len(q) - len(template)
    out = shifted(type(template)(), dq, base)
    if base != 0:
        turn = root_quaternion(q)
        unit = turn / wp.length(turn)
        zero = type(q[0])(0.0)
        moved = wp.vector(zero, component(dq, 0), component(dq, 1), component(dq, 2))
        d_position = vector_part(quat_multiply(quat_conjugate(unit), quat_multiply(moved, unit)))
        spin = (type(q[0])(2.0) / wp.dot(turn, turn)) * vector_part(
            quat_multiply(quat_conjugate(turn), root_quaternion(dq))
        )
        for j in range(6):
            if j < 3:
                out[wp.min(j, len(out) - 1)] = d_position[wp.min(j, 2)]
            else:
                out[wp.min(j, len(out) - 1)] = spin[wp.clamp(j - 3, 0, 2)]
    return out


@wp.func
def ambient_cotangent(q: Any, g: Any):
    """The transpose of `ambient_tangent`: a cotangent in the tangent space as one of q."""
    base = len(q) - len(g)
    out = shifted(type(q)(), g, -base)
    if base != 0:
        turn = root_quaternion(q)
        unit = turn / wp.length(turn)
        zero = type(q[0])(0.0)
        moved = wp.vector(zero, component(g, 0), component(g, 1), component(g, 2))
        push = quat_multiply(unit, quat_multiply(moved, quat_conjugate(unit)))
        pull = (type(q[0])(2.0) / wp.dot(turn, turn)) * quat_multiply(
            turn, wp.vector(zero, component(g, 3), component(g, 4), component(g, 5))
        )
        for j in range(7):
            if j < 3:
                out[wp.min(j, len(out) - 1)] = push[wp.clamp(j + 1, 1, 3)]
            else:
                out[wp.min(j, len(out) - 1)] = pull[wp.clamp(j - 3, 0, 3)]
    return out


# --- the element functions -------------------------------------------------------------------


@wp.func
def no_forces(q: Any):
    """A single zero external force on the root, for sweeps that take none."""
    return wp.matrix(shape=(1, 6), dtype=type(q[0])), wp.matrix(shape=(1, 8), dtype=type(q[0]))


@wp.func
def inverse_dynamics(q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any):
    return rnea(q, v, a, forces, bodies, frames, type(q[0])(1.0))


@wp.func
def inverse_dynamics_tangent(
    q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any,
    dq: Any, dv: Any, da: Any, dforces: Any, d_bodies: Any, d_frames: Any,
):  # fmt: skip
    one = type(q[0])(1.0)
    tangent = ambient_tangent(q, dq, v)
    return rnea_tangent(q, v, a, forces, bodies, frames, one, tangent, dv, da, dforces)


@wp.func
def inverse_dynamics_vjp(q: Any, v: Any, a: Any, forces: Any, bodies: Any, frames: Any, g: Any):
    g_q, g_v, g_a, g_forces = rnea_vjp(q, v, a, forces, bodies, frames, type(q[0])(1.0), g)
    return ambient_cotangent(q, g_q), g_v, g_a, g_forces, type(bodies)(), type(frames)()


@wp.func
def forward_solution(q: Any, v: Any, tau: Any, forces: Any, bodies: Any, frames: Any):
    """a = M^-1 (tau - b) and the Cholesky factor of M (differentiable by Warp's adjoint:
    the closed forms below call it)."""
    bias = rnea(q, v, type(v)(), forces, bodies, frames, type(q[0])(1.0))
    lower = cholesky(crba(q, v, bodies))
    return cholesky_solve(lower, tau - bias), lower


@wp.func
def forward_solution_forward_only(
    q: Any, v: Any, tau: Any, forces: Any, bodies: Any, frames: Any
):  # fmt: skip
    """`forward_solution` for kernels that Warp never differentiates, with M factored
    along the tree (`_tree_factor.py`): a, the factor and its slots."""
    bias = rnea(q, v, type(v)(), forces, bodies, frames, type(q[0])(1.0))
    order, parents = tree_slots(q, v, bodies)
    factor = tree_factor_forward_only(crba(q, v, bodies), order, parents)
    return tree_solve_forward_only(factor, order, parents, tau - bias), factor, order, parents


@wp.func
def factored_forward_dynamics(q: Any, v: Any, tau: Any, forces: Any, bodies: Any, frames: Any):
    a, factor, order, parents = forward_solution_forward_only(q, v, tau, forces, bodies, frames)
    return a


@wp.func
def forward_dynamics(q: Any, v: Any, tau: Any, forces: Any, bodies: Any, frames: Any):
    """The articulated-body recursion where the joints own their coordinates (O(n)), the
    factored mass matrix where a mimic joint couples branches."""
    if joints_own_coordinates(q, v, bodies):
        return articulated_body(q, v, tau, forces, bodies, frames)
    return factored_forward_dynamics(q, v, tau, forces, bodies, frames)


@wp.func
def forward_dynamics_tangent(
    q: Any, v: Any, tau: Any, forces: Any, bodies: Any, frames: Any,
    dq: Any, dv: Any, dtau: Any, dforces: Any, d_bodies: Any, d_frames: Any,
):  # fmt: skip
    a, lower = forward_solution(q, v, tau, forces, bodies, frames)
    one = type(q[0])(1.0)
    tangent = ambient_tangent(q, dq, v)
    moved = rnea_tangent(q, v, a, forces, bodies, frames, one, tangent, dv, type(v)(), dforces)
    return cholesky_solve(lower, dtau - moved)


@wp.func
def forward_dynamics_vjp(q: Any, v: Any, tau: Any, forces: Any, bodies: Any, frames: Any, g: Any):
    a, lower = forward_solution(q, v, tau, forces, bodies, frames)
    pull = cholesky_solve(lower, g)
    g_q, g_v, g_a, g_forces = rnea_vjp(q, v, a, forces, bodies, frames, type(q[0])(1.0), pull)
    return -ambient_cotangent(q, g_q), -g_v, pull, -g_forces, type(bodies)(), type(frames)()


@wp.func
def inverse_dynamics_derivatives(q: Any, v: Any, a: Any, bodies: Any):
    forces, frames = no_forces(q)
    return rnea_partials(q, v, a, forces, bodies, frames, 1)


@wp.func
def forward_dynamics_derivatives(q: Any, v: Any, tau: Any, bodies: Any):
    forces, frames = no_forces(q)
    # M comes from the CRBA that a = FD(q, v, tau) factors (the partials need that a, so
    # theirs would come too late to factor); the partials skip their copy of it
    a, factor, order, parents = forward_solution_forward_only(q, v, tau, forces, bodies, frames)
    inverse = tree_inverse_forward_only(factor, order, parents)
    by_q, by_v, no_mass = rnea_partials(q, v, a, forces, bodies, frames, 0)
    return (
        -symmetric_times_sparse_forward_only(inverse, by_q),
        -symmetric_times_sparse_forward_only(inverse, by_v),
        inverse,
    )


@functools.cache
def _mass_matrix_functions(nv: int):
    """The mass matrix's element functions for nv velocity coordinates (its only operand
    besides the tables is q, whose length does not say nv on a floating base)."""

    @wp.func
    def mass_matrix(q: Any, bodies: Any):
        return crba(q, wp.vector(length=nv, dtype=type(q[0])), bodies)

    @wp.func
    def mass_matrix_tangent(q: Any, bodies: Any, dq: Any, d_bodies: Any):
        zero = wp.vector(length=nv, dtype=type(q[0]))
        forces, frames = no_forces(q)
        tangent = ambient_tangent(q, dq, zero)
        d_m = wp.matrix(shape=(nv, nv), dtype=type(q[0]))
        for c in range(nv):
            unit = wp.vector(length=nv, dtype=type(q[0]))
            unit[c] = type(q[0])(1.0)
            column = rnea_tangent(
                q, zero, unit, forces, bodies, frames, type(q[0])(0.0), tangent, zero, zero, forces
            )
            for r in range(nv):
                d_m[r, c] = column[r]
        return d_m

    @wp.func
    def mass_matrix_vjp(q: Any, bodies: Any, g_m: Any):
        zero = wp.vector(length=nv, dtype=type(q[0]))
        forces, frames = no_forces(q)
        g_q = wp.vector(length=nv, dtype=type(q[0]))
        for c in range(nv):
            unit = wp.vector(length=nv, dtype=type(q[0]))
            unit[c] = type(q[0])(1.0)
            pull = wp.vector(length=nv, dtype=type(q[0]))
            for r in range(nv):
                pull[r] = g_m[r, c]
            g_column, g_v, g_a, g_forces = rnea_vjp(
                q, zero, unit, forces, bodies, frames, type(q[0])(0.0), pull
            )
            g_q = g_q + g_column
        return ambient_cotangent(q, g_q), type(bodies)()

    return mass_matrix, mass_matrix_tangent, mass_matrix_vjp


# --- the ops, one per (call, bodies, links, nq, nv) ----------------------------------------


# Each call's element function (a mass matrix's made per nv), closed forms, operands in
# order (q's kind, then vectors of v's length, "forces") and results, and its formula.
_CALLS = {
    "inverse_dynamics": (
        lambda nv: (inverse_dynamics, inverse_dynamics_tangent, inverse_dynamics_vjp),
        ("q", "v", "a", "forces"), {"tau": 1},
        "tau = M(q) a + C(q, v) v + g(q) - sum_i J_i^T f_i (by the recursive Newton-Euler "
        "algorithm)",
    ),
    "mass_matrix": (
        _mass_matrix_functions, ("q",), {"mass_matrix": 2},
        "the joint-space mass matrix M(q) (by the composite rigid body algorithm)",
    ),
    "forward_dynamics": (
        lambda nv: (forward_dynamics, forward_dynamics_tangent, forward_dynamics_vjp),
        ("q", "v", "tau", "forces"), {"a": 1},
        "a = M(q)^-1 (tau - C(q, v) v - g(q) + sum_i J_i^T f_i)",
    ),
    "inverse_dynamics_derivatives": (
        lambda nv: (inverse_dynamics_derivatives, None, None),
        ("q", "v", "a"), {"dtau_dq": 2, "dtau_dv": 2, "mass_matrix": 2},
        "d tau / dq (in the tangent space), d tau / dv and M(q)",
    ),
    "forward_dynamics_derivatives": (
        lambda nv: (forward_dynamics_derivatives, None, None),
        ("q", "v", "tau"), {"da_dq": 2, "da_dv": 2, "mass_matrix_inverse": 2},
        "d a / dq (in the tangent space), d a / dv and M(q)^-1 at a = FD(q, v, tau)",
    ),
}  # fmt: skip
CALLS = tuple(_CALLS)


@functools.cache
def dynamics_op(call: str, n_bodies: int, n_links: int, nq: int, nv: int) -> Op:
    """The op of a `Chain` dynamics call (`CALLS`) for a tree of these sizes. Its kernels
    unroll no loop (a whole tree compiles in a fraction of the time, and runs as fast);
    a configuration weighs a few FKs in the CPU split (the partials, a few RNEAs). The
    partials are not differentiable: differentiating them raises (`NOT_DIFFERENTIABLE`)."""
    functions, names, results, doc = _CALLS[call]
    function, tangent, vjp = functions(nv)
    shapes = {"q": (nq,), "forces": (n_links, 6)}
    operands = {name: shapes.get(name, (nv,)) for name in names}
    operands["bodies"] = Operand((n_bodies, _inertia.BODY_COLUMNS), batch=())
    if "forces" in names:
        operands["frames"] = Operand((n_links, _inertia.FRAME_COLUMNS), batch=())
    links = f"_{n_links}_links" if "forces" in names else ""
    partials = tangent is None
    return define_op(
        f"{call}_{n_bodies}_bodies{links}_{nq}_q_{nv}_v",
        function,
        operands,
        {name: (nv,) * rank for name, rank in results.items()},
        tangent=tangent,
        vjp=vjp,
        differentiable=names,
        work=16.0 * n_bodies * (4 if partials else 1),
        max_unroll=1,
        doc=f"{doc} (xform.kinematics.Chain.{call}).",
        not_differentiable=NOT_DIFFERENTIABLE.format(call=call) if partials else "",
    )


# Why the partials have no derivatives (see docs/dynamics.md): they would be second
# derivatives of the dynamics, in closed form a second-order sweep not written here, and
# Warp's adjoint of the partials' sweeps (their loops unrolled pair by pair) takes minutes
# to compile for a tree of 8 bodies, more than grows with the square of the bodies.
NOT_DIFFERENTIABLE = (
    "xform.kinematics.Chain.{call} is not differentiable (its derivatives would be second "
    "derivatives of the dynamics). Differentiate inverse_dynamics or forward_dynamics "
    "twice instead (torch.func.hessian, jax.hessian, jacfwd(jacrev(...))), or call it on "
    "constants: q.detach() in PyTorch, jax.lax.stop_gradient(q) in JAX"
)
