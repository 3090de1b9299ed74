"""xform: differentiable rigid-body transforms, one Warp kernel per op, for NumPy,
Warp, PyTorch and JAX.

Quaternions are [w, x, y, z]; positions (..., 3); rotation matrices (..., 3, 3) act
on column vectors; a pose (position, quaternion) maps p to R(q) p + t.

The functions here take NumPy or Warp arrays and return the same type. The PyTorch
and JAX adapters live in `xform.backends.torch` and `xform.backends.jax`; importing
`xform` imports neither framework.
"""

from ._api import FUNCTIONS as _FUNCTIONS
from ._api import jvp, vjp
from ._optable import OPS

__version__ = "0.1.0"

transform_points = _FUNCTIONS["transform_points"]
batch_transform_points = _FUNCTIONS["batch_transform_points"]
batch_transform_points_inverse = _FUNCTIONS["batch_transform_points_inverse"]
transform_point_inverse = _FUNCTIONS["transform_point_inverse"]
get_inv_transform = _FUNCTIONS["get_inv_transform"]
quaternion_to_matrix = _FUNCTIONS["quaternion_to_matrix"]
matrix_to_quaternion = _FUNCTIONS["matrix_to_quaternion"]
cuda_matrix_to_quaternion = _FUNCTIONS["cuda_matrix_to_quaternion"]
pose_to_matrix = _FUNCTIONS["pose_to_matrix"]
pose_multiply = _FUNCTIONS["pose_multiply"]
pose_inverse = _FUNCTIONS["pose_inverse"]

__all__ = ["OPS", "jvp", "vjp", *_FUNCTIONS]
