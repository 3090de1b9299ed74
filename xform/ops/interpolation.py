"""Interpolation on SO(3) and SE(3): spherical linear interpolation of quaternions and the
geodesic between poses, through the exponential and logarithm of `so3.py` and `se3.py`,
so exact (series, no division by sin(theta)) as the two ends coincide."""

from typing import Any

import warp as wp

from .._define import define_op
from . import _families as families
from .quaternion import (
    normalize_tangent,
    quat_conjugate,
    quat_multiply,
    quat_multiply_tangent,
    quat_rotate,
    quat_rotate_tangent,
)
from .se3 import omega_of, rho_of, se3_log, se3_log_tangent
from .so3 import (
    left_jacobian,
    left_jacobian_tangent,
    quat_exp,
    quat_exp_tangent,
    so3_log,
    so3_log_tangent,
)


@wp.func
def slerp(q1: Any, q2: Any, t: Any):
    """q1 exp(t log(q1* q2)) for q1 normalised: the shortest arc (the logarithm picks the
    sign of q2 nearer q1), at any real t; a unit quaternion."""
    start = q1 / wp.length(q1)
    return quat_multiply(start, quat_exp(t * so3_log(quat_multiply(quat_conjugate(start), q2))))


@wp.func
def pose_interpolate(position: Any, quaternion: Any, position2: Any, quaternion2: Any, t: Any):
    """T1 exp(t log(T1^-1 T2)), the SE(3) geodesic, with q1 normalised."""
    q1 = quaternion / wp.length(quaternion)
    inverse = quat_conjugate(q1)
    relative_t = quat_rotate(inverse, position2 - position)
    xi = t * se3_log(relative_t, quat_multiply(inverse, quaternion2))
    omega = omega_of(xi)
    step_t = left_jacobian(omega) @ rho_of(xi)
    return quat_rotate(q1, step_t) + position, quat_multiply(q1, quat_exp(omega))


@wp.func
def normalized(q: Any, dq: Any):
    """q / |q| and its tangent along dq."""
    inverse = type(q[0])(1.0) / wp.length(q)
    start = q * inverse
    return start, normalize_tangent(start, inverse, dq)


@wp.func
def slerp_tangent(q1: Any, q2: Any, t: Any, dq1: Any, dq2: Any, dt: Any):
    """The chain rule through slerp's closed forms."""
    start, d_start = normalized(q1, dq1)
    inverse = quat_conjugate(start)
    relative = quat_multiply(inverse, q2)
    d_relative = quat_multiply_tangent(inverse, q2, quat_conjugate(d_start), dq2)
    log = so3_log(relative)
    step = t * log
    d_step = dt * log + t * so3_log_tangent(relative, d_relative)
    return quat_multiply_tangent(start, quat_exp(step), d_start, quat_exp_tangent(step, d_step))


@wp.func
def pose_interpolate_tangent(
    position: Any,
    quaternion: Any,
    position2: Any,
    quaternion2: Any,
    t: Any,
    d_position: Any,
    d_quaternion: Any,
    d_position2: Any,
    d_quaternion2: Any,
    dt: Any,
):
    """The chain rule through pose_interpolate's closed forms."""
    q1, d_q1 = normalized(quaternion, d_quaternion)
    inverse = quat_conjugate(q1)
    d_inverse = quat_conjugate(d_q1)
    offset = position2 - position
    d_offset = d_position2 - d_position
    relative_t = quat_rotate(inverse, offset)
    d_relative_t = quat_rotate_tangent(inverse, d_inverse, offset, d_offset)
    relative_q = quat_multiply(inverse, quaternion2)
    d_relative_q = quat_multiply_tangent(inverse, quaternion2, d_inverse, d_quaternion2)
    log = se3_log(relative_t, relative_q)
    d_log = se3_log_tangent(relative_t, relative_q, d_relative_t, d_relative_q)
    xi = t * log
    d_xi = dt * log + t * d_log
    omega = omega_of(xi)
    d_omega = omega_of(d_xi)
    jacobian = left_jacobian(omega)
    step_t = jacobian @ rho_of(xi)
    d_step_t = left_jacobian_tangent(omega, d_omega) @ rho_of(xi) + jacobian @ rho_of(d_xi)
    return (
        quat_rotate_tangent(q1, d_q1, step_t, d_step_t) + d_position,
        quat_multiply_tangent(q1, quat_exp(omega), d_q1, quat_exp_tangent(omega, d_omega)),
    )


QUATERNION_SLERP = define_op(
    "quaternion_slerp",
    slerp,
    operands={"quaternion": (4,), "quaternion2": (4,), "t": ()},
    results={"out_quaternion": (4,)},
    tangent=slerp_tangent,
    doc="Spherical linear interpolation q1 exp(t log(q1* q2)), q1 normalised: the shortest "
    "arc, any real t (t = 0 gives q1 / |q1|, t = 1 the rotation of q2); exact as q1 and q2 "
    "coincide.",
    family=families.UTILITIES,
)
POSE_INTERPOLATE = define_op(
    "pose_interpolate",
    pose_interpolate,
    operands={
        "position": (3,),
        "quaternion": (4,),
        "position2": (3,),
        "quaternion2": (4,),
        "t": (),
    },
    results={"out_position": (3,), "out_quaternion": (4,)},
    tangent=pose_interpolate_tangent,
    doc="The SE(3) geodesic T1 exp(t log(T1^-1 T2)), q1 normalised: the pose at t along the "
    "screw motion from T1 (t = 0) to T2 (t = 1), any real t.",
    family=families.UTILITIES,
)
