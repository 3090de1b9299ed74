"""Conversions between rotation representations: quaternions and rotation matrices."""

from typing import Any

import warp as wp

from .._define import define_op
from . import _families as families
from .quaternion import (
    normalize_tangent,
    quat_conjugate,
    quat_matrix_vjp,
    quat_multiply,
    quat_normalize,
    quat_normalize_tangent,
    quat_to_matrix,
    quat_to_matrix_tangent,
    vector_part,
)


@wp.func
def shepperd_branch(m: Any):
    """Which of 4w^2, 4x^2, 4y^2, 4z^2 (read off the diagonal) is largest: dividing by it
    keeps the conversion accurate near 180 degrees."""
    t0 = m[0, 0] + m[1, 1] + m[2, 2]
    t1 = m[0, 0] - m[1, 1] - m[2, 2]
    t2 = -m[0, 0] + m[1, 1] - m[2, 2]
    t3 = -m[0, 0] - m[1, 1] + m[2, 2]
    branch = int(3)  # noqa: UP018 -- a typed, mutable Warp local
    if t0 >= t1 and t0 >= t2 and t0 >= t3:
        branch = 0
    elif t1 >= t2 and t1 >= t3:
        branch = 1
    elif t2 >= t3:
        branch = 2
    return branch


@wp.func
def shepperd_terms(m: Any, branch: int, one: Any):
    """For the chosen branch, t = 4 c^2 (c the largest component) and the vector 4 c q,
    both affine in m; with one = 0 they are the linear parts, i.e. their tangents."""
    wx = m[2, 1] - m[1, 2]
    wy = m[0, 2] - m[2, 0]
    wz = m[1, 0] - m[0, 1]
    xy = m[0, 1] + m[1, 0]
    xz = m[0, 2] + m[2, 0]
    yz = m[1, 2] + m[2, 1]
    t = one + m[0, 0] + m[1, 1] + m[2, 2]
    v = wp.vector(t, wx, wy, wz)
    if branch == 1:
        t = one + m[0, 0] - m[1, 1] - m[2, 2]
        v = wp.vector(wx, t, xy, xz)
    elif branch == 2:
        t = one - m[0, 0] + m[1, 1] - m[2, 2]
        v = wp.vector(wy, xy, t, yz)
    elif branch == 3:
        t = one - m[0, 0] - m[1, 1] + m[2, 2]
        v = wp.vector(wz, xz, yz, t)
    return t, v


@wp.func
def matrix_to_quat(m: Any):
    """Shepperd's method, q = v / (2 sqrt(t)), with the sign chosen so that w >= 0."""
    half = type(m[0, 0])(0.5)
    t, v = shepperd_terms(m, shepperd_branch(m), type(m[0, 0])(1.0))
    q = (half / wp.sqrt(t)) * v
    if q[0] < type(q[0])(0.0):
        q = -q
    return q


@wp.func
def matrix_to_quat_tangent(m: Any, dm: Any):
    half = type(m[0, 0])(0.5)
    branch = shepperd_branch(m)
    t, v = shepperd_terms(m, branch, type(m[0, 0])(1.0))
    dt, dv = shepperd_terms(dm, branch, type(m[0, 0])(0.0))
    scale = half / wp.sqrt(t)
    dq = scale * (dv - (dt * half / t) * v)
    if scale * v[0] < type(t)(0.0):
        dq = -dq
    return dq


@wp.func
def shepperd_terms_vjp(branch: int, t_bar: Any, v_bar: Any):
    """The transpose of shepperd_terms' linear part: the cotangent of m for those of t
    and v. Each term is a signed sum of two entries of m (or of the diagonal)."""
    zero = type(t_bar)(0.0)
    wx = zero
    wy = zero
    wz = zero
    xy = zero
    xz = zero
    yz = zero
    diagonal = wp.vector(zero, zero, zero)
    if branch == 0:
        a = t_bar + v_bar[0]
        wx = v_bar[1]
        wy = v_bar[2]
        wz = v_bar[3]
        diagonal = wp.vector(a, a, a)
    elif branch == 1:
        a = t_bar + v_bar[1]
        wx = v_bar[0]
        xy = v_bar[2]
        xz = v_bar[3]
        diagonal = wp.vector(a, -a, -a)
    elif branch == 2:
        a = t_bar + v_bar[2]
        wy = v_bar[0]
        xy = v_bar[1]
        yz = v_bar[3]
        diagonal = wp.vector(-a, a, -a)
    else:
        a = t_bar + v_bar[3]
        wz = v_bar[0]
        xz = v_bar[1]
        yz = v_bar[2]
        diagonal = wp.vector(-a, -a, a)
    return wp.matrix(
        diagonal[0], xy - wz, xz + wy,
        xy + wz, diagonal[1], yz - wx,
        xz - wy, yz + wx, diagonal[2],
        shape=(3, 3),
    )  # fmt: skip


@wp.func
def matrix_to_quat_vjp(m: Any, g: Any):
    half = type(m[0, 0])(0.5)
    branch = shepperd_branch(m)
    t, v = shepperd_terms(m, branch, type(m[0, 0])(1.0))
    scale = half / wp.sqrt(t)
    signed = g
    if scale * v[0] < type(t)(0.0):
        signed = -g
    return shepperd_terms_vjp(branch, -(scale * half / t) * wp.dot(v, signed), scale * signed)


QUATERNION_TO_MATRIX = define_op(
    "quaternion_to_matrix",
    quat_to_matrix,
    operands={"quaternion": (4,)},
    results={"out_matrix": (3, 3)},
    tangent=quat_to_matrix_tangent,
    vjp=quat_matrix_vjp,
    doc="The matrix of v -> q (0, v) q*: entries are quadratic in q, and equal |q|^2 "
    "times the rotation matrix of q / |q|.",
    result_buffers=("out_mat",),
    gradient_buffers=("adj_quaternion",),
    family=families.CONVERSIONS,
)

_SHEPPERD = (
    "Shepperd's method: the largest of 4w^2 = 1 + m00 + m11 + m22 (and likewise "
    "4x^2, 4y^2, 4z^2) gives one component, the off-diagonal sums and differences "
    "the others; the sign is chosen so that w >= 0."
)

MATRIX_TO_QUATERNION = define_op(
    "matrix_to_quaternion",
    matrix_to_quat,
    operands={"matrix": (3, 3)},
    results={"out_quaternion": (4,)},
    tangent=matrix_to_quat_tangent,
    vjp=matrix_to_quat_vjp,
    doc=_SHEPPERD,
    result_buffers=("out_quat",),
    gradient_buffers=("adj_matrix",),
    family=families.CONVERSIONS,
)

CUDA_MATRIX_TO_QUATERNION = define_op(
    "cuda_matrix_to_quaternion",
    matrix_to_quat,
    operands={"matrix": (3, 3)},
    results={"out_quaternion": (4,)},
    differentiable=(),
    doc="As matrix_to_quaternion; not differentiable.",
    family=families.CONVERSIONS,
)


@wp.func
def rows_to_matrix(a: Any, b: Any, c: Any):
    return wp.matrix(a[0], a[1], a[2], b[0], b[1], b[2], c[0], c[1], c[2], shape=(3, 3))


@wp.func
def gram_schmidt(d6: Any):
    """The 6D representation's two rows, a / |a| and the unit part of b orthogonal to it,
    with what the products reuse: 1 / |a|, the component of b along the first, and
    1 / |b - along first|."""
    a = wp.vector(d6[0], d6[1], d6[2])
    b = wp.vector(d6[3], d6[4], d6[5])
    one = type(d6[0])(1.0)
    inverse_a = one / wp.length(a)
    first = a * inverse_a
    along = wp.dot(first, b)
    u = b - along * first
    inverse_u = one / wp.length(u)
    return first, u * inverse_u, inverse_a, along, inverse_u


@wp.func
def rotation_6d_to_matrix(d6: Any):
    """Gram-Schmidt of the two 3-vectors: they become the first two rows."""
    first, second, inverse_a, along, inverse_u = gram_schmidt(d6)
    return rows_to_matrix(first, second, wp.cross(first, second))


@wp.func
def rotation_6d_to_matrix_tangent(d6: Any, d_d6: Any):
    first, second, inverse_a, along, inverse_u = gram_schmidt(d6)
    d_first = normalize_tangent(first, inverse_a, wp.vector(d_d6[0], d_d6[1], d_d6[2]))
    b = wp.vector(d6[3], d6[4], d6[5])
    d_b = wp.vector(d_d6[3], d_d6[4], d_d6[5])
    d_u = d_b - (wp.dot(d_first, b) + wp.dot(first, d_b)) * first - along * d_first
    d_second = normalize_tangent(second, inverse_u, d_u)
    d_third = wp.cross(d_first, second) + wp.cross(first, d_second)
    return rows_to_matrix(d_first, d_second, d_third)


@wp.func
def rotation_6d_to_matrix_vjp(d6: Any, g: Any):
    # <g2, first x second> = <second x g2, first> = <g2 x first, second>.
    first, second, inverse_a, along, inverse_u = gram_schmidt(d6)
    u_bar = normalize_tangent(second, inverse_u, g[1] + wp.cross(g[2], first))
    along_bar = -wp.dot(u_bar, first)
    b = wp.vector(d6[3], d6[4], d6[5])
    first_bar = g[0] + wp.cross(second, g[2]) - along * u_bar + along_bar * b
    a_bar = normalize_tangent(first, inverse_a, first_bar)
    b_bar = u_bar + along_bar * first
    return wp.vector(a_bar[0], a_bar[1], a_bar[2], b_bar[0], b_bar[1], b_bar[2])


@wp.func
def matrix_to_rotation_6d(m: Any):
    return wp.vector(m[0, 0], m[0, 1], m[0, 2], m[1, 0], m[1, 1], m[1, 2])


@wp.func
def matrix_to_rotation_6d_tangent(m: Any, dm: Any):
    """Linear: the first two rows of dm."""
    return matrix_to_rotation_6d(dm)


@wp.func
def matrix_to_rotation_6d_vjp(m: Any, g: Any):
    """The transpose of taking the first two rows: g in them, zeros in the third."""
    zero = type(g[0])(0.0)
    return wp.matrix(
        g[0], g[1], g[2], g[3], g[4], g[5], zero, zero, zero, shape=(3, 3)
    )  # fmt: skip


@wp.func
def rotation_block(m: Any):
    """The top-left 3x3 block of a 4x4 matrix."""
    return wp.matrix(
        m[0, 0], m[0, 1], m[0, 2], m[1, 0], m[1, 1], m[1, 2], m[2, 0], m[2, 1], m[2, 2],
        shape=(3, 3),
    )  # fmt: skip


@wp.func
def matrix_to_pose_tangent(m: Any, dm: Any):
    return (
        wp.vector(dm[0, 3], dm[1, 3], dm[2, 3]),
        matrix_to_quat_tangent(rotation_block(m), rotation_block(dm)),
    )


@wp.func
def matrix_to_pose_vjp(m: Any, g_position: Any, g_quaternion: Any):
    r = matrix_to_quat_vjp(rotation_block(m), g_quaternion)
    zero = type(g_position[0])(0.0)
    return wp.matrix(
        r[0, 0], r[0, 1], r[0, 2], g_position[0],
        r[1, 0], r[1, 1], r[1, 2], g_position[1],
        r[2, 0], r[2, 1], r[2, 2], g_position[2],
        zero, zero, zero, zero,
        shape=(4, 4),
    )  # fmt: skip


@wp.func
def matrix_to_pose(m: Any):
    return wp.vector(m[0, 3], m[1, 3], m[2, 3]), matrix_to_quat(rotation_block(m))


@wp.func
def rate_to_angular_velocity(q: Any, dq: Any):
    """2 vec(q* dq): for a unit q moving at dq, the angular velocity in q's own frame."""
    return type(q[0])(2.0) * vector_part(quat_multiply(quat_conjugate(q), dq))


@wp.func
def rate_to_angular_velocity_tangent(q: Any, dq: Any, d_q: Any, d_dq: Any):
    """Bilinear in (q, dq)."""
    return rate_to_angular_velocity(d_q, dq) + rate_to_angular_velocity(q, d_dq)


@wp.func
def rate_to_axis_angle_rate(quaternion_rate: Any, current_quaternion: Any):
    """cuRobo's 0.5 vec(q* dq) for q the current quaternion normalised: the transpose of
    the Jacobian of q exp(delta) in delta at 0, which maps a quaternion's gradient to the
    rotation vector's."""
    q = quat_normalize(current_quaternion)
    half = type(q[0])(0.5)
    return half * vector_part(quat_multiply(quat_conjugate(q), quaternion_rate))


@wp.func
def rate_to_axis_angle_rate_tangent(
    quaternion_rate: Any, current_quaternion: Any, d_rate: Any, d_current: Any
):
    q = quat_normalize(current_quaternion)
    dq = quat_normalize_tangent(current_quaternion, d_current)
    half = type(q[0])(0.5)
    conjugate = quat_conjugate(q)
    return half * vector_part(
        quat_multiply(quat_conjugate(dq), quaternion_rate) + quat_multiply(conjugate, d_rate)
    )


ROTATION_6D_TO_MATRIX = define_op(
    "rotation_6d_to_matrix",
    rotation_6d_to_matrix,
    operands={"d6": (6,)},
    results={"out_matrix": (3, 3)},
    tangent=rotation_6d_to_matrix_tangent,
    vjp=rotation_6d_to_matrix_vjp,
    doc="Zhou et al.'s 6D representation: Gram-Schmidt of a = d6[:3] and b = d6[3:], which "
    "become the first two rows (pytorch3d's convention); the third row is their cross "
    "product.",
    family=families.UTILITIES,
)
MATRIX_TO_ROTATION_6D = define_op(
    "matrix_to_rotation_6d",
    matrix_to_rotation_6d,
    operands={"matrix": (3, 3)},
    results={"out_d6": (6,)},
    tangent=matrix_to_rotation_6d_tangent,
    vjp=matrix_to_rotation_6d_vjp,
    doc="The first two rows of the matrix (pytorch3d's convention).",
    family=families.UTILITIES,
)
MATRIX_TO_POSE = define_op(
    "matrix_to_pose",
    matrix_to_pose,
    operands={"matrix": (4, 4)},
    results={"out_position": (3,), "out_quaternion": (4,)},
    tangent=matrix_to_pose_tangent,
    vjp=matrix_to_pose_vjp,
    doc="(the top-right column, Shepperd's quaternion of the top-left block, w >= 0): the "
    "inverse of pose_to_matrix for rigid input.",
    family=families.UTILITIES,
)
QUATERNION_RATE_TO_AXIS_ANGLE_RATE = define_op(
    "quaternion_rate_to_axis_angle_rate",
    rate_to_axis_angle_rate,
    operands={"quaternion_rate": (4,), "current_quaternion": (4,)},
    results={"out_axis_angle_rate": (3,)},
    tangent=rate_to_axis_angle_rate_tangent,
    doc="cuRobo's name, argument order and values: 0.5 vec(q* dq) for q the current "
    "quaternion normalised, the transpose of the Jacobian of q exp(delta) in the rotation "
    "vector delta at 0, which maps a quaternion's gradient dq to the rotation vector's. "
    "(The angular velocity of q moving at dq is quaternion_rate_to_angular_velocity.)",
    family=families.UTILITIES,
)
QUATERNION_RATE_TO_ANGULAR_VELOCITY = define_op(
    "quaternion_rate_to_angular_velocity",
    rate_to_angular_velocity,
    operands={"quaternion": (4,), "quaternion_rate": (4,)},
    results={"out_angular_velocity": (3,)},
    tangent=rate_to_angular_velocity_tangent,
    doc="2 vec(q* dq): for a unit quaternion q moving at dq, the angular velocity in q's frame.",
    family=families.UTILITIES,
)
