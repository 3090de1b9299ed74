"""The scalar functions of the angle that the rotation groups' closed forms share, exact
at the identity: every coefficient that is 0/0 at `theta = 0` (`sin(theta) / theta`,
`(1 - cos(theta)) / theta^2`, ...) is a power series in `x = theta^2` below `x = 1` (to
float64 rounding, so that its derivatives are the series' too: Warp's adjoint of a closed
form such as `sin(theta) / theta` would divide by zero at the identity), and its closed
form above. Each takes `x`, not `theta`, so that no square root is taken at 0.
"""

from typing import Any

import warp as wp

_F64x9 = wp.types.vector(9, wp.float64)

# Taylor coefficients in x = theta^2, from the constant term up; nine terms are exact to
# float64 rounding for x < 1 (the first term left out is below 1e-17 of the sum).
SIN_SERIES = wp.constant(
    _F64x9(
        1.0,
        -1 / 6,
        1 / 120,
        -1 / 5040,
        1 / 362880,
        -1 / 39916800,
        1 / 6227020800,
        -1 / 1307674368000,
        1 / 355687428096000,
    )
)  # fmt: skip  sin(t) / t
COS_SERIES = wp.constant(
    _F64x9(
        1 / 2,
        -1 / 24,
        1 / 720,
        -1 / 40320,
        1 / 3628800,
        -1 / 479001600,
        1 / 87178291200,
        -1 / 20922789888000,
        1 / 6402373705728000,
    )
)  # fmt: skip  (1 - cos t) / t^2
SINE_REMAINDER_SERIES = wp.constant(
    _F64x9(
        1 / 6,
        -1 / 120,
        1 / 5040,
        -1 / 362880,
        1 / 39916800,
        -1 / 6227020800,
        1 / 1307674368000,
        -1 / 355687428096000,
        1 / 121645100408832000,
    )
)  # fmt: skip  (t - sin t) / t^3
COSINE_REMAINDER_SERIES = wp.constant(
    _F64x9(
        1 / 24,
        -1 / 720,
        1 / 40320,
        -1 / 3628800,
        1 / 479001600,
        -1 / 87178291200,
        1 / 20922789888000,
        -1 / 6402373705728000,
        1 / 2432902008176640000,
    )
)  # fmt: skip  (t^2 / 2 + cos t - 1) / t^4
SINE_REMAINDER2_SERIES = wp.constant(
    _F64x9(
        -1 / 120,
        1 / 5040,
        -1 / 362880,
        1 / 39916800,
        -1 / 6227020800,
        1 / 1307674368000,
        -1 / 355687428096000,
        1 / 121645100408832000,
        -1 / 51090942171709440000,
    )
)  # fmt: skip  (t - sin t - t^3 / 6) / t^5
JACOBIAN_INVERSE_SERIES = wp.constant(
    _F64x9(
        1 / 12,
        1 / 720,
        1 / 30240,
        1 / 1209600,
        1 / 47900160,
        691 / 1307674368000,
        1 / 74724249600,
        3617 / 10670622842880000,
        43867 / 5109094217170944000,
    )
)  # fmt: skip  1 / t^2 - cot(t / 2) / (2 t), whose coefficients are |B_2n| / (2n)!
HALF_COS_SERIES = wp.constant(
    _F64x9(
        1.0,
        -1 / 8,
        1 / 384,
        -1 / 46080,
        1 / 10321920,
        -1 / 3715891200,
        1 / 1961990553600,
        -1 / 1428329123020800,
        1 / 1371195958099968000,
    )
)  # fmt: skip  cos(t / 2)
HALF_SIN_SERIES = wp.constant(
    _F64x9(
        1 / 2,
        -1 / 48,
        1 / 3840,
        -1 / 645120,
        1 / 185794560,
        -1 / 81749606400,
        1 / 51011754393600,
        -1 / 42849873690624000,
        1 / 46620662575398912000,
    )
)  # fmt: skip  sin(t / 2) / t
HALF_SIN_SLOPE_SERIES = wp.constant(
    _F64x9(
        -1 / 48,
        1 / 1920,
        -1 / 215040,
        1 / 46448640,
        -1 / 16349921280,
        1 / 8501959065600,
        -1 / 6121410527232000,
        1 / 5827582821924864000,
        -1 / 7086340711460634624000,
    )
)  # fmt: skip  d/dx [sin(t / 2) / t], x = t^2
ATAN_SERIES = wp.constant(
    _F64x9(1.0, -1 / 3, 1 / 5, -1 / 7, 1 / 9, -1 / 11, 1 / 13, -1 / 15, 1 / 17)
)  # fmt: skip  atan(r) / r in r^2, used for r^2 < 1/100

ATAN_SLOPE_SERIES = wp.constant(
    _F64x9(-1 / 3, 2 / 5, -3 / 7, 4 / 9, -5 / 11, 6 / 13, -7 / 15, 8 / 17, -9 / 19)
)  # fmt: skip  the derivative of atan(r) / r in r^2

SERIES_BELOW = 1.0  # theta^2 under which the series replace the closed forms
ATAN_SERIES_BELOW = 0.01  # (|u| / |w|)^2 under which the logarithm uses its series


@wp.func
def horner(x: Any, c: Any):
    """sum_k c[k] x^k for the nine coefficients c, in x's precision."""
    total = type(x)(c[8])
    for k in range(7, -1, -1):
        total = total * x + type(x)(c[k])
    return total


@wp.func
def horner_slope(x: Any, c: Any):
    """d/dx of horner(x, c): sum_k k c[k] x^(k - 1)."""
    total = type(x)(wp.float64(8.0) * c[8])
    for k in range(7, 0, -1):
        total = total * x + type(x)(wp.float64(k) * c[k])
    return total


@wp.func
def horner_curvature(x: Any, c: Any):
    """d^2/dx^2 of horner(x, c): sum_k k (k - 1) c[k] x^(k - 2)."""
    total = type(x)(wp.float64(56.0) * c[8])
    for k in range(7, 1, -1):
        total = total * x + type(x)(wp.float64(k * (k - 1)) * c[k])
    return total


@wp.func
def series_pair(x: Any, a: Any, b: Any):
    """Two series and their slopes in x: (a(x), a'(x), b(x), b'(x))."""
    return horner(x, a), horner_slope(x, a), horner(x, b), horner_slope(x, b)


@wp.func
def sin_over(x: Any):
    """sin(theta) / theta, for x = theta^2."""
    if x < type(x)(SERIES_BELOW):
        return horner(x, SIN_SERIES)
    theta = wp.sqrt(x)
    return wp.sin(theta) / theta


@wp.func
def one_minus_cos_over(x: Any):
    """(1 - cos(theta)) / theta^2, as 2 sin^2(theta / 2) / theta^2 (no cancellation)."""
    if x < type(x)(SERIES_BELOW):
        return horner(x, COS_SERIES)
    theta = wp.sqrt(x)
    half = wp.sin(type(x)(0.5) * theta) / theta
    return type(x)(2.0) * half * half


@wp.func
def sine_remainder(x: Any):
    """(theta - sin(theta)) / theta^3."""
    if x < type(x)(SERIES_BELOW):
        return horner(x, SINE_REMAINDER_SERIES)
    theta = wp.sqrt(x)
    return (theta - wp.sin(theta)) / (x * theta)


@wp.func
def cosine_remainder(x: Any):
    """(theta^2 / 2 + cos(theta) - 1) / theta^4."""
    if x < type(x)(SERIES_BELOW):
        return horner(x, COSINE_REMAINDER_SERIES)
    return (type(x)(0.5) - one_minus_cos_over(x)) / x


@wp.func
def sine_remainder2(x: Any):
    """(theta - sin(theta) - theta^3 / 6) / theta^5."""
    if x < type(x)(SERIES_BELOW):
        return horner(x, SINE_REMAINDER2_SERIES)
    return (sine_remainder(x) - type(x)(1.0) / type(x)(6.0)) / x


@wp.func
def jacobian_inverse_coefficient(x: Any):
    """1 / theta^2 - (1 + cos(theta)) / (2 theta sin(theta)), written with cot(theta / 2)
    so that it is finite at theta = pi (it grows without bound at 2 pi)."""
    if x < type(x)(SERIES_BELOW):
        return horner(x, JACOBIAN_INVERSE_SERIES)
    theta = wp.sqrt(x)
    half = type(x)(0.5) * theta
    return (type(x)(1.0) - half * wp.cos(half) / wp.sin(half)) / x


@wp.func
def rodrigues_coefficients(x: Any):
    """Rodrigues' a = sin(theta)/theta, b = (1 - cos(theta))/theta^2, and their slopes in x."""
    if x < type(x)(SERIES_BELOW):
        return series_pair(x, SIN_SERIES, COS_SERIES)
    theta = wp.sqrt(x)
    a = wp.sin(theta) / theta
    b = one_minus_cos_over(x)
    two_x = type(x)(2.0) * x
    return a, (wp.cos(theta) - a) / two_x, b, (a - type(x)(2.0) * b) / two_x


@wp.func
def rodrigues_curvatures(x: Any):
    """rodrigues_coefficients' a, a', b, b' with the second derivatives in x after each:
    (a, a', a'', b, b', b''), a'' = (-a/2 - 3a') / 2x and b'' = (a' - 4b') / 2x."""
    a, a_slope, b, b_slope = rodrigues_coefficients(x)
    if x < type(x)(SERIES_BELOW):
        a_curvature = horner_curvature(x, SIN_SERIES)
        b_curvature = horner_curvature(x, COS_SERIES)
        return a, a_slope, a_curvature, b, b_slope, b_curvature
    two_x = type(x)(2.0) * x
    a_curvature = (type(x)(-0.5) * a - type(x)(3.0) * a_slope) / two_x
    return a, a_slope, a_curvature, b, b_slope, (a_slope - type(x)(4.0) * b_slope) / two_x


@wp.func
def left_jacobian_coefficients(x: Any):
    """J_l's a = (1 - cos(theta))/theta^2, b = (theta - sin(theta))/theta^3, and their
    slopes in x: a' = (sin(theta)/theta - 2a) / 2x, b' = (a - 3b) / 2x."""
    if x < type(x)(SERIES_BELOW):
        return series_pair(x, COS_SERIES, SINE_REMAINDER_SERIES)
    theta = wp.sqrt(x)
    sine = wp.sin(theta) / theta
    a = one_minus_cos_over(x)
    b = (type(x)(1.0) - sine) / x
    two_x = type(x)(2.0) * x
    return a, (sine - type(x)(2.0) * a) / two_x, b, (a - type(x)(3.0) * b) / two_x


@wp.func
def left_jacobian_inverse_coefficients(x: Any):
    """J_l^-1's a = -1/2 and b = jacobian_inverse_coefficient(x) = (1 - h cot(h)) / x,
    h = theta / 2, and their slopes in x (b' = -(d(h cot h)/dx + b) / x)."""
    a = type(x)(-0.5)
    zero = type(x)(0.0)
    if x < type(x)(SERIES_BELOW):
        return a, zero, horner(x, JACOBIAN_INVERSE_SERIES), horner_slope(x, JACOBIAN_INVERSE_SERIES)
    theta = wp.sqrt(x)
    half = type(x)(0.5) * theta
    sine = wp.sin(half)
    cotangent = wp.cos(half) / sine
    b = (type(x)(1.0) - half * cotangent) / x
    d_half_cotangent = (cotangent - half / (sine * sine)) / (type(x)(4.0) * theta)
    return a, zero, b, -(d_half_cotangent + b) / x


@wp.func
def half_angle(x: Any):
    """cos(theta / 2), sin(theta / 2) / theta, and the latter's derivative in x = theta^2."""
    if x < type(x)(SERIES_BELOW):
        return (
            horner(x, HALF_COS_SERIES),
            horner(x, HALF_SIN_SERIES),
            horner(x, HALF_SIN_SLOPE_SERIES),
        )
    theta = wp.sqrt(x)
    c = wp.cos(type(x)(0.5) * theta)
    s = wp.sin(type(x)(0.5) * theta) / theta
    return c, s, (type(x)(0.5) * c - s) / (type(x)(2.0) * x)


@wp.func
def log_scale(n2: Any, w: Any):
    """k with log(q) = k u for q = (w, u), w >= 0, n2 = |u|^2: 2 atan2(|u|, w) / |u|, and
    its partial derivatives in n2 and in w; for |u| << w, through the series of
    atan(r) / r in r^2 = n2 / w^2."""
    two = type(w)(2.0)
    if n2 < type(w)(ATAN_SERIES_BELOW) * w * w:
        x = n2 / (w * w)
        h = horner(x, ATAN_SERIES)
        slope = horner(x, ATAN_SLOPE_SERIES)
        return two * h / w, two * slope / (w * w * w), -(two / (w * w)) * (h + two * x * slope)
    n = wp.sqrt(n2)
    a = wp.atan2(n, w)
    r2 = n2 + w * w
    return two * a / n, (w / r2 - a / n) / n2, -two / r2
