"""Interpolation on SO(3) and SE(3): spherical linear interpolation of quaternions and the
geodesic between poses, through the exponential and logarithm of `so3.py` and `se3.py`,
so exact (series, no division by sin(theta)) as the two ends coincide."""

from typing import Any

import warp as wp

from .._op import define_op
from .quaternion import quat_conjugate, quat_multiply, quat_rotate
from .se3 import omega_of, rho_of, se3_log
from .so3 import left_jacobian, quat_exp, so3_log


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


QUATERNION_SLERP = define_op(
    "quaternion_slerp",
    slerp,
    operands={"quaternion": (4,), "quaternion2": (4,), "t": ()},
    results={"out_quaternion": (4,)},
    doc="Spherical linear interpolation q1 exp(t log(q1* q2)), q1 normalised: the shortest "
    "arc, any real t (t = 0 gives q1 / |q1|, t = 1 the rotation of q2); exact as q1 and q2 "
    "coincide.",
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
    doc="The SE(3) geodesic T1 exp(t log(T1^-1 T2)), q1 normalised: the pose at t along the "
    "screw motion from T1 (t = 0) to T2 (t = 1), any real t.",
)
