"""W(omega, sigma) = int_0^1 e^(sigma tau) R(tau omega) dtau, the integral that Sim(3)'s
exponential applies to rho (SO(3)'s left Jacobian at sigma = 0), and the derivatives of
W rho that Sim(3)'s exponential, logarithm and left Jacobian are made of.

W = a0 I + a1 K + a2 K^2, K = [omega]x. With z = sigma + i theta and f(z) = (e^z - 1) / z
= int_0^1 e^(z tau) dtau, the coefficients are the "triple" of f: a0 = f(sigma), a1 =
Im f(z) / theta and a2 = (f(sigma) - Re f(z)) / theta^2 (W's eigenvalues are f(sigma) and
f(sigma +- i theta)). Each is 0/0 where theta or sigma vanishes, so:

- for |z| < 2 they are power series in z, summed by a Horner scheme over the triple that
  never divides (`_triple_step`): exact at theta = 0, sigma = 0 and both, and so are their
  derivatives, the series' own (as `_series.py`'s);
- above, closed forms in e^sigma, sin(theta)/theta and (1 - cos(theta))/theta^2 over
  sigma^2 + theta^2 >= 4, which has nothing left to cancel.

The derivatives of the triple in sigma are the triples of f' and f'' (the construction
commutes with d/dsigma); those in x = theta^2 differentiate the Horner scheme, or the
closed forms' quotients. W^-1 = b0 I + b1 K + b2 K^2 follows from the eigenvalues: b0 =
1 / a0, b1 = -a1 / |f(z)|^2, b2 = (a1^2 - a0 a2 + x a2^2) / (a0 |f(z)|^2), with no division
by theta.

Sim(3)'s left Jacobian is [[W, Q, q], [0, J_l(omega), 0], [0, 0, 1]]: a left perturbation
exp(eta) T moves the translation t = W rho by eta_rho + eta_sigma t + eta_omega x t, so
Q = d(W rho)/d omega + [W rho]x J_l(omega) and q = d(W rho)/d sigma - W rho, closed forms
in the triple's first derivatives (their tangents in its second): `jacobian_blocks`.
"""

from typing import Any

import warp as wp

from ._series import one_minus_cos_over, rodrigues_curvatures, sin_over
from .se3 import omega_of, rho_of
from .so3 import hat, identity3, left_jacobian, left_jacobian_tangent, skew_quadratic_tangent

_F64x9 = wp.types.vector(9, wp.float64)


def _chunks(coefficient):
    """Three Warp constants of nine float64 coefficients each, c_0..c_8, c_9..c_17 and
    c_18..c_26, of the series sum c_n z^n: Warp unrolls a loop of up to 16 iterations
    (`wp.config.max_unroll`), so each chunk's Horner loop is unrolled where one loop of 27
    would not be."""
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
# f(z) - 1: its constant term left out (the Horner step that adds it touches a0 only)
F_LESS_ONE_LOW = _chunks(lambda n: 0.0 if n == 0 else 1.0 / _factorial(n + 1))[0]
F1_LOW, F1_MID, F1_HIGH = _chunks(lambda n: (n + 1) / _factorial(n + 2))
F2_LOW, F2_MID, F2_HIGH = _chunks(lambda n: (n + 1) * (n + 2) / _factorial(n + 3))

SERIES_RADIUS2 = 4.0  # |z|^2 = sigma^2 + theta^2 under which the triples are series
EXP_SERIES_BELOW = 1.0  # |sigma| under which f(sigma) and its derivatives are series


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
def closed_numerators(sigma: Any, x: Any):
    """The closed forms' numerators N1, N2 (a1 = N1 / D, a2 = N2 / D, D = sigma^2 + x) and
    their first and second derivatives, with E = e^sigma, s and c from rodrigues_curvatures:
    N1 = sigma E s + x E c - sigma f(sigma), N2 = sigma E c + f(sigma) - E s."""
    e = wp.exp(sigma)
    f, f1, f2 = exp_ratio(sigma)
    s, s1, s2, c, c1, c2 = rodrigues_curvatures(x)
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
def scaled_rotation_coefficients_less_one(sigma: Any, x: Any):
    """W's a0 - 1, a1, a2: sim3_exp's translation as rho + (W - I) rho, rho unrounded
    (near the identity a0 = 1 + sigma / 2 rounds before it multiplies)."""
    if sigma * sigma + x < type(x)(SERIES_RADIUS2):
        return series_triple(sigma, x, F_LESS_ONE_LOW, F_MID, F_HIGH)
    a0, a1, a2 = scaled_rotation_coefficients(sigma, x)
    return a0 - type(x)(1.0), a1, a2


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
def slope_vectors(sigma: Any, x: Any):
    """a0, a1, a2 and their slopes as the vectors (0, a1_x, a2_x) and (a0_s, a1_s, a2_s)
    that scaled_rotation_apply_tangent and scaled_rotation_apply_vjp take."""
    a0, a1, a2, a0_s, a1_x, a1_s, a2_x, a2_s = scaled_rotation_slopes(sigma, x)
    zero = type(x)(0.0)
    return a0, a1, a2, wp.vector(zero, a1_x, a2_x), wp.vector(a0_s, a1_s, a2_s)


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
    d_w = skew_quadratic_tangent(omega, a1, a1_x, a2, a2_x, d_omega) + d_sigma * quadratic_matrix(
        omega, a0_s, a1_s, a2_s
    )
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
