"""The transforms as plain array formulas, written once for PyTorch and JAX: `xp` is
`torch` or `jax.numpy` (the calls they share). What a user writes without xform
(`peers.py` times them), and the tests' independent references. Imports no framework."""


def rotation_matrix(xp, q):
    """The rotation matrix of a unit quaternion [w, x, y, z]."""
    w, x, y, z = (q[..., k] for k in range(4))
    return xp.stack(
        [
            xp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            xp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            xp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def quaternion_product(xp, a, b):
    """The Hamilton product a b of quaternions [w, x, y, z]."""
    aw, ax, ay, az = (a[..., k] for k in range(4))
    bw, bx, by, bz = (b[..., k] for k in range(4))
    return xp.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        -1,
    )


def shepperd_quaternion(xp, m):
    """Shepperd's method, branch-free: all four candidates, keep the best conditioned;
    w >= 0."""
    take = getattr(xp, "take_along_dim", None) or xp.take_along_axis  # torch's, NumPy's
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    t = xp.stack(
        [1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1
    )
    wx, wy, wz = (
        m[..., 2, 1] - m[..., 1, 2],
        m[..., 0, 2] - m[..., 2, 0],
        m[..., 1, 0] - m[..., 0, 1],
    )
    xy, xz, yz = (
        m[..., 0, 1] + m[..., 1, 0],
        m[..., 0, 2] + m[..., 2, 0],
        m[..., 1, 2] + m[..., 2, 1],
    )
    candidates = xp.stack(
        [
            xp.stack([t[..., 0], wx, wy, wz], -1),
            xp.stack([wx, t[..., 1], xy, xz], -1),
            xp.stack([wy, xy, t[..., 2], yz], -1),
            xp.stack([wz, xz, yz, t[..., 3]], -1),
        ],
        -2,
    )
    best = t.argmax(-1)
    chosen = take(candidates, best[..., None, None], -2)[..., 0, :]
    q = chosen * (0.5 / xp.sqrt(take(t, best[..., None], -1)))
    return q * xp.where(q[..., :1] < 0, -1.0, 1.0)


def euler_xyz_quaternion(xp, angles):
    """Intrinsic XYZ: q_x(a) q_y(b) q_z(c), multiplied out."""
    c, s = xp.cos(angles / 2), xp.sin(angles / 2)
    cx, cy, cz, sx, sy, sz = c[..., 0], c[..., 1], c[..., 2], s[..., 0], s[..., 1], s[..., 2]
    return xp.stack(
        [
            cx * cy * cz - sx * sy * sz,
            sx * cy * cz + cx * sy * sz,
            cx * sy * cz - sx * cy * sz,
            cx * cy * sz + sx * sy * cz,
        ],
        -1,
    )


def rows_gram_schmidt(xp, d6):
    """pytorch3d's rotation_6d_to_matrix."""
    a, b = d6[..., :3], d6[..., 3:]
    first = a / (a * a).sum(-1)[..., None] ** 0.5
    b = b - (first * b).sum(-1)[..., None] * first
    second = b / (b * b).sum(-1)[..., None] ** 0.5
    return xp.stack([first, second, xp.linalg.cross(first, second)], -2)


def svd_procrustes(xp, m):
    u, _, vt = xp.linalg.svd(m)
    sign = xp.linalg.det(u @ vt)[..., None, None]
    return xp.concatenate([u[..., :2], u[..., 2:] * sign], -1) @ vt


def svd_kabsch(xp, points, targets):
    """Centroids, the cross-covariance, its nearest rotation: (t, R)."""
    p_mean, y_mean = points.mean(-2), targets.mean(-2)
    cov = xp.swapaxes(targets - y_mean[..., None, :], -1, -2) @ (points - p_mean[..., None, :])
    r = svd_procrustes(xp, cov)
    return y_mean - (r @ p_mean[..., None])[..., 0], r
