"""Sim(3): similarity transforms `p -> s R p + t`, their exponential and logarithm, products,
the adjoint, and the left and right Jacobians, exact at the identity, at zero scale change
and near 180 degrees, in float32 and float64.

An element is `(position, quaternion, scale)`, `s > 0`; a tangent is `xi = [rho, omega,
sigma]` (7,), `s = e^sigma` (as LieTorch and PyPose). `exp(xi)` is `(W rho, so3_exp(omega),
e^sigma)` with the scaled rotation integral

    W(omega, sigma) = int_0^1 e^(sigma tau) R(tau omega) dtau = a0 I + a1 K + a2 K^2,

K = [omega]x. With z = sigma + i theta and f(z) = (e^z - 1) / z = int_0^1 e^(z tau) dtau, the
coefficients are the "triple" of f: a0 = f(sigma), a1 = Im f(z) / theta and a2 = (f(sigma) -
Re f(z)) / theta^2 (W's eigenvalues are f(sigma) and f(sigma +- i theta)). Each is 0/0 where
theta or sigma vanishes, so:

- for |z| < 2 they are power series in z, summed by a Horner scheme over the triple that
  never divides (`_triple_step`): exact at theta = 0, sigma = 0 and both, and so are their
  derivatives, the series' own (as so3.py's);
- above, closed forms in e^sigma, sin(theta)/theta and (1 - cos(theta))/theta^2 over
  sigma^2 + theta^2 >= 4, which has nothing left to cancel.

The derivatives of the triple in sigma are the triples of f' and f'' (the construction
commutes with d/dsigma); those in x = theta^2 differentiate the Horner scheme, or the
closed forms' quotients. W^-1 = b0 I + b1 K + b2 K^2 follows from the eigenvalues: b0 =
1 / a0, b1 = -a1 / |f(z)|^2, b2 = (a1^2 - a0 a2 + x a2^2) / (a0 |f(z)|^2), with no division
by theta.

The left Jacobian is [[W, Q, q], [0, J_l(omega), 0], [0, 0, 1]]: a left perturbation
exp(eta) T moves the translation t = W rho by eta_rho + eta_sigma t + eta_omega x t, so
Q = d(W rho)/d omega + [W rho]x J_l(omega) and q = d(W rho)/d sigma - W rho, closed forms
in the triple's first derivatives (their tangents in its second).
"""

from typing import Any

import warp as wp

from .._op import Operand, define_op
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
    COS_SERIES,
    SIN_SERIES,
    hat,
    hat_vjp,
    horner,
    horner_slope,
    identity3,
    left_jacobian,
    left_jacobian_inverse,
    left_jacobian_inverse_tangent,
    left_jacobian_tangent,
    log_parts,
    log_pull,
    log_push,
    one_minus_cos_over,
    sin_over,
    so3_exp,
    so3_exp_tangent,
    so3_exp_vjp,
    so3_log,
)
from .transforms import homogeneous

_F64x9 = wp.types.vector(9, wp.float64)


def _chunks(coefficient):
    """Three Warp constants of nine float64 coefficients each, c_0..c_8, c_9..c_17 and
    c_18..c_26, of the series sum c_n z^n."""
    values = [coefficient(n) for n in range(27)]
    return tuple(wp.constant(_F64x9(*values[9 * k : 9 * k + 9])) for k in range(3))


def _factorial(n: int) -> float:
    out = 1
    for k in range(2, n + 1):
        out *= k
    return float(out)


# f(z) = (e^z - 1) / z and its first two derivatives, sum c_n z^n to 27 terms: at |z| < 2
# the first term left out is below 1e-19 of the sum (1e-17 with the factors n^4 that the
# second derivatives in x bring).
F_LOW, F_MID, F_HIGH = _chunks(lambda n: 1.0 / _factorial(n + 1))
F1_LOW, F1_MID, F1_HIGH = _chunks(lambda n: (n + 1) / _factorial(n + 2))
F2_LOW, F2_MID, F2_HIGH = _chunks(lambda n: (n + 1) * (n + 2) / _factorial(n + 3))

SERIES_RADIUS2 = 4.0  # |z|^2 = sigma^2 + theta^2 under which the triples are series
EXP_SERIES_BELOW = 1.0  # |sigma| under which f(sigma) and its derivatives are series


# --- the series -------------------------------------------------------------------------------


@wp.func
def _triple_step(sigma: Any, x: Any, c: Any, p0: Any, p1: Any, p2: Any):
    """One Horner step S <- z S + c, on the triple (S(sigma), Im S(z) / theta,
    (S(sigma) - Re S(z)) / x) of a real polynomial S: no division, exact at x = 0."""
    return sigma * p0 + c, sigma * p1 + p0 - x * p2, sigma * p2 + p1


@wp.func
def series_triple(sigma: Any, x: Any, low: Any, mid: Any, high: Any):
    """The triple of sum c_n z^n (27 coefficients in three chunks)."""
    zero = type(x)(0.0)
    p0 = zero
    p1 = zero
    p2 = zero
    for k in range(8, -1, -1):
        p0, p1, p2 = _triple_step(sigma, x, type(x)(high[k]), p0, p1, p2)
    for k in range(8, -1, -1):
        p0, p1, p2 = _triple_step(sigma, x, type(x)(mid[k]), p0, p1, p2)
    for k in range(8, -1, -1):
        p0, p1, p2 = _triple_step(sigma, x, type(x)(low[k]), p0, p1, p2)
    return p0, p1, p2


@wp.func
def _triple_slope_step(sigma: Any, x: Any, c: Any, p0: Any, p1: Any, p2: Any, d1: Any, d2: Any):
    """_triple_step with the x-derivatives d1, d2 of p1, p2 (p0 does not depend on x)."""
    return (
        sigma * p0 + c,
        sigma * p1 + p0 - x * p2,
        sigma * p2 + p1,
        sigma * d1 - p2 - x * d2,
        sigma * d2 + d1,
    )


@wp.func
def series_triple_slope(sigma: Any, x: Any, low: Any, mid: Any, high: Any):
    """The triple, and the x-derivatives of its last two entries."""
    zero = type(x)(0.0)
    p0 = zero
    p1 = zero
    p2 = zero
    d1 = zero
    d2 = zero
    for k in range(8, -1, -1):
        p0, p1, p2, d1, d2 = _triple_slope_step(sigma, x, type(x)(high[k]), p0, p1, p2, d1, d2)
    for k in range(8, -1, -1):
        p0, p1, p2, d1, d2 = _triple_slope_step(sigma, x, type(x)(mid[k]), p0, p1, p2, d1, d2)
    for k in range(8, -1, -1):
        p0, p1, p2, d1, d2 = _triple_slope_step(sigma, x, type(x)(low[k]), p0, p1, p2, d1, d2)
    return p0, p1, p2, d1, d2


@wp.func
def _triple_curvature_step(
    sigma: Any, x: Any, c: Any, p0: Any, p1: Any, p2: Any, d1: Any, d2: Any, e1: Any, e2: Any
):
    """_triple_slope_step with the second x-derivatives e1, e2."""
    return (
        sigma * p0 + c,
        sigma * p1 + p0 - x * p2,
        sigma * p2 + p1,
        sigma * d1 - p2 - x * d2,
        sigma * d2 + d1,
        sigma * e1 - type(x)(2.0) * d2 - x * e2,
        sigma * e2 + e1,
    )


@wp.func
def series_triple_curvature(sigma: Any, x: Any, low: Any, mid: Any, high: Any):
    """The triple, and the first and second x-derivatives of its last two entries."""
    zero = type(x)(0.0)
    p0 = zero
    p1 = zero
    p2 = zero
    d1 = zero
    d2 = zero
    e1 = zero
    e2 = zero
    for k in range(8, -1, -1):
        p0, p1, p2, d1, d2, e1, e2 = _triple_curvature_step(
            sigma, x, type(x)(high[k]), p0, p1, p2, d1, d2, e1, e2
        )
    for k in range(8, -1, -1):
        p0, p1, p2, d1, d2, e1, e2 = _triple_curvature_step(
            sigma, x, type(x)(mid[k]), p0, p1, p2, d1, d2, e1, e2
        )
    for k in range(8, -1, -1):
        p0, p1, p2, d1, d2, e1, e2 = _triple_curvature_step(
            sigma, x, type(x)(low[k]), p0, p1, p2, d1, d2, e1, e2
        )
    return p0, p1, p2, d1, d2, e1, e2


@wp.func
def series_at(sigma: Any, low: Any, mid: Any, high: Any):
    """sum c_n sigma^n (27 coefficients in three chunks), by Horner."""
    total = type(sigma)(0.0)
    for k in range(8, -1, -1):
        total = total * sigma + type(sigma)(high[k])
    for k in range(8, -1, -1):
        total = total * sigma + type(sigma)(mid[k])
    for k in range(8, -1, -1):
        total = total * sigma + type(sigma)(low[k])
    return total


# --- the closed forms -------------------------------------------------------------------------


@wp.func
def exp_ratio(sigma: Any):
    """f(sigma) = (e^sigma - 1) / sigma, f'(sigma) and f''(sigma); series for |sigma| < 1,
    else the recurrences f' = (e^sigma - f) / sigma, f'' = (e^sigma - 2 f') / sigma."""
    if wp.abs(sigma) < type(sigma)(EXP_SERIES_BELOW):
        return (
            series_at(sigma, F_LOW, F_MID, F_HIGH),
            series_at(sigma, F1_LOW, F1_MID, F1_HIGH),
            series_at(sigma, F2_LOW, F2_MID, F2_HIGH),
        )
    e = wp.exp(sigma)
    f = (e - type(sigma)(1.0)) / sigma
    f1 = (e - f) / sigma
    return f, f1, (e - type(sigma)(2.0) * f1) / sigma


@wp.func
def horner_curvature(x: Any, c: Any):
    """d^2/dx^2 of horner(x, c): sum_k k (k - 1) c[k] x^(k - 2)."""
    total = type(x)(wp.float64(56.0) * c[8])
    for k in range(7, 1, -1):
        total = total * x + type(x)(wp.float64(k * (k - 1)) * c[k])
    return total


@wp.func
def sine_cosine_ratios(x: Any):
    """s = sin(theta)/theta and c = (1 - cos(theta))/theta^2, and their first and second
    derivatives in x = theta^2: s' = (cos(theta) - s) / 2x, c' = (s - 2c) / 2x,
    s'' = (-s/2 - 3s') / 2x, c'' = (s' - 4c') / 2x; series below x = 1."""
    if x < type(x)(1.0):
        return (
            horner(x, SIN_SERIES),
            horner_slope(x, SIN_SERIES),
            horner_curvature(x, SIN_SERIES),
            horner(x, COS_SERIES),
            horner_slope(x, COS_SERIES),
            horner_curvature(x, COS_SERIES),
        )
    theta = wp.sqrt(x)
    s = wp.sin(theta) / theta
    c = one_minus_cos_over(x)
    two_x = type(x)(2.0) * x
    s1 = (wp.cos(theta) - s) / two_x
    c1 = (s - type(x)(2.0) * c) / two_x
    return (
        s,
        s1,
        (type(x)(-0.5) * s - type(x)(3.0) * s1) / two_x,
        c,
        c1,
        (s1 - type(x)(4.0) * c1) / two_x,
    )


@wp.func
def closed_numerators(sigma: Any, x: Any):
    """The closed forms' numerators N1, N2 (a1 = N1 / D, a2 = N2 / D, D = sigma^2 + x) and
    their first and second derivatives, with E = e^sigma, s and c from sine_cosine_ratios:
    N1 = sigma E s + x E c - sigma f(sigma), N2 = sigma E c + f(sigma) - E s."""
    e = wp.exp(sigma)
    f, f1, f2 = exp_ratio(sigma)
    s, s1, s2, c, c1, c2 = sine_cosine_ratios(x)
    one = type(x)(1.0)
    n1 = sigma * e * s + x * e * c - sigma * f
    n2 = sigma * e * c + f - e * s
    n1_x = sigma * e * s1 + e * c + x * e * c1
    n2_x = sigma * e * c1 - e * s1
    # d(sigma f) / dsigma = e^sigma; s + x c = 1 - cos + sin/theta, kept as written
    n1_s = e * (sigma * s + (s - one) + x * c)
    n2_s = e * c * (one + sigma) + f1 - e * s
    n1_xx = sigma * e * s2 + type(x)(2.0) * e * c1 + x * e * c2
    n2_xx = sigma * e * c2 - e * s2
    n1_xs = n1_x + e * s1
    n2_xs = n2_x + e * c1
    n1_ss = n1_s + e * s
    n2_ss = n2_s - f1 + e * c + f2
    return (
        f, f1, f2,
        n1, n1_x, n1_s, n1_xx, n1_xs, n1_ss,
        n2, n2_x, n2_s, n2_xx, n2_xs, n2_ss,
    )  # fmt: skip


@wp.func
def quotient_slopes(n: Any, n_x: Any, n_s: Any, d: Any, sigma: Any):
    """a = n / d with d = sigma^2 + x, and a_x, a_sigma."""
    a = n / d
    return a, (n_x - a) / d, (n_s - type(d)(2.0) * sigma * a) / d


@wp.func
def quotient_curvatures(
    n: Any, n_x: Any, n_s: Any, n_xx: Any, n_xs: Any, n_ss: Any, d: Any, sigma: Any
):
    """a = n / d with d = sigma^2 + x: a, a_x, a_sigma, a_xx, a_xsigma, a_sigmasigma."""
    two = type(d)(2.0)
    a, a_x, a_s = quotient_slopes(n, n_x, n_s, d, sigma)
    return (
        a,
        a_x,
        a_s,
        (n_xx - two * a_x) / d,
        (n_xs - two * sigma * a_x - a_s) / d,
        (n_ss - two * a - type(d)(4.0) * sigma * a_s) / d,
    )


# --- the coefficients of W --------------------------------------------------------------------


@wp.func
def scaled_rotation_coefficients(sigma: Any, x: Any):
    """W's a0, a1, a2 at sigma and x = theta^2."""
    if sigma * sigma + x < type(x)(SERIES_RADIUS2):
        return series_triple(sigma, x, F_LOW, F_MID, F_HIGH)
    e = wp.exp(sigma)
    f, f1, f2 = exp_ratio(sigma)
    s = sin_over(x)
    c = one_minus_cos_over(x)
    d = sigma * sigma + x
    return f, (sigma * e * s + x * e * c - sigma * f) / d, (sigma * e * c + f - e * s) / d


@wp.func
def scaled_rotation_slopes(sigma: Any, x: Any):
    """a0, a1, a2 and their derivatives: a0_sigma, a1_x, a1_sigma, a2_x, a2_sigma."""
    if sigma * sigma + x < type(x)(SERIES_RADIUS2):
        a0, a1, a2, a1_x, a2_x = series_triple_slope(sigma, x, F_LOW, F_MID, F_HIGH)
        a0_s, a1_s, a2_s = series_triple(sigma, x, F1_LOW, F1_MID, F1_HIGH)
        return a0, a1, a2, a0_s, a1_x, a1_s, a2_x, a2_s
    (
        f, f1, f2,
        n1, n1_x, n1_s, n1_xx, n1_xs, n1_ss,
        n2, n2_x, n2_s, n2_xx, n2_xs, n2_ss,
    ) = closed_numerators(sigma, x)  # fmt: skip
    d = sigma * sigma + x
    a1, a1_x, a1_s = quotient_slopes(n1, n1_x, n1_s, d, sigma)
    a2, a2_x, a2_s = quotient_slopes(n2, n2_x, n2_s, d, sigma)
    return f, a1, a2, f1, a1_x, a1_s, a2_x, a2_s


@wp.func
def scaled_rotation_curvatures(sigma: Any, x: Any):
    """scaled_rotation_slopes' values, then the second derivatives a0_ss, a1_xx, a1_xs,
    a1_ss, a2_xx, a2_xs, a2_ss."""
    if sigma * sigma + x < type(x)(SERIES_RADIUS2):
        a0, a1, a2, a1_x, a2_x, a1_xx, a2_xx = series_triple_curvature(
            sigma, x, F_LOW, F_MID, F_HIGH
        )
        a0_s, a1_s, a2_s, a1_xs, a2_xs = series_triple_slope(sigma, x, F1_LOW, F1_MID, F1_HIGH)
        a0_ss, a1_ss, a2_ss = series_triple(sigma, x, F2_LOW, F2_MID, F2_HIGH)
        return (
            a0, a1, a2, a0_s, a1_x, a1_s, a2_x, a2_s,
            a0_ss, a1_xx, a1_xs, a1_ss, a2_xx, a2_xs, a2_ss,
        )  # fmt: skip
    (
        f, f1, f2,
        n1, n1_x, n1_s, n1_xx, n1_xs, n1_ss,
        n2, n2_x, n2_s, n2_xx, n2_xs, n2_ss,
    ) = closed_numerators(sigma, x)  # fmt: skip
    d = sigma * sigma + x
    a1, a1_x, a1_s, a1_xx, a1_xs, a1_ss = quotient_curvatures(
        n1, n1_x, n1_s, n1_xx, n1_xs, n1_ss, d, sigma
    )
    a2, a2_x, a2_s, a2_xx, a2_xs, a2_ss = quotient_curvatures(
        n2, n2_x, n2_s, n2_xx, n2_xs, n2_ss, d, sigma
    )
    return (
        f, a1, a2, f1, a1_x, a1_s, a2_x, a2_s,
        f2, a1_xx, a1_xs, a1_ss, a2_xx, a2_xs, a2_ss,
    )  # fmt: skip


@wp.func
def inverse_coefficients(x: Any, a0: Any, a1: Any, a2: Any):
    """W^-1's b0, b1, b2 from W's: W's eigenvalues are a0 and f(z) = (a0 - x a2) +- i
    theta a1, and W^-1 is the same function of K with their reciprocals."""
    real = a0 - x * a2
    modulus2 = real * real + x * a1 * a1
    return (
        type(x)(1.0) / a0,
        -a1 / modulus2,
        (a1 * a1 - a0 * a2 + x * a2 * a2) / (a0 * modulus2),
    )


# --- W applied to vectors, and its derivatives ------------------------------------------------


@wp.func
def quadratic_apply(omega: Any, c0: Any, c1: Any, c2: Any, v: Any):
    """(c0 I + c1 K + c2 K^2) v, K = [omega]x."""
    u = wp.cross(omega, v)
    return c0 * v + c1 * u + c2 * wp.cross(omega, u)


@wp.func
def quadratic_matrix(omega: Any, c0: Any, c1: Any, c2: Any):
    """c0 I + c1 K + c2 K^2, with K^2 = omega omega^T - |omega|^2 I."""
    x = wp.dot(omega, omega)
    return c0 * identity3(x) + c1 * hat(omega) + c2 * (wp.outer(omega, omega) - x * identity3(x))


@wp.func
def quadratic_matrix_tangent(
    omega: Any, d_omega: Any, c1: Any, c2: Any, d_c0: Any, d_c1: Any, d_c2: Any
):
    """d(c0 I + c1 K + c2 K^2) given the coefficients' differentials d_c."""
    x = wp.dot(omega, omega)
    dx = type(x)(2.0) * wp.dot(omega, d_omega)
    k2 = wp.outer(omega, omega) - x * identity3(x)
    dk2 = wp.outer(d_omega, omega) + wp.outer(omega, d_omega) - dx * identity3(x)
    return d_c0 * identity3(x) + d_c1 * hat(omega) + d_c2 * k2 + c1 * hat(d_omega) + c2 * dk2


@wp.func
def scaled_rotation_apply_tangent(
    omega: Any, sigma: Any, v: Any, d_omega: Any, d_sigma: Any, slopes_x: Any, slopes_s: Any,
    a1: Any, a2: Any,
):  # fmt: skip
    """(dW) v along (d_omega, d_sigma): slopes_x = (0, a1_x, a2_x), slopes_s = (a0_s, a1_s,
    a2_s) as vectors."""
    dx = type(sigma)(2.0) * wp.dot(omega, d_omega)
    u = wp.cross(omega, v)
    w = wp.cross(omega, u)
    d = dx * slopes_x + d_sigma * slopes_s
    return (
        d[0] * v
        + d[1] * u
        + d[2] * w
        + a1 * wp.cross(d_omega, v)
        + a2 * (wp.cross(d_omega, u) + wp.cross(omega, wp.cross(d_omega, v)))
    )


@wp.func
def scaled_rotation_apply_vjp(
    omega: Any, v: Any, g: Any, slopes_x: Any, slopes_s: Any, a1: Any, a2: Any
):
    """The cotangents of omega and sigma from the cotangent g of W(omega, sigma) v."""
    u = wp.cross(omega, v)
    w = wp.cross(omega, u)
    gv = wp.dot(g, v)
    gu = wp.dot(g, u)
    gw = wp.dot(g, w)
    x_bar = slopes_x[1] * gu + slopes_x[2] * gw
    omega_bar = (
        (type(gv)(2.0) * x_bar) * omega
        + a1 * wp.cross(v, g)
        + a2 * (wp.cross(u, g) + wp.cross(v, wp.cross(g, omega)))
    )
    return omega_bar, slopes_s[0] * gv + slopes_s[1] * gu + slopes_s[2] * gw


# --- tangents ---------------------------------------------------------------------------------


@wp.func
def similarity_twist(rho: Any, omega: Any, sigma: Any):
    return wp.vector(rho[0], rho[1], rho[2], omega[0], omega[1], omega[2], sigma)


# --- exp and log ------------------------------------------------------------------------------


@wp.func
def sim3_exp(xi: Any):
    """(W(omega, sigma) rho, so3_exp(omega), e^sigma)."""
    omega = omega_of(xi)
    sigma = xi[6]
    a0, a1, a2 = scaled_rotation_coefficients(sigma, wp.dot(omega, omega))
    return quadratic_apply(omega, a0, a1, a2, rho_of(xi)), so3_exp(omega), wp.exp(sigma)


@wp.func
def _slope_vectors(sigma: Any, x: Any):
    a0, a1, a2, a0_s, a1_x, a1_s, a2_x, a2_s = scaled_rotation_slopes(sigma, x)
    zero = type(x)(0.0)
    return a0, a1, a2, wp.vector(zero, a1_x, a2_x), wp.vector(a0_s, a1_s, a2_s)


@wp.func
def sim3_exp_tangent(xi: Any, d_xi: Any):
    omega = omega_of(xi)
    rho = rho_of(xi)
    sigma = xi[6]
    d_omega = omega_of(d_xi)
    a0, a1, a2, slopes_x, slopes_s = _slope_vectors(sigma, wp.dot(omega, omega))
    d_position = scaled_rotation_apply_tangent(
        omega, sigma, rho, d_omega, d_xi[6], slopes_x, slopes_s, a1, a2
    ) + quadratic_apply(omega, a0, a1, a2, rho_of(d_xi))
    return d_position, so3_exp_tangent(omega, d_omega), wp.exp(sigma) * d_xi[6]


@wp.func
def sim3_exp_vjp(xi: Any, g_position: Any, g_quaternion: Any, g_scale: Any):
    omega = omega_of(xi)
    rho = rho_of(xi)
    sigma = xi[6]
    a0, a1, a2, slopes_x, slopes_s = _slope_vectors(sigma, wp.dot(omega, omega))
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
    a0, a1, a2, slopes_x, slopes_s = _slope_vectors(sigma, x)
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
    a0, a1, a2, slopes_x, slopes_s = _slope_vectors(sigma, x)
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


# --- products, inverse, points ----------------------------------------------------------------


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


# --- matrices and the adjoint -----------------------------------------------------------------


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


# --- the Jacobians ----------------------------------------------------------------------------


@wp.func
def omega_derivative(omega: Any, v: Any, a1: Any, a2: Any, a1_x: Any, a2_x: Any):
    """d(W v)/d omega = -a1 [v]x + a2 ((omega.v) I + omega v^T - 2 v omega^T)
    + 2 a1_x (omega x v) omega^T + 2 a2_x (omega x (omega x v)) omega^T."""
    u = wp.cross(omega, v)
    w = wp.cross(omega, u)
    two = type(a1)(2.0)
    return (
        -a1 * hat(v)
        + a2 * (wp.dot(omega, v) * identity3(a1) + wp.outer(omega, v) - two * wp.outer(v, omega))
        + (two * a1_x) * wp.outer(u, omega)
        + (two * a2_x) * wp.outer(w, omega)
    )


@wp.func
def jacobian_blocks(xi: Any):
    """W, Q, q and J_l(omega) of the left Jacobian (see the module's docstring)."""
    rho = rho_of(xi)
    omega = omega_of(xi)
    sigma = xi[6]
    a0, a1, a2, a0_s, a1_x, a1_s, a2_x, a2_s = scaled_rotation_slopes(sigma, wp.dot(omega, omega))
    w = quadratic_matrix(omega, a0, a1, a2)
    j = left_jacobian(omega)
    translation = w @ rho
    q = omega_derivative(omega, rho, a1, a2, a1_x, a2_x) + hat(translation) @ j
    column = quadratic_apply(omega, a0_s - a0, a1_s - a1, a2_s - a2, rho)
    return w, q, column, j


@wp.func
def jacobian_blocks_tangent(xi: Any, d_xi: Any):
    """The blocks of jacobian_blocks, and their differentials along d_xi."""
    rho = rho_of(xi)
    omega = omega_of(xi)
    sigma = xi[6]
    d_rho = rho_of(d_xi)
    d_omega = omega_of(d_xi)
    d_sigma = d_xi[6]
    two = type(sigma)(2.0)
    x = wp.dot(omega, omega)
    dx = two * wp.dot(omega, d_omega)
    (
        a0, a1, a2, a0_s, a1_x, a1_s, a2_x, a2_s,
        a0_ss, a1_xx, a1_xs, a1_ss, a2_xx, a2_xs, a2_ss,
    ) = scaled_rotation_curvatures(sigma, x)  # fmt: skip
    d_a0 = a0_s * d_sigma
    d_a1 = a1_x * dx + a1_s * d_sigma
    d_a2 = a2_x * dx + a2_s * d_sigma
    d_a0_s = a0_ss * d_sigma
    d_a1_x = a1_xx * dx + a1_xs * d_sigma
    d_a2_x = a2_xx * dx + a2_xs * d_sigma
    d_a1_s = a1_xs * dx + a1_ss * d_sigma
    d_a2_s = a2_xs * dx + a2_ss * d_sigma

    w = quadratic_matrix(omega, a0, a1, a2)
    d_w = quadratic_matrix_tangent(omega, d_omega, a1, a2, d_a0, d_a1, d_a2)
    j = left_jacobian(omega)
    d_j = left_jacobian_tangent(omega, d_omega)
    translation = w @ rho
    d_translation = d_w @ rho + w @ d_rho

    u = wp.cross(omega, rho)
    v = wp.cross(omega, u)
    d_u = wp.cross(d_omega, rho) + wp.cross(omega, d_rho)
    d_v = wp.cross(d_omega, u) + wp.cross(omega, d_u)
    d_derivative = (
        -d_a1 * hat(rho)
        - a1 * hat(d_rho)
        + d_a2
        * (wp.dot(omega, rho) * identity3(x) + wp.outer(omega, rho) - two * wp.outer(rho, omega))
        + a2
        * (
            (wp.dot(d_omega, rho) + wp.dot(omega, d_rho)) * identity3(x)
            + wp.outer(d_omega, rho)
            + wp.outer(omega, d_rho)
            - two * (wp.outer(d_rho, omega) + wp.outer(rho, d_omega))
        )
        + (two * d_a1_x) * wp.outer(u, omega)
        + (two * a1_x) * (wp.outer(d_u, omega) + wp.outer(u, d_omega))
        + (two * d_a2_x) * wp.outer(v, omega)
        + (two * a2_x) * (wp.outer(d_v, omega) + wp.outer(v, d_omega))
    )
    q = omega_derivative(omega, rho, a1, a2, a1_x, a2_x) + hat(translation) @ j
    d_q = d_derivative + hat(d_translation) @ j + hat(translation) @ d_j
    column = (a0_s - a0) * rho + (a1_s - a1) * u + (a2_s - a2) * v
    d_column = (
        (d_a0_s - d_a0) * rho
        + (a0_s - a0) * d_rho
        + (d_a1_s - d_a1) * u
        + (a1_s - a1) * d_u
        + (d_a2_s - d_a2) * v
        + (a2_s - a2) * d_v
    )
    return w, q, column, j, d_w, d_q, d_column, d_j


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


@wp.func
def sim3_right_jacobian(xi: Any):
    return sim3_left_jacobian(-xi)


@wp.func
def sim3_right_jacobian_tangent(xi: Any, d_xi: Any):
    return sim3_left_jacobian_tangent(-xi, -d_xi)


@wp.func
def sim3_right_jacobian_inverse(xi: Any):
    return sim3_left_jacobian_inverse(-xi)


@wp.func
def sim3_right_jacobian_inverse_tangent(xi: Any, d_xi: Any):
    return sim3_left_jacobian_inverse_tangent(-xi, -d_xi)


# --- the ops ----------------------------------------------------------------------------------

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
)
SIM3_MULTIPLY = define_op(
    "sim3_multiply",
    sim3_multiply,
    operands={**_ELEMENT, "position2": (3,), "quaternion2": (4,), "scale2": ()},
    results=_ELEMENT_RESULTS,
    tangent=sim3_multiply_tangent,
    vjp=sim3_multiply_vjp,
    doc="T1 T2 = (s1 R(q1) t2 + t1, q1 q2, s1 s2): T2 is applied first.",
)
SIM3_INVERSE = define_op(
    "sim3_inverse",
    sim3_inverse,
    operands=_ELEMENT,
    results=_ELEMENT_RESULTS,
    tangent=sim3_inverse_tangent,
    vjp=sim3_inverse_vjp,
    doc="T^-1 = (-R(q*) t / s, q*, 1 / s), with q* the conjugate.",
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
)
SIM3_TO_MATRIX = define_op(
    "sim3_to_matrix",
    sim3_to_matrix,
    operands=_ELEMENT,
    results={"out_matrix": (4, 4)},
    tangent=sim3_to_matrix_tangent,
    vjp=sim3_to_matrix_vjp,
    doc="[[s R(q), t], [0, 0, 0, 1]].",
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
)
SIM3_LEFT_JACOBIAN = define_op(
    "sim3_left_jacobian",
    sim3_left_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_left_jacobian_tangent,
    doc="[[W, Q, q], [0, J_l(omega), 0], [0, 0, 1]]: Q = d(W rho)/d omega + [W rho]x "
    "J_l(omega), q = d(W rho)/d sigma - W rho.",
)
SIM3_LEFT_JACOBIAN_INVERSE = define_op(
    "sim3_left_jacobian_inverse",
    sim3_left_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_left_jacobian_inverse_tangent,
    doc="[[W^-1, -W^-1 Q J_l^-1, -W^-1 q], [0, J_l^-1, 0], [0, 0, 1]], for |omega| < 2 pi.",
)
SIM3_RIGHT_JACOBIAN = define_op(
    "sim3_right_jacobian",
    sim3_right_jacobian,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_right_jacobian_tangent,
    doc="J_r(xi) = J_l(-xi).",
)
SIM3_RIGHT_JACOBIAN_INVERSE = define_op(
    "sim3_right_jacobian_inverse",
    sim3_right_jacobian_inverse,
    operands=_TWIST,
    results=_JACOBIAN,
    tangent=sim3_right_jacobian_inverse_tangent,
    doc="J_r(xi)^-1 = J_l(-xi)^-1, for |omega| < 2 pi.",
)
