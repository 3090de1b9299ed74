"""Independent float64 references for every op, and random inputs for them.

The rotations come from SciPy's `Rotation` (scalar-first); a non-unit quaternion q acts
as |q|^2 times the rotation by q/|q|, as the SPEC's formula for each op states. Nothing
here shares code with the kernels.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.linalg import expm
from scipy.spatial.transform import Rotation

from xform import OPS

# The built-in ops by name, the differentiable ones, and cuRobo's point and pose ops.
OP_NAMES = sorted(OPS)
DIFFERENTIABLE = [n for n in OP_NAMES if OPS[n].differentiable]
POINT_AND_POSE_OPS = [
    "transform_points",
    "batch_transform_points",
    "batch_transform_points_inverse",
    "pose_multiply",
    "pose_inverse",
]


def rotation_matrix(q: np.ndarray) -> np.ndarray:
    """(..., 4) -> (..., 3, 3): |q|^2 R(q / |q|)."""
    flat = q.reshape(-1, 4).astype(np.float64)
    if flat.shape[0] == 0:
        return np.zeros((*q.shape[:-1], 3, 3))
    scale = (flat**2).sum(-1)[:, None, None]
    m = Rotation.from_quat(flat, scalar_first=True).as_matrix() * scale
    return m.reshape(*q.shape[:-1], 3, 3)


def hamilton(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a b through the left-multiplication matrix of a."""
    w, x, y, z = np.moveaxis(a, -1, 0)
    left = np.stack(
        [
            np.stack([w, -x, -y, -z], -1),
            np.stack([x, w, -z, y], -1),
            np.stack([y, z, w, -x], -1),
            np.stack([z, -y, x, w], -1),
        ],
        -2,
    )
    return (left @ b[..., None])[..., 0]


def conjugate(q: np.ndarray) -> np.ndarray:
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def apply(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    return (m @ v[..., None])[..., 0]


def transpose(m: np.ndarray) -> np.ndarray:
    return np.swapaxes(m, -1, -2)


def canonical_quaternion(m: np.ndarray) -> np.ndarray:
    """Unit quaternion of rotation matrices, with w >= 0."""
    flat = m.reshape(-1, 3, 3)
    if flat.shape[0] == 0:
        return np.zeros((*m.shape[:-2], 4))
    q = Rotation.from_matrix(flat).as_quat(scalar_first=True)
    q = q * np.where(q[:, :1] < 0, -1.0, 1.0)
    return q.reshape(*m.shape[:-2], 4)


def _broadcast(*args_and_elements):
    """Broadcast the leading dims of (array, element_ndim) pairs by NumPy rules."""
    leading = [a.shape[: a.ndim - n] for a, n in args_and_elements]
    batch = np.broadcast_shapes(*leading)
    return [np.broadcast_to(a, batch + a.shape[a.ndim - n :]) for a, n in args_and_elements]


def transform_points(t, q, p):
    return apply(rotation_matrix(q.reshape(4)), p) + t.reshape(3)


def batch_transform_points(t, q, p):
    return apply(rotation_matrix(q)[:, None], p) + t[:, None]


def batch_transform_points_inverse(t, q, p):
    return apply(transpose(rotation_matrix(q))[:, None], p - t[:, None])


def transform_point_inverse(p, r, t):
    p, r, t = _broadcast((p, 1), (r, 2), (t, 1))
    return apply(transpose(r), p - t)


def get_inv_transform(r, t):
    r, t = _broadcast((r, 2), (t, 1))
    return transpose(r), -apply(transpose(r), t)


def quaternion_to_matrix(q):
    return rotation_matrix(q)


def matrix_to_quaternion(m):
    return canonical_quaternion(m)


def pose_to_matrix(t, q):
    t, q = _broadcast((t, 1), (q, 1))
    out = np.zeros((*t.shape[:-1], 4, 4))
    out[..., :3, :3] = rotation_matrix(q)
    out[..., :3, 3] = t
    out[..., 3, 3] = 1.0
    return out


def pose_multiply(t1, q1, t2, q2):
    t1, q1, t2, q2 = _broadcast((t1, 1), (q1, 1), (t2, 1), (q2, 1))
    return apply(rotation_matrix(q1), t2) + t1, hamilton(q1, q2)


def pose_inverse(t, q):
    t, q = _broadcast((t, 1), (q, 1))
    return -apply(transpose(rotation_matrix(q)), t), conjugate(q)


# --- quaternion algebra, SO(3), SE(3) and distances: SciPy's Rotation, and the Lie
# algebra's exponential through scipy.linalg.expm (Jacobians included: J_l is the
# top-right block of expm([[ad, I], [0, 0]]), the integral of exp(s ad) over [0, 1]) ---


def standardized(q):
    return np.where(q[..., :1] < 0, -q, q)


def skew(v):
    x, y, z = np.moveaxis(v, -1, 0)
    zero = np.zeros_like(x)
    return np.stack(
        [np.stack([zero, -z, y], -1), np.stack([z, zero, -x], -1), np.stack([-y, x, zero], -1)],
        -2,
    )


def _per_element(fn, *arrays, element_ndims):
    """fn applied to every element of broadcast arrays (fn returns one array)."""
    arrays = _broadcast(*zip(arrays, element_ndims))
    batch = arrays[0].shape[: arrays[0].ndim - element_ndims[0]]
    out = [fn(*(a[index] for a in arrays)) for index in np.ndindex(batch)]
    example = fn(*(np.zeros(a.shape[a.ndim - n :]) for a, n in zip(arrays, element_ndims)))
    return np.array(out).reshape(*batch, *np.shape(example))


def _integral_of_exp(a):
    """∫_0^1 exp(s a) ds, as the top-right block of expm([[a, I], [0, 0]])."""
    n = a.shape[0]
    big = np.zeros((2 * n, 2 * n))
    big[:n, :n], big[:n, n:] = a, np.eye(n)
    return expm(big)[:n, n:]


def rotvec_quaternion(w):
    flat = w.reshape(-1, 3)
    q = Rotation.from_rotvec(flat).as_quat(scalar_first=True) if len(flat) else np.zeros((0, 4))
    return standardized(q).reshape(*w.shape[:-1], 4)


def quaternion_rotvec(q):
    flat = q.reshape(-1, 4)
    w = Rotation.from_quat(flat, scalar_first=True).as_rotvec() if len(flat) else np.zeros((0, 3))
    return w.reshape(*q.shape[:-1], 3)


def so3_left_jacobian(w):
    return _per_element(lambda v: _integral_of_exp(skew(v)), w, element_ndims=(1,))


def se3_ad(xi):
    out = np.zeros((6, 6))
    out[:3, :3] = out[3:, 3:] = skew(xi[3:])
    out[:3, 3:] = skew(xi[:3])
    return out


def se3_left_jacobian(xi):
    return _per_element(lambda v: _integral_of_exp(se3_ad(v)), xi, element_ndims=(1,))


def se3_exp(xi):
    def one(v):
        m = np.zeros((4, 4))
        m[:3, :3], m[:3, 3] = skew(v[3:]), v[:3]
        return expm(m)

    t = _per_element(one, xi, element_ndims=(1,))
    flat = t.reshape(-1, 4, 4)
    q = (
        Rotation.from_matrix(flat[:, :3, :3]).as_quat(scalar_first=True)
        if len(flat)
        else flat[:, 0]
    )
    return t[..., :3, 3], standardized(q.reshape(*xi.shape[:-1], 4))


def se3_log(t, q):
    t, q = _broadcast((t, 1), (q, 1))
    w = quaternion_rotvec(q)
    rho = np.linalg.solve(so3_left_jacobian(w), t[..., None])[..., 0]
    return np.concatenate([rho, w], -1)


def se3_hat(xi):
    out = np.zeros((*xi.shape[:-1], 4, 4))
    out[..., :3, :3], out[..., :3, 3] = skew(xi[..., 3:]), xi[..., :3]
    return out


def se3_adjoint(t, q):
    t, q = _broadcast((t, 1), (q, 1))
    r = rotation_matrix(q)
    out = np.zeros((*t.shape[:-1], 6, 6))
    out[..., :3, :3] = out[..., 3:, 3:] = r
    out[..., :3, 3:] = skew(t) @ r
    return out


def sim3_hat(xi):
    """[[sigma I + [omega]x, rho], [0, 0]]: the 4x4 matrix of a Sim(3) tangent."""
    out = np.zeros((*xi.shape[:-1], 4, 4))
    out[..., :3, :3] = skew(xi[..., 3:6]) + xi[..., 6, None, None] * np.eye(3)
    out[..., :3, 3] = xi[..., :3]
    return out


def sim3_ad(xi):
    """ad(xi) e_k = vee([hat(xi), hat(e_k)]), from the commutator of 4x4 matrices."""
    basis = sim3_hat(np.eye(7))
    a = sim3_hat(xi)

    def vee7(m):
        block = m[:3, :3]
        sigma = np.trace(block) / 3
        return np.concatenate([m[:3, 3], vee(block - sigma * np.eye(3)), [sigma]])

    return np.stack([vee7(a @ b - b @ a) for b in basis], -1)


def sim3_left_jacobian(xi):
    return _per_element(lambda v: _integral_of_exp(sim3_ad(v)), xi, element_ndims=(1,))


def sim3_exp(xi):
    m = _per_element(lambda v: expm(sim3_hat(v)), xi, element_ndims=(1,))
    scale = np.exp(xi[..., 6])
    return m[..., :3, 3], canonical_quaternion(m[..., :3, :3] / scale[..., None, None]), scale


def sim3_log(t, q, s):
    t, q, s = _broadcast((t, 1), (q, 1), (s, 0))
    w = quaternion_rotvec(q)
    sigma = np.log(s)
    generator = skew(w) + sigma[..., None, None] * np.eye(3)
    rho = _per_element(
        lambda a, p: np.linalg.solve(_integral_of_exp(a), p), generator, t, element_ndims=(2, 1)
    )
    return np.concatenate([rho, w, sigma[..., None]], -1)


def sim3_multiply(t1, q1, s1, t2, q2, s2):
    t1, q1, s1, t2, q2, s2 = _broadcast((t1, 1), (q1, 1), (s1, 0), (t2, 1), (q2, 1), (s2, 0))
    return s1[..., None] * apply(rotation_matrix(q1), t2) + t1, hamilton(q1, q2), s1 * s2


def sim3_inverse(t, q, s):
    t, q, s = _broadcast((t, 1), (q, 1), (s, 0))
    return -apply(rotation_matrix(conjugate(q)), t) / s[..., None], conjugate(q), 1 / s


def sim3_to_matrix(t, q, s):
    t, q, s = _broadcast((t, 1), (q, 1), (s, 0))
    out = np.zeros((*t.shape[:-1], 4, 4))
    out[..., :3, :3] = s[..., None, None] * rotation_matrix(q)
    out[..., :3, 3] = t
    out[..., 3, 3] = 1.0
    return out


def matrix_to_sim3(m):
    """The scale as the cube root of the block's determinant (the op uses its norm)."""
    scale = np.cbrt(np.linalg.det(m[..., :3, :3]))
    return m[..., :3, 3], canonical_quaternion(m[..., :3, :3] / scale[..., None, None]), scale


def sim3_adjoint(t, q, s):
    t, q, s = _broadcast((t, 1), (q, 1), (s, 0))
    r = rotation_matrix(q)
    out = np.zeros((*t.shape[:-1], 7, 7))
    out[..., :3, :3] = s[..., None, None] * r
    out[..., :3, 3:6] = skew(t) @ r
    out[..., :3, 6] = -t
    out[..., 3:6, 3:6] = r
    out[..., 6, 6] = 1.0
    return out


def angle(q):
    flat = q.reshape(-1, 4)
    a = Rotation.from_quat(flat, scalar_first=True).magnitude() if len(flat) else np.zeros(0)
    return a.reshape(q.shape[:-1])


def vee(m):
    return 0.5 * np.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                           m[..., 1, 0] - m[..., 0, 1]], -1)  # fmt: skip


def quaternion_exp(v):
    """exp of the pure quaternion (0, v / 2), not standardised: w < 0 past |v| = pi."""
    theta = np.linalg.norm(v, axis=-1, keepdims=True)
    axis = np.divide(v, theta, out=np.zeros_like(v), where=theta > 0)
    return np.concatenate([np.cos(theta / 2), np.sin(theta / 2) * axis], -1)


def normalized(q):
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def slerp(q1, q2, t):
    """q1 exp(t log(q1^-1 q2)) from SciPy's rotations: the relative rotation's vector
    (|r| <= pi, the shorter arc), scaled by t."""
    q1, q2, t = _broadcast((q1, 1), (q2, 1), (t, 0))
    relative = hamilton(conjugate(normalized(q1)), normalized(q2))
    return hamilton(normalized(q1), quaternion_exp(t[..., None] * quaternion_rotvec(relative)))


def pose_interpolate(p1, q1, p2, q2, t):
    """T1 exp(t log(T1^-1 T2)), the logarithm and exponential from matrix functions."""
    p1, q1, p2, q2, t = _broadcast((p1, 1), (q1, 1), (p2, 1), (q2, 1), (t, 0))
    q1 = normalized(q1)
    relative_q = hamilton(conjugate(q1), normalized(q2))
    relative_p = apply(rotation_matrix(conjugate(q1)), p2 - p1)
    xi = t[..., None] * se3_log(relative_p, relative_q)
    step_p, _ = se3_exp(xi)
    return (
        apply(rotation_matrix(q1), step_p) + p1,
        hamilton(q1, quaternion_exp(xi[..., 3:])),
    )


def rotation_6d_to_matrix(d6):
    """Gram-Schmidt, rows: pytorch3d's convention."""
    a, b = d6[..., :3], d6[..., 3:]
    first = normalized(a)
    second = normalized(b - (first * b).sum(-1, keepdims=True) * first)
    return np.stack([first, second, np.cross(first, second)], -2)


def special_procrustes(m):
    """argmin over rotations R of |R - M|: U diag(1, 1, det(U V^T)) V^T from NumPy's SVD."""
    u, _, vt = np.linalg.svd(m)
    d = np.ones(m.shape[:-1])
    d[..., -1] = np.linalg.det(u @ vt)
    return (u * d[..., None, :]) @ vt


# --- SO(2) and SE(2): NumPy's complex numbers, homogeneous 3x3 matrices, and the algebra's
# exponential through scipy.linalg.expm (the adjoints and ad from their definitions:
# conjugation and the commutator of hat matrices) ---


def as_complex(z):
    return z[..., 0] + 1j * z[..., 1]


def from_complex(c):
    return np.stack([c.real, c.imag], -1).astype(np.float64)


def complex_product(a, b):
    return from_complex(as_complex(a) * as_complex(b))


def so2_matrix(z):
    c, s = z[..., 0], z[..., 1]
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def se2_matrix(t, z):
    t, z = _broadcast((t, 1), (z, 1))
    out = np.zeros((*t.shape[:-1], 3, 3))
    out[..., :2, :2] = so2_matrix(z)
    out[..., :2, 2] = t
    out[..., 2, 2] = 1.0
    return out


def se2_hat(xi):
    out = np.zeros((*xi.shape[:-1], 3, 3))
    out[..., 0, 1], out[..., 1, 0] = -xi[..., 2], xi[..., 2]
    out[..., :2, 2] = xi[..., :2]
    return out


def se2_vee(m):
    return np.stack([m[..., 0, 2], m[..., 1, 2], m[..., 1, 0]], -1)


def se2_ad(xi):
    """ad(xi) e_k = vee([hat(xi), hat(e_k)])."""
    a, basis = se2_hat(xi), se2_hat(np.eye(3))
    return np.stack([se2_vee(a @ b - b @ a) for b in basis], -1)


def se2_left_jacobian(xi):
    return _per_element(lambda v: _integral_of_exp(se2_ad(v)), xi, element_ndims=(1,))


def se2_exp(xi):
    m = _per_element(lambda v: expm(se2_hat(v)), xi, element_ndims=(1,))
    return m[..., :2, 2], m[..., :2, 0]


def se2_log(t, z):
    t, z = _broadcast((t, 1), (z, 1))
    theta = np.arctan2(z[..., 1], z[..., 0])
    quarter = np.array([[0.0, -1.0], [1.0, 0.0]])
    v = _per_element(
        lambda a, p: np.linalg.solve(_integral_of_exp(a[0] * quarter), p),
        theta[..., None],
        t,
        element_ndims=(1, 1),
    )
    return np.concatenate([v, theta[..., None]], -1)


def se2_adjoint(t, z):
    """Ad_T e_k = vee(T hat(e_k) T^-1), T the homogeneous matrix."""
    m = se2_matrix(t, z)
    inverse = np.linalg.inv(m)
    return np.stack([se2_vee(m @ b @ inverse) for b in se2_hat(np.eye(3))], -1)


def pose_multiply_2d(t1, z1, t2, z2):
    m = se2_matrix(t1, z1) @ se2_matrix(t2, z2)
    return m[..., :2, 2], m[..., :2, 0]


def pose_inverse_2d(t, z):
    t, z = _broadcast((t, 1), (z, 1))
    return -apply(transpose(so2_matrix(z)), t), from_complex(np.conj(as_complex(z)))


REFERENCES = {
    "transform_points": transform_points,
    "batch_transform_points": batch_transform_points,
    "batch_transform_points_inverse": batch_transform_points_inverse,
    "transform_point_inverse": transform_point_inverse,
    "get_inv_transform": get_inv_transform,
    "quaternion_to_matrix": quaternion_to_matrix,
    "matrix_to_quaternion": matrix_to_quaternion,
    "cuda_matrix_to_quaternion": matrix_to_quaternion,
    "pose_to_matrix": pose_to_matrix,
    "pose_multiply": pose_multiply,
    "pose_inverse": pose_inverse,
    "pose_transform_points": lambda t, q, p: (lambda r, p, t: apply(r, p) + t)(
        *_broadcast((rotation_matrix(q), 2), (p, 1), (t, 1))
    ),
    "quaternion_multiply": lambda a, b: hamilton(*_broadcast((a, 1), (b, 1))),
    "quaternion_conjugate": conjugate,
    "quaternion_inverse": lambda q: conjugate(q) / (q**2).sum(-1, keepdims=True),
    "quaternion_normalize": lambda q: q / np.linalg.norm(q, axis=-1, keepdims=True),
    "quaternion_standardize": standardized,
    "quaternion_rotate": lambda q, v: apply(*_broadcast((rotation_matrix(q), 2), (v, 1))),
    "so3_exp": rotvec_quaternion,
    "so3_log": quaternion_rotvec,
    "axis_angle_to_quaternion": rotvec_quaternion,
    "quaternion_to_axis_angle": quaternion_rotvec,
    "axis_angle_to_matrix": lambda w: (
        Rotation.from_rotvec(w.reshape(-1, 3)).as_matrix().reshape(*w.shape[:-1], 3, 3)
    ),
    "matrix_to_axis_angle": lambda m: (
        Rotation.from_matrix(m.reshape(-1, 3, 3)).as_rotvec().reshape(*m.shape[:-2], 3)
    ),
    "so3_hat": skew,
    "so3_vee": vee,
    "so3_left_jacobian": so3_left_jacobian,
    "so3_left_jacobian_inverse": lambda w: np.linalg.inv(so3_left_jacobian(w)),
    "so3_right_jacobian": lambda w: so3_left_jacobian(-w),
    "so3_right_jacobian_inverse": lambda w: np.linalg.inv(so3_left_jacobian(-w)),
    "se3_exp": se3_exp,
    "se3_log": se3_log,
    "se3_hat": se3_hat,
    "se3_vee": lambda m: np.concatenate([m[..., :3, 3], vee(m[..., :3, :3])], -1),
    "se3_adjoint": se3_adjoint,
    "se3_left_jacobian": se3_left_jacobian,
    "se3_left_jacobian_inverse": lambda xi: np.linalg.inv(se3_left_jacobian(xi)),
    "se3_right_jacobian": lambda xi: se3_left_jacobian(-xi),
    "se3_right_jacobian_inverse": lambda xi: np.linalg.inv(se3_left_jacobian(-xi)),
    "sim3_exp": sim3_exp,
    "sim3_log": sim3_log,
    "sim3_multiply": sim3_multiply,
    "sim3_inverse": sim3_inverse,
    "sim3_transform_points": lambda t, q, s, p: (lambda r, p, t: apply(r, p) + t)(
        *_broadcast((s[..., None, None] * rotation_matrix(q), 2), (p, 1), (t, 1))
    ),
    "sim3_to_matrix": sim3_to_matrix,
    "matrix_to_sim3": matrix_to_sim3,
    "sim3_adjoint": sim3_adjoint,
    "sim3_left_jacobian": sim3_left_jacobian,
    "sim3_left_jacobian_inverse": lambda xi: np.linalg.inv(sim3_left_jacobian(xi)),
    "sim3_right_jacobian": lambda xi: sim3_left_jacobian(-xi),
    "sim3_right_jacobian_inverse": lambda xi: np.linalg.inv(sim3_left_jacobian(-xi)),
    "rotation_angle": angle,
    "quaternion_geodesic_distance": lambda a, b: angle(
        hamilton(*_broadcast((conjugate(a), 1), (b, 1)))
    ),
    "matrix_geodesic_distance": lambda a, b: (
        Rotation.from_matrix(
            np.swapaxes(a, -1, -2) @ b if a.size and b.size else np.zeros((0, 3, 3))
        )
        .magnitude()
        .reshape(np.broadcast_shapes(a.shape, b.shape)[:-2])
    ),
    "rotation_6d_to_matrix": rotation_6d_to_matrix,
    "matrix_to_rotation_6d": lambda m: m[..., :2, :].reshape(*m.shape[:-2], 6),
    "matrix_to_pose": lambda m: (m[..., :3, 3], canonical_quaternion(m[..., :3, :3])),
    "quaternion_rate_to_axis_angle_rate": lambda dq, q: (
        0.5 * hamilton(*_broadcast((conjugate(normalized(q)), 1), (dq, 1)))[..., 1:]
    ),
    "quaternion_rate_to_angular_velocity": lambda q, dq: (
        2 * hamilton(*_broadcast((conjugate(q), 1), (dq, 1)))[..., 1:]
    ),
    "quaternion_slerp": slerp,
    "pose_interpolate": pose_interpolate,
    "special_procrustes": special_procrustes,
    "so2_exp": lambda theta: np.concatenate([np.cos(theta), np.sin(theta)], -1),
    "so2_log": lambda z: np.arctan2(z[..., 1:], z[..., :1]),
    "so2_to_matrix": so2_matrix,
    "so2_from_matrix": lambda m: m[..., :, 0],
    "so2_multiply": lambda a, b: complex_product(*_broadcast((a, 1), (b, 1))),
    "so2_inverse": lambda z: from_complex(np.conj(as_complex(z))),
    "so2_rotate": lambda z, p: complex_product(*_broadcast((z, 1), (p, 1))),
    "so2_normalize": lambda z: z / np.linalg.norm(z, axis=-1, keepdims=True),
    "se2_exp": se2_exp,
    "se2_log": se2_log,
    "se2_to_matrix": se2_matrix,
    "se2_from_matrix": lambda m: (m[..., :2, 2], m[..., :2, 0]),
    "se2_adjoint": se2_adjoint,
    "transform_points_2d": lambda t, z, p: apply(*_broadcast((so2_matrix(z), 2), (p, 1))) + t,
    "pose_multiply_2d": pose_multiply_2d,
    "pose_inverse_2d": pose_inverse_2d,
    "se2_left_jacobian": se2_left_jacobian,
    "se2_left_jacobian_inverse": lambda xi: np.linalg.inv(se2_left_jacobian(xi)),
    "se2_right_jacobian": lambda xi: se2_left_jacobian(-xi),
    "se2_right_jacobian_inverse": lambda xi: np.linalg.inv(se2_left_jacobian(-xi)),
}

MATRIX_INPUT_OPS = {
    "matrix_to_quaternion",
    "cuda_matrix_to_quaternion",
    "matrix_to_axis_angle",
    "matrix_geodesic_distance",
    "matrix_to_pose",
    "matrix_to_sim3",
}
# Tangents drawn at half scale: |omega| stays well inside (0, pi), where the logarithm is
# the exponential's inverse and the Jacobians' inverses exist.
TANGENT_INPUTS = {"omega", "axis_angle", "xi"}
# The angle and the distances have kinks at 0 and pi; random rotations (whose relative
# angles crowd near pi) would put finite differences across them. Their inputs are
# rotations of at most ~1.2 radians, so relative angles stay below ~2.4.
DISTANCE_OPS = {"rotation_angle", "quaternion_geodesic_distance", "matrix_geodesic_distance"}


def reference(name: str, args) -> tuple[np.ndarray, ...]:
    out = REFERENCES[name](*[np.asarray(a, dtype=np.float64) for a in args])
    return out if isinstance(out, tuple) else (out,)


def random_rotations(rng: np.random.Generator, leading: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(leading, dtype=int))
    m = Rotation.random(max(n, 1), random_state=rng).as_matrix()[:n]
    return m.reshape(*leading, 3, 3)


def random_args(name: str, leadings, rng: np.random.Generator, dtype=np.float64) -> list:
    """Fresh random arguments for op `name`, one leading shape per operand. Quaternions are
    not normalised (the formulas hold for any quaternion); matrix_to_quaternion gets
    rotation matrices."""
    args = []
    for operand, leading in zip(OPS[name].operands, leadings):
        if name in DISTANCE_OPS:
            w = rng.normal(size=(*leading, 3)) * 0.4
            a = rotvec_quaternion(w) * rng.uniform(0.5, 2.0, size=(*leading, 1))
            if operand.element == (3, 3):
                a = Rotation.from_rotvec(w.reshape(-1, 3)).as_matrix().reshape(*leading, 3, 3)
        elif name == "special_procrustes":
            # Near rotations, as noisy estimates are: far from the matrices where the
            # nearest rotation is not unique, which float32 input could not resolve.
            a = random_rotations(rng, leading) + 0.3 * rng.normal(size=(*leading, 3, 3))
        elif name in MATRIX_INPUT_OPS and operand.element == (4, 4):
            a = np.zeros((*leading, 4, 4))
            a[..., :3, :3] = random_rotations(rng, leading)
            if name == "matrix_to_sim3":
                a[..., :3, :3] *= np.exp(0.5 * rng.normal(size=(*leading, 1, 1)))
            a[..., :3, 3] = rng.normal(size=(*leading, 3))
            a[..., 3, 3] = 1.0
        elif name in MATRIX_INPUT_OPS:
            a = random_rotations(rng, leading)
        elif operand.name.startswith("scale"):  # Sim(3)'s scales are positive
            a = np.asarray(np.exp(0.5 * rng.normal(size=leading)))
        else:
            a = rng.normal(size=(*leading, *operand.element))
            if operand.name in TANGENT_INPUTS:
                a = 0.5 * a
        args.append(a.astype(dtype))
    return args


def leading_cases(name: str) -> list[tuple[tuple[int, ...], ...]]:
    """Leading shapes per operand: equal shapes (), (1,), (5,), (2, 3), and broadcast
    pairs such as (1,) with (5,) and (2, 1) with (1, 3), each operand taking a turn."""
    op = OPS[name]
    n = len(op.operands)
    if name == "transform_points":
        return [
            (single, single, points) for single in ((), (1,)) for points in ((), (1,), (5,), (2, 3))
        ]
    if op.operands[-1].batch == ("B", "N"):
        return [
            ((bp,), (bq,), (bx, nx))
            for bp, bq, bx in ((5, 5, 5), (1, 5, 5), (5, 1, 5), (5, 5, 1), (1, 1, 4), (3, 1, 1))
            for nx in (1, 7)
        ]
    cases = [(shape,) * n for shape in ((), (1,), (5,), (2, 3))]
    if n > 1:
        for k in range(n):
            for own, others in (((1,), (5,)), ((2, 1), (1, 3)), ((), (2, 3)), ((4, 1, 3), (2, 1))):
                cases.append(tuple(own if j == k else others for j in range(n)))
    return cases


def op_cases(names) -> dict:
    """pytest.mark.parametrize keywords for (name, leadings) over every leading case."""
    cases = [(name, leadings) for name in names for leadings in leading_cases(name)]
    return {
        "argnames": ("name", "leadings"),
        "argvalues": cases,
        "ids": [f"{name}-{leadings}" for name, leadings in cases],
    }


def vmap_args(name: str, rng: np.random.Generator, size: int = 4):
    """Arguments for vmapping op `name` over `size` samples: every other argument (or the
    only one) stacked along a new leading axis, the rest shared; and which are mapped."""
    per_sample = random_args(name, leading_cases(name)[2], rng)
    mapped = [k % 2 == 0 or len(per_sample) == 1 for k in range(len(per_sample))]
    stacked = [
        np.stack([random_args(name, leading_cases(name)[2], rng)[k] for _ in range(size)])
        if m
        else a
        for k, (a, m) in enumerate(zip(per_sample, mapped))
    ]
    return stacked, mapped


# --- the functions over ops (xform.ops.COMPOSITES) ------------------------------------


def _axis_quaternion(angle, axis: str):
    """(cos(a/2), sin(a/2) e_axis)."""
    unit = np.eye(3)["xyz".index(axis.lower())]
    return np.concatenate([np.cos(angle / 2)[..., None], np.sin(angle / 2)[..., None] * unit], -1)


def euler_to_quaternion(angles, convention):
    """The product of the axis rotations' quaternions: q1 q2 q3 about the moving axes
    (upper case), q3 q2 q1 about the fixed ones."""
    q1, q2, q3 = (_axis_quaternion(angles[..., i], convention[i]) for i in range(3))
    return (
        hamilton(hamilton(q1, q2), q3) if convention.isupper() else hamilton(q3, hamilton(q2, q1))
    )


def _per_rotation(x, element_ndims: int, result_element: tuple, function):
    """SciPy's Rotation over the flattened leading dimensions of x."""
    leading = x.shape[: x.ndim - element_ndims]
    flat = x.reshape(-1, *x.shape[x.ndim - element_ndims :])
    with warnings.catch_warnings():  # SciPy warns at gimbal lock, and sets the third angle 0
        warnings.simplefilter("ignore", UserWarning)
        return function(flat).reshape(*leading, *result_element)


def rigid_registration_one(p, y, w, scale):
    """Umeyama (1991) in NumPy for one point set: centroids, SVD of the weighted
    cross-covariance, the sign fix, then scale and translation: (t, R, s)."""
    w = np.ones(len(p)) if w is None else w
    pm = (w[:, None] * p).sum(0) / w.sum()
    ym = (w[:, None] * y).sum(0) / w.sum()
    cov = ((y - ym).T * w) @ (p - pm)
    u, d, vt = np.linalg.svd(cov)
    sign = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])
    r = u @ sign @ vt
    s = np.trace(np.diag(d) @ sign) / (w * ((p - pm) ** 2).sum(-1)).sum() if scale else 1.0
    return ym - s * r @ pm, r, s


def rigid_registration(points, targets, weights=None, scale=False):
    """Per leading index (equal leading shapes): the position, the canonical quaternion,
    and with scale=True the scale."""
    leading = points.shape[:-2]
    sets = [
        rigid_registration_one(points[i], targets[i], None if weights is None else weights[i],
                               scale)
        for i in np.ndindex(leading)
    ]  # fmt: skip
    t = np.array([s[0] for s in sets]).reshape(*leading, 3)
    q = canonical_quaternion(np.array([s[1] for s in sets]).reshape(*leading, 3, 3))
    return (t, q, np.array([s[2] for s in sets]).reshape(leading)) if scale else (t, q)


FAMILY_REFERENCES = {
    "euler_to_quaternion": euler_to_quaternion,
    "euler_to_matrix": lambda angles, convention: _per_rotation(
        angles, 1, (3, 3), lambda a: Rotation.from_euler(convention, a).as_matrix()
    ),
    "quaternion_to_euler": lambda quaternion, convention: _per_rotation(
        quaternion,
        1,
        (3,),
        lambda q: Rotation.from_quat(q, scalar_first=True).as_euler(convention),
    ),  # fmt: skip
    "matrix_to_euler": lambda matrix, convention: _per_rotation(
        matrix, 2, (3,), lambda m: Rotation.from_matrix(m).as_euler(convention)
    ),
    "rigid_registration": rigid_registration,
}

REGISTRATION_POINTS = 5


def random_family_args(name: str, leading: tuple[int, ...], rng: np.random.Generator) -> dict:
    """Fresh random array arguments for family `name` by parameter name, optional ones
    included: angles anywhere, quaternions not normalised, rotation matrices, and for
    registration targets a noisy rigid motion of the points (a well-conditioned moment)."""
    if name in ("euler_to_quaternion", "euler_to_matrix"):
        return {"angles": rng.uniform(-np.pi, np.pi, size=(*leading, 3))}
    if name == "quaternion_to_euler":
        return {"quaternion": rng.normal(size=(*leading, 4))}
    if name == "matrix_to_euler":
        return {"matrix": random_rotations(rng, leading)}
    if name == "rigid_registration":
        points = rng.normal(size=(*leading, REGISTRATION_POINTS, 3))
        moved = np.einsum("...ij,...nj->...ni", random_rotations(rng, leading), points)
        return {
            "points": points,
            "targets": moved
            + rng.normal(size=(*leading, 1, 3))
            + 0.1 * rng.normal(size=moved.shape),
            "weights": rng.uniform(0.5, 1.5, size=(*leading, REGISTRATION_POINTS)),
        }
    raise KeyError(f"tests/reference.py has no random arguments for the family {name!r}: add them")
