"""Sim(3): similarity transforms `p -> s R p + t`, their exponential and logarithm, products,
the adjoint, and the left and right Jacobians, exact at the identity, at zero scale change
and near 180 degrees, in float32 and float64.

An element is `(position, quaternion, scale)`, `s > 0`; a tangent is `xi = [rho, omega,
sigma]` (7,), `s = e^sigma` (as LieTorch and PyPose). `exp(xi)` is `(W rho, so3_exp(omega),
e^sigma)` with the scaled rotation integral W(omega, sigma) = int_0^1 e^(sigma tau)
R(tau omega) dtau, whose coefficients (series and closed forms) and derivatives are in
`_scaled_rotation.py`; the left Jacobian is [[W, Q, q], [0, J_l(omega), 0], [0, 0, 1]], Q
and q the derivatives of W rho in omega and sigma (`jacobian_blocks`).
"""

from typing import Any

import warp as wp

from .._define import define_op
from .._op import Operand
from . import _families as families
from ._forms import at_negated
from ._scaled_rotation import (
    inverse_coefficients,
    jacobian_blocks,
    jacobian_blocks_tangent,
    quadratic_apply,
    quadratic_matrix,
    scaled_rotation_apply_tangent,
    scaled_rotation_apply_vjp,
    scaled_rotation_coefficients,
    scaled_rotation_coefficients_less_one,
    slope_vectors,
)
from .conversions import (
    QUATERNION_TO_MATRIX,
    matrix_to_quat,
    matrix_to_quat_tangent,
    matrix_to_quat_vjp,
)
from .quaternion import (
    quat_conjugate,
    quat_matrix_vjp,
    quat_multiply,
    quat_multiply_tangent,
    quat_multiply_vjp,
    quat_rotate,
    quat_rotate_tangent,
    quat_rotate_vjp,
    quat_to_matrix,
    quat_to_matrix_tangent,
)
from .se3 import omega_of, rho_of, top_left
from .so3 import (
    hat,
    hat_vjp,
    left_jacobian_inverse,
    left_jacobian_inverse_tangent,
    log_parts,
    log_pull,
    log_push,
    so3_exp,
    so3_exp_tangent,
    so3_exp_vjp,
    so3_log,
)
from .transforms import homogeneous


@wp.func
def similarity_twist(rho: Any, omega: Any, sigma: Any):
    return wp.vector(rho[0], rho[1], rho[2], omega[0], omega[1], omega[2], sigma)


@wp.func
def sim3_exp(xi: Any):
    """(W(omega, sigma) rho, so3_exp(omega), e^sigma)."""
    omega = omega_of(xi)
    sigma = xi[6]
    a0_less_one, a1, a2 = scaled_rotation_coefficients_less_one(sigma, wp.dot(omega, omega))
    rho = rho_of(xi)
    return rho + quadratic_apply(omega, a0_less_one, a1, a2, rho), so3_exp(omega), wp.exp(sigma)


@wp.func
def sim3_exp_tangent(xi: Any, d_xi: Any):
    omega = omega_of(xi)
    rho = rho_of(xi)
    sigma = xi[6]
    d_omega = omega_of(d_xi)
    a0, a1, a2, slopes_x, slopes_s = slope_vectors(sigma, wp.dot(omega, omega))
    d_position = scaled_rotation_apply_tangent(
        omega, sigma, rho, d_omega, d_xi[6], slopes_x, slopes_s, a1, a2
    ) + quadratic_apply(omega, a0, a1, a2, rho_of(d_xi))
    return d_position, so3_exp_tangent(omega, d_omega), wp.exp(sigma) * d_xi[6]


@wp.func
def sim3_exp_vjp(xi: Any, g_position: Any, g_quaternion: Any, g_scale: Any):
    omega = omega_of(xi)
    rho = rho_of(xi)
    sigma = xi[6]
    a0, a1, a2, slopes_x, slopes_s = slope_vectors(sigma, wp.dot(omega, omega))
    omega_bar, sigma_bar = scaled_rotation_apply_vjp(
        omega, rho, g_position, slopes_x, slopes_s, a1, a2
    )
    rho_bar = quadratic_apply(omega, a0, -a1, a2, g_position)  # W^T g
    omega_bar = omega_bar + so3_exp_vjp(omega, g_quaternion)
    return similarity_twist(rho_bar, omega_bar, sigma_bar + wp.exp(sigma) * g_scale)


@wp.func
def sim3_log(position: Any, quaternion: Any, scale: Any):
    """[W(omega, sigma)^-1 t, omega, sigma] with omega = so3_log(q), sigma = log(s)."""
    omega = so3_log(quaternion)
    sigma = wp.log(scale)
    x = wp.dot(omega, omega)
    a0, a1, a2 = scaled_rotation_coefficients(sigma, x)
    b0, b1, b2 = inverse_coefficients(x, a0, a1, a2)
    return similarity_twist(quadratic_apply(omega, b0, b1, b2, position), omega, sigma)


@wp.func
def sim3_log_tangent(
    position: Any, quaternion: Any, scale: Any, d_position: Any, d_quaternion: Any, d_scale: Any
):
    u, sign, k, k_n2, k_w = log_parts(quaternion)
    omega = (sign * k) * u
    d_omega = log_push(u, sign, k, k_n2, k_w, d_quaternion)
    sigma = wp.log(scale)
    d_sigma = d_scale / scale
    x = wp.dot(omega, omega)
    a0, a1, a2, slopes_x, slopes_s = slope_vectors(sigma, x)
    b0, b1, b2 = inverse_coefficients(x, a0, a1, a2)
    rho = quadratic_apply(omega, b0, b1, b2, position)
    # rho = W^-1 t: d rho = W^-1 (dt - dW rho)
    d_w_rho = scaled_rotation_apply_tangent(
        omega, sigma, rho, d_omega, d_sigma, slopes_x, slopes_s, a1, a2
    )
    d_rho = quadratic_apply(omega, b0, b1, b2, d_position - d_w_rho)
    return similarity_twist(d_rho, d_omega, d_sigma)


@wp.func
def sim3_log_vjp(position: Any, quaternion: Any, scale: Any, g: Any):
    u, sign, k, k_n2, k_w = log_parts(quaternion)
    omega = (sign * k) * u
    sigma = wp.log(scale)
    x = wp.dot(omega, omega)
    a0, a1, a2, slopes_x, slopes_s = slope_vectors(sigma, x)
    b0, b1, b2 = inverse_coefficients(x, a0, a1, a2)
    rho = quadratic_apply(omega, b0, b1, b2, position)
    position_bar = quadratic_apply(omega, b0, -b1, b2, rho_of(g))  # W^-T g_rho
    omega_w, sigma_w = scaled_rotation_apply_vjp(
        omega, rho, -position_bar, slopes_x, slopes_s, a1, a2
    )
    omega_bar = omega_of(g) + omega_w
    return (
        position_bar,
        log_pull(u, sign, k, k_n2, k_w, omega_bar),
        (g[6] + sigma_w) / scale,
    )


@wp.func
def sim3_multiply(
    position: Any, quaternion: Any, scale: Any, position2: Any, quaternion2: Any, scale2: Any
):
    """(s1 R(q1) t2 + t1, q1 q2, s1 s2)."""
    return (
        scale * quat_rotate(quaternion, position2) + position,
        quat_multiply(quaternion, quaternion2),
        scale * scale2,
    )


@wp.func
def sim3_multiply_tangent(
    position: Any, quaternion: Any, scale: Any, position2: Any, quaternion2: Any, scale2: Any,
    d_position: Any, d_quaternion: Any, d_scale: Any, d_position2: Any, d_quaternion2: Any,
    d_scale2: Any,
):  # fmt: skip
    rotated = quat_rotate(quaternion, position2)
    d_rotated = quat_rotate_tangent(quaternion, d_quaternion, position2, d_position2)
    return (
        d_scale * rotated + scale * d_rotated + d_position,
        quat_multiply_tangent(quaternion, quaternion2, d_quaternion, d_quaternion2),
        d_scale * scale2 + scale * d_scale2,
    )


@wp.func
def sim3_multiply_vjp(
    position: Any, quaternion: Any, scale: Any, position2: Any, quaternion2: Any, scale2: Any,
    g_position: Any, g_quaternion: Any, g_scale: Any,
):  # fmt: skip
    rotated = quat_rotate(quaternion, position2)
    rotation_bar, position2_bar = quat_rotate_vjp(quaternion, position2, scale * g_position)
    product_bar, quaternion2_bar = quat_multiply_vjp(quaternion, quaternion2, g_quaternion)
    return (
        g_position,
        rotation_bar + product_bar,
        wp.dot(g_position, rotated) + g_scale * scale2,
        position2_bar,
        quaternion2_bar,
        g_scale * scale,
    )


@wp.func
def sim3_inverse(position: Any, quaternion: Any, scale: Any):
    """(-R(q*) t / s, q*, 1 / s)."""
    inverse = quat_conjugate(quaternion)
    # (s - s) is 0, or NaN where s is infinite: 1 / s would hide that in a finite 0
    reciprocal = type(scale)(1.0) / scale + (scale - scale)
    return -reciprocal * quat_rotate(inverse, position), inverse, reciprocal


@wp.func
def sim3_inverse_tangent(
    position: Any, quaternion: Any, scale: Any, d_position: Any, d_quaternion: Any, d_scale: Any
):
    inverse = quat_conjugate(quaternion)
    reciprocal = type(scale)(1.0) / scale
    d_reciprocal = -reciprocal * reciprocal * d_scale
    rotated = quat_rotate(inverse, position)
    d_rotated = quat_rotate_tangent(inverse, quat_conjugate(d_quaternion), position, d_position)
    return (
        -(d_reciprocal * rotated + reciprocal * d_rotated),
        quat_conjugate(d_quaternion),
        d_reciprocal,
    )


@wp.func
def sim3_inverse_vjp(
    position: Any, quaternion: Any, scale: Any, g_position: Any, g_quaternion: Any, g_scale: Any
):
    inverse = quat_conjugate(quaternion)
    reciprocal = type(scale)(1.0) / scale
    rotated = quat_rotate(inverse, position)
    inverse_bar, position_bar = quat_rotate_vjp(inverse, position, -reciprocal * g_position)
    reciprocal_bar = g_scale - wp.dot(g_position, rotated)
    return (
        position_bar,
        quat_conjugate(g_quaternion + inverse_bar),
        -reciprocal * reciprocal * reciprocal_bar,
    )


@wp.func
def similarity_point(position: Any, rotation: Any, scale: Any, point: Any):
    return scale * (rotation @ point) + position


@wp.func
def similarity_point_tangent(
    position: Any, rotation: Any, scale: Any, point: Any,
    d_position: Any, d_rotation: Any, d_scale: Any, d_point: Any,
):  # fmt: skip
    return (
        d_scale * (rotation @ point)
        + scale * (d_rotation @ point + rotation @ d_point)
        + d_position
    )


@wp.func
def similarity_point_vjp(position: Any, rotation: Any, scale: Any, point: Any, g: Any):
    return (
        g,
        scale * wp.outer(g, point),
        wp.dot(g, rotation @ point),
        scale * (wp.transpose(rotation) @ g),
    )


@wp.func
def sim3_to_matrix(position: Any, quaternion: Any, scale: Any):
    """[[s R(q), t], [0, 0, 0, 1]]."""
    return homogeneous(scale * quat_to_matrix(quaternion), position, type(scale)(1.0))


@wp.func
def sim3_to_matrix_tangent(
    position: Any, quaternion: Any, scale: Any, d_position: Any, d_quaternion: Any, d_scale: Any
):
    d_block = d_scale * quat_to_matrix(quaternion) + scale * quat_to_matrix_tangent(
        quaternion, d_quaternion
    )
    return homogeneous(d_block, d_position, type(scale)(0.0))


@wp.func
def sim3_to_matrix_vjp(position: Any, quaternion: Any, scale: Any, g: Any):
    block = top_left(g)
    return (
        wp.vector(g[0, 3], g[1, 3], g[2, 3]),
        quat_matrix_vjp(quaternion, scale * block),
        wp.ddot(block, quat_to_matrix(quaternion)),
    )


@wp.func
def matrix_scale(block: Any):
    """The scale of s R: |s R|_F / sqrt(3)."""
    return wp.sqrt(wp.ddot(block, block) / type(block[0, 0])(3.0))


@wp.func
def matrix_to_sim3(m: Any):
    """(the top-right column, the quaternion of the block / s, s = |block|_F / sqrt(3))."""
    block = top_left(m)
    scale = matrix_scale(block)
    return wp.vector(m[0, 3], m[1, 3], m[2, 3]), matrix_to_quat(block / scale), scale


@wp.func
def matrix_to_sim3_tangent(m: Any, dm: Any):
    block = top_left(m)
    d_block = top_left(dm)
    scale = matrix_scale(block)
    d_scale = wp.ddot(block, d_block) / (type(scale)(3.0) * scale)
    rotation = block / scale
    d_rotation = (d_block - d_scale * rotation) / scale
    return (
        wp.vector(dm[0, 3], dm[1, 3], dm[2, 3]),
        matrix_to_quat_tangent(rotation, d_rotation),
        d_scale,
    )


@wp.func
def matrix_to_sim3_vjp(m: Any, g_position: Any, g_quaternion: Any, g_scale: Any):
    block = top_left(m)
    scale = matrix_scale(block)
    rotation = block / scale
    rotation_bar = matrix_to_quat_vjp(rotation, g_quaternion)
    # R = B / s and s = |B| / sqrt(3): ds/dB = B / 3s
    scale_bar = g_scale - wp.ddot(rotation_bar, rotation) / scale
    block_bar = rotation_bar / scale + (scale_bar / (type(scale)(3.0) * scale)) * block
    return homogeneous(block_bar, g_position, type(scale)(0.0))


@wp.func
def similarity_blocks(a: Any, b: Any, column: Any, d: Any, corner: Any):
    """The 7x7 matrix [[a, b, column], [0, d, 0], [0, 0, corner]] of 3x3 blocks a, b, d."""
    z = type(corner)(0.0)
    return wp.matrix(
        a[0, 0], a[0, 1], a[0, 2], b[0, 0], b[0, 1], b[0, 2], column[0],
        a[1, 0], a[1, 1], a[1, 2], b[1, 0], b[1, 1], b[1, 2], column[1],
        a[2, 0], a[2, 1], a[2, 2], b[2, 0], b[2, 1], b[2, 2], column[2],
        z, z, z, d[0, 0], d[0, 1], d[0, 2], z,
        z, z, z, d[1, 0], d[1, 1], d[1, 2], z,
        z, z, z, d[2, 0], d[2, 1], d[2, 2], z,
        z, z, z, z, z, z, corner,
        shape=(7, 7),
    )  # fmt: skip


@wp.func
def sim3_adjoint(position: Any, quaternion: Any, scale: Any):
    """Ad_T = [[s R, [t]x R, -t], [0, R, 0], [0, 0, 1]]: T exp(xi) T^-1 = exp(Ad_T xi)."""
    r = quat_to_matrix(quaternion)
    return similarity_blocks(scale * r, hat(position) @ r, -position, r, type(scale)(1.0))


@wp.func
def sim3_adjoint_tangent(
    position: Any, quaternion: Any, scale: Any, d_position: Any, d_quaternion: Any, d_scale: Any
):
    r = quat_to_matrix(quaternion)
    dr = quat_to_matrix_tangent(quaternion, d_quaternion)
    return similarity_blocks(
        d_scale * r + scale * dr,
        hat(d_position) @ r + hat(position) @ dr,
        -d_position,
        dr,
        type(scale)(0.0),
    )


@wp.func
def sim3_adjoint_vjp(position: Any, quaternion: Any, scale: Any, g: Any):
    r = quat_to_matrix(quaternion)
    g_a = top_left(g)
    g_b = wp.matrix(
        g[0, 3], g[0, 4], g[0, 5], g[1, 3], g[1, 4], g[1, 5], g[2, 3], g[2, 4], g[2, 5],
        shape=(3, 3),
    )  # fmt: skip
    g_d = wp.matrix(
        g[3, 3], g[3, 4], g[3, 5], g[4, 3], g[4, 4], g[4, 5], g[5, 3], g[5, 4], g[5, 5],
        shape=(3, 3),
    )  # fmt: skip
    # <g_b, [t]x R> = <g_b R^T, [t]x>; [t]x^T = -[t]x
    r_bar = scale * g_a + wp.transpose(hat(position)) @ g_b + g_d
    position_bar = hat_vjp(position, g_b @ wp.transpose(r)) - wp.vector(g[0, 6], g[1, 6], g[2, 6])
    return position_bar, quat_matrix_vjp(quaternion, r_bar), wp.ddot(g_a, r)


@wp.func
def sim3_left_jacobian(xi: Any):
    """[[W, Q, q], [0, J_l(omega), 0], [0, 0, 1]]."""
    w, q, column, j = jacobian_blocks(xi)
    return similarity_blocks(w, q, column, j, type(xi[0])(1.0))


@wp.func
def sim3_left_jacobian_tangent(xi: Any, d_xi: Any):
    w, q, column, j, d_w, d_q, d_column, d_j = jacobian_blocks_tangent(xi, d_xi)
    return similarity_blocks(d_w, d_q, d_column, d_j, type(xi[0])(0.0))


@wp.func
def _inverse_w(xi: Any):
    omega = omega_of(xi)
    x = wp.dot(omega, omega)
    a0, a1, a2 = scaled_rotation_coefficients(xi[6], x)
    b0, b1, b2 = inverse_coefficients(x, a0, a1, a2)
    return quadratic_matrix(omega, b0, b1, b2)


@wp.func
def sim3_left_jacobian_inverse(xi: Any):
    """[[W^-1, -W^-1 Q J^-1, -W^-1 q], [0, J^-1, 0], [0, 0, 1]]."""
    w, q, column, j = jacobian_blocks(xi)
    w_inv = _inverse_w(xi)
    j_inv = left_jacobian_inverse(omega_of(xi))
    return similarity_blocks(
        w_inv, -(w_inv @ q @ j_inv), -(w_inv @ column), j_inv, type(xi[0])(1.0)
    )


@wp.func
def sim3_left_jacobian_inverse_tangent(xi: Any, d_xi: Any):
    w, q, column, j, d_w, d_q, d_column, d_j = jacobian_blocks_tangent(xi, d_xi)
    w_inv = _inverse_w(xi)
    omega = omega_of(xi)
    j_inv = left_jacobian_inverse(omega)
    d_j_inv = left_jacobian_inverse_tangent(omega, omega_of(d_xi))
    d_w_inv = -(w_inv @ d_w @ w_inv)
    d_corner = -(d_w_inv @ q @ j_inv + w_inv @ d_q @ j_inv + w_inv @ q @ d_j_inv)
    d_column_inv = -(d_w_inv @ column + w_inv @ d_column)
    return similarity_blocks(d_w_inv, d_corner, d_column_inv, d_j_inv, type(xi[0])(0.0))


# J_r(xi) = J_l(-xi), and so for the inverses.
sim3_right_jacobian, sim3_right_jacobian_tangent, _ = at_negated(
    "sim3_right_jacobian", sim3_left_jacobian, sim3_left_jacobian_tangent
)
sim3_right_jacobian_inverse, sim3_right_jacobian_inverse_tangent, _ = at_negated(
    "sim3_right_jacobian_inverse", sim3_left_jacobian_inverse, sim3_left_jacobian_inverse_tangent
)


_ELEMENT = {"position": (3,), "quaternion": (4,), "scale": ()}
_ELEMENT_RESULTS = {"out_position": (3,), "out_quaternion": (4,), "out_scale": ()}
_TWIST = {"xi": (7,)}
_JACOBIAN = {"out_jacobian": (7, 7)}

SIM3_EXP = define_op(
    "sim3_exp",
    sim3_exp,
    operands=_TWIST,
    results=_ELEMENT_RESULTS,
    tangent=sim3_exp_tangent,
    vjp=sim3_exp_vjp,
    doc="exp(xi) for xi = [rho, omega, sigma]: (W rho, so3_exp(omega), e^sigma), with "
    "W = int_0^1 e^(sigma tau) R(tau omega) dtau.",
    family=families.SIM3,
)
SIM3_LOG = define_op(
    "sim3_log",
    sim3_log,
    operands=_ELEMENT,
    results={"out_xi": (7,)},
    tangent=sim3_log_tangent,
    vjp=sim3_log_vjp,
    doc="log(T) = [W(omega, sigma)^-1 t, omega, sigma] with omega = so3_log(q) and "
    "sigma = log(s); the inverse of sim3_exp for |omega| < pi.",
    family=families.SIM3,
)
SIM3_MULTIPLY = define_op(
    "sim3_multiply",
    sim3_multiply,
    operands={**_ELEMENT, "position2": (3,), "quaternion2": (4,), "scale2": ()},
    results=_ELEMENT_RESULTS,
    tangent=sim3_multiply_tangent,
    vjp=sim3_multiply_vjp,
    doc="T1 T2 = (s1 R(q1) t2 + t1, q1 q2, s1 s2): T2 is applied first.",
    family=families.SIM3,
)
SIM3_INVERSE = define_op(
    "sim3_inverse",
    sim3_inverse,
    operands=_ELEMENT,
    results=_ELEMENT_RESULTS,
    tangent=sim3_inverse_tangent,
    vjp=sim3_inverse_vjp,
    doc="T^-1 = (-R(q*) t / s, q*, 1 / s), with q* the conjugate.",
    family=families.SIM3,
)
SIM3_TRANSFORM_POINTS = define_op(
    "sim3_transform_points",
    similarity_point,
    operands={
        "position": (3,),
        "quaternion": Operand((4,), prepare=QUATERNION_TO_MATRIX),
        "scale": (),
        "points": (3,),
    },
    results={"out_points": (3,)},
    tangent=similarity_point_tangent,
    vjp=similarity_point_vjp,
    doc="s R(q) p + t for similarities and points whose leading dimensions broadcast, "
    "where R(q) v = q (0, v) q*: `Sim3.apply`.",
    runs=True,
    family=families.SIM3,
)
SIM3_TO_MATRIX = define_op(
    "sim3_to_matrix",
    sim3_to_matrix,
    operands=_ELEMENT,
    results={"out_matrix": (4, 4)},
    tangent=sim3_to_matrix_tangent,
    vjp=sim3_to_matrix_vjp,
    doc="[[s R(q), t], [0, 0, 0, 1]].",
    family=families.SIM3,
)
MATRIX_TO_SIM3 = define_op(
    "matrix_to_sim3",
    matrix_to_sim3,
    operands={"matrix": (4, 4)},
    results=_ELEMENT_RESULTS,
    tangent=matrix_to_sim3_tangent,
    vjp=matrix_to_sim3_vjp,
    doc="(the top-right column, Shepperd's quaternion of B / s, w >= 0, s = |B|_F / "
    "sqrt(3)) for the top-left block B = s R: the inverse of sim3_to_matrix.",
    family=families.SIM3,
)
SIM3_ADJOINT = define_op(
    "sim3_adjoint",
    sim3_adjoint,
    operands=_ELEMENT,
    results={"out_adjoint": (7, 7)},
    tangent=sim3_adjoint_tangent,
    vjp=sim3_adjoint_vjp,
    doc="Ad_T = [[s R, [t]x R, -t], [0, R, 0], [0, 0, 1]] for T = (t, q, s), R = R(q): "
    "T exp(xi) T^-1 = exp(Ad_T xi).",
    family=families.SIM3,
)
SIM3_LEFT_JACOBIAN = define_op(
    "sim3_left_jacobian",
    sim3_left_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_left_jacobian_tangent,
    doc="[[W, Q, q], [0, J_l(omega), 0], [0, 0, 1]]: Q = d(W rho)/d omega + [W rho]x "
    "J_l(omega), q = d(W rho)/d sigma - W rho.",
    family=families.SIM3,
)
SIM3_LEFT_JACOBIAN_INVERSE = define_op(
    "sim3_left_jacobian_inverse",
    sim3_left_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_left_jacobian_inverse_tangent,
    doc="[[W^-1, -W^-1 Q J_l^-1, -W^-1 q], [0, J_l^-1, 0], [0, 0, 1]], for |omega| < 2 pi.",
    family=families.SIM3,
)
SIM3_RIGHT_JACOBIAN = define_op(
    "sim3_right_jacobian",
    sim3_right_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_right_jacobian_tangent,
    doc="J_r(xi) = J_l(-xi).",
    family=families.SIM3,
)
SIM3_RIGHT_JACOBIAN_INVERSE = define_op(
    "sim3_right_jacobian_inverse",
    sim3_right_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_right_jacobian_inverse_tangent,
    doc="J_r(xi)^-1 = J_l(-xi)^-1, for |omega| < 2 pi.",
    family=families.SIM3,
)
