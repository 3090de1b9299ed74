"""Forward kinematics and Jacobians of a kinematic tree as xform ops: one kernel launch per
call, whatever the number of links. Each thread walks the whole tree for its configuration,
root to leaves, in its own registers and stack. Every loop runs over the links with a
bound fixed by the op's shapes (a path to the root is the links on it, in reverse order),
so that Warp can unroll it when it differentiates these closed forms again (second
derivatives: its adjoint of a loop whose bound is only known at run time would be wrong).

Operands: `q (..., dof)` and the model's constant table `(n_links, 15)` (`_urdf.Model.table`:
one row per link, the joint from its parent), whose leading shape is `()`: it broadcasts
over every configuration and is not differentiated. Helpers take one row at a time (Warp
passes arguments by value). The element functions are generic in the scalar type and in
the sizes (`len` of a Warp vector or matrix is static, `type(x)()` its zero), so one
definition serves every robot; the ops are made once per (n_links, dof), which fixes the
element shapes, and their kernels compiled at a shape's first call.

Derivatives are closed forms, in the language of rigid-body velocities and forces:

- **Tangent** (forward sweep). A joint moving at rate `dθ` about (along) the unit axis `a`,
  seen in the base frame, gives its child link the angular velocity `ω_i = ω_p + a dθ`
  (revolute) and its origin the velocity `v_i = v_p + ω_p × (p_i - p_p)` (+ `a dθ` when
  prismatic). Then `dp_i = v_i` and `dq_i = ½ (0, ω_i) q_i`.
- **VJP** (reverse sweep, the transpose of the above). A position cotangent is a force `f_i`
  at the link's origin, a quaternion cotangent `g_i` a torque `τ_i = ½ vec(g_i q_i*)`.
  Leaves to root: a joint's coordinate receives `τ_i · a` (revolute) or `f_i · a`
  (prismatic), times its mimic multiplier; the parent receives `f_i` and
  `τ_i + (p_i - p_p) × f_i`.
- **Jacobian** `J (6, dof)` of link L, in the base frame (Pinocchio's LOCAL_WORLD_ALIGNED):
  the column of each joint k between the root and L is `[a_k × (p_L - p_k); a_k]`
  (revolute) or `[a_k; 0]` (prismatic), times its multiplier, added into its coordinate's
  column (a mimic joint into its master's). Its tangent differentiates `a_k` (`ω_k × a_k`)
  and the positions (`v_L - v_k`) from the same forward sweep; its VJP turns each column's
  cotangent into torques and forces and runs the same reverse sweep.
"""

from __future__ import annotations

import functools
from typing import Any

import warp as wp

from .._define import define_op
from .._op import Op, Operand
from ..ops.quaternion import quat_conjugate, quat_multiply, vector_part
from . import _urdf

FIXED = wp.constant(_urdf.FIXED)
REVOLUTE = wp.constant(_urdf.REVOLUTE)
PARENT = wp.constant(_urdf.PARENT)
KIND = wp.constant(_urdf.KIND)
INDEX = wp.constant(_urdf.INDEX)
MULTIPLIER = wp.constant(_urdf.MULTIPLIER)
OFFSET = wp.constant(_urdf.OFFSET)
POSITION = wp.constant(_urdf.POSITION)
QUATERNION = wp.constant(_urdf.QUATERNION)
AXIS = wp.constant(_urdf.AXIS)


@wp.func
def row_vector3(row: Any, start: int):
    return wp.vector(row[start], row[start + 1], row[start + 2])


@wp.func
def row_quaternion(row: Any, start: int):
    return wp.vector(row[start], row[start + 1], row[start + 2], row[start + 3])


@wp.func
def rotate(q: Any, v: Any):
    """R(q) v for a unit quaternion q = (w, u): v + w t + u x t with t = 2 u x v (fewer
    products than the sandwich, which also scales by |q|^2: the chain's quaternions are
    products of unit ones)."""
    u = vector_part(q)
    t = type(q[0])(2.0) * wp.cross(u, v)
    return v + q[0] * t + wp.cross(u, t)


@wp.func
def row_parent(row: Any, i: int):
    """The parent of link i: an earlier link (clamped so, whatever the table holds, so
    that a malformed table passed to the op by hand can neither read out of bounds nor
    walk in a circle)."""
    return wp.clamp(wp.int32(row[PARENT]), 0, i - 1)


@wp.func
def row_index(row: Any, coordinates: int):
    """The coordinate that drives the joint (clamped into q, as above)."""
    return wp.clamp(wp.int32(row[INDEX]), 0, coordinates - 1)


@wp.func
def link_index(link: Any, links: int):
    """The requested link's index; the root's (a zero Jacobian) if out of range."""
    i = wp.int32(link)
    if i < 0 or i >= links:
        i = 0
    return i


@wp.func
def joint_motion(q: Any, row: Any):
    """A link's pose in its parent's frame, from its row: the joint's origin, then its
    motion by the joint's value."""
    return joint_placement(row, row[MULTIPLIER] * q[row_index(row, len(q))] + row[OFFSET])


@wp.func
def joint_placement(row: Any, theta: Any):
    """A link's pose in its parent's frame for the joint value theta (unused where the
    joint is fixed): the joint's origin, then its motion by theta."""
    offset = row_vector3(row, POSITION)
    rotation = row_quaternion(row, QUATERNION)
    kind = wp.int32(row[KIND])
    if kind != FIXED:
        axis = row_vector3(row, AXIS)
        if kind == REVOLUTE:
            half = type(theta)(0.5) * theta
            s = wp.sin(half)
            turn = wp.vector(wp.cos(half), s * axis[0], s * axis[1], s * axis[2])
            rotation = quat_multiply(rotation, turn)
        else:
            offset = offset + rotate(rotation, theta * axis)
    return offset, rotation


@wp.func
def link_poses(q: Any, model: Any):
    """Every link's pose in the base frame, parents first (row 0, the root: identity)."""
    positions = wp.matrix(shape=(len(model), 3), dtype=type(q[0]))
    quaternions = wp.matrix(shape=(len(model), 4), dtype=type(q[0]))
    one = type(q[0])(1.0)
    zero = type(q[0])(0.0)
    quaternions[0] = wp.vector(one, zero, zero, zero)
    for i in range(1, len(model)):
        row = model[i]
        parent = row_parent(row, i)
        offset, rotation = joint_motion(q, row)
        frame = quaternions[parent]
        positions[i] = positions[parent] + rotate(frame, offset)
        quaternions[i] = quat_multiply(frame, rotation)
    return positions, quaternions


@wp.func
def joint_direction(row: Any, quaternion: Any):
    """The joint's axis in the base frame, times its mimic multiplier: the motion of its
    link (whose quaternion is given) per unit of its coordinate (the joint's own rotation
    leaves its axis where it is)."""
    return row[MULTIPLIER] * rotate(quaternion, row_vector3(row, AXIS))


@wp.func
def link_velocities(q: Any, model: Any, dq: Any, positions: Any, quaternions: Any):
    """The forward sweep: each link's angular velocity and its origin's velocity, in the
    base frame, for the coordinates' rates dq."""
    angular = type(positions)()
    linear = type(positions)()
    for i in range(1, len(model)):
        row = model[i]
        parent = row_parent(row, i)
        w = angular[parent]
        v = linear[parent] + wp.cross(w, positions[i] - positions[parent])
        kind = wp.int32(row[KIND])
        if kind != FIXED:
            motion = dq[row_index(row, len(q))] * joint_direction(row, quaternions[i])
            if kind == REVOLUTE:
                w = w + motion
            else:
                v = v + motion
        angular[i] = w
        linear[i] = v
    return angular, linear


@wp.func
def pull_back(q: Any, model: Any, positions: Any, quaternions: Any, force: Any, torque: Any):
    """The reverse sweep: the cotangent of q for a force (cotangent of each link's origin
    velocity) and a torque (of its angular velocity) on every link, leaves to root."""
    gradient = type(q)()
    n = len(model)
    for k in range(1, n):
        i = n - k
        row = model[i]
        parent = row_parent(row, i)
        f = force[i]
        t = torque[i]
        kind = wp.int32(row[KIND])
        if kind != FIXED:
            direction = joint_direction(row, quaternions[i])
            index = row_index(row, len(q))
            if kind == REVOLUTE:
                gradient[index] += wp.dot(t, direction)
            else:
                gradient[index] += wp.dot(f, direction)
        force[parent] = force[parent] + f
        torque[parent] = torque[parent] + t + wp.cross(positions[i] - positions[parent], f)
    return gradient


# --- forward kinematics ----------------------------------------------------------------


@wp.func
def forward_kinematics(q: Any, model: Any):
    return link_poses(q, model)


@wp.func
def forward_kinematics_tangent(q: Any, model: Any, dq: Any, d_model: Any):
    positions, quaternions = link_poses(q, model)
    angular, linear = link_velocities(q, model, dq, positions, quaternions)
    d_quaternions = type(quaternions)()
    half = type(q[0])(0.5)
    zero = type(q[0])(0.0)
    for i in range(1, len(model)):
        w = angular[i]
        spin = wp.vector(zero, half * w[0], half * w[1], half * w[2])
        d_quaternions[i] = quat_multiply(spin, quaternions[i])
    return linear, d_quaternions


@wp.func
def forward_kinematics_vjp(q: Any, model: Any, g_positions: Any, g_quaternions: Any):
    positions, quaternions = link_poses(q, model)
    torque = type(positions)()
    half = type(q[0])(0.5)
    for i in range(1, len(model)):
        turning = quat_multiply(g_quaternions[i], quat_conjugate(quaternions[i]))
        torque[i] = half * vector_part(turning)
    gradient = pull_back(q, model, positions, quaternions, g_positions, torque)
    return gradient, type(model)()


# --- Jacobians ---------------------------------------------------------------------------


@wp.func
def column_add(matrix: Any, column: int, top: Any, bottom: Any):
    for r in range(3):
        matrix[r, column] += top[r]
        matrix[r + 3, column] += bottom[r]
    return matrix


@wp.func
def column_top(matrix: Any, column: int):
    return wp.vector(matrix[0, column], matrix[1, column], matrix[2, column])


@wp.func
def column_bottom(matrix: Any, column: int):
    return wp.vector(matrix[3, column], matrix[4, column], matrix[5, column])


@wp.func
def path_joint(q: Any, model: Any, quaternions: Any, i: int, on_path: int):
    """Link i's joint, seen from link `on_path` on a walk from a link to the root, leaves
    first: its kind (FIXED where i is not on the path: it moves nothing there), its
    direction (`joint_direction`), its coordinate, and the walk's next link."""
    kind = FIXED
    direction = wp.vector(length=3, dtype=type(q[0]))
    column = wp.int32(0)
    if i == on_path:
        row = model[i]
        kind = wp.int32(row[KIND])
        if kind != FIXED:
            direction = joint_direction(row, quaternions[i])
            column = row_index(row, len(q))
        on_path = row_parent(row, i)
    return kind, direction, column, on_path


@wp.func
def jacobian(q: Any, model: Any, link: Any):
    positions, quaternions = link_poses(q, model)
    result = wp.matrix(shape=(6, len(q)), dtype=type(q[0]))
    zero = type(positions[0])()
    n = len(model)
    on_path = link_index(link, n)
    target = positions[on_path]
    for step in range(1, n):
        i = n - step
        kind, direction, column, on_path = path_joint(q, model, quaternions, i, on_path)
        if kind == REVOLUTE:
            result = column_add(
                result, column, wp.cross(direction, target - positions[i]), direction
            )
        elif kind != FIXED:
            result = column_add(result, column, direction, zero)
    return result


@wp.func
def jacobian_tangent(q: Any, model: Any, link: Any, dq: Any, d_model: Any, d_link: Any):
    positions, quaternions = link_poses(q, model)
    angular, linear = link_velocities(q, model, dq, positions, quaternions)
    result = wp.matrix(shape=(6, len(q)), dtype=type(q[0]))
    zero = type(positions[0])()
    n = len(model)
    on_path = link_index(link, n)
    target = positions[on_path]
    target_velocity = linear[on_path]
    for step in range(1, n):
        i = n - step
        kind, direction, column, on_path = path_joint(q, model, quaternions, i, on_path)
        turn = wp.cross(angular[i], direction)  # the direction's rate
        if kind == REVOLUTE:
            arm = target - positions[i]
            top = wp.cross(turn, arm) + wp.cross(direction, target_velocity - linear[i])
            result = column_add(result, column, top, turn)
        elif kind != FIXED:
            result = column_add(result, column, turn, zero)
    return result


@wp.func
def jacobian_vjp(q: Any, model: Any, link: Any, g_jacobian: Any):
    positions, quaternions = link_poses(q, model)
    force = type(positions)()
    torque = type(positions)()
    n = len(model)
    last = link_index(link, n)
    on_path = last
    target = positions[last]
    for step in range(1, n):
        i = n - step
        kind, direction, column, on_path = path_joint(q, model, quaternions, i, on_path)
        g_top = column_top(g_jacobian, column)
        if kind == REVOLUTE:
            # <g_top, (w x d) x r + d x (v_L - v_i)> + <g_bottom, w x d>
            arm = target - positions[i]
            g_bottom = column_bottom(g_jacobian, column)
            torque[i] = torque[i] + wp.cross(direction, wp.cross(arm, g_top) + g_bottom)
            push = wp.cross(g_top, direction)
            force[last] = force[last] + push
            force[i] = force[i] - push
        elif kind != FIXED:
            torque[i] = torque[i] + wp.cross(direction, g_top)
    gradient = pull_back(q, model, positions, quaternions, force, torque)
    return gradient, type(model)(), type(link)(0.0)


# --- the ops, one per (n_links, dof) -------------------------------------------------------


def _model_operand(n_links: int) -> Operand:
    """The model table: one for every configuration (leading shape `()`)."""
    return Operand((n_links, _urdf.TABLE_COLUMNS), batch=())


def _work(n_links: int) -> float:
    """A configuration's weight in the CPU split (`Op.work`): measured, Panda's FK (13
    links, ~250 ns a configuration on one core) gains from both cores from ~1,100
    configurations up, where the threads' hand-off (~130 µs) pays (benchmarks/NOTES.md 32)."""
    return 2.0 * n_links


@functools.cache
def forward_kinematics_op(n_links: int, dof: int) -> Op:
    return define_op(
        f"forward_kinematics_{n_links}_links_{dof}_dof",
        forward_kinematics,
        {"q": (dof,), "model": _model_operand(n_links)},
        {"positions": (n_links, 3), "quaternions": (n_links, 4)},
        tangent=forward_kinematics_tangent,
        vjp=forward_kinematics_vjp,
        differentiable=["q"],
        work=_work(n_links),
        doc=f"Every link's pose in the base frame, for a tree of {n_links} links and {dof} "
        "coordinates (xform.kinematics.Chain.forward_kinematics).",
    )


@functools.cache
def jacobian_op(n_links: int, dof: int) -> Op:
    return define_op(
        f"jacobian_{n_links}_links_{dof}_dof",
        jacobian,
        {"q": (dof,), "model": _model_operand(n_links), "link": Operand((), batch=())},
        {"jacobian": (6, dof)},
        tangent=jacobian_tangent,
        vjp=jacobian_vjp,
        differentiable=["q"],
        work=_work(n_links),
        doc=f"The Jacobian [linear; angular] of one link in the base frame, for a tree of "
        f"{n_links} links and {dof} coordinates (xform.kinematics.Chain.jacobian).",
    )
