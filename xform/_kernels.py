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

Reverse mode is a hand-written VJP kernel where the op has one (the point transforms,
which carry the big batches), else Warp's adjoint launch of the forward kernel: vectors
and matrices are built in one constructor call, never component by component, because
per-component writes break Warp's adjoint.
"""

from typing import Any

import warp as wp

# Leading dimensions that the launch grid can index directly; see `_layout.py`.
MAX_GRID_DIMS = 4


@wp.struct
class Grid:
    """The coalesced broadcast batch that one launch covers, innermost dimension first:
    `size` launch indices in all, `run` of them per thread for kernels that loop over a
    run (one per thread for the others). Bit k of `dense` is set when operand k has one
    element per launch index of the whole batch (it is not broadcast): a VJP kernel then
    stores that operand's gradient instead of adding into it."""

    ndim: wp.int32
    shape: wp.vec4i
    size: wp.int32
    run: wp.int32
    dense: wp.int32


@wp.struct
class FlatGrid:
    """A one-dimensional batch (the common case once dimensions are coalesced): its own
    type, so that the kernels' overloads for it index operands without any division or
    branch (a third of the per-point time on CPU)."""

    size: wp.int32
    run: wp.int32
    dense: wp.int32


@wp.func
def run_bounds(grid: Any, thread: wp.int32):
    """The launch indices [first, last) that one thread of a run-looping kernel covers."""
    first = thread * grid.run
    return first, wp.min(first + grid.run, grid.size)


@wp.func
def unravel(grid: FlatGrid, launch_index: wp.int32):
    return wp.vec4i(launch_index, 0, 0, 0)


@wp.func
def unravel(grid: Grid, launch_index: wp.int32):  # noqa: F811 -- a Warp overload
    """The launch index as grid coordinates, innermost first. The outermost coordinate needs
    no division (the index is in range), so a 1-D grid costs nothing."""
    i0 = launch_index
    i1 = wp.int32(0)
    i2 = wp.int32(0)
    i3 = wp.int32(0)
    if grid.ndim > 1:
        i1 = i0 / grid.shape[0]
        i0 = i0 - i1 * grid.shape[0]
        if grid.ndim > 2:
            i2 = i1 / grid.shape[1]
            i1 = i1 - i2 * grid.shape[1]
            if grid.ndim > 3:
                i3 = i2 / grid.shape[2]
                i2 = i2 - i3 * grid.shape[2]
    return wp.vec4i(i0, i1, i2, i3)


@wp.func
def advance(grid: FlatGrid, coordinates: wp.vec4i):
    """The coordinates of the next launch index."""
    return wp.vec4i(coordinates[0] + 1, 0, 0, 0)


@wp.func
def advance(grid: Grid, coordinates: wp.vec4i):  # noqa: F811 -- a Warp overload
    """The coordinates of the next launch index, as an odometer: no division. (Dimensions
    past `ndim` have extent 1, so they only turn over past the last index.)"""
    i0 = coordinates[0] + 1
    i1 = coordinates[1]
    i2 = coordinates[2]
    i3 = coordinates[3]
    if i0 == grid.shape[0]:
        i0 = 0
        i1 = i1 + 1
        if i1 == grid.shape[1]:
            i1 = 0
            i2 = i2 + 1
            if i2 == grid.shape[2]:
                i2 = 0
                i3 = i3 + 1
    return wp.vec4i(i0, i1, i2, i3)


@wp.func
def element_index(coordinates: wp.vec4i, strides: wp.vec4i):
    """Index of the element an operand with these strides contributes at these coordinates."""
    return (
        coordinates[0] * strides[0]
        + coordinates[1] * strides[1]
        + coordinates[2] * strides[2]
        + coordinates[3] * strides[3]
    )


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
def quat_rotate_polar(q: Any, r: Any, v: Any):
    """The symmetric bilinear form B(q, r) v with B(q, q) v = q (0, v) q*. Every rotation
    below is written through it, so that the tangent of R(q) v along dq is 2 B(q, dq) v."""
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
def dense(grid: Any, operand: wp.int32):
    return (grid.dense >> operand) & 1 != 0


@wp.func
def accumulate(gradient: wp.array(dtype=Any), index: wp.int32, value: Any, store: bool):
    """Add into a gradient that several launch indices may share (a broadcast operand),
    or store into one that only this index writes (`store`, no zero-fill needed); a null
    array (an unneeded gradient) has length 0 and is skipped."""
    if gradient.shape[0] > 0:
        if store:
            gradient[index] = value
        else:
            wp.atomic_add(gradient, index, value)


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
def conjugate_matrix_vjp(q: Any, g: Any):
    """Pull the cotangent g of the matrix R(q*) = R(q)^T back to q."""
    return quat_conjugate(quat_matrix_vjp(quat_conjugate(q), g))


@wp.func
def shepperd_branch(m: Any):
    """Which of 4w^2, 4x^2, 4y^2, 4z^2 (read off the diagonal) is largest: dividing by it
    keeps the conversion accurate near 180 degrees."""
    t0 = m[0, 0] + m[1, 1] + m[2, 2]
    t1 = m[0, 0] - m[1, 1] - m[2, 2]
    t2 = -m[0, 0] + m[1, 1] - m[2, 2]
    t3 = -m[0, 0] - m[1, 1] + m[2, 2]
    branch = int(3)  # noqa: UP018 -- a typed, mutable Warp local
    if t0 >= t1 and t0 >= t2 and t0 >= t3:
        branch = 0
    elif t1 >= t2 and t1 >= t3:
        branch = 1
    elif t2 >= t3:
        branch = 2
    return branch


@wp.func
def shepperd_terms(m: Any, branch: int, one: Any):
    """For the chosen branch, t = 4 c^2 (c the largest component) and the vector 4 c q,
    both affine in m; with one = 0 they are the linear parts, i.e. their tangents."""
    wx = m[2, 1] - m[1, 2]
    wy = m[0, 2] - m[2, 0]
    wz = m[1, 0] - m[0, 1]
    xy = m[0, 1] + m[1, 0]
    xz = m[0, 2] + m[2, 0]
    yz = m[1, 2] + m[2, 1]
    t = one + m[0, 0] + m[1, 1] + m[2, 2]
    v = wp.vector(t, wx, wy, wz)
    if branch == 1:
        t = one + m[0, 0] - m[1, 1] - m[2, 2]
        v = wp.vector(wx, t, xy, xz)
    elif branch == 2:
        t = one - m[0, 0] + m[1, 1] - m[2, 2]
        v = wp.vector(wy, xy, t, yz)
    elif branch == 3:
        t = one - m[0, 0] - m[1, 1] + m[2, 2]
        v = wp.vector(wz, xz, yz, t)
    return t, v


@wp.func
def matrix_to_quat(m: Any):
    """Shepperd's method, q = v / (2 sqrt(t)), with the sign chosen so that w >= 0."""
    half = type(m[0, 0])(0.5)
    t, v = shepperd_terms(m, shepperd_branch(m), type(m[0, 0])(1.0))
    q = (half / wp.sqrt(t)) * v
    if q[0] < type(q[0])(0.0):
        q = -q
    return q


@wp.func
def matrix_to_quat_tangent(m: Any, dm: Any):
    half = type(m[0, 0])(0.5)
    branch = shepperd_branch(m)
    t, v = shepperd_terms(m, branch, type(m[0, 0])(1.0))
    dt, dv = shepperd_terms(dm, branch, type(m[0, 0])(0.0))
    scale = half / wp.sqrt(t)
    dq = scale * (dv - (dt * half / t) * v)
    if scale * v[0] < type(t)(0.0):
        dq = -dq
    return dq


@wp.func
def rigid_inverse(rot: Any, trans: Any):
    rot_t = wp.transpose(rot)
    return rot_t, -(rot_t @ trans)


# --- kernels: one per job ---------------------------------------------------------------


# The point transforms loop over a run of points per thread, forming the rotation matrix
# once per pose they meet rather than once per point (on CPU, where a thread's run is long,
# that is most of the arithmetic; on a GPU a run is one point). They have VJP kernels, so
# Warp's adjoint of these loops is never needed. One function serves the transform and
# its inverse, y = R p + t and y = R^T (p - t) with R = R(q); its kernels fix `inverse`.


@wp.func
def pose_rotation(q: Any, transpose: bool):
    """R(q), or R(q)^T = R(q*)."""
    if transpose:
        return quat_to_matrix(quat_conjugate(q))
    return quat_to_matrix(q)


@wp.func
def transform_points_run(
    grid: Any,
    thread: wp.int32,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points: wp.array(dtype=Any),
    inverse: bool,
):
    first, last = run_bounds(grid, thread)
    at = unravel(grid, first)
    pose = element_index(at, quaternion_strides)
    rotation = pose_rotation(quaternion[pose], inverse)
    for i in range(first, last):
        iq = element_index(at, quaternion_strides)
        if iq != pose:
            pose = iq
            rotation = pose_rotation(quaternion[pose], inverse)
        p = points[element_index(at, points_strides)]
        t = position[element_index(at, position_strides)]
        if inverse:
            out_points[i] = rotation @ (p - t)
        else:
            out_points[i] = rotation @ p + t
        at = advance(grid, at)


@wp.kernel(enable_backward=False)
def transform_points_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points: wp.array(dtype=Any),
):
    transform_points_run(
        grid, wp.tid(), position, position_strides, quaternion, quaternion_strides,
        points, points_strides, out_points, False,
    )  # fmt: skip


@wp.kernel(enable_backward=False)
def transform_points_inverse_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points: wp.array(dtype=Any),
):
    transform_points_run(
        grid, wp.tid(), position, position_strides, quaternion, quaternion_strides,
        points, points_strides, out_points, True,
    )  # fmt: skip


@wp.kernel
def transform_point_inverse_kernel(
    grid: Any,
    point: wp.array(dtype=Any),
    point_strides: wp.vec4i,
    rot: wp.array(dtype=Any),
    rot_strides: wp.vec4i,
    trans: wp.array(dtype=Any),
    trans_strides: wp.vec4i,
    out_point: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    p = point[element_index(at, point_strides)]
    r = rot[element_index(at, rot_strides)]
    t = trans[element_index(at, trans_strides)]
    out_point[i] = wp.transpose(r) @ (p - t)


@wp.kernel
def inverse_transform_kernel(
    grid: Any,
    rot: wp.array(dtype=Any),
    rot_strides: wp.vec4i,
    trans: wp.array(dtype=Any),
    trans_strides: wp.vec4i,
    out_rot: wp.array(dtype=Any),
    out_trans: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    r = rot[element_index(at, rot_strides)]
    t = trans[element_index(at, trans_strides)]
    inv_rot, inv_trans = rigid_inverse(r, t)
    out_rot[i] = inv_rot
    out_trans[i] = inv_trans


@wp.kernel
def quaternion_to_matrix_kernel(
    grid: Any,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    out_matrix: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    out_matrix[i] = quat_to_matrix(quaternion[element_index(at, quaternion_strides)])


@wp.kernel
def matrix_to_quaternion_kernel(
    grid: Any,
    matrix: wp.array(dtype=Any),
    matrix_strides: wp.vec4i,
    out_quaternion: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    out_quaternion[i] = matrix_to_quat(matrix[element_index(at, matrix_strides)])


@wp.kernel
def pose_to_matrix_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    out_matrix: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    t = position[element_index(at, position_strides)]
    r = quat_to_matrix(quaternion[element_index(at, quaternion_strides)])
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
    grid: Any,
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
    at = unravel(grid, i)
    t1 = position[element_index(at, position_strides)]
    q1 = quaternion[element_index(at, quaternion_strides)]
    t2 = position2[element_index(at, position2_strides)]
    q2 = quaternion2[element_index(at, quaternion2_strides)]
    out_position[i] = quat_rotate(q1, t2) + t1
    out_quaternion[i] = quat_multiply(q1, q2)


@wp.kernel
def pose_inverse_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    out_position: wp.array(dtype=Any),
    out_quaternion: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    t = position[element_index(at, position_strides)]
    q_inv = quat_conjugate(quaternion[element_index(at, quaternion_strides)])
    out_position[i] = -quat_rotate(q_inv, t)
    out_quaternion[i] = q_inv


# --- VJP kernels, for the ops where a closed form beats Warp's adjoint (a replay of the
# forward, then a reverse sweep): operands and strides as in the forward kernel, then the
# result cotangents (read at the launch index), then one gradient per operand, accumulated
# at the operand's own index --------------------------------------------------------------


@wp.func
def zero_vec3(like: Any):
    zero = type(like)(0.0)
    return wp.vector(zero, zero, zero)


@wp.func
def rotation_vjp(q: Any, g: Any, transpose: bool):
    """Pull the cotangent g of pose_rotation(q, transpose) back to q."""
    if transpose:
        return conjugate_matrix_vjp(q, g)
    return quat_matrix_vjp(q, g)


@wp.func
def transform_points_vjp_run(
    grid: Any,
    thread: wp.int32,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points_bar: wp.array(dtype=Any),
    position_bar: wp.array(dtype=Any),
    quaternion_bar: wp.array(dtype=Any),
    points_bar: wp.array(dtype=Any),
    inverse: bool,
):
    # Per point, p's gradient is the rotation's transpose applied to g (R^T g, or R g for
    # the inverse), and t's is g (or minus p's). Over a run, the pose's gradients are
    # sums, pulled back to q once per pose: sum g v^T is the matrix's, with v = p (or
    # p - t) the vector it multiplies.
    first, last = run_bounds(grid, thread)
    at = unravel(grid, first)
    it = element_index(at, position_strides)
    iq = element_index(at, quaternion_strides)
    q = quaternion[iq]
    back = pose_rotation(q, not inverse)
    zero = zero_vec3(q[0])
    t_sum = zero
    r_sum = wp.outer(zero, zero)
    for i in range(first, last):
        jt = element_index(at, position_strides)
        jq = element_index(at, quaternion_strides)
        if jt != it:
            accumulate(position_bar, it, t_sum, dense(grid, 0))
            it = jt
            t_sum = zero
        if jq != iq:
            accumulate(quaternion_bar, iq, rotation_vjp(q, r_sum, inverse), dense(grid, 1))
            iq = jq
            q = quaternion[iq]
            back = pose_rotation(q, not inverse)
            r_sum = wp.outer(zero, zero)
        g = out_points_bar[i]
        ip = element_index(at, points_strides)
        p_bar = back @ g
        if inverse:
            t_sum = t_sum - p_bar
            r_sum = r_sum + wp.outer(g, points[ip] - position[jt])
        else:
            t_sum = t_sum + g
            r_sum = r_sum + wp.outer(g, points[ip])
        accumulate(points_bar, ip, p_bar, dense(grid, 2))
        at = advance(grid, at)
    accumulate(position_bar, it, t_sum, dense(grid, 0))
    accumulate(quaternion_bar, iq, rotation_vjp(q, r_sum, inverse), dense(grid, 1))


@wp.kernel(enable_backward=False)
def transform_points_vjp_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points_bar: wp.array(dtype=Any),
    position_bar: wp.array(dtype=Any),
    quaternion_bar: wp.array(dtype=Any),
    points_bar: wp.array(dtype=Any),
):
    transform_points_vjp_run(
        grid, wp.tid(), position, position_strides, quaternion, quaternion_strides,
        points, points_strides, out_points_bar, position_bar, quaternion_bar, points_bar,
        False,
    )  # fmt: skip


@wp.kernel(enable_backward=False)
def transform_points_inverse_vjp_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    out_points_bar: wp.array(dtype=Any),
    position_bar: wp.array(dtype=Any),
    quaternion_bar: wp.array(dtype=Any),
    points_bar: wp.array(dtype=Any),
):
    transform_points_vjp_run(
        grid, wp.tid(), position, position_strides, quaternion, quaternion_strides,
        points, points_strides, out_points_bar, position_bar, quaternion_bar, points_bar,
        True,
    )  # fmt: skip


@wp.kernel(enable_backward=False)
def quaternion_to_matrix_vjp_kernel(
    grid: Any,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    out_matrix_bar: wp.array(dtype=Any),
    quaternion_bar: wp.array(dtype=Any),
):
    i = wp.tid()
    iq = element_index(unravel(grid, i), quaternion_strides)
    q_bar = quat_matrix_vjp(quaternion[iq], out_matrix_bar[i])
    accumulate(quaternion_bar, iq, q_bar, dense(grid, 0))


# --- tangent (JVP) kernels: operands and strides as in the forward kernel, then one tangent
# per operand (read at the operand's own index), then the result tangents ---------------


@wp.kernel(enable_backward=False)
def transform_points_tangent_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    position_dot: wp.array(dtype=Any),
    quaternion_dot: wp.array(dtype=Any),
    points_dot: wp.array(dtype=Any),
    out_points_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    it = element_index(at, position_strides)
    iq = element_index(at, quaternion_strides)
    ip = element_index(at, points_strides)
    out_points_dot[i] = (
        quat_rotate_tangent(quaternion[iq], quaternion_dot[iq], points[ip], points_dot[ip])
        + position_dot[it]
    )


@wp.kernel(enable_backward=False)
def transform_points_inverse_tangent_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    points: wp.array(dtype=Any),
    points_strides: wp.vec4i,
    position_dot: wp.array(dtype=Any),
    quaternion_dot: wp.array(dtype=Any),
    points_dot: wp.array(dtype=Any),
    out_points_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    it = element_index(at, position_strides)
    iq = element_index(at, quaternion_strides)
    ip = element_index(at, points_strides)
    out_points_dot[i] = quat_rotate_tangent(
        quat_conjugate(quaternion[iq]),
        quat_conjugate(quaternion_dot[iq]),
        points[ip] - position[it],
        points_dot[ip] - position_dot[it],
    )


@wp.kernel(enable_backward=False)
def transform_point_inverse_tangent_kernel(
    grid: Any,
    point: wp.array(dtype=Any),
    point_strides: wp.vec4i,
    rot: wp.array(dtype=Any),
    rot_strides: wp.vec4i,
    trans: wp.array(dtype=Any),
    trans_strides: wp.vec4i,
    point_dot: wp.array(dtype=Any),
    rot_dot: wp.array(dtype=Any),
    trans_dot: wp.array(dtype=Any),
    out_point_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    ip = element_index(at, point_strides)
    ir = element_index(at, rot_strides)
    it = element_index(at, trans_strides)
    out_point_dot[i] = wp.transpose(rot_dot[ir]) @ (point[ip] - trans[it]) + wp.transpose(
        rot[ir]
    ) @ (point_dot[ip] - trans_dot[it])


@wp.kernel(enable_backward=False)
def inverse_transform_tangent_kernel(
    grid: Any,
    rot: wp.array(dtype=Any),
    rot_strides: wp.vec4i,
    trans: wp.array(dtype=Any),
    trans_strides: wp.vec4i,
    rot_dot: wp.array(dtype=Any),
    trans_dot: wp.array(dtype=Any),
    out_rot_dot: wp.array(dtype=Any),
    out_trans_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    ir = element_index(at, rot_strides)
    it = element_index(at, trans_strides)
    rot_dot_t = wp.transpose(rot_dot[ir])
    out_rot_dot[i] = rot_dot_t
    out_trans_dot[i] = -(rot_dot_t @ trans[it] + wp.transpose(rot[ir]) @ trans_dot[it])


@wp.kernel(enable_backward=False)
def quaternion_to_matrix_tangent_kernel(
    grid: Any,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    quaternion_dot: wp.array(dtype=Any),
    out_matrix_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    iq = element_index(at, quaternion_strides)
    out_matrix_dot[i] = quat_to_matrix_tangent(quaternion[iq], quaternion_dot[iq])


@wp.kernel(enable_backward=False)
def matrix_to_quaternion_tangent_kernel(
    grid: Any,
    matrix: wp.array(dtype=Any),
    matrix_strides: wp.vec4i,
    matrix_dot: wp.array(dtype=Any),
    out_quaternion_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    im = element_index(at, matrix_strides)
    out_quaternion_dot[i] = matrix_to_quat_tangent(matrix[im], matrix_dot[im])


@wp.kernel(enable_backward=False)
def pose_to_matrix_tangent_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    position_dot: wp.array(dtype=Any),
    quaternion_dot: wp.array(dtype=Any),
    out_matrix_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    dt = position_dot[element_index(at, position_strides)]
    iq = element_index(at, quaternion_strides)
    dr = quat_to_matrix_tangent(quaternion[iq], quaternion_dot[iq])
    zero = type(dt[0])(0.0)
    out_matrix_dot[i] = wp.matrix(
        dr[0, 0], dr[0, 1], dr[0, 2], dt[0],
        dr[1, 0], dr[1, 1], dr[1, 2], dt[1],
        dr[2, 0], dr[2, 1], dr[2, 2], dt[2],
        zero, zero, zero, zero,
        shape=(4, 4),
    )  # fmt: skip


@wp.kernel(enable_backward=False)
def pose_multiply_tangent_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    position2: wp.array(dtype=Any),
    position2_strides: wp.vec4i,
    quaternion2: wp.array(dtype=Any),
    quaternion2_strides: wp.vec4i,
    position_dot: wp.array(dtype=Any),
    quaternion_dot: wp.array(dtype=Any),
    position2_dot: wp.array(dtype=Any),
    quaternion2_dot: wp.array(dtype=Any),
    out_position_dot: wp.array(dtype=Any),
    out_quaternion_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    i1 = element_index(at, position_strides)
    j1 = element_index(at, quaternion_strides)
    i2 = element_index(at, position2_strides)
    j2 = element_index(at, quaternion2_strides)
    q1 = quaternion[j1]
    q2 = quaternion2[j2]
    dq1 = quaternion_dot[j1]
    out_position_dot[i] = (
        quat_rotate_tangent(q1, dq1, position2[i2], position2_dot[i2]) + position_dot[i1]
    )
    out_quaternion_dot[i] = quat_multiply(dq1, q2) + quat_multiply(q1, quaternion2_dot[j2])


@wp.kernel(enable_backward=False)
def pose_inverse_tangent_kernel(
    grid: Any,
    position: wp.array(dtype=Any),
    position_strides: wp.vec4i,
    quaternion: wp.array(dtype=Any),
    quaternion_strides: wp.vec4i,
    position_dot: wp.array(dtype=Any),
    quaternion_dot: wp.array(dtype=Any),
    out_position_dot: wp.array(dtype=Any),
    out_quaternion_dot: wp.array(dtype=Any),
):
    i = wp.tid()
    at = unravel(grid, i)
    it = element_index(at, position_strides)
    iq = element_index(at, quaternion_strides)
    q_inv_dot = quat_conjugate(quaternion_dot[iq])
    out_position_dot[i] = -quat_rotate_tangent(
        quat_conjugate(quaternion[iq]), q_inv_dot, position[it], position_dot[it]
    )
    out_quaternion_dot[i] = q_inv_dot
