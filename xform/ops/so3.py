"""SO(3): the exponential and logarithm, axis-angle conversions, hat and vee, the left
and right Jacobians, and geodesic distances, exact at the identity and at 180 degrees.

A tangent is a rotation vector `omega` (axis times angle, radians), `theta = |omega|`.
Every coefficient that is 0/0 at `theta = 0` is a series below `theta = 1` (`_series.py`).
Angles come from `atan2`, never `acos` (whose derivative is infinite at 0 and pi), and
the logarithm divides by the largest quaternion component (Shepperd) for matrices near
180 degrees.

Rodrigues' matrix and the Jacobians are each I + a(x) K + b(x) K^2, K = [omega]x, x =
theta^2: one closed-form tangent and VJP (`skew_quadratic_products`) serves them all,
given a, b and their slopes in x (the series' derivatives below x = 1, closed forms
above).

References for the formulas: Barfoot, "State Estimation for Robotics" (2017), section 7.1;
Sola et al., "A micro Lie theory for state estimation in robotics" (2018).
"""

from typing import Any

import warp as wp

from .._define import define_op
from . import _families as families
from ._forms import at_negated, warp_function
from ._series import (
    half_angle,
    jacobian_inverse_coefficient,
    left_jacobian_coefficients,
    left_jacobian_inverse_coefficients,
    log_scale,
    one_minus_cos_over,
    rodrigues_coefficients,
    sin_over,
    sine_remainder,
)
from .conversions import matrix_to_quat, matrix_to_quat_tangent, matrix_to_quat_vjp
from .quaternion import quat_conjugate, quat_multiply, vector_part


@wp.func
def skew_quadratic(omega: Any, a: Any, b: Any):
    """I + a K + b K^2 for K = [omega]x, with K^2 = omega omega^T - |omega|^2 I."""
    x = wp.dot(omega, omega)
    return identity3(x) + a * hat(omega) + b * (wp.outer(omega, omega) - x * identity3(x))


@wp.func
def skew_quadratic_apply(omega: Any, a: Any, b: Any, v: Any):
    """(I + a K + b K^2) v as v + a (omega x v) + b omega x (omega x v): v enters
    unrounded, so near the identity the result is v and small terms to one rounding, where
    the matrix's diagonal 1 + b K^2_ii is rounded before it multiplies (float32's error
    near the identity, docs/lietorch.md)."""
    u = wp.cross(omega, v)
    return v + a * u + b * wp.cross(omega, u)


@wp.func
def skew_quadratic_tangent(omega: Any, a: Any, a_slope: Any, b: Any, b_slope: Any, d_omega: Any):
    """d(I + a(x) K + b(x) K^2) along d_omega, x = |omega|^2, given a, b and their slopes."""
    x = wp.dot(omega, omega)
    dx = type(x)(2.0) * wp.dot(omega, d_omega)
    k2 = wp.outer(omega, omega) - x * identity3(x)
    dk2 = wp.outer(d_omega, omega) + wp.outer(omega, d_omega) - dx * identity3(x)
    return (dx * a_slope) * hat(omega) + (dx * b_slope) * k2 + a * hat(d_omega) + b * dk2


@wp.func
def skew_quadratic_vjp(omega: Any, a: Any, a_slope: Any, b: Any, b_slope: Any, g: Any):
    """The cotangent of omega from the cotangent g of I + a(x) K + b(x) K^2:
    <g, K> = omega . 2vee(g) and <g, K^2> = omega^T g omega - x tr(g)."""
    x = wp.dot(omega, omega)
    two = type(x)(2.0)
    skew = two * vee(g)
    trace = wp.trace(g)
    g_omega = g @ omega
    x_bar = a_slope * wp.dot(omega, skew) + b_slope * (wp.dot(omega, g_omega) - x * trace)
    return (
        (two * x_bar) * omega
        + a * skew
        + b * (g_omega + wp.transpose(g) @ omega - (two * trace) * omega)
    )


def skew_quadratic_products(name: str, coefficients):
    """The tangent and VJP of `omega -> I + a(x) K + b(x) K^2` (x = |omega|^2, K =
    [omega]x) for `coefficients(x) = (a, a', b, b')`, named `name_tangent` and
    `name_vjp`."""

    def tangent(omega: Any, d_omega: Any):
        a, a_slope, b, b_slope = coefficients(wp.dot(omega, omega))
        return skew_quadratic_tangent(omega, a, a_slope, b, b_slope, d_omega)

    def vjp(omega: Any, g: Any):
        a, a_slope, b, b_slope = coefficients(wp.dot(omega, omega))
        return skew_quadratic_vjp(omega, a, a_slope, b, b_slope, g)

    return warp_function(tangent, f"{name}_tangent"), warp_function(vjp, f"{name}_vjp")


@wp.func
def hat(omega: Any):
    """The skew matrix [omega]x, with [omega]x v = omega x v."""
    zero = type(omega[0])(0.0)
    return wp.matrix(
        zero, -omega[2], omega[1],
        omega[2], zero, -omega[0],
        -omega[1], omega[0], zero,
        shape=(3, 3),
    )  # fmt: skip


@wp.func
def vee(m: Any):
    """The vector of the skew part (m - m^T) / 2 of a 3x3 matrix."""
    half = type(m[0, 0])(0.5)
    return half * wp.vector(m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1])


@wp.func
def hat_vjp(omega: Any, g: Any):
    """The transpose of hat: <g, [d]x> = d . 2 vee(g)."""
    return type(g[0, 0])(2.0) * vee(g)


@wp.func
def hat_tangent(omega: Any, d_omega: Any):
    """Linear: hat(d_omega)."""
    return hat(d_omega)


@wp.func
def vee_tangent(m: Any, dm: Any):
    """Linear: vee(dm)."""
    return vee(dm)


@wp.func
def vee_vjp(m: Any, g: Any):
    """The transpose of vee: <g, vee(d)> = <hat(g) / 2, d>."""
    return type(g[0])(0.5) * hat(g)


@wp.func
def identity3(like: Any):
    return wp.identity(n=3, dtype=type(like))


@wp.func
def quat_exp(omega: Any):
    """(cos(theta / 2), sin(theta / 2) / theta omega), of either sign: smooth in omega
    everywhere (so3_exp is this with w >= 0)."""
    c, s, slope = half_angle(wp.dot(omega, omega))
    return wp.vector(c, s * omega[0], s * omega[1], s * omega[2])


@wp.func
def so3_exp(omega: Any):
    """The unit quaternion of the rotation by |omega| about omega, with w >= 0:
    (cos(theta / 2), sin(theta / 2) / theta omega)."""
    q = quat_exp(omega)
    if q[0] < type(q[0])(0.0):
        q = -q
    return q


@wp.func
def quat_exp_tangent(omega: Any, d_omega: Any):
    # d cos(theta/2) / dx = -(sin(theta/2) / theta) / 4, with dx = 2 omega . d_omega
    c, s, slope = half_angle(wp.dot(omega, omega))
    dx = type(c)(2.0) * wp.dot(omega, d_omega)
    du = (slope * dx) * omega + s * d_omega
    return wp.vector(type(c)(-0.25) * s * dx, du[0], du[1], du[2])


@wp.func
def quat_exp_vjp(omega: Any, g: Any):
    c, s, slope = half_angle(wp.dot(omega, omega))
    gu = vector_part(g)
    dx = type(c)(-0.25) * s * g[0] + slope * wp.dot(gu, omega)  # the cotangent of x
    return s * gu + (type(c)(2.0) * dx) * omega


@wp.func
def so3_exp_tangent(omega: Any, d_omega: Any):
    c, s, slope = half_angle(wp.dot(omega, omega))
    dq = quat_exp_tangent(omega, d_omega)
    if c < type(c)(0.0):
        dq = -dq
    return dq


@wp.func
def so3_exp_vjp(omega: Any, g: Any):
    c, s, slope = half_angle(wp.dot(omega, omega))
    if c < type(c)(0.0):
        g = -g
    return quat_exp_vjp(omega, g)


@wp.func
def log_parts(q: Any):
    """What so3_log and its products share: u = vec(q), the sign of w, and log_scale's k
    and partials at (|u|^2, |w|)."""
    u = vector_part(q)
    sign = type(q[0])(1.0)
    if q[0] < type(q[0])(0.0):
        sign = type(q[0])(-1.0)
    k, k_n2, k_w = log_scale(wp.dot(u, u), sign * q[0])
    return u, sign, k, k_n2, k_w


@wp.func
def so3_log(q: Any):
    """The rotation vector of q / |q| (or of -q: the same rotation), |omega| <= pi:
    2 atan2(|u|, |w|) u / |u| with the sign of w, q = (w, u); for |u| << |w|, the series of
    atan(r) / r. Invariant to the scale and the sign of q."""
    u, sign, k, k_n2, k_w = log_parts(q)
    return (sign * k) * u


@wp.func
def log_push(u: Any, sign: Any, k: Any, k_n2: Any, k_w: Any, dq: Any):
    """so3_log's tangent along dq, from log_parts."""
    du = vector_part(dq)
    dk = k_n2 * type(k)(2.0) * wp.dot(u, du) + k_w * sign * dq[0]
    return sign * (k * du + dk * u)


@wp.func
def log_pull(u: Any, sign: Any, k: Any, k_n2: Any, k_w: Any, g: Any):
    """so3_log's VJP of the cotangent g, from log_parts."""
    gu = sign * wp.dot(g, u)  # the cotangent of k
    u_bar = (sign * k) * g + (type(k)(2.0) * k_n2 * gu) * u
    return wp.vector(sign * k_w * gu, u_bar[0], u_bar[1], u_bar[2])


@wp.func
def so3_log_tangent(q: Any, dq: Any):
    u, sign, k, k_n2, k_w = log_parts(q)
    return log_push(u, sign, k, k_n2, k_w, dq)


@wp.func
def so3_log_vjp(q: Any, g: Any):
    u, sign, k, k_n2, k_w = log_parts(q)
    return log_pull(u, sign, k, k_n2, k_w, g)


@wp.func
def rodrigues(omega: Any):
    """The rotation matrix exp([omega]x) = I + sin(theta)/theta [omega]x
    + (1 - cos(theta))/theta^2 [omega]x^2."""
    x = wp.dot(omega, omega)
    return skew_quadratic(omega, sin_over(x), one_minus_cos_over(x))


rodrigues_tangent, rodrigues_vjp = skew_quadratic_products("rodrigues", rodrigues_coefficients)


@wp.func
def matrix_log(m: Any):
    """The rotation vector of a rotation matrix, through Shepperd's quaternion (accurate
    near 180 degrees, where the matrix's skew part vanishes)."""
    return so3_log(matrix_to_quat(m))


@wp.func
def matrix_log_tangent(m: Any, dm: Any):
    return so3_log_tangent(matrix_to_quat(m), matrix_to_quat_tangent(m, dm))


@wp.func
def matrix_log_vjp(m: Any, g: Any):
    return matrix_to_quat_vjp(m, so3_log_vjp(matrix_to_quat(m), g))


@wp.func
def left_jacobian(omega: Any):
    """J_l = I + (1 - cos(theta))/theta^2 [omega]x + (theta - sin(theta))/theta^3 [omega]x^2."""
    x = wp.dot(omega, omega)
    return skew_quadratic(omega, one_minus_cos_over(x), sine_remainder(x))


@wp.func
def left_jacobian_apply(omega: Any, v: Any):
    """J_l(omega) v."""
    x = wp.dot(omega, omega)
    return skew_quadratic_apply(omega, one_minus_cos_over(x), sine_remainder(x), v)


@wp.func
def left_jacobian_transpose_apply(omega: Any, v: Any):
    """J_l(omega)^T v (K^T = -K)."""
    x = wp.dot(omega, omega)
    return skew_quadratic_apply(omega, -one_minus_cos_over(x), sine_remainder(x), v)


left_jacobian_tangent, left_jacobian_vjp = skew_quadratic_products(
    "left_jacobian", left_jacobian_coefficients
)


@wp.func
def left_jacobian_inverse(omega: Any):
    """J_l^-1 = I - [omega]x / 2
    + (1/theta^2 - (1 + cos(theta))/(2 theta sin(theta))) [omega]x^2."""
    x = wp.dot(omega, omega)
    return skew_quadratic(omega, type(x)(-0.5), jacobian_inverse_coefficient(x))


@wp.func
def left_jacobian_inverse_apply(omega: Any, v: Any):
    """J_l(omega)^-1 v."""
    x = wp.dot(omega, omega)
    return skew_quadratic_apply(omega, type(x)(-0.5), jacobian_inverse_coefficient(x), v)


left_jacobian_inverse_tangent, left_jacobian_inverse_vjp = skew_quadratic_products(
    "left_jacobian_inverse", left_jacobian_inverse_coefficients
)

# J_r(omega) = J_l(-omega), and so for the inverses.
right_jacobian, right_jacobian_tangent, right_jacobian_vjp = at_negated(
    "right_jacobian", left_jacobian, left_jacobian_tangent, left_jacobian_vjp
)
right_jacobian_inverse, right_jacobian_inverse_tangent, right_jacobian_inverse_vjp = at_negated(
    "right_jacobian_inverse",
    left_jacobian_inverse,
    left_jacobian_inverse_tangent,
    left_jacobian_inverse_vjp,
)


@wp.func
def angle_of(sine: Any, cosine: Any):
    """atan2(|sine|, cosine) for a vector `sine` and a scalar `cosine`: the angle, with a
    zero gradient where `sine` vanishes (the angle is not differentiable there, and the
    derivative of |sine| would divide by zero)."""
    s2 = wp.dot(sine, sine)
    # atan2 maps an infinite argument to a finite angle; (x - x) is 0 for a finite x and
    # NaN otherwise, so that NaN and Inf in the input still show in the result.
    poison = (s2 - s2) + (cosine - cosine)
    if s2 == type(s2)(0.0):
        return wp.atan2(s2, cosine) + poison
    return wp.atan2(wp.sqrt(s2), cosine) + poison


@wp.func
def atan2_tangent(y: Any, x: Any, dy: Any, dx: Any):
    """d atan2(y, x); zero where x = y = 0, as Warp's adjoint."""
    d = x * x + y * y
    if d > type(d)(0.0):
        return (x * dy - y * dx) / d
    return type(d)(0.0)


@wp.func
def angle_of_tangent(sine: Any, cosine: Any, d_sine: Any, d_cosine: Any):
    """d angle_of(sine, cosine), through the same branches."""
    s2 = wp.dot(sine, sine)
    ds2 = type(s2)(2.0) * wp.dot(sine, d_sine)
    if s2 == type(s2)(0.0):
        return atan2_tangent(s2, cosine, ds2, d_cosine)
    n = wp.sqrt(s2)
    return atan2_tangent(n, cosine, ds2 / (type(s2)(2.0) * n), d_cosine)


@wp.func
def rotation_angle(q: Any):
    """The angle of the rotation q, 2 atan2(|u|, |w|), in [0, pi]."""
    return type(q[0])(2.0) * angle_of(vector_part(q), wp.abs(q[0]))


@wp.func
def rotation_angle_tangent(q: Any, dq: Any):
    sign = type(q[0])(1.0)
    if q[0] < type(q[0])(0.0):  # d|w| = sign(w) dw, +1 at 0 (as Warp's adjoint)
        sign = -sign
    return type(q[0])(2.0) * angle_of_tangent(
        vector_part(q), wp.abs(q[0]), vector_part(dq), sign * dq[0]
    )


@wp.func
def quaternion_geodesic_distance(q1: Any, q2: Any):
    return rotation_angle(quat_multiply(quat_conjugate(q1), q2))


@wp.func
def quaternion_geodesic_distance_tangent(q1: Any, q2: Any, dq1: Any, dq2: Any):
    relative = quat_multiply(quat_conjugate(q1), q2)
    d_relative = quat_multiply(quat_conjugate(dq1), q2) + quat_multiply(quat_conjugate(q1), dq2)
    return rotation_angle_tangent(relative, d_relative)


@wp.func
def matrix_geodesic_distance(m1: Any, m2: Any):
    """The angle of m1^T m2: atan2(|vee(m)|, (trace(m) - 1) / 2) for m = m1^T m2."""
    m = wp.transpose(m1) @ m2
    half = type(m[0, 0])(0.5)
    return angle_of(vee(m), half * (wp.trace(m) - type(m[0, 0])(1.0)))


@wp.func
def matrix_geodesic_distance_tangent(m1: Any, m2: Any, dm1: Any, dm2: Any):
    m = wp.transpose(m1) @ m2
    dm = wp.transpose(dm1) @ m2 + wp.transpose(m1) @ dm2
    half = type(m[0, 0])(0.5)
    cosine = half * (wp.trace(m) - type(m[0, 0])(1.0))
    return angle_of_tangent(vee(m), cosine, vee(dm), half * wp.trace(dm))


_TANGENT = {"omega": (3,)}
_QUATERNION = {"quaternion": (4,)}

SO3_EXP = define_op(
    "so3_exp",
    so3_exp,
    operands=_TANGENT,
    results={"out_quaternion": (4,)},
    tangent=so3_exp_tangent,
    vjp=so3_exp_vjp,
    doc="exp(omega): (cos(theta / 2), sin(theta / 2) omega / theta), theta = |omega|, with the "
    "sign that makes w >= 0; a Taylor series near theta = 0.",
    family=families.SO3,
)
SO3_LOG = define_op(
    "so3_log",
    so3_log,
    operands=_QUATERNION,
    results={"out_omega": (3,)},
    tangent=so3_log_tangent,
    vjp=so3_log_vjp,
    doc="log(q): 2 atan2(|u|, |w|) u / |u| with the sign of w, q = (w, u), |omega| <= pi; "
    "invariant to the scale and the sign of q: log(q) = log(q / |q|) = log(-q).",
    family=families.SO3,
)
AXIS_ANGLE_TO_QUATERNION = define_op(
    "axis_angle_to_quaternion",
    so3_exp,
    operands={"axis_angle": (3,)},
    results={"out_quaternion": (4,)},
    tangent=so3_exp_tangent,
    vjp=so3_exp_vjp,
    doc="The unit quaternion of the rotation vector (axis times angle), w >= 0: so3_exp.",
    family=families.SO3,
)
QUATERNION_TO_AXIS_ANGLE = define_op(
    "quaternion_to_axis_angle",
    so3_log,
    operands=_QUATERNION,
    results={"out_axis_angle": (3,)},
    tangent=so3_log_tangent,
    vjp=so3_log_vjp,
    doc="The rotation vector (axis times angle, |angle| <= pi) of q / |q|: so3_log.",
    family=families.SO3,
)
AXIS_ANGLE_TO_MATRIX = define_op(
    "axis_angle_to_matrix",
    rodrigues,
    operands={"axis_angle": (3,)},
    results={"out_matrix": (3, 3)},
    tangent=rodrigues_tangent,
    vjp=rodrigues_vjp,
    doc="Rodrigues: I + sin(theta)/theta [omega]x + (1 - cos(theta))/theta^2 [omega]x^2.",
    family=families.SO3,
)
MATRIX_TO_AXIS_ANGLE = define_op(
    "matrix_to_axis_angle",
    matrix_log,
    operands={"matrix": (3, 3)},
    results={"out_axis_angle": (3,)},
    tangent=matrix_log_tangent,
    vjp=matrix_log_vjp,
    doc="The rotation vector of a rotation matrix, |angle| <= pi: so3_log of Shepperd's "
    "quaternion (accurate at and near 180 degrees).",
    family=families.SO3,
)
SO3_HAT = define_op(
    "so3_hat",
    hat,
    operands=_TANGENT,
    results={"out_matrix": (3, 3)},
    tangent=hat_tangent,
    vjp=hat_vjp,
    doc="The skew matrix [omega]x: [[0, -z, y], [z, 0, -x], [-y, x, 0]].",
    family=families.SO3,
)
SO3_VEE = define_op(
    "so3_vee",
    vee,
    operands={"matrix": (3, 3)},
    results={"out_omega": (3,)},
    tangent=vee_tangent,
    vjp=vee_vjp,
    doc="The vector of the skew part (M - M^T) / 2.",
    family=families.SO3,
)
SO3_LEFT_JACOBIAN = define_op(
    "so3_left_jacobian",
    left_jacobian,
    operands=_TANGENT,
    results={"out_jacobian": (3, 3)},
    tangent=left_jacobian_tangent,
    vjp=left_jacobian_vjp,
    doc="J_l(omega) = I + (1 - cos(theta))/theta^2 [omega]x "
    "+ (theta - sin(theta))/theta^3 [omega]x^2; J_r(omega) = J_l(-omega).",
    family=families.SO3,
)
SO3_LEFT_JACOBIAN_INVERSE = define_op(
    "so3_left_jacobian_inverse",
    left_jacobian_inverse,
    operands=_TANGENT,
    results={"out_jacobian": (3, 3)},
    tangent=left_jacobian_inverse_tangent,
    vjp=left_jacobian_inverse_vjp,
    doc="J_l(omega)^-1 = I - [omega]x / 2 + (1/theta^2 - (1 + cos(theta))/(2 theta "
    "sin(theta))) [omega]x^2, for |omega| < 2 pi.",
    family=families.SO3,
)
SO3_RIGHT_JACOBIAN = define_op(
    "so3_right_jacobian",
    right_jacobian,
    operands=_TANGENT,
    results={"out_jacobian": (3, 3)},
    tangent=right_jacobian_tangent,
    vjp=right_jacobian_vjp,
    doc="J_r(omega) = J_l(-omega).",
    family=families.SO3,
)
SO3_RIGHT_JACOBIAN_INVERSE = define_op(
    "so3_right_jacobian_inverse",
    right_jacobian_inverse,
    operands=_TANGENT,
    results={"out_jacobian": (3, 3)},
    tangent=right_jacobian_inverse_tangent,
    vjp=right_jacobian_inverse_vjp,
    doc="J_r(omega)^-1 = J_l(-omega)^-1, for |omega| < 2 pi.",
    family=families.SO3,
)
ROTATION_ANGLE = define_op(
    "rotation_angle",
    rotation_angle,
    operands=_QUATERNION,
    results={"out_angle": ()},
    tangent=rotation_angle_tangent,
    doc="The angle of the rotation q, 2 atan2(|u|, |w|) for q = (w, u), in [0, pi]; its "
    "gradient is zero at the identity, where the angle is not differentiable.",
    family=families.DISTANCES,
)
QUATERNION_GEODESIC_DISTANCE = define_op(
    "quaternion_geodesic_distance",
    quaternion_geodesic_distance,
    operands={"quaternion": (4,), "quaternion2": (4,)},
    results={"out_angle": ()},
    tangent=quaternion_geodesic_distance_tangent,
    doc="The angle of q1* q2, in [0, pi]: rotation_angle of the relative rotation.",
    family=families.DISTANCES,
)
MATRIX_GEODESIC_DISTANCE = define_op(
    "matrix_geodesic_distance",
    matrix_geodesic_distance,
    operands={"matrix": (3, 3), "matrix2": (3, 3)},
    results={"out_angle": ()},
    tangent=matrix_geodesic_distance_tangent,
    doc="The angle of R1^T R2, atan2(|vee(M)|, (trace(M) - 1) / 2) for M = R1^T R2, in "
    "[0, pi] (never acos); its gradient is zero where the angle is 0 or pi.",
    family=families.DISTANCES,
)
