"""SE(2): poses of the plane `(position, unit_complex)`, tangent `xi = [vx, vy, theta]`
(jaxlie's order), with the same complex arithmetic as `so2.py`.

With `K` the rotation by 90 degrees (the complex unit `i`), the algebra's adjoint is
`ad(xi) = [[theta K, -K v], [0, 0]]`, and every series of it is one of two complex
numbers times `v`:

- `exp(xi) = (V(theta) v, [cos theta, sin theta])` with `V = (e^(i theta) - 1) / (i theta)
  = sin(theta)/theta + i (1 - cos(theta))/theta`;
- `log(T) = [V(theta)^-1 t, theta]`, `theta = atan2(s, c)`, with `V^-1 = h cot(h) - i h`,
  `h = theta / 2` (finite at theta = pi; it grows without bound at 2 pi);
- the left Jacobian, the integral of `exp(s ad(xi))` over `[0, 1]`, is
  `[[V, (I - V) v / theta], [0, 1]]`, and its inverse `[[V^-1, (I - V^-1) v / theta], [0, 1]]`;
  `J_r(xi) = J_l(-xi)` (Sola et al., "A micro Lie theory for state estimation in robotics",
  2018, eqs. 163-164; jaxlie's `jlog` is `J_r^-1(log T)`).

Each coefficient is a function of `theta^2` times a power of theta, through the series and
closed forms of `so3.py` (`sin_over`, `one_minus_cos_over`, `sine_remainder`,
`jacobian_inverse_coefficient`), so that values and derivatives are exact at theta = 0.
Every Jacobian is `[[m, n v], [0, 1]]` for two complex numbers `m(theta)`, `n(theta)` (a
complex number `m` standing for its 2x2 matrix): one closed-form tangent and VJP
(`jacobian_form_*`) serve them all, given `m`, `n` and their derivatives in theta.
"""

from typing import Any

import warp as wp

from .._define import define_op
from . import _families as families
from ._forms import at_negated, warp_function
from ._series import (
    jacobian_inverse_coefficient,
    left_jacobian_coefficients,
    left_jacobian_inverse_coefficients,
    one_minus_cos_over,
    rodrigues_coefficients,
    sin_over,
    sine_remainder,
)
from .so2 import (
    angle,
    angle_gradient,
    complex_conjugate,
    complex_matrix_cotangent,
    complex_multiply,
    complex_multiply_tangent,
    complex_multiply_vjp,
)


@wp.func
def translation_of(xi: Any):
    return wp.vector(xi[0], xi[1])


@wp.func
def twist_2d(v: Any, theta: Any):
    return wp.vector(v[0], v[1], theta)


@wp.func
def pose_matrix_2d(m: Any, column: Any, corner: Any):
    """[[m0, -m1, column0], [m1, m0, column1], [0, 0, corner]]: the complex number m's
    matrix, a column beside it, and a corner (1 for a pose, 0 for a tangent)."""
    zero = type(corner)(0.0)
    return wp.matrix(
        m[0], -m[1], column[0],
        m[1], m[0], column[1],
        zero, zero, corner,
        shape=(3, 3),
    )  # fmt: skip


@wp.func
def pose_matrix_2d_cotangents(g: Any):
    """The cotangents of pose_matrix_2d's m and column from its cotangent g."""
    return complex_matrix_cotangent(g[0, 0], g[0, 1], g[1, 0], g[1, 1]), wp.vector(g[0, 2], g[1, 2])


@wp.func
def quarter_turn(v: Any):
    """-K v = [v1, -v0]: the column of the adjoint."""
    return wp.vector(v[1], -v[0])


@wp.func
def unit_circle(theta: Any):
    return wp.vector(wp.cos(theta), wp.sin(theta))


# --- the coefficients: m and n of each Jacobian, and their derivatives in theta ----------


@wp.func
def left_coefficients(theta: Any):
    """J_l's m = V = sin(t)/t + i (1 - cos t)/t and n = (I - V) / t
    = (t - sin t)/t^2 - i (1 - cos t)/t^2."""
    x = theta * theta
    c = one_minus_cos_over(x)
    return wp.vector(sin_over(x), theta * c), wp.vector(theta * sine_remainder(x), -c)


@wp.func
def left_coefficients_slopes(theta: Any):
    """left_coefficients' m and n, and their derivatives in theta, from the series'
    derivatives in x = theta^2 (d/dt f(x) = 2 t f'(x), d/dt (t f(x)) = f + 2 x f')."""
    x = theta * theta
    two = type(x)(2.0)
    a, a_slope, c, c_slope = rodrigues_coefficients(x)
    c_, c_slope_, s, s_slope = left_jacobian_coefficients(x)
    m = wp.vector(a, theta * c)
    m_theta = wp.vector(two * theta * a_slope, c + two * x * c_slope)
    n = wp.vector(theta * s, -c)
    n_theta = wp.vector(s + two * x * s_slope, -two * theta * c_slope)
    return m, m_theta, n, n_theta


@wp.func
def inverse_coefficients(theta: Any):
    """J_l^-1's m = V^-1 = h cot(h) - i h, h = t / 2, and n = (I - V^-1) / t
    = (1 - h cot h)/t + i / 2, with 1 - h cot(h) = t^2 jacobian_inverse_coefficient(t^2)."""
    x = theta * theta
    half = type(x)(0.5)
    b = jacobian_inverse_coefficient(x)
    return wp.vector(type(x)(1.0) - x * b, -half * theta), wp.vector(theta * b, half)


@wp.func
def inverse_coefficients_slopes(theta: Any):
    x = theta * theta
    two = type(x)(2.0)
    half = type(x)(0.5)
    a, a_slope, b, b_slope = left_jacobian_inverse_coefficients(x)
    d = b + two * x * b_slope  # d/dt (t b(t^2))
    m = wp.vector(type(x)(1.0) - x * b, -half * theta)
    m_theta = wp.vector(-theta * (b + d), -half)
    n = wp.vector(theta * b, half)
    n_theta = wp.vector(d, type(x)(0.0))
    return m, m_theta, n, n_theta


# --- the Jacobians, [[m, n v], [0, 1]] ----------------------------------------------------


@wp.func
def jacobian_form(m: Any, n: Any, v: Any):
    return pose_matrix_2d(m, complex_multiply(n, v), type(v[0])(1.0))


@wp.func
def jacobian_form_tangent(m_theta: Any, n: Any, n_theta: Any, v: Any, d_theta: Any, dv: Any):
    d_column = d_theta * complex_multiply(n_theta, v) + complex_multiply(n, dv)
    return pose_matrix_2d(d_theta * m_theta, d_column, type(v[0])(0.0))


@wp.func
def jacobian_form_vjp(m_theta: Any, n: Any, n_theta: Any, v: Any, g: Any):
    """The cotangent of xi = [v, theta] from the cotangent g of [[m, n v], [0, 1]]."""
    g_m, g_column = pose_matrix_2d_cotangents(g)
    v_bar = complex_multiply(complex_conjugate(n), g_column)
    theta_bar = wp.dot(m_theta, g_m) + wp.dot(complex_multiply(n_theta, v), g_column)
    return twist_2d(v_bar, theta_bar)


def jacobian_form_functions(name: str, coefficients, coefficients_slopes):
    """`xi -> [[m, n v], [0, 1]]` for `coefficients(theta) = (m, n)`, with its tangent
    and VJP from `coefficients_slopes(theta) = (m, dm / dtheta, n, dn / dtheta)`: named
    `name`, `name_tangent` and `name_vjp`."""

    def value(xi: Any):
        m, n = coefficients(xi[2])
        return jacobian_form(m, n, translation_of(xi))

    def tangent(xi: Any, d_xi: Any):
        m, m_theta, n, n_theta = coefficients_slopes(xi[2])
        v, dv = translation_of(xi), translation_of(d_xi)
        return jacobian_form_tangent(m_theta, n, n_theta, v, d_xi[2], dv)

    def vjp(xi: Any, g: Any):
        m, m_theta, n, n_theta = coefficients_slopes(xi[2])
        return jacobian_form_vjp(m_theta, n, n_theta, translation_of(xi), g)

    return (
        warp_function(value, name),
        warp_function(tangent, f"{name}_tangent"),
        warp_function(vjp, f"{name}_vjp"),
    )


se2_left_jacobian, se2_left_jacobian_tangent, se2_left_jacobian_vjp = jacobian_form_functions(
    "se2_left_jacobian", left_coefficients, left_coefficients_slopes
)
se2_left_jacobian_inverse, se2_left_jacobian_inverse_tangent, se2_left_jacobian_inverse_vjp = (
    jacobian_form_functions(
        "se2_left_jacobian_inverse", inverse_coefficients, inverse_coefficients_slopes
    )
)

# J_r(xi) = J_l(-xi), and so for the inverses.
se2_right_jacobian, se2_right_jacobian_tangent, se2_right_jacobian_vjp = at_negated(
    "se2_right_jacobian", se2_left_jacobian, se2_left_jacobian_tangent, se2_left_jacobian_vjp
)
se2_right_jacobian_inverse, se2_right_jacobian_inverse_tangent, se2_right_jacobian_inverse_vjp = (
    at_negated(
        "se2_right_jacobian_inverse",
        se2_left_jacobian_inverse,
        se2_left_jacobian_inverse_tangent,
        se2_left_jacobian_inverse_vjp,
    )
)


# --- exp and log -------------------------------------------------------------------------


@wp.func
def se2_exp(xi: Any):
    m, n = left_coefficients(xi[2])
    return complex_multiply(m, translation_of(xi)), unit_circle(xi[2])


@wp.func
def se2_exp_tangent(xi: Any, d_xi: Any):
    m, m_theta, n, n_theta = left_coefficients_slopes(xi[2])
    d_position = d_xi[2] * complex_multiply(m_theta, translation_of(xi)) + complex_multiply(
        m, translation_of(d_xi)
    )
    return d_position, d_xi[2] * wp.vector(-wp.sin(xi[2]), wp.cos(xi[2]))


@wp.func
def se2_exp_vjp(xi: Any, g_position: Any, g_unit_complex: Any):
    m, m_theta, n, n_theta = left_coefficients_slopes(xi[2])
    v_bar = complex_multiply(complex_conjugate(m), g_position)
    theta_bar = wp.dot(complex_multiply(m_theta, translation_of(xi)), g_position) + wp.dot(
        wp.vector(-wp.sin(xi[2]), wp.cos(xi[2])), g_unit_complex
    )
    return twist_2d(v_bar, theta_bar)


@wp.func
def se2_log(position: Any, z: Any):
    theta = angle(z)
    m, n = inverse_coefficients(theta)
    return twist_2d(complex_multiply(m, position), theta)


@wp.func
def se2_log_tangent(position: Any, z: Any, d_position: Any, dz: Any):
    m, m_theta, n, n_theta = inverse_coefficients_slopes(angle(z))
    d_theta = wp.dot(angle_gradient(z), dz)
    dv = d_theta * complex_multiply(m_theta, position) + complex_multiply(m, d_position)
    return twist_2d(dv, d_theta)


@wp.func
def se2_log_vjp(position: Any, z: Any, g: Any):
    m, m_theta, n, n_theta = inverse_coefficients_slopes(angle(z))
    g_v = translation_of(g)
    theta_bar = g[2] + wp.dot(complex_multiply(m_theta, position), g_v)
    return complex_multiply(complex_conjugate(m), g_v), theta_bar * angle_gradient(z)


# --- poses: matrices, the adjoint, action, composition, inverse ---------------------------


@wp.func
def se2_to_matrix(position: Any, z: Any):
    return pose_matrix_2d(z, position, type(z[0])(1.0))


@wp.func
def se2_to_matrix_tangent(position: Any, z: Any, d_position: Any, dz: Any):
    return pose_matrix_2d(dz, d_position, type(z[0])(0.0))


@wp.func
def se2_to_matrix_vjp(position: Any, z: Any, g: Any):
    g_z, g_position = pose_matrix_2d_cotangents(g)
    return g_position, g_z


@wp.func
def se2_from_matrix(m: Any):
    """(the top of the last column, the first column of the rotation block), as jaxlie."""
    return wp.vector(m[0, 2], m[1, 2]), wp.vector(m[0, 0], m[1, 0])


@wp.func
def se2_from_matrix_tangent(m: Any, dm: Any):
    return se2_from_matrix(dm)


@wp.func
def se2_from_matrix_vjp(m: Any, g_position: Any, g_z: Any):
    zero = type(g_z[0])(0.0)
    return wp.matrix(
        g_z[0], zero, g_position[0],
        g_z[1], zero, g_position[1],
        zero, zero, zero,
        shape=(3, 3),
    )  # fmt: skip


@wp.func
def se2_adjoint(position: Any, z: Any):
    return pose_matrix_2d(z, quarter_turn(position), type(z[0])(1.0))


@wp.func
def se2_adjoint_tangent(position: Any, z: Any, d_position: Any, dz: Any):
    return pose_matrix_2d(dz, quarter_turn(d_position), type(z[0])(0.0))


@wp.func
def se2_adjoint_vjp(position: Any, z: Any, g: Any):
    g_z, g_column = pose_matrix_2d_cotangents(g)
    return wp.vector(-g_column[1], g_column[0]), g_z


@wp.func
def transform_points_2d(position: Any, z: Any, points: Any):
    return complex_multiply(z, points) + position


@wp.func
def transform_points_2d_tangent(
    position: Any, z: Any, points: Any, d_position: Any, dz: Any, d_points: Any
):
    return complex_multiply_tangent(z, points, dz, d_points) + d_position


@wp.func
def transform_points_2d_vjp(position: Any, z: Any, points: Any, g: Any):
    z_bar, points_bar = complex_multiply_vjp(z, points, g)
    return g, z_bar, points_bar


@wp.func
def pose_multiply_2d(position: Any, z: Any, position2: Any, z2: Any):
    return complex_multiply(z, position2) + position, complex_multiply(z, z2)


@wp.func
def pose_multiply_2d_tangent(
    position: Any,
    z: Any,
    position2: Any,
    z2: Any,
    d_position: Any,
    dz: Any,
    d_position2: Any,
    dz2: Any,
):
    return (
        complex_multiply_tangent(z, position2, dz, d_position2) + d_position,
        complex_multiply_tangent(z, z2, dz, dz2),
    )


@wp.func
def pose_multiply_2d_vjp(position: Any, z: Any, position2: Any, z2: Any, g_position: Any, g_z: Any):
    z_bar, position2_bar = complex_multiply_vjp(z, position2, g_position)
    z_bar_rotation, z2_bar = complex_multiply_vjp(z, z2, g_z)
    return g_position, z_bar + z_bar_rotation, position2_bar, z2_bar


@wp.func
def pose_inverse_2d(position: Any, z: Any):
    z_inverse = complex_conjugate(z)
    return -complex_multiply(z_inverse, position), z_inverse


@wp.func
def pose_inverse_2d_tangent(position: Any, z: Any, d_position: Any, dz: Any):
    dz_inverse = complex_conjugate(dz)
    d_out = complex_multiply_tangent(complex_conjugate(z), position, dz_inverse, d_position)
    return -d_out, dz_inverse


@wp.func
def pose_inverse_2d_vjp(position: Any, z: Any, g_position: Any, g_z: Any):
    # the cotangent of conj(z) is pulled back through the conjugate, its own adjoint
    z_inverse_bar, position_bar = complex_multiply_vjp(complex_conjugate(z), position, -g_position)
    return position_bar, complex_conjugate(z_inverse_bar + g_z)


_TWIST = {"xi": (3,)}
_POSE = {"position": (2,), "unit_complex": (2,)}
_JACOBIAN = {"out_jacobian": (3, 3)}

SE2_EXP = define_op(
    "se2_exp",
    se2_exp,
    operands=_TWIST,
    results={"out_position": (2,), "out_unit_complex": (2,)},
    tangent=se2_exp_tangent,
    vjp=se2_exp_vjp,
    doc="exp(xi) for xi = [vx, vy, theta]: the pose (V(theta) v, [cos(theta), sin(theta)]), "
    "V = [[sin(theta)/theta, -(1 - cos(theta))/theta], [(1 - cos(theta))/theta, "
    "sin(theta)/theta]]; a Taylor series near theta = 0.",
    family=families.PLANAR,
)
SE2_LOG = define_op(
    "se2_log",
    se2_log,
    operands=_POSE,
    results={"out_xi": (3,)},
    tangent=se2_log_tangent,
    vjp=se2_log_vjp,
    doc="log(T) = [V(theta)^-1 t, theta] with theta = atan2(s, c) in [-pi, pi], V^-1 = "
    "[[h cot(h), h], [-h, h cot(h)]], h = theta / 2; invariant to the scale of z, the "
    "inverse of se2_exp for |theta| < pi.",
    family=families.PLANAR,
)
SE2_TO_MATRIX = define_op(
    "se2_to_matrix",
    se2_to_matrix,
    operands=_POSE,
    results={"out_matrix": (3, 3)},
    tangent=se2_to_matrix_tangent,
    vjp=se2_to_matrix_vjp,
    doc="[[c, -s, x], [s, c, y], [0, 0, 1]] for T = ([x, y], [c, s]).",
    family=families.PLANAR,
)
SE2_FROM_MATRIX = define_op(
    "se2_from_matrix",
    se2_from_matrix,
    operands={"matrix": (3, 3)},
    results={"out_position": (2,), "out_unit_complex": (2,)},
    tangent=se2_from_matrix_tangent,
    vjp=se2_from_matrix_vjp,
    doc="([m02, m12], [m00, m10]): the translation column and the rotation block's first "
    "column (as jaxlie; the bottom row is not read, the rotation not projected).",
    family=families.PLANAR,
)
SE2_ADJOINT = define_op(
    "se2_adjoint",
    se2_adjoint,
    operands=_POSE,
    results={"out_adjoint": (3, 3)},
    tangent=se2_adjoint_tangent,
    vjp=se2_adjoint_vjp,
    doc="Ad_T = [[c, -s, y], [s, c, -x], [0, 0, 1]] for T = ([x, y], [c, s]), so that "
    "T exp(xi) T^-1 = exp(Ad_T xi).",
    family=families.PLANAR,
)
TRANSFORM_POINTS_2D = define_op(
    "transform_points_2d",
    transform_points_2d,
    operands={"position": (2,), "unit_complex": (2,), "points": (2,)},
    results={"out_points": (2,)},
    tangent=transform_points_2d_tangent,
    vjp=transform_points_2d_vjp,
    doc="R p + t with R = [[c, -s], [s, c]]: the complex product z p, plus t.",
    family=families.PLANAR,
)
POSE_MULTIPLY_2D = define_op(
    "pose_multiply_2d",
    pose_multiply_2d,
    operands={
        "position": (2,),
        "unit_complex": (2,),
        "position2": (2,),
        "unit_complex2": (2,),
    },
    results={"out_position": (2,), "out_unit_complex": (2,)},
    tangent=pose_multiply_2d_tangent,
    vjp=pose_multiply_2d_vjp,
    doc="T1 T2 = (R1 t2 + t1, z1 z2) (T2 applied first).",
    family=families.PLANAR,
)
POSE_INVERSE_2D = define_op(
    "pose_inverse_2d",
    pose_inverse_2d,
    operands=_POSE,
    results={"out_position": (2,), "out_unit_complex": (2,)},
    tangent=pose_inverse_2d_tangent,
    vjp=pose_inverse_2d_vjp,
    doc="T^-1 = (-R^T t, conj(z)) with R^T = [[c, s], [-s, c]] (the inverse of a unit z; not "
    "divided by |z|^2, as jaxlie).",
    family=families.PLANAR,
)
SE2_LEFT_JACOBIAN = define_op(
    "se2_left_jacobian",
    se2_left_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se2_left_jacobian_tangent,
    vjp=se2_left_jacobian_vjp,
    doc="J_l(xi) = [[V(theta), (I - V(theta)) v / theta], [0, 1]] for xi = [v, theta], "
    "V as in se2_exp: the integral of exp(s ad(xi)) over [0, 1].",
    family=families.PLANAR,
)
SE2_LEFT_JACOBIAN_INVERSE = define_op(
    "se2_left_jacobian_inverse",
    se2_left_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se2_left_jacobian_inverse_tangent,
    vjp=se2_left_jacobian_inverse_vjp,
    doc="J_l(xi)^-1 = [[V^-1, (I - V^-1) v / theta], [0, 1]], V^-1 as in se2_log, for "
    "|theta| < 2 pi.",
    family=families.PLANAR,
)
SE2_RIGHT_JACOBIAN = define_op(
    "se2_right_jacobian",
    se2_right_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se2_right_jacobian_tangent,
    vjp=se2_right_jacobian_vjp,
    doc="J_r(xi) = J_l(-xi).",
    family=families.PLANAR,
)
SE2_RIGHT_JACOBIAN_INVERSE = define_op(
    "se2_right_jacobian_inverse",
    se2_right_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=se2_right_jacobian_inverse_tangent,
    vjp=se2_right_jacobian_inverse_vjp,
    doc="J_r(xi)^-1 = J_l(-xi)^-1, for |theta| < 2 pi; J_r^-1(log T) is the derivative of "
    "log(T exp(delta)) in delta at 0 (jaxlie's jlog).",
    family=families.PLANAR,
)
