"""Quaternion algebra on `[w, x, y, z]` vectors: the element functions every rotation op
is written with.

A quaternion acts on a vector by the sandwich product `q (0, v) q*`, which for any
quaternion equals

    R(q) v = (w^2 - |u|^2) v + 2 (u . v) u + 2 w (u x v),    q = (w, u),

that is `|q|^2` times the rotation by `q / |q|`. It is a homogeneous quadratic in `q`, so
every op agrees with `quaternion_to_matrix` for unit and non-unit quaternions alike.

Vectors and matrices are built in one constructor call, never component by component:
per-component writes break Warp's adjoint, which the derived derivatives run.
"""

from typing import Any

import warp as wp

from .._define import define_op
from . import _families as families


@wp.func
def vector_part(q: Any):
    return wp.vector(q[1], q[2], q[3])


@wp.func
def quat_conjugate(q: Any):
    return wp.vector(q[0], -q[1], -q[2], -q[3])


@wp.func
def quat_multiply(a: Any, b: Any):
    """Hamilton product `a b`."""
    return wp.vector(
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    )


@wp.func
def quat_rotate_polar(q: Any, r: Any, v: Any):
    """The symmetric bilinear form B(q, r) v with B(q, q) v = q (0, v) q*. Every rotation
    is written through it, so that the tangent of R(q) v along dq is 2 B(q, dq) v."""
    wq = q[0]
    uq = vector_part(q)
    wr = r[0]
    ur = vector_part(r)
    return (
        (wq * wr - wp.dot(uq, ur)) * v
        + wp.dot(uq, v) * ur
        + wp.dot(ur, v) * uq
        + wq * wp.cross(ur, v)
        + wr * wp.cross(uq, v)
    )


@wp.func
def quat_rotate(q: Any, v: Any):
    """The sandwich product `q (0, v) q*` as a 3-vector."""
    return quat_rotate_polar(q, q, v)


@wp.func
def quat_rotate_tangent(q: Any, dq: Any, v: Any, dv: Any):
    two = type(q[0])(2.0)
    return quat_rotate(q, dv) + two * quat_rotate_polar(q, dq, v)


@wp.func
def quat_matrix_polar(q: Any, r: Any):
    """The matrix of B(q, r): quat_matrix_polar(q, q) is the matrix of `quat_rotate(q, .)`."""
    return wp.matrix(
        q[0] * r[0] + q[1] * r[1] - q[2] * r[2] - q[3] * r[3],
        q[1] * r[2] + r[1] * q[2] - q[0] * r[3] - r[0] * q[3],
        q[1] * r[3] + r[1] * q[3] + q[0] * r[2] + r[0] * q[2],
        q[1] * r[2] + r[1] * q[2] + q[0] * r[3] + r[0] * q[3],
        q[0] * r[0] - q[1] * r[1] + q[2] * r[2] - q[3] * r[3],
        q[2] * r[3] + r[2] * q[3] - q[0] * r[1] - r[0] * q[1],
        q[1] * r[3] + r[1] * q[3] - q[0] * r[2] - r[0] * q[2],
        q[2] * r[3] + r[2] * q[3] + q[0] * r[1] + r[0] * q[1],
        q[0] * r[0] - q[1] * r[1] - q[2] * r[2] + q[3] * r[3],
        shape=(3, 3),
    )


@wp.func
def quat_to_matrix(q: Any):
    """The matrix of `v -> q (0, v) q*`."""
    return quat_matrix_polar(q, q)


@wp.func
def quat_to_matrix_tangent(q: Any, dq: Any):
    return type(q[0])(2.0) * quat_matrix_polar(q, dq)


@wp.func
def quat_matrix_vjp(q: Any, g: Any):
    """Pull the cotangent g of the matrix R(q) = B(q, q) back to q: twice the gradient of
    the linear map r -> <g, B(q, r)>, whose coefficients are read off quat_matrix_polar."""
    two = type(q[0])(2.0)
    return two * wp.vector(
        (g[0, 0] + g[1, 1] + g[2, 2]) * q[0]
        + (g[2, 1] - g[1, 2]) * q[1]
        + (g[0, 2] - g[2, 0]) * q[2]
        + (g[1, 0] - g[0, 1]) * q[3],
        (g[2, 1] - g[1, 2]) * q[0]
        + (g[0, 0] - g[1, 1] - g[2, 2]) * q[1]
        + (g[0, 1] + g[1, 0]) * q[2]
        + (g[0, 2] + g[2, 0]) * q[3],
        (g[0, 2] - g[2, 0]) * q[0]
        + (g[0, 1] + g[1, 0]) * q[1]
        + (g[1, 1] - g[0, 0] - g[2, 2]) * q[2]
        + (g[1, 2] + g[2, 1]) * q[3],
        (g[1, 0] - g[0, 1]) * q[0]
        + (g[0, 2] + g[2, 0]) * q[1]
        + (g[1, 2] + g[2, 1]) * q[2]
        + (g[2, 2] - g[0, 0] - g[1, 1]) * q[3],
    )


@wp.func
def quat_rotate_vjp(q: Any, v: Any, g: Any):
    """Pull the cotangent g of `quat_rotate(q, v)` back to q and to v, through one product
    u = (0, g) q: <g, q (0, v) q*> pulls back to -2 u (0, v) on q, and to the vector part
    of q* u, R(q)^T g, on v. Exact for any q (the sandwich is a quadratic form in q); it
    costs about two thirds of the matrix route's arithmetic (NOTES 28)."""
    two = type(q[0])(2.0)
    uq = vector_part(q)
    u_w = -wp.dot(g, uq)
    u_v = q[0] * g + wp.cross(g, uq)
    q_bar = -two * (u_w * v + wp.cross(u_v, v))
    return (
        wp.vector(two * wp.dot(u_v, v), q_bar[0], q_bar[1], q_bar[2]),
        q[0] * u_v - u_w * uq - wp.cross(uq, u_v),
    )


@wp.func
def quat_multiply_vjp(a: Any, b: Any, g: Any):
    """<g, a b> pulls back to g b* on a and a* g on b (the multiplication matrices'
    transposes are those of the conjugates)."""
    return quat_multiply(g, quat_conjugate(b)), quat_multiply(quat_conjugate(a), g)


@wp.func
def quat_inverse(q: Any):
    return quat_conjugate(q) / wp.dot(q, q)


@wp.func
def quat_normalize(q: Any):
    return q / wp.length(q)


@wp.func
def normalize_tangent(unit: Any, inverse_length: Any, d: Any):
    """d(v / |v|) along d, given unit = v / |v| and 1 / |v|; also the VJP, the derivative
    being symmetric. (One division per vector, not one per component: divisions bound
    these products on a CPU.)"""
    return (d - wp.dot(unit, d) * unit) * inverse_length


@wp.func
def quat_normalize_tangent(q: Any, dq: Any):
    inverse_length = type(q[0])(1.0) / wp.length(q)
    return normalize_tangent(q * inverse_length, inverse_length, dq)


@wp.func
def quat_multiply_tangent(a: Any, b: Any, da: Any, db: Any):
    return quat_multiply(da, b) + quat_multiply(a, db)


@wp.func
def quaternion_rotate_tangent(q: Any, v: Any, dq: Any, dv: Any):
    return quat_rotate_tangent(q, dq, v, dv)


@wp.func
def quat_standardize(q: Any):
    """q or -q, whichever has w >= 0 (the same rotation)."""
    if q[0] < type(q[0])(0.0):
        return -q
    return q


@wp.func
def quat_standardize_tangent(q: Any, dq: Any):
    """dq with the sign that quat_standardize gives q; also its VJP (a sign is symmetric)."""
    if q[0] < type(q[0])(0.0):
        return -dq
    return dq


@wp.func
def quat_conjugate_tangent(q: Any, dq: Any):
    """Linear: the conjugate of dq; also its VJP (conjugation is symmetric)."""
    return quat_conjugate(dq)


@wp.func
def quat_inverse_tangent(q: Any, dq: Any):
    """d(q* / |q|^2) = (dq* - 2 (q . dq) / |q|^2 q*) / |q|^2."""
    inverse_n2 = type(q[0])(1.0) / wp.dot(q, q)
    two = type(q[0])(2.0)
    return (
        quat_conjugate(dq) - (two * wp.dot(q, dq) * inverse_n2) * quat_conjugate(q)
    ) * inverse_n2


@wp.func
def quat_inverse_vjp(q: Any, g: Any):
    inverse_n2 = type(q[0])(1.0) / wp.dot(q, q)
    two = type(q[0])(2.0)
    return (quat_conjugate(g) - (two * wp.dot(quat_conjugate(q), g) * inverse_n2) * q) * inverse_n2


QUATERNION_MULTIPLY = define_op(
    "quaternion_multiply",
    quat_multiply,
    operands={"quaternion": (4,), "quaternion2": (4,)},
    results={"out_quaternion": (4,)},
    tangent=quat_multiply_tangent,
    vjp=quat_multiply_vjp,
    doc="The Hamilton product q1 q2 (the rotation q2, then q1).",
    family=families.QUATERNION_ALGEBRA,
)

QUATERNION_CONJUGATE = define_op(
    "quaternion_conjugate",
    quat_conjugate,
    operands={"quaternion": (4,)},
    results={"out_quaternion": (4,)},
    tangent=quat_conjugate_tangent,
    vjp=quat_conjugate_tangent,
    doc="[w, -x, -y, -z].",
    family=families.QUATERNION_ALGEBRA,
)

QUATERNION_INVERSE = define_op(
    "quaternion_inverse",
    quat_inverse,
    operands={"quaternion": (4,)},
    results={"out_quaternion": (4,)},
    tangent=quat_inverse_tangent,
    vjp=quat_inverse_vjp,
    doc="q* / |q|^2, so that q q^-1 = [1, 0, 0, 0].",
    family=families.QUATERNION_ALGEBRA,
)

QUATERNION_NORMALIZE = define_op(
    "quaternion_normalize",
    quat_normalize,
    operands={"quaternion": (4,)},
    results={"out_quaternion": (4,)},
    tangent=quat_normalize_tangent,
    vjp=quat_normalize_tangent,
    doc="q / |q|.",
    family=families.QUATERNION_ALGEBRA,
)

QUATERNION_STANDARDIZE = define_op(
    "quaternion_standardize",
    quat_standardize,
    operands={"quaternion": (4,)},
    results={"out_quaternion": (4,)},
    tangent=quat_standardize_tangent,
    vjp=quat_standardize_tangent,
    doc="q with its sign flipped where w < 0, so that w >= 0 (the same rotation).",
    family=families.QUATERNION_ALGEBRA,
)

QUATERNION_ROTATE = define_op(
    "quaternion_rotate",
    quat_rotate,
    operands={"quaternion": (4,), "vector": (3,)},
    results={"out_vector": (3,)},
    tangent=quaternion_rotate_tangent,
    vjp=quat_rotate_vjp,
    doc="q (0, v) q*: the rotation of v by q / |q|, times |q|^2.",
    family=families.QUATERNION_ALGEBRA,
)
