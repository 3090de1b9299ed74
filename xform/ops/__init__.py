"""xform's built-in ops, one file per family; each file holds the family's element
functions and the `define_op` calls that make them ops. The element functions are
`@wp.func`s that user ops can call too."""

from . import (
    conversions,
    euler,
    interpolation,
    quaternion,
    registration,
    se2,
    se3,
    sim3,
    so2,
    so3,
)
from .conversions import CUDA_MATRIX_TO_QUATERNION, MATRIX_TO_QUATERNION, QUATERNION_TO_MATRIX
from .transforms import (
    BATCH_TRANSFORM_POINTS,
    BATCH_TRANSFORM_POINTS_INVERSE,
    GET_INV_TRANSFORM,
    POSE_INVERSE,
    POSE_MULTIPLY,
    POSE_TO_MATRIX,
    POSE_TRANSFORM_POINTS,
    TRANSFORM_POINT_INVERSE,
    TRANSFORM_POINTS,
)

# The built-in ops by family, in the order the documentation lists them.
FAMILIES = {
    "Points and poses (cuRobo's curobo.geom.transform)": (
        TRANSFORM_POINTS,
        BATCH_TRANSFORM_POINTS,
        BATCH_TRANSFORM_POINTS_INVERSE,
        TRANSFORM_POINT_INVERSE,
        GET_INV_TRANSFORM,
        POSE_TO_MATRIX,
        POSE_MULTIPLY,
        POSE_INVERSE,
        POSE_TRANSFORM_POINTS,
    ),
    "Conversions": (QUATERNION_TO_MATRIX, MATRIX_TO_QUATERNION, CUDA_MATRIX_TO_QUATERNION),
    "Quaternion algebra": (
        quaternion.QUATERNION_MULTIPLY,
        quaternion.QUATERNION_CONJUGATE,
        quaternion.QUATERNION_INVERSE,
        quaternion.QUATERNION_NORMALIZE,
        quaternion.QUATERNION_STANDARDIZE,
        quaternion.QUATERNION_ROTATE,
    ),
    "SO(3)": (
        so3.SO3_EXP,
        so3.SO3_LOG,
        so3.AXIS_ANGLE_TO_QUATERNION,
        so3.QUATERNION_TO_AXIS_ANGLE,
        so3.AXIS_ANGLE_TO_MATRIX,
        so3.MATRIX_TO_AXIS_ANGLE,
        so3.SO3_HAT,
        so3.SO3_VEE,
        so3.SO3_LEFT_JACOBIAN,
        so3.SO3_LEFT_JACOBIAN_INVERSE,
        so3.SO3_RIGHT_JACOBIAN,
        so3.SO3_RIGHT_JACOBIAN_INVERSE,
    ),
    "SE(3)": (
        se3.SE3_EXP,
        se3.SE3_LOG,
        se3.SE3_HAT,
        se3.SE3_VEE,
        se3.SE3_ADJOINT,
        se3.SE3_LEFT_JACOBIAN,
        se3.SE3_LEFT_JACOBIAN_INVERSE,
        se3.SE3_RIGHT_JACOBIAN,
        se3.SE3_RIGHT_JACOBIAN_INVERSE,
    ),
    "Sim(3)": (
        sim3.SIM3_EXP,
        sim3.SIM3_LOG,
        sim3.SIM3_MULTIPLY,
        sim3.SIM3_INVERSE,
        sim3.SIM3_TRANSFORM_POINTS,
        sim3.SIM3_TO_MATRIX,
        sim3.MATRIX_TO_SIM3,
        sim3.SIM3_ADJOINT,
        sim3.SIM3_LEFT_JACOBIAN,
        sim3.SIM3_LEFT_JACOBIAN_INVERSE,
        sim3.SIM3_RIGHT_JACOBIAN,
        sim3.SIM3_RIGHT_JACOBIAN_INVERSE,
    ),
    "SO(2) and SE(2)": (
        so2.SO2_EXP,
        so2.SO2_LOG,
        so2.SO2_TO_MATRIX,
        so2.SO2_FROM_MATRIX,
        so2.SO2_MULTIPLY,
        so2.SO2_INVERSE,
        so2.SO2_ROTATE,
        so2.SO2_NORMALIZE,
        se2.SE2_EXP,
        se2.SE2_LOG,
        se2.SE2_TO_MATRIX,
        se2.SE2_FROM_MATRIX,
        se2.SE2_ADJOINT,
        se2.TRANSFORM_POINTS_2D,
        se2.POSE_MULTIPLY_2D,
        se2.POSE_INVERSE_2D,
        se2.SE2_LEFT_JACOBIAN,
        se2.SE2_LEFT_JACOBIAN_INVERSE,
        se2.SE2_RIGHT_JACOBIAN,
        se2.SE2_RIGHT_JACOBIAN_INVERSE,
    ),
    "Distances": (
        so3.ROTATION_ANGLE,
        so3.QUATERNION_GEODESIC_DISTANCE,
        so3.MATRIX_GEODESIC_DISTANCE,
    ),
    "Conversions and utilities": (
        conversions.ROTATION_6D_TO_MATRIX,
        conversions.MATRIX_TO_ROTATION_6D,
        conversions.MATRIX_TO_POSE,
        conversions.QUATERNION_RATE_TO_AXIS_ANGLE_RATE,
        conversions.QUATERNION_RATE_TO_ANGULAR_VELOCITY,
        interpolation.QUATERNION_SLERP,
        interpolation.POSE_INTERPOLATE,
        registration.SPECIAL_PROCRUSTES,
    ),
}

# Every built-in op by name.
OPS = {op.name: op for ops in FAMILIES.values() for op in ops}

# Functions over ops: choosing among them by static arguments (a convention string, a
# flag), or chaining them.
FAMILY_FUNCTIONS = {**euler.FAMILIES, "rigid_registration": registration.RIGID_REGISTRATION}
