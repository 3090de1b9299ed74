"""Warp kernels: the only place in xform that holds transform math.

Every kernel is generic over the scalar type (float32 / float64) and is launched
over the flattened broadcast batch. Each array operand arrives with a `wp.vec4i`
of element strides (zero along broadcast dimensions) that maps the launch index to
the element it reads; results are always written contiguously at the launch index.

Quaternions are stored as `[w, x, y, z]` vectors. The rotation they act by is the
sandwich product `q (0, v) q*`, which for any quaternion equals

    R(q) v = (w^2 - |u|^2) v + 2 (u . v) u + 2 w (u x v),    q = (w, u),

i.e. `|q|^2` times the rotation by `q / |q|`. It is a homogeneous quadratic in `q`,
so every op agrees with `quaternion_to_matrix` for unit and non-unit quaternions alike.

Reverse mode comes from Warp's adjoint launch of these same kernels: vectors and
matrices are built in one constructor call, never component by component, because
per-component writes break Warp's adjoint.
"""

from typing import Any

import warp as wp

# Leading dimensions that the launch grid can index directly; see `_layout.py`.
MAX_GRID_DIMS = 4


@wp.struct
class Grid:
    """The coalesced broadcast batch that one launch covers, innermost dimension first."""

    ndim: wp.int32
    shape: wp.vec4i


@wp.func
def element_index(grid: Grid, launch_index: wp.int32, strides: wp.vec4i):
    """Index of the element an operand with these strides contributes to `launch_index`."""
    index = wp.int32(0)
    rest = launch_index
    for d in range(grid.ndim):
        size = grid.shape[d]
        index += (rest % size) * strides[d]
        rest = rest / size
    return index


# --- quaternion algebra on [w, x, y, z] ------------------------------------------------


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
def quat_rotate(q: Any, v: Any):
    """The sandwich product `q (0, v) q*` as a 3-vector."""
    w = q[0]
    u = vector_part(q)
    two = type(w)(2.0)
    return (w * w - wp.dot(u, u)) * v + (two * wp.dot(u, v)) * u + (two * w) * wp.cross(u, v)


@wp.func
def quat_to_matrix(q: Any):
    """The matrix of `quat_rotate(q, .)`."""
    w = q[0]
    x = q[1]
    y = q[2]
    z = q[3]
    two = type(w)(2.0)
    return wp.matrix(
        w * w + x * x - y * y - z * z, two * (x * y - w * z), two * (x * z + w * y),
        two * (x * y + w * z), w * w - x * x + y * y - z * z, two * (y * z - w * x),
        two * (x * z - w * y), two * (y * z + w * x), w * w - x * x - y * y + z * z,
        shape=(3, 3),
    )  # fmt: skip


@wp.func
def matrix_to_quat(m: Any):
    """Shepperd's method: divide by the largest of 4w^2, 4x^2, 4y^2, 4z^2 (each read off the
    diagonal), so that the result stays accurate near 180 degrees; then flip to w >= 0."""
    one = type(m[0, 0])(1.0)
    half = type(m[0, 0])(0.5)
    t0 = one + m[0, 0] + m[1, 1] + m[2, 2]
    t1 = one + m[0, 0] - m[1, 1] - m[2, 2]
    t2 = one - m[0, 0] + m[1, 1] - m[2, 2]
    t3 = one - m[0, 0] - m[1, 1] + m[2, 2]
    wx = m[2, 1] - m[1, 2]
    wy = m[0, 2] - m[2, 0]
    wz = m[1, 0] - m[0, 1]
    xy = m[0, 1] + m[1, 0]
    xz = m[0, 2] + m[2, 0]
    yz = m[1, 2] + m[2, 1]
    q = wp.vector(t0, wx, wy, wz)
    if t0 >= t1 and t0 >= t2 and t0 >= t3:
        q = (half / wp.sqrt(t0)) * wp.vector(t0, wx, wy, wz)
    elif t1 >= t2 and t1 >= t3:
        q = (half / wp.sqrt(t1)) * wp.vector(wx, t1, xy, xz)
    elif t2 >= t3:
        q = (half / wp.sqrt(t2)) * wp.vector(wy, xy, t2, yz)
    else:
        q = (half / wp.sqrt(t3)) * wp.vector(wz, xz, yz, t3)
    if q[0] < type(q[0])(0.0):
        q = -q
    return q


@wp.func
def rigid_inverse(rot: Any, trans: Any):
    rot_t = wp.transpose(rot)
    return rot_t, -(rot_t @ trans)


# --- kernels: one per job ---------------------------------------------------------------


@wp.kernel
def transform_points_kernel(
    grid: Grid,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points: wp.array(dtype=Any),
):
    i = wp.tid()
    t = position[element_index(grid, i, position_strides)]
    q = quaternion[element_index(grid, i, quaternion_strides)]
    p = points[element_index(grid, i, points_strides)]
    out_points[i] = quat_rotate(q, p) + t


@wp.kernel
def transform_points_inverse_kernel(
    grid: Grid,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points: wp.array(dtype=Any),
):
    i = wp.tid()
    t = position[element_index(grid, i, position_strides)]
    q = quaternion[element_index(grid, i, quaternion_strides)]
    p = points[element_index(grid, i, points_strides)]
    out_points[i] = quat_rotate(quat_conjugate(q), p - t)


@wp.kernel
def transform_point_inverse_kernel(
    grid: Grid,
    point: wp.array(dtype=Any),
    point_strides: wp.vec4i,
    rot: wp.array(dtype=Any),
    rot_strides: wp.vec4i,
    trans: wp.array(dtype=Any),
    trans_strides: wp.vec4i,
    out_point: wp.array(dtype=Any),
):
    i = wp.tid()
    p = point[element_index(grid, i, point_strides)]
    r = rot[element_index(grid, i, rot_strides)]
    t = trans[element_index(grid, i, trans_strides)]
    out_point[i] = wp.transpose(r) @ (p - t)


@wp.kernel
def inverse_transform_kernel(
    grid: Grid,
    rot: wp.array(dtype=Any),
    rot_strides: wp.vec4i,
    trans: wp.array(dtype=Any),
    trans_strides: wp.vec4i,
    out_rot: wp.array(dtype=Any),
    out_trans: wp.array(dtype=Any),
):
    i = wp.tid()
    r = rot[element_index(grid, i, rot_strides)]
    t = trans[element_index(grid, i, trans_strides)]
    inv_rot, inv_trans = rigid_inverse(r, t)
    out_rot[i] = inv_rot
    out_trans[i] = inv_trans


@wp.kernel
def quaternion_to_matrix_kernel(
    grid: Grid,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    out_matrix: wp.array(dtype=Any),
):
    i = wp.tid()
    out_matrix[i] = quat_to_matrix(quaternion[element_index(grid, i, quaternion_strides)])


@wp.kernel
def matrix_to_quaternion_kernel(
    grid: Grid,
    matrix: wp.array(dtype=Any),
    matrix_strides: wp.vec4i,
    out_quaternion: wp.array(dtype=Any),
):
    i = wp.tid()
    out_quaternion[i] = matrix_to_quat(matrix[element_index(grid, i, matrix_strides)])


@wp.kernel
def pose_to_matrix_kernel(
    grid: Grid,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    out_matrix: wp.array(dtype=Any),
):
    i = wp.tid()
    t = position[element_index(grid, i, position_strides)]
    r = quat_to_matrix(quaternion[element_index(grid, i, quaternion_strides)])
    zero = type(t[0])(0.0)
    one = type(t[0])(1.0)
    out_matrix[i] = wp.matrix(
        r[0, 0], r[0, 1], r[0, 2], t[0],
        r[1, 0], r[1, 1], r[1, 2], t[1],
        r[2, 0], r[2, 1], r[2, 2], t[2],
        zero, zero, zero, one,
        shape=(4, 4),
    )  # fmt: skip


@wp.kernel
def pose_multiply_kernel(
    grid: Grid,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    position2: wp.array(dtype=Any),
    position2_strides: wp.vec4i,
    quaternion2: wp.array(dtype=Any),
    quaternion2_strides: wp.vec4i,
    out_position: wp.array(dtype=Any),
    out_quaternion: wp.array(dtype=Any),
):
    i = wp.tid()
    t1 = position[element_index(grid, i, position_strides)]
    q1 = quaternion[element_index(grid, i, quaternion_strides)]
    t2 = position2[element_index(grid, i, position2_strides)]
    q2 = quaternion2[element_index(grid, i, quaternion2_strides)]
    out_position[i] = quat_rotate(q1, t2) + t1
    out_quaternion[i] = quat_multiply(q1, q2)


@wp.kernel
def pose_inverse_kernel(
    grid: Grid,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    out_position: wp.array(dtype=Any),
    out_quaternion: wp.array(dtype=Any),
):
    i = wp.tid()
    t = position[element_index(grid, i, position_strides)]
    q_inv = quat_conjugate(quaternion[element_index(grid, i, quaternion_strides)])
    out_position[i] = -quat_rotate(q_inv, t)
    out_quaternion[i] = q_inv
