"""Euler angles in all twelve axis sequences, in SciPy's conventions: a lower-case
sequence (`"xyz"`) is extrinsic (rotations about the fixed axes, in order), an upper-case
one (`"XYZ"`) intrinsic (about the moving axes). Angles from quaternions follow SciPy's
`Rotation.as_euler`: the first and third in [-pi, pi], the second in [0, pi] for
symmetric sequences (`"zyz"`) and in [-pi/2, pi/2] for the others, and at gimbal lock
(the second angle within 1e-7 of its limits) the third angle is 0.

The conversion from quaternions is Bernardes and Viollet's direct method (PLoS ONE
17(11), 2022): two atan2 of sums and differences of the quaternion's components. Each
convention is a kernel of its own (an `Composite`): the axes are constants in its code.
"""

import inspect
import math
from typing import Any

import warp as wp

from .._define import define_op
from .._launch.source import build
from .._op import Composite
from .conversions import matrix_to_quat, matrix_to_quat_tangent
from .quaternion import quat_matrix_vjp, quat_multiply, quat_to_matrix, quat_to_matrix_tangent
from .so3 import atan2_tangent

PI = wp.constant(wp.float64(math.pi))
GIMBAL_LOCK = 1e-7  # SciPy's: how close to 0 or pi the second angle may come
SEQUENCES = ("xyz", "xzy", "yxz", "yzx", "zxy", "zyx", "xyx", "xzx", "yxy", "yzy", "zxz", "zyz")
CONVENTIONS = (*SEQUENCES, *(s.upper() for s in SEQUENCES))


@wp.func
def axis_quat(axis: int, angle: Any):
    """The quaternion of the rotation by `angle` about axis 0, 1 or 2."""
    half = type(angle)(0.5) * angle
    c = wp.cos(half)
    s = wp.sin(half)
    zero = type(angle)(0.0)
    if axis == 0:
        return wp.vector(c, s, zero, zero)
    if axis == 1:
        return wp.vector(c, zero, s, zero)
    return wp.vector(c, zero, zero, s)


@wp.func
def axis_quat_slope(axis: int, angle: Any):
    """d axis_quat / d angle: (-sin(angle / 2), cos(angle / 2) e_axis) / 2."""
    half = type(angle)(0.5) * angle
    c = type(angle)(0.5) * wp.cos(half)
    s = type(angle)(-0.5) * wp.sin(half)
    zero = type(angle)(0.0)
    if axis == 0:
        return wp.vector(s, c, zero, zero)
    if axis == 1:
        return wp.vector(s, zero, c, zero)
    return wp.vector(s, zero, zero, c)


@wp.func
def euler_to_quat_partials(angles: Any, first: int, second: int, third: int, intrinsic: bool):
    """The quaternion's derivatives in each of the three angles: the product with one
    factor replaced by its slope."""
    q1 = axis_quat(first, angles[0])
    q2 = axis_quat(second, angles[1])
    q3 = axis_quat(third, angles[2])
    p1 = axis_quat_slope(first, angles[0])
    p2 = axis_quat_slope(second, angles[1])
    p3 = axis_quat_slope(third, angles[2])
    if intrinsic:
        return (
            quat_multiply(quat_multiply(p1, q2), q3),
            quat_multiply(quat_multiply(q1, p2), q3),
            quat_multiply(quat_multiply(q1, q2), p3),
        )
    return (
        quat_multiply(q3, quat_multiply(q2, p1)),
        quat_multiply(q3, quat_multiply(p2, q1)),
        quat_multiply(p3, quat_multiply(q2, q1)),
    )


@wp.func
def euler_to_quat_tangent(
    angles: Any, d_angles: Any, first: int, second: int, third: int, intrinsic: bool
):
    p1, p2, p3 = euler_to_quat_partials(angles, first, second, third, intrinsic)
    return d_angles[0] * p1 + d_angles[1] * p2 + d_angles[2] * p3


@wp.func
def euler_to_quat_vjp(angles: Any, g: Any, first: int, second: int, third: int, intrinsic: bool):
    p1, p2, p3 = euler_to_quat_partials(angles, first, second, third, intrinsic)
    return wp.vector(wp.dot(g, p1), wp.dot(g, p2), wp.dot(g, p3))


@wp.func
def euler_to_quat(angles: Any, first: int, second: int, third: int, intrinsic: bool):
    """The rotation by angles[0] about `first`, then angles[1] about `second`, then
    angles[2] about `third`: about the moving axes (intrinsic) or the fixed ones."""
    q1 = axis_quat(first, angles[0])
    q2 = axis_quat(second, angles[1])
    q3 = axis_quat(third, angles[2])
    if intrinsic:
        return quat_multiply(quat_multiply(q1, q2), q3)
    return quat_multiply(q3, quat_multiply(q2, q1))


@wp.func
def norm2(x: Any, y: Any):
    """hypot(x, y), with a zero gradient where x = y = 0 (there it is not differentiable,
    and the derivative of a square root would divide by zero)."""
    n2 = x * x + y * y
    if n2 == type(n2)(0.0):
        return n2
    return wp.sqrt(n2)


@wp.func
def norm2_tangent(x: Any, y: Any, dx: Any, dy: Any):
    """d norm2(x, y), through the same branches."""
    n2 = x * x + y * y
    if n2 == type(n2)(0.0):
        return type(n2)(2.0) * (x * dx + y * dy)
    return (x * dx + y * dy) / wp.sqrt(n2)


@wp.func
def wrap(angle: Any):
    """An angle in [-2 pi, 2 pi] moved into [-pi, pi] as SciPy does (pi and -pi stay)."""
    pi = type(angle)(PI)
    if angle > pi:
        return angle - type(angle)(2.0) * pi
    if angle < -pi:
        return angle + type(angle)(2.0) * pi
    return angle


@wp.func
def euler_sign(like: Any, i: int, j: int, k: int):
    """-1 for an odd permutation (i, j, k), else 1."""
    if (i - j) * (j - k) * (k - i) < 0:
        return type(like)(-1.0)
    return type(like)(1.0)


@wp.func
def euler_terms(q: Any, i: int, j: int, k: int, symmetric: bool):
    """The sums and differences of q's components whose atan2 give the angles: linear in
    q, so that they are their own tangents."""
    sign = euler_sign(q[0], i, j, k)
    w = q[0]
    if symmetric:
        return w, q[i + 1], q[j + 1], sign * q[k + 1]
    return w - q[j + 1], q[i + 1] + sign * q[k + 1], q[j + 1] + w, sign * q[k + 1] - q[i + 1]


@wp.func
def quat_to_euler(q: Any, i: int, j: int, k: int, symmetric: bool, extrinsic: bool):
    """Angles of the sequence (i, j, k) (reversed for intrinsic sequences; k is the third
    axis, 3 - i - j, for symmetric ones), from sums and differences of q's components."""
    sign = euler_sign(q[0], i, j, k)
    a, b, c, d = euler_terms(q, i, j, k, symmetric)
    half_sum = wp.atan2(b, a)
    half_diff = wp.atan2(d, c)
    two = type(q[0])(2.0)
    middle = two * wp.atan2(norm2(c, d), norm2(a, b))
    pi = type(q[0])(PI)
    lock = type(q[0])(GIMBAL_LOCK)
    outer = half_sum - half_diff
    inner = half_sum + half_diff
    if not symmetric:
        inner = sign * inner
    first = outer
    last = inner
    if not extrinsic:
        first = inner
        last = outer
    if wp.abs(middle) <= lock or wp.abs(middle - pi) <= lock:  # gimbal lock: third is 0
        locked = two * half_sum
        if wp.abs(middle) > lock:
            locked = two * half_diff
            if extrinsic:
                locked = -locked
        if not extrinsic and not symmetric:
            locked = sign * locked
        first = locked
        last = type(q[0])(0.0)
    if not symmetric:
        middle = middle - type(q[0])(0.5) * pi
    return wp.vector(wrap(first), middle, wrap(last))


@wp.func
def quat_to_euler_tangent(
    q: Any, dq: Any, i: int, j: int, k: int, symmetric: bool, extrinsic: bool
):
    """d quat_to_euler along dq, through the same branches (wrap and the shift of the
    middle angle are constants there)."""
    sign = euler_sign(q[0], i, j, k)
    a, b, c, d = euler_terms(q, i, j, k, symmetric)
    da, db, dc, dd = euler_terms(dq, i, j, k, symmetric)
    d_half_sum = atan2_tangent(b, a, db, da)
    d_half_diff = atan2_tangent(d, c, dd, dc)
    two = type(q[0])(2.0)
    n_cd = norm2(c, d)
    n_ab = norm2(a, b)
    middle = two * wp.atan2(n_cd, n_ab)
    d_middle = two * atan2_tangent(
        n_cd, n_ab, norm2_tangent(c, d, dc, dd), norm2_tangent(a, b, da, db)
    )
    pi = type(q[0])(PI)
    lock = type(q[0])(GIMBAL_LOCK)
    d_outer = d_half_sum - d_half_diff
    d_inner = d_half_sum + d_half_diff
    if not symmetric:
        d_inner = sign * d_inner
    d_first = d_outer
    d_last = d_inner
    if not extrinsic:
        d_first = d_inner
        d_last = d_outer
    if wp.abs(middle) <= lock or wp.abs(middle - pi) <= lock:
        d_locked = two * d_half_sum
        if wp.abs(middle) > lock:
            d_locked = two * d_half_diff
            if extrinsic:
                d_locked = -d_locked
        if not extrinsic and not symmetric:
            d_locked = sign * d_locked
        d_first = d_locked
        d_last = type(q[0])(0.0)
    return wp.vector(d_first, d_middle, d_last)


def _axes(convention: str) -> tuple[int, int, int]:
    return tuple("xyz".index(a) for a in convention.lower())


def check_convention(function: str, convention) -> str:
    if not isinstance(convention, str) or convention not in CONVENTIONS:
        raise ValueError(
            f"xform.{function}: convention {convention!r} is not an Euler sequence; expected "
            f"one of {', '.join(CONVENTIONS)} (lower case extrinsic, upper case intrinsic)"
        )
    return convention


def _tag(convention: str) -> str:
    return ("intrinsic_" if convention.isupper() else "extrinsic_") + convention.lower()


def _element_functions(convention: str) -> dict[str, tuple]:
    """The four element functions of one convention, with their closed-form tangents and
    (from angles) VJPs: its axes constants in their code, the generic closed forms above
    called with them."""
    first, second, third = _axes(convention)
    intrinsic = convention.isupper()
    i, j, k = (third, second, first) if intrinsic else (first, second, third)
    symmetric = i == k
    if symmetric:
        k = 3 - i - j
    tag = _tag(convention)
    axes = f"{first}, {second}, {third}, {intrinsic}"
    to_quat = f"euler_to_quat(angles, {axes})"
    from_quat = f"quat_to_euler(q, {i}, {j}, {k}, {symmetric}, {not intrinsic})"
    from_quat_tangent = f"quat_to_euler_tangent(q, dq, {i}, {j}, {k}, {symmetric}, {not intrinsic})"
    source = f"""
@wp.func
def euler_{tag}_to_quaternion(angles: Any):
    return {to_quat}


@wp.func
def quaternion_to_euler_{tag}(quaternion: Any):
    q = quaternion
    return {from_quat}


@wp.func
def euler_{tag}_to_matrix(angles: Any):
    return quat_to_matrix({to_quat})


@wp.func
def matrix_to_euler_{tag}(matrix: Any):
    q = matrix_to_quat(matrix)
    return {from_quat}


@wp.func
def euler_{tag}_to_quaternion_tangent(angles: Any, d_angles: Any):
    return euler_to_quat_tangent(angles, d_angles, {axes})


@wp.func
def euler_{tag}_to_quaternion_vjp(angles: Any, g: Any):
    return euler_to_quat_vjp(angles, g, {axes})


@wp.func
def quaternion_to_euler_{tag}_tangent(quaternion: Any, d_quaternion: Any):
    q = quaternion
    dq = d_quaternion
    return {from_quat_tangent}


@wp.func
def euler_{tag}_to_matrix_tangent(angles: Any, d_angles: Any):
    return quat_to_matrix_tangent({to_quat}, euler_to_quat_tangent(angles, d_angles, {axes}))


@wp.func
def euler_{tag}_to_matrix_vjp(angles: Any, g: Any):
    return euler_to_quat_vjp(angles, quat_matrix_vjp({to_quat}, g), {axes})


@wp.func
def matrix_to_euler_{tag}_tangent(matrix: Any, d_matrix: Any):
    q = matrix_to_quat(matrix)
    dq = matrix_to_quat_tangent(matrix, d_matrix)
    return {from_quat_tangent}
"""
    namespace = build(
        source,
        f"xform_ops.euler.{tag}",
        {
            "euler_to_quat": euler_to_quat,
            "quat_to_euler": quat_to_euler,
            "quat_to_matrix": quat_to_matrix,
            "matrix_to_quat": matrix_to_quat,
            "euler_to_quat_tangent": euler_to_quat_tangent,
            "euler_to_quat_vjp": euler_to_quat_vjp,
            "quat_to_euler_tangent": quat_to_euler_tangent,
            "quat_to_matrix_tangent": quat_to_matrix_tangent,
            "quat_matrix_vjp": quat_matrix_vjp,
            "matrix_to_quat_tangent": matrix_to_quat_tangent,
        },
    )
    names = {
        "euler_to_quaternion": f"euler_{tag}_to_quaternion",
        "quaternion_to_euler": f"quaternion_to_euler_{tag}",
        "euler_to_matrix": f"euler_{tag}_to_matrix",
        "matrix_to_euler": f"matrix_to_euler_{tag}",
    }
    # (function, closed-form tangent, closed-form VJP or None) of each op
    return {
        op: (
            namespace[name],
            namespace[f"{name}_tangent"],
            namespace.get(f"{name}_vjp"),
        )
        for op, name in names.items()
    }


_SHAPES = {
    "euler_to_quaternion": ("angles", (3,), "out_quaternion", (4,)),
    "quaternion_to_euler": ("quaternion", (4,), "out_angles", (3,)),
    "euler_to_matrix": ("angles", (3,), "out_matrix", (3, 3)),
    "matrix_to_euler": ("matrix", (3, 3), "out_angles", (3,)),
}
_DOCS = {
    "euler_to_quaternion": "The quaternion of the rotation by three Euler angles: the product "
    "of the three axis rotations (w may be negative).",
    "quaternion_to_euler": "The Euler angles of a quaternion's rotation (scale- and "
    "sign-invariant), SciPy's ranges; at gimbal lock the third angle is 0.",
    "euler_to_matrix": "The rotation matrix of three Euler angles.",
    "matrix_to_euler": "The Euler angles of a rotation matrix (through Shepperd's "
    "quaternion), SciPy's ranges; at gimbal lock the third angle is 0.",
}


def _family(name: str, ops: dict[str, object]) -> Composite:
    operand = _SHAPES[name][0]
    signature = inspect.Signature(
        [
            inspect.Parameter(operand, inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("convention", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ]
    )

    def run(call, *args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        convention = check_convention(name, bound.arguments["convention"])
        return call(ops[convention], bound.arguments[operand])

    doc = (
        f"{_DOCS[name]}\n\nArguments:\n    {operand}: (..., "
        f"{', '.join(map(str, _SHAPES[name][1]))})\n    convention: one of "
        f"{', '.join(CONVENTIONS)}: three axes, lower case extrinsic (fixed axes), upper "
        "case intrinsic (moving axes), as SciPy's Rotation.from_euler.\nReturns:\n"
        f"    {_SHAPES[name][2]}: (..., {', '.join(map(str, _SHAPES[name][3]))})\n"
        f"Differentiable with respect to: {operand}.\n"
        "Leading dimensions broadcast; float32 or float64; results have the input dtype."
    )
    return Composite(name, run, signature, doc, tuple(ops.values()), arrays=(operand,))


def _define_all() -> dict[str, Composite]:
    ops: dict[str, dict[str, object]] = {name: {} for name in _SHAPES}
    for convention in CONVENTIONS:
        functions = _element_functions(convention)
        for name, (operand, element, result, result_element) in _SHAPES.items():
            function, tangent, vjp = functions[name]
            ops[name][convention] = define_op(
                f"{name}_{_tag(convention)}",
                function,
                operands={operand: element},
                results={result: result_element},
                tangent=tangent,
                vjp=vjp,
                doc=f"{_DOCS[name]} Convention {convention!r}.",
            )
    return {name: _family(name, members) for name, members in ops.items()}


COMPOSITES = _define_all()
