"""The one place that knows how a pose is stored and which xform ops act on it.

A pose is the pair (position, rotation) of xform's functional API: SE(3) as (position
(n, 3), quaternion (n, 4) [w, x, y, z]), SE(2) as (position (n, 2), unit complex (n, 2)
[cos theta, sin theta]). Perturbations are on the right, T <- T exp(delta), with tangents
[rho, omega] (SE(3)) and [x, y, theta] (SE(2)): the order of g2o's information matrices.

Everything here is a handful of batched op calls over all vertices or all edges at once,
written once for both frameworks (`ops` is `xform.backends.torch` or `xform.backends.jax`;
the arrays are that framework's). When xform's group objects (`xform.SE3`, `xform.SE2`)
land, the pairs below become group objects and these functions their methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Group:
    """A pose group: sizes and the names of the xform ops that act on it."""

    name: str
    space_dim: int  # size of a position
    rotation_size: int  # size of a stored rotation (quaternion 4, unit complex 2)
    tangent_dim: int
    multiply: str
    inverse: str
    log: str
    exp: str
    adjoint: str
    right_jacobian_inverse: str
    to_matrix: str  # stored rotation -> rotation matrix
    normalize: str  # the op that puts a rotation back on the group


SE3 = Group(
    name="SE3",
    space_dim=3,
    rotation_size=4,
    tangent_dim=6,
    multiply="pose_multiply",
    inverse="pose_inverse",
    log="se3_log",
    exp="se3_exp",
    adjoint="se3_adjoint",
    right_jacobian_inverse="se3_right_jacobian_inverse",
    to_matrix="quaternion_to_matrix",
    normalize="quaternion_normalize",
)

SE2 = Group(
    name="SE2",
    space_dim=2,
    rotation_size=2,
    tangent_dim=3,
    multiply="pose_multiply_2d",
    inverse="pose_inverse_2d",
    log="se2_log",
    exp="se2_exp",
    adjoint="se2_adjoint",
    right_jacobian_inverse="se2_right_jacobian_inverse",
    to_matrix="so2_to_matrix",
    normalize="so2_normalize",
)


def op(ops, group: Group, which: str):
    return getattr(ops, getattr(group, which))


def multiply(ops, group: Group, a, b):
    """a b for poses a, b (pairs); b is applied first."""
    return op(ops, group, "multiply")(*a, *b)


def inverse(ops, group: Group, a):
    return op(ops, group, "inverse")(*a)


def log(ops, group: Group, a):
    return op(ops, group, "log")(*a)


def take(a, index):
    """The poses a[index] (index: an integer array of the pair's framework)."""
    return a[0][index], a[1][index]


def edge_residuals_and_jacobians(ops, group: Group, poses, i, j, measurements_inverse):
    """For every edge (i, j) with measurement Z: the residual r = log(Z^-1 T_i^-1 T_j) and
    its Jacobians in right perturbations of T_i and T_j,

        dr/d(delta_j) = J_r^-1(r),   dr/d(delta_i) = -J_r^-1(r) Ad(T_j^-1 T_i),

    since (T_i exp(delta))^-1 T_j = T_i^-1 T_j exp(-Ad(T_j^-1 T_i) delta): both move the
    error E = Z^-1 T_i^-1 T_j on its right, and log(E exp(e)) = r + J_r^-1(r) e + O(e^2).
    One batched call per op for all edges. Returns r (m, d), J_i (m, d, d), J_j (m, d, d)."""
    relative = multiply(ops, group, inverse(ops, group, take(poses, i)), take(poses, j))
    residual = log(ops, group, multiply(ops, group, measurements_inverse, relative))
    jacobian_j = op(ops, group, "right_jacobian_inverse")(residual)
    adjoint = op(ops, group, "adjoint")(*inverse(ops, group, relative))
    return residual, -(jacobian_j @ adjoint), jacobian_j


def retract(ops, group: Group, poses, delta):
    """T exp(delta) for every pose (delta (n, d) in the framework of the poses)."""
    position, rotation = multiply(ops, group, poses, op(ops, group, "exp")(delta))
    return position, op(ops, group, "normalize")(rotation)  # on the group after many steps


def rotation_matrices(fw, group: Group, rotations: np.ndarray) -> np.ndarray:
    """The stored rotations (n, rotation_size) as matrices (n, D, D) (NumPy in and out,
    through the framework `fw`'s ops)."""
    return fw.numpy(op(fw.ops, group, "to_matrix")(fw.array(rotations)))


def nearest_rotations(fw, group: Group, matrices: np.ndarray) -> np.ndarray:
    """The stored rotation nearest to each matrix (n, D, D), by special_procrustes: a 2D
    matrix M goes in as diag(M, 1), whose nearest rotation is diag(R, 1). Quaternions come
    out with w >= 0."""
    if group.space_dim == 3:
        return fw.numpy(fw.ops.matrix_to_quaternion(fw.ops.special_procrustes(fw.array(matrices))))
    embedded = np.zeros((len(matrices), 3, 3))
    embedded[:, :2, :2] = matrices
    embedded[:, 2, 2] = 1.0
    rotations = fw.ops.special_procrustes(fw.array(embedded))[:, :2, :2]
    return fw.numpy(fw.ops.so2_from_matrix(rotations))


def identity(group: Group, count: int) -> tuple[np.ndarray, np.ndarray]:
    rotation = np.zeros((count, group.rotation_size))
    rotation[:, 0] = 1.0
    return np.zeros((count, group.space_dim)), rotation


def rotations_from_file(fw, group: Group, rotations: np.ndarray) -> np.ndarray:
    """A file's rotations (quaternions (n, 4), angles (n,)) in the stored form: quaternions
    normalised, angles as unit complex numbers (so2_exp)."""
    if group.space_dim == 3:
        return fw.numpy(fw.ops.quaternion_normalize(fw.array(rotations)))
    return fw.numpy(fw.ops.so2_exp(fw.array(rotations[:, None])))


def rotations_to_file(fw, group: Group, rotations: np.ndarray) -> np.ndarray:
    """The stored rotations as a file writes them: quaternions, or angles (so2_log)."""
    if group.space_dim == 3:
        return rotations
    return fw.numpy(fw.ops.so2_log(fw.array(rotations)))[:, 0]
