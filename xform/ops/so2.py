"""SO(2): rotations of the plane as complex numbers `z = [cos t, sin t]`, tangent `[t]`.

Every op here is written with complex arithmetic on 2-vectors: a rotation acts on a point
`p = [x, y]` as the complex product `z p`, its matrix is `[[c, -s], [s, c]]`, and it
composes by the complex product. As every xform op, none normalises its input: a non-unit
`z` acts as `|z|` times the rotation by `z / |z|` (jaxlie's semantics, for which
`as_matrix`, `apply` and `multiply` are these products of the raw parameters), the inverse
is the conjugate, and the logarithm `atan2(s, c)` is invariant to the scale of `z`.

Each op's tangent and VJP are closed forms: the products are bilinear (a real-linear map
`w -> a w` has the adjoint `g -> conj(a) g`), the logarithm's gradient is
`[-s, c] / |z|^2`.
"""

from typing import Any

import warp as wp

from .._define import define_op
from . import _families as families


@wp.func
def complex_multiply(a: Any, b: Any):
    """The complex product a b of 2-vectors [re, im]."""
    return wp.vector(a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0])


@wp.func
def complex_conjugate(a: Any):
    return wp.vector(a[0], -a[1])


@wp.func
def complex_multiply_tangent(a: Any, b: Any, da: Any, db: Any):
    return complex_multiply(da, b) + complex_multiply(a, db)


@wp.func
def complex_multiply_vjp(a: Any, b: Any, g: Any):
    """The cotangents of a and b: g conj(b) and conj(a) g."""
    return complex_multiply(g, complex_conjugate(b)), complex_multiply(complex_conjugate(a), g)


@wp.func
def complex_conjugate_linear(a: Any, d: Any):
    """conj(d): the conjugate is linear and its own adjoint (its tangent and its VJP)."""
    return complex_conjugate(d)


@wp.func
def complex_matrix(a: Any):
    """[[re, -im], [im, re]]: the matrix of w -> a w."""
    return wp.matrix(a[0], -a[1], a[1], a[0], shape=(2, 2))


@wp.func
def complex_matrix_cotangent(g00: Any, g01: Any, g10: Any, g11: Any):
    """The cotangent of `a` from the cotangent of the block [[re, -im], [im, re]] of a
    matrix that holds complex_matrix(a): [g00 + g11, g10 - g01]."""
    return wp.vector(g00 + g11, g10 - g01)


@wp.func
def complex_matrix_vjp(a: Any, g: Any):
    return complex_matrix_cotangent(g[0, 0], g[0, 1], g[1, 0], g[1, 1])


@wp.func
def so2_exp(theta: Any):
    """[cos t, sin t]."""
    return wp.vector(wp.cos(theta[0]), wp.sin(theta[0]))


@wp.func
def so2_exp_tangent(theta: Any, d_theta: Any):
    return d_theta[0] * wp.vector(-wp.sin(theta[0]), wp.cos(theta[0]))


@wp.func
def so2_exp_vjp(theta: Any, g: Any):
    return wp.vector(g[1] * wp.cos(theta[0]) - g[0] * wp.sin(theta[0]), length=1)


@wp.func
def angle(z: Any):
    """atan2(s, c) for z = [c, s], in [-pi, pi]: invariant to the scale of z."""
    # atan2 maps infinite arguments to finite angles; (x - x) is 0 for a finite x and NaN
    # otherwise, so that NaN and Inf in the input still show in the result.
    poison = (z[0] - z[0]) + (z[1] - z[1])
    return wp.atan2(z[1], z[0]) + poison


@wp.func
def angle_gradient(z: Any):
    """d angle(z) / dz = [-s, c] / |z|^2."""
    return wp.vector(-z[1], z[0]) / wp.dot(z, z)


@wp.func
def so2_log(z: Any):
    return wp.vector(angle(z), length=1)


@wp.func
def so2_log_tangent(z: Any, dz: Any):
    return wp.vector(wp.dot(angle_gradient(z), dz), length=1)


@wp.func
def so2_log_vjp(z: Any, g: Any):
    return g[0] * angle_gradient(z)


@wp.func
def so2_to_matrix_tangent(z: Any, dz: Any):
    return complex_matrix(dz)


@wp.func
def so2_from_matrix(m: Any):
    """The first column [m00, m10] (jaxlie's)."""
    return wp.vector(m[0, 0], m[1, 0])


@wp.func
def so2_from_matrix_tangent(m: Any, dm: Any):
    return so2_from_matrix(dm)


@wp.func
def so2_from_matrix_vjp(m: Any, g: Any):
    zero = type(g[0])(0.0)
    return wp.matrix(g[0], zero, g[1], zero, shape=(2, 2))


@wp.func
def so2_normalize(z: Any):
    return z / wp.length(z)


@wp.func
def so2_normalize_tangent(z: Any, dz: Any):
    """(dz - u (u . dz)) / |z| for u = z / |z|: a symmetric map, so also the VJP."""
    n = wp.length(z)
    u = z / n
    return (dz - wp.dot(u, dz) * u) / n


_UNIT_COMPLEX = {"unit_complex": (2,)}

SO2_EXP = define_op(
    "so2_exp",
    so2_exp,
    operands={"theta": (1,)},
    results={"out_unit_complex": (2,)},
    tangent=so2_exp_tangent,
    vjp=so2_exp_vjp,
    doc="exp(theta) = [cos(theta), sin(theta)] for theta (..., 1).",
    family=families.PLANAR,
)
SO2_LOG = define_op(
    "so2_log",
    so2_log,
    operands=_UNIT_COMPLEX,
    results={"out_theta": (1,)},
    tangent=so2_log_tangent,
    vjp=so2_log_vjp,
    doc="log(z) = [atan2(s, c)] for z = [c, s], in [-pi, pi]; invariant to the scale of z, "
    "with the gradient [-s, c] / |z|^2.",
    family=families.PLANAR,
)
SO2_TO_MATRIX = define_op(
    "so2_to_matrix",
    complex_matrix,
    operands=_UNIT_COMPLEX,
    results={"out_matrix": (2, 2)},
    tangent=so2_to_matrix_tangent,
    vjp=complex_matrix_vjp,
    doc="[[c, -s], [s, c]] for z = [c, s] (|z| times a rotation matrix).",
    family=families.PLANAR,
)
SO2_FROM_MATRIX = define_op(
    "so2_from_matrix",
    so2_from_matrix,
    operands={"matrix": (2, 2)},
    results={"out_unit_complex": (2,)},
    tangent=so2_from_matrix_tangent,
    vjp=so2_from_matrix_vjp,
    doc="The first column [m00, m10] of a rotation matrix (as jaxlie; not a projection).",
    family=families.PLANAR,
)
SO2_MULTIPLY = define_op(
    "so2_multiply",
    complex_multiply,
    operands={"unit_complex": (2,), "unit_complex2": (2,)},
    results={"out_unit_complex": (2,)},
    tangent=complex_multiply_tangent,
    vjp=complex_multiply_vjp,
    doc="The complex product z1 z2 = [c1 c2 - s1 s2, c1 s2 + s1 c2] (the rotation z2, then z1).",
    family=families.PLANAR,
)
SO2_INVERSE = define_op(
    "so2_inverse",
    complex_conjugate,
    operands=_UNIT_COMPLEX,
    results={"out_unit_complex": (2,)},
    tangent=complex_conjugate_linear,
    vjp=complex_conjugate_linear,
    doc="The conjugate [c, -s] (the inverse of a unit z; not divided by |z|^2, as jaxlie).",
    family=families.PLANAR,
)
SO2_ROTATE = define_op(
    "so2_rotate",
    complex_multiply,
    operands={"unit_complex": (2,), "points": (2,)},
    results={"out_points": (2,)},
    tangent=complex_multiply_tangent,
    vjp=complex_multiply_vjp,
    doc="[[c, -s], [s, c]] p: the complex product z p.",
    family=families.PLANAR,
)
SO2_NORMALIZE = define_op(
    "so2_normalize",
    so2_normalize,
    operands=_UNIT_COMPLEX,
    results={"out_unit_complex": (2,)},
    tangent=so2_normalize_tangent,
    vjp=so2_normalize_tangent,
    doc="z / |z|.",
    family=families.PLANAR,
)
