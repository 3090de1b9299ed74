"""SE(3): the exponential and logarithm of poses, hat and vee, the adjoint, and the left
and right Jacobians.

A tangent is `xi = [rho, omega]`, translation part first (as jaxlie, PyPose, LieTorch).
`exp(xi)` is the pose `(J_l(omega) rho, so3_exp(omega))`, and the left Jacobian is
`[[J_l(omega), Q(rho, omega)], [0, J_l(omega)]]` (Barfoot, "State Estimation for
Robotics", 2017, eq. 7.86, with the same series and closed forms as `so3.py`).
"""

from typing import Any

import warp as wp

from .._define import define_op
from . import _families as families
from ._forms import at_negated
from ._series import (
    COSINE_REMAINDER_SERIES,
    SERIES_BELOW,
    SINE_REMAINDER2_SERIES,
    SINE_REMAINDER_SERIES,
    cosine_remainder,
    horner,
    horner_slope,
    left_jacobian_coefficients,
    left_jacobian_inverse_coefficients,
    one_minus_cos_over,
    sine_remainder,
    sine_remainder2,
)
from .quaternion import quat_to_matrix, quat_to_matrix_tangent
from .so3 import (
    hat,
    hat_vjp,
    left_jacobian,
    left_jacobian_apply,
    left_jacobian_inverse,
    left_jacobian_inverse_apply,
    left_jacobian_inverse_tangent,
    left_jacobian_tangent,
    log_parts,
    log_pull,
    log_push,
    skew_quadratic,
    skew_quadratic_tangent,
    skew_quadratic_vjp,
    so3_exp,
    so3_exp_tangent,
    so3_exp_vjp,
    so3_log,
)
from .transforms import homogeneous


@wp.func
def rho_of(xi: Any):
    return wp.vector(xi[0], xi[1], xi[2])


@wp.func
def omega_of(xi: Any):
    return wp.vector(xi[3], xi[4], xi[5])


@wp.func
def twist(rho: Any, omega: Any):
    return wp.vector(rho[0], rho[1], rho[2], omega[0], omega[1], omega[2])


@wp.func
def blocks(a: Any, b: Any, c: Any, d: Any):
    """The 6x6 matrix [[a, b], [c, d]] of four 3x3 blocks."""
    return wp.matrix(
        a[0, 0], a[0, 1], a[0, 2], b[0, 0], b[0, 1], b[0, 2],
        a[1, 0], a[1, 1], a[1, 2], b[1, 0], b[1, 1], b[1, 2],
        a[2, 0], a[2, 1], a[2, 2], b[2, 0], b[2, 1], b[2, 2],
        c[0, 0], c[0, 1], c[0, 2], d[0, 0], d[0, 1], d[0, 2],
        c[1, 0], c[1, 1], c[1, 2], d[1, 0], d[1, 1], d[1, 2],
        c[2, 0], c[2, 1], c[2, 2], d[2, 0], d[2, 1], d[2, 2],
        shape=(6, 6),
    )  # fmt: skip


@wp.func
def se3_exp(xi: Any):
    omega = omega_of(xi)
    return left_jacobian_apply(omega, rho_of(xi)), so3_exp(omega)


@wp.func
def se3_exp_tangent(xi: Any, d_xi: Any):
    omega = omega_of(xi)
    d_omega = omega_of(d_xi)
    a, a_slope, b, b_slope = left_jacobian_coefficients(wp.dot(omega, omega))
    d_jacobian = skew_quadratic_tangent(omega, a, a_slope, b, b_slope, d_omega)
    d_position = d_jacobian @ rho_of(xi) + skew_quadratic(omega, a, b) @ rho_of(d_xi)
    return d_position, so3_exp_tangent(omega, d_omega)


@wp.func
def se3_exp_vjp(xi: Any, g_position: Any, g_quaternion: Any):
    # <g, J rho> = <g rho^T, J>: the Jacobian's cotangent is an outer product.
    omega = omega_of(xi)
    a, a_slope, b, b_slope = left_jacobian_coefficients(wp.dot(omega, omega))
    g_jacobian = wp.outer(g_position, rho_of(xi))
    omega_bar = skew_quadratic_vjp(omega, a, a_slope, b, b_slope, g_jacobian)
    omega_bar = omega_bar + so3_exp_vjp(omega, g_quaternion)
    return twist(wp.transpose(skew_quadratic(omega, a, b)) @ g_position, omega_bar)


@wp.func
def se3_log(position: Any, quaternion: Any):
    omega = so3_log(quaternion)
    return twist(left_jacobian_inverse_apply(omega, position), omega)


@wp.func
def se3_log_tangent(position: Any, quaternion: Any, d_position: Any, d_quaternion: Any):
    u, sign, k, k_n2, k_w = log_parts(quaternion)
    omega = (sign * k) * u
    d_omega = log_push(u, sign, k, k_n2, k_w, d_quaternion)
    a, a_slope, b, b_slope = left_jacobian_inverse_coefficients(wp.dot(omega, omega))
    d_inverse = skew_quadratic_tangent(omega, a, a_slope, b, b_slope, d_omega)
    return twist(d_inverse @ position + skew_quadratic(omega, a, b) @ d_position, d_omega)


@wp.func
def se3_log_vjp(position: Any, quaternion: Any, g: Any):
    u, sign, k, k_n2, k_w = log_parts(quaternion)
    omega = (sign * k) * u
    a, a_slope, b, b_slope = left_jacobian_inverse_coefficients(wp.dot(omega, omega))
    g_rho = rho_of(g)
    g_inverse = wp.outer(g_rho, position)
    omega_bar = omega_of(g) + skew_quadratic_vjp(omega, a, a_slope, b, b_slope, g_inverse)
    position_bar = wp.transpose(skew_quadratic(omega, a, b)) @ g_rho
    return position_bar, log_pull(u, sign, k, k_n2, k_w, omega_bar)


@wp.func
def se3_hat(xi: Any):
    """[[ [omega]x, rho ], [0, 0]]."""
    return homogeneous(hat(omega_of(xi)), rho_of(xi), type(xi[0])(0.0))


@wp.func
def se3_vee(m: Any):
    return wp.vector(
        m[0, 3],
        m[1, 3],
        m[2, 3],
        type(m[0, 0])(0.5) * (m[2, 1] - m[1, 2]),
        type(m[0, 0])(0.5) * (m[0, 2] - m[2, 0]),
        type(m[0, 0])(0.5) * (m[1, 0] - m[0, 1]),
    )


@wp.func
def se3_hat_tangent(xi: Any, d_xi: Any):
    """Linear: se3_hat(d_xi)."""
    return se3_hat(d_xi)


@wp.func
def se3_hat_vjp(xi: Any, g: Any):
    return twist(wp.vector(g[0, 3], g[1, 3], g[2, 3]), hat_vjp(omega_of(xi), top_left(g)))


@wp.func
def se3_vee_tangent(m: Any, dm: Any):
    """Linear: se3_vee(dm)."""
    return se3_vee(dm)


@wp.func
def se3_vee_vjp(m: Any, g: Any):
    """The transpose of se3_vee: rho's cotangent in the last column, omega's as a skew
    matrix (the transpose of vee)."""
    return homogeneous(type(g[0])(0.5) * hat(omega_of(g)), rho_of(g), type(g[0])(0.0))


@wp.func
def top_left(m: Any):
    return wp.matrix(
        m[0, 0], m[0, 1], m[0, 2], m[1, 0], m[1, 1], m[1, 2], m[2, 0], m[2, 1], m[2, 2],
        shape=(3, 3),
    )  # fmt: skip


@wp.func
def se3_adjoint(position: Any, quaternion: Any):
    """Ad_T = [[R, [t]x R], [0, R]], so that T exp(xi) T^-1 = exp(Ad_T xi)."""
    r = quat_to_matrix(quaternion)
    zero = r * type(r[0, 0])(0.0)
    return blocks(r, hat(position) @ r, zero, r)


@wp.func
def se3_adjoint_tangent(position: Any, quaternion: Any, d_position: Any, d_quaternion: Any):
    r = quat_to_matrix(quaternion)
    dr = quat_to_matrix_tangent(quaternion, d_quaternion)
    zero = r * type(r[0, 0])(0.0)
    return blocks(dr, hat(d_position) @ r + hat(position) @ dr, zero, dr)


@wp.func
def translation_jacobian(rho: Any, omega: Any):
    """Barfoot's Q(rho, omega), the top-right block of the left Jacobian of SE(3):
    Q = P/2 + c1 (WP + PW + WPW) + c2 (WWP + PWW - 3 WPW) + (c2 + 3 c3)/2 (WPWW + WWPW),
    W = [omega]x, P = [rho]x, with c1 = (t - sin t)/t^3, c2 = (t^2/2 + cos t - 1)/t^4 and
    c3 = (t - sin t - t^3/6)/t^5."""
    x = wp.dot(omega, omega)
    w = hat(omega)
    p = hat(rho)
    wp_ = w @ p
    pw = p @ w
    wpw = wp_ @ w
    ww = w @ w
    half = type(x)(0.5)
    c2 = cosine_remainder(x)
    return (
        half * p
        + sine_remainder(x) * (wp_ + pw + wpw)
        + c2 * (ww @ p + pw @ w - type(x)(3.0) * wpw)
        + half * (c2 + type(x)(3.0) * sine_remainder2(x)) * (wpw @ w + w @ wpw)
    )


@wp.func
def translation_coefficients(x: Any):
    """translation_jacobian's c1 = sine_remainder, c2 = cosine_remainder and
    c3 = sine_remainder2 of x = theta^2, and their slopes in x: c1' = (a - 3 c1) / 2x with
    a = (1 - cos(theta)) / theta^2, c2' = -(a' + c2) / x, c3' = (c1' - c3) / x."""
    if x < type(x)(SERIES_BELOW):
        return (
            horner(x, SINE_REMAINDER_SERIES),
            horner_slope(x, SINE_REMAINDER_SERIES),
            horner(x, COSINE_REMAINDER_SERIES),
            horner_slope(x, COSINE_REMAINDER_SERIES),
            horner(x, SINE_REMAINDER2_SERIES),
            horner_slope(x, SINE_REMAINDER2_SERIES),
        )
    theta = wp.sqrt(x)
    sine = wp.sin(theta) / theta
    a = one_minus_cos_over(x)
    two_x = type(x)(2.0) * x
    a_slope = (sine - type(x)(2.0) * a) / two_x
    c1 = (type(x)(1.0) - sine) / x
    c1_slope = (a - type(x)(3.0) * c1) / two_x
    c2 = (type(x)(0.5) - a) / x
    c3 = (c1 - type(x)(1.0) / type(x)(6.0)) / x
    return c1, c1_slope, c2, -(a_slope + c2) / x, c3, (c1_slope - c3) / x


@wp.func
def translation_jacobian_tangent(rho: Any, omega: Any, d_rho: Any, d_omega: Any):
    """d translation_jacobian, term by term (products of skew matrices, and the three
    coefficients' slopes times dx = 2 omega . d_omega)."""
    x = wp.dot(omega, omega)
    dx = type(x)(2.0) * wp.dot(omega, d_omega)
    c1, c1_slope, c2, c2_slope, c3, c3_slope = translation_coefficients(x)
    w = hat(omega)
    p = hat(rho)
    dw = hat(d_omega)
    dp = hat(d_rho)
    wp_ = w @ p
    pw = p @ w
    wpw = wp_ @ w
    ww = w @ w
    d_wp = dw @ p + w @ dp
    d_pw = dp @ w + p @ dw
    d_wpw = d_wp @ w + wp_ @ dw
    d_ww = dw @ w + w @ dw
    three = type(x)(3.0)
    half = type(x)(0.5)
    first = wp_ + pw + wpw
    second = ww @ p + pw @ w - three * wpw
    d_second = d_ww @ p + ww @ dp + d_pw @ w + pw @ dw - three * d_wpw
    third = wpw @ w + w @ wpw
    d_third = d_wpw @ w + wpw @ dw + dw @ wpw + w @ d_wpw
    c4 = half * (c2 + three * c3)
    c4_slope = half * (c2_slope + three * c3_slope)
    return (
        half * dp
        + (c1_slope * dx) * first
        + c1 * (d_wp + d_pw + d_wpw)
        + (c2_slope * dx) * second
        + c2 * d_second
        + (c4_slope * dx) * third
        + c4 * d_third
    )


@wp.func
def se3_left_jacobian(xi: Any):
    rho = rho_of(xi)
    omega = omega_of(xi)
    j = left_jacobian(omega)
    return blocks(j, translation_jacobian(rho, omega), j * type(xi[0])(0.0), j)


@wp.func
def se3_left_jacobian_inverse(xi: Any):
    """[[J^-1, -J^-1 Q J^-1], [0, J^-1]]."""
    rho = rho_of(xi)
    omega = omega_of(xi)
    j_inv = left_jacobian_inverse(omega)
    q = translation_jacobian(rho, omega)
    return blocks(j_inv, -(j_inv @ q @ j_inv), j_inv * type(xi[0])(0.0), j_inv)


@wp.func
def se3_left_jacobian_tangent(xi: Any, d_xi: Any):
    omega = omega_of(xi)
    dj = left_jacobian_tangent(omega, omega_of(d_xi))
    dq = translation_jacobian_tangent(rho_of(xi), omega, rho_of(d_xi), omega_of(d_xi))
    return blocks(dj, dq, dj * type(xi[0])(0.0), dj)


@wp.func
def se3_left_jacobian_inverse_tangent(xi: Any, d_xi: Any):
    rho = rho_of(xi)
    omega = omega_of(xi)
    j_inv = left_jacobian_inverse(omega)
    dj_inv = left_jacobian_inverse_tangent(omega, omega_of(d_xi))
    q = translation_jacobian(rho, omega)
    dq = translation_jacobian_tangent(rho, omega, rho_of(d_xi), omega_of(d_xi))
    d_corner = -(dj_inv @ q @ j_inv + j_inv @ dq @ j_inv + j_inv @ q @ dj_inv)
    return blocks(dj_inv, d_corner, dj_inv * type(xi[0])(0.0), dj_inv)


# J_r(xi) = J_l(-xi), and so for the inverses.
se3_right_jacobian, se3_right_jacobian_tangent, _ = at_negated(
    "se3_right_jacobian", se3_left_jacobian, se3_left_jacobian_tangent
)
se3_right_jacobian_inverse, se3_right_jacobian_inverse_tangent, _ = at_negated(
    "se3_right_jacobian_inverse", se3_left_jacobian_inverse, se3_left_jacobian_inverse_tangent
)


_TWIST = {"xi": (6,)}
_JACOBIAN = {"out_jacobian": (6, 6)}

SE3_EXP = define_op(
    "se3_exp",
    se3_exp,
    operands=_TWIST,
    results={"out_position": (3,), "out_quaternion": (4,)},
    tangent=se3_exp_tangent,
    vjp=se3_exp_vjp,
    doc="exp(xi) for xi = [rho, omega]: the pose (J_l(omega) rho, so3_exp(omega)).",
    family=families.SE3,
)
SE3_LOG = define_op(
    "se3_log",
    se3_log,
    operands={"position": (3,), "quaternion": (4,)},
    results={"out_xi": (6,)},
    tangent=se3_log_tangent,
    vjp=se3_log_vjp,
    doc="log(T) = [J_l(omega)^-1 t, omega] with omega = so3_log(q); the inverse of se3_exp "
    "for |omega| < pi.",
    family=families.SE3,
)
SE3_HAT = define_op(
    "se3_hat",
    se3_hat,
    operands=_TWIST,
    results={"out_matrix": (4, 4)},
    tangent=se3_hat_tangent,
    vjp=se3_hat_vjp,
    doc="[[ [omega]x, rho ], [0, 0]] for xi = [rho, omega].",
    family=families.SE3,
)
SE3_VEE = define_op(
    "se3_vee",
    se3_vee,
    operands={"matrix": (4, 4)},
    results={"out_xi": (6,)},
    tangent=se3_vee_tangent,
    vjp=se3_vee_vjp,
    doc="[rho, omega]: the top-right column, and the vector of the skew part of the "
    "top-left 3x3 block.",
    family=families.SE3,
)
SE3_ADJOINT = define_op(
    "se3_adjoint",
    se3_adjoint,
    operands={"position": (3,), "quaternion": (4,)},
    results={"out_adjoint": (6, 6)},
    tangent=se3_adjoint_tangent,
    doc="Ad_T = [[R, [t]x R], [0, R]] for T = (t, q), R = R(q): T exp(xi) T^-1 = exp(Ad_T xi).",
    family=families.SE3,
)
SE3_LEFT_JACOBIAN = define_op(
    "se3_left_jacobian",
    se3_left_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se3_left_jacobian_tangent,
    doc="[[J_l(omega), Q(rho, omega)], [0, J_l(omega)]] with Barfoot's Q.",
    family=families.SE3,
)
SE3_LEFT_JACOBIAN_INVERSE = define_op(
    "se3_left_jacobian_inverse",
    se3_left_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se3_left_jacobian_inverse_tangent,
    doc="[[J_l^-1, -J_l^-1 Q J_l^-1], [0, J_l^-1]], for |omega| < 2 pi.",
    family=families.SE3,
)
SE3_RIGHT_JACOBIAN = define_op(
    "se3_right_jacobian",
    se3_right_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se3_right_jacobian_tangent,
    doc="J_r(xi) = J_l(-xi).",
    family=families.SE3,
)
SE3_RIGHT_JACOBIAN_INVERSE = define_op(
    "se3_right_jacobian_inverse",
    se3_right_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se3_right_jacobian_inverse_tangent,
    doc="J_r(xi)^-1 = J_l(-xi)^-1, for |omega| < 2 pi.",
    family=families.SE3,
)
