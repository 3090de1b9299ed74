"""Points and poses: cuRobo's `curobo.geom.transform` ops.

The point transforms take the pose's quaternion prepared as its rotation matrix
(`quaternion_to_matrix`): their kernels loop over runs of points and form the matrix
once per pose they meet, and their VJPs sum the pose's cotangents over the run and pull
the matrix's back to the quaternion once per pose.
"""

from typing import Any

import warp as wp

from .._define import define_op
from .._op import Operand, Result
from . import _families as families
from .conversions import QUATERNION_TO_MATRIX
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


@wp.func
def transform_point(position: Any, rotation: Any, point: Any):
    return rotation @ point + position


@wp.func
def transform_point_tangent(
    position: Any, rotation: Any, point: Any, d_position: Any, d_rotation: Any, d_point: Any
):
    return d_rotation @ point + rotation @ d_point + d_position


@wp.func
def transform_point_vjp(position: Any, rotation: Any, point: Any, g: Any):
    return g, wp.outer(g, point), wp.transpose(rotation) @ g


@wp.func
def untransform_point(position: Any, rotation: Any, point: Any):
    """The inverse transform, R^T (p - t)."""
    return wp.transpose(rotation) @ (point - position)


@wp.func
def untransform_point_tangent(
    position: Any, rotation: Any, point: Any, d_position: Any, d_rotation: Any, d_point: Any
):
    return wp.transpose(d_rotation) @ (point - position) + wp.transpose(rotation) @ (
        d_point - d_position
    )


@wp.func
def untransform_point_vjp(position: Any, rotation: Any, point: Any, g: Any):
    back = rotation @ g
    return -back, wp.outer(point - position, g), back


@wp.func
def transform_point_inverse(point: Any, rot: Any, trans: Any):
    return untransform_point(trans, rot, point)


@wp.func
def transform_point_inverse_tangent(
    point: Any, rot: Any, trans: Any, d_point: Any, d_rot: Any, d_trans: Any
):
    return untransform_point_tangent(trans, rot, point, d_trans, d_rot, d_point)


@wp.func
def transform_point_inverse_vjp(point: Any, rot: Any, trans: Any, g: Any):
    trans_bar, rot_bar, point_bar = untransform_point_vjp(trans, rot, point, g)
    return point_bar, rot_bar, trans_bar


@wp.func
def rigid_inverse(rot: Any, trans: Any):
    rot_t = wp.transpose(rot)
    return rot_t, -(rot_t @ trans)


@wp.func
def rigid_inverse_tangent(rot: Any, trans: Any, d_rot: Any, d_trans: Any):
    d_rot_t = wp.transpose(d_rot)
    return d_rot_t, -(d_rot_t @ trans + wp.transpose(rot) @ d_trans)


@wp.func
def rigid_inverse_vjp(rot: Any, trans: Any, g_rot: Any, g_trans: Any):
    return wp.transpose(g_rot) - wp.outer(trans, g_trans), -(rot @ g_trans)


@wp.func
def homogeneous(rotation: Any, position: Any, corner: Any):
    """[[rotation, position], [0, 0, 0, corner]]."""
    zero = type(corner)(0.0)
    return wp.matrix(
        rotation[0, 0], rotation[0, 1], rotation[0, 2], position[0],
        rotation[1, 0], rotation[1, 1], rotation[1, 2], position[1],
        rotation[2, 0], rotation[2, 1], rotation[2, 2], position[2],
        zero, zero, zero, corner,
        shape=(4, 4),
    )  # fmt: skip


@wp.func
def pose_to_matrix(position: Any, quaternion: Any):
    return homogeneous(quat_to_matrix(quaternion), position, type(position[0])(1.0))


@wp.func
def pose_to_matrix_tangent(position: Any, quaternion: Any, d_position: Any, d_quaternion: Any):
    return homogeneous(
        quat_to_matrix_tangent(quaternion, d_quaternion), d_position, type(position[0])(0.0)
    )


@wp.func
def pose_to_matrix_vjp(position: Any, quaternion: Any, g: Any):
    rotation = wp.matrix(
        g[0, 0], g[0, 1], g[0, 2], g[1, 0], g[1, 1], g[1, 2], g[2, 0], g[2, 1], g[2, 2],
        shape=(3, 3),
    )  # fmt: skip
    return wp.vector(g[0, 3], g[1, 3], g[2, 3]), quat_matrix_vjp(quaternion, rotation)


@wp.func
def pose_multiply(position: Any, quaternion: Any, position2: Any, quaternion2: Any):
    return quat_rotate(quaternion, position2) + position, quat_multiply(quaternion, quaternion2)


@wp.func
def pose_multiply_tangent(
    position: Any,
    quaternion: Any,
    position2: Any,
    quaternion2: Any,
    d_position: Any,
    d_quaternion: Any,
    d_position2: Any,
    d_quaternion2: Any,
):
    return (
        quat_rotate_tangent(quaternion, d_quaternion, position2, d_position2) + d_position,
        quat_multiply_tangent(quaternion, quaternion2, d_quaternion, d_quaternion2),
    )


@wp.func
def pose_multiply_vjp(
    position: Any,
    quaternion: Any,
    position2: Any,
    quaternion2: Any,
    g_position: Any,
    g_quaternion: Any,
):
    rotation_bar, position2_bar = quat_rotate_vjp(quaternion, position2, g_position)
    product_bar, quaternion2_bar = quat_multiply_vjp(quaternion, quaternion2, g_quaternion)
    return g_position, rotation_bar + product_bar, position2_bar, quaternion2_bar


@wp.func
def pose_inverse(position: Any, quaternion: Any):
    inverse = quat_conjugate(quaternion)
    return -quat_rotate(inverse, position), inverse


@wp.func
def pose_inverse_tangent(position: Any, quaternion: Any, d_position: Any, d_quaternion: Any):
    d_inverse = quat_conjugate(d_quaternion)
    return (
        -quat_rotate_tangent(quat_conjugate(quaternion), d_inverse, position, d_position),
        d_inverse,
    )


@wp.func
def pose_inverse_vjp(position: Any, quaternion: Any, g_position: Any, g_quaternion: Any):
    # -R(q*) t pulls back to -R(q) g on t, and through the conjugate on q.
    inverse_bar, position_bar = quat_rotate_vjp(quat_conjugate(quaternion), position, g_position)
    return -position_bar, quat_conjugate(g_quaternion - inverse_bar)


_POINT_BUFFERS = {
    "runs": True,
    "result_buffers": ("out_points",),
    "gradient_buffers": ("out_gp", "out_gq", "out_gpt"),
}
_ROTATION = Operand((4,), prepare=QUATERNION_TO_MATRIX)
_BATCH_POSE = {
    "position": Operand((3,), ("B",)),
    "quaternion": Operand((4,), ("B",), prepare=QUATERNION_TO_MATRIX),
    "points": Operand((3,), ("B", "N")),
}
_BATCH_RESULT = {"out_points": Result((3,), ("B", "N"))}

TRANSFORM_POINTS = define_op(
    "transform_points",
    transform_point,
    operands={
        "position": Operand((3,), single=True),
        "quaternion": Operand((4,), single=True, prepare=QUATERNION_TO_MATRIX),
        "points": (3,),
    },
    results={"out_points": (3,)},
    tangent=transform_point_tangent,
    vjp=transform_point_vjp,
    doc="R(q) p + t, where R(q) v = q (0, v) q* (|q|^2 times a rotation).",
    **_POINT_BUFFERS,
    family=families.POINTS_AND_POSES,
)

BATCH_TRANSFORM_POINTS = define_op(
    "batch_transform_points",
    transform_point,
    operands=_BATCH_POSE,
    results=_BATCH_RESULT,
    tangent=transform_point_tangent,
    vjp=transform_point_vjp,
    doc="R(q_b) p_bn + t_b, where R(q) v = q (0, v) q*.",
    **_POINT_BUFFERS,
    family=families.POINTS_AND_POSES,
)

BATCH_TRANSFORM_POINTS_INVERSE = define_op(
    "batch_transform_points_inverse",
    untransform_point,
    operands=_BATCH_POSE,
    results=_BATCH_RESULT,
    tangent=untransform_point_tangent,
    vjp=untransform_point_vjp,
    doc="R(q_b)^T (p_bn - t_b), where R(q)^T v = q* (0, v) q.",
    **_POINT_BUFFERS,
    family=families.POINTS_AND_POSES,
)

TRANSFORM_POINT_INVERSE = define_op(
    "transform_point_inverse",
    transform_point_inverse,
    operands={"point": (3,), "rot": (3, 3), "trans": (3,)},
    results={"out_point": (3,)},
    tangent=transform_point_inverse_tangent,
    vjp=transform_point_inverse_vjp,
    doc="R^T (p - t).",
    family=families.POINTS_AND_POSES,
)

GET_INV_TRANSFORM = define_op(
    "get_inv_transform",
    rigid_inverse,
    operands={"w_rot_c": (3, 3), "w_trans_c": (3,)},
    results={"out_rot": (3, 3), "out_trans": (3,)},
    tangent=rigid_inverse_tangent,
    vjp=rigid_inverse_vjp,
    doc="(R^T, -R^T t).",
    family=families.POINTS_AND_POSES,
)

POSE_TO_MATRIX = define_op(
    "pose_to_matrix",
    pose_to_matrix,
    operands={"position": (3,), "quaternion": (4,)},
    results={"out_matrix": (4, 4)},
    tangent=pose_to_matrix_tangent,
    vjp=pose_to_matrix_vjp,
    doc="[[R(q), t], [0, 0, 0, 1]].",
    result_buffers=("out_matrix",),
    family=families.POINTS_AND_POSES,
)

POSE_MULTIPLY = define_op(
    "pose_multiply",
    pose_multiply,
    operands={"position": (3,), "quaternion": (4,), "position2": (3,), "quaternion2": (4,)},
    results={"out_position": (3,), "out_quaternion": (4,)},
    tangent=pose_multiply_tangent,
    vjp=pose_multiply_vjp,
    doc="T1 T2 = (R(q1) t2 + t1, q1 q2): pose 2 is applied first.",
    result_buffers=("out_position", "out_quaternion"),
    gradient_buffers=("adj_pos", "adj_quat", "adj_pos2", "adj_quat2"),
    family=families.POINTS_AND_POSES,
)

POSE_INVERSE = define_op(
    "pose_inverse",
    pose_inverse,
    operands={"position": (3,), "quaternion": (4,)},
    results={"out_position": (3,), "out_quaternion": (4,)},
    tangent=pose_inverse_tangent,
    vjp=pose_inverse_vjp,
    doc="(-R(q)^T t, q*), with q* the conjugate.",
    result_buffers=("out_position", "out_quaternion"),
    gradient_buffers=("adj_pos", "adj_quat"),
    family=families.POINTS_AND_POSES,
)

POSE_TRANSFORM_POINTS = define_op(
    "pose_transform_points",
    transform_point,
    operands={"position": (3,), "quaternion": _ROTATION, "points": (3,)},
    results={"out_points": (3,)},
    tangent=transform_point_tangent,
    vjp=transform_point_vjp,
    doc="R(q) p + t for poses and points whose leading dimensions broadcast, where "
    "R(q) v = q (0, v) q*: `SE3.apply`.",
    runs=True,
    family=families.POINTS_AND_POSES,
)
