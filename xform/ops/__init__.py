"""xform's built-in ops, one file per family; each file holds the family's element
functions and the `define_op` calls that make them ops. The element functions are
`@wp.func`s that user ops can call too."""

from .conversions import CUDA_MATRIX_TO_QUATERNION, MATRIX_TO_QUATERNION, QUATERNION_TO_MATRIX
from .transforms import (
    BATCH_TRANSFORM_POINTS,
    BATCH_TRANSFORM_POINTS_INVERSE,
    GET_INV_TRANSFORM,
    POSE_INVERSE,
    POSE_MULTIPLY,
    POSE_TO_MATRIX,
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
    ),
    "Conversions": (QUATERNION_TO_MATRIX, MATRIX_TO_QUATERNION, CUDA_MATRIX_TO_QUATERNION),
}

# Every built-in op by name.
OPS = {op.name: op for ops in FAMILIES.values() for op in ops}
