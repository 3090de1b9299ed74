"""Independent float64 references for every op, and random inputs for them.

The rotations come from SciPy's `Rotation` (scalar-first); a non-unit quaternion q acts
as |q|^2 times the rotation by q/|q|, as the SPEC's formula for each op states. Nothing
here shares code with the kernels.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from xform import OPS


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
}

MATRIX_INPUT_OPS = {"matrix_to_quaternion", "cuda_matrix_to_quaternion"}


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
        if name in MATRIX_INPUT_OPS:
            a = random_rotations(rng, leading)
        else:
            a = rng.normal(size=(*leading, *operand.element))
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
