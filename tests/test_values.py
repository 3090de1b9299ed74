"""Every op against the independent float64 reference, for every leading-shape case."""

import numpy as np
import pytest
from helpers import as_tuple, assert_matches
from reference import op_cases, random_args, reference

import xform


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(**op_cases(xform.OPS))
def test_matches_reference(name, leadings, dtype, rng):
    args = random_args(name, leadings, rng, dtype)
    results = as_tuple(getattr(xform, name)(*args))
    expected = reference(name, args)
    assert len(results) == len(expected)
    for got, want in zip(results, expected):
        assert isinstance(got, np.ndarray)
        assert got.dtype == dtype
        assert got.shape == want.shape
        assert_matches(got, want, dtype)


def test_transform_points_result_takes_the_points_shape(rng):
    points = rng.normal(size=(3,))
    out = xform.transform_points(rng.normal(size=(1, 3)), rng.normal(size=(1, 4)), points)
    assert out.shape == (3,)


def test_unit_quaternions_give_rigid_transforms(rng):
    """With unit quaternions the ops agree with SciPy's rotations exactly as rigid motions:
    transform_points(t, q, p) == quaternion_to_matrix(q) @ p + t, and poses compose."""
    q = rng.normal(size=(6, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    t = rng.normal(size=(6, 3))
    p = rng.normal(size=(6, 3))
    m = xform.quaternion_to_matrix(q)
    np.testing.assert_allclose(
        m @ np.swapaxes(m, -1, -2), np.broadcast_to(np.eye(3), m.shape), atol=1e-12
    )
    np.testing.assert_allclose(np.linalg.det(m), 1.0, atol=1e-12)
    t_ab, q_ab = xform.pose_multiply(t, q, t[::-1].copy(), q[::-1].copy())
    composed = xform.batch_transform_points(t_ab, q_ab, p[:, None])[:, 0]
    stepwise = xform.batch_transform_points(
        t, q, xform.batch_transform_points(t[::-1].copy(), q[::-1].copy(), p[:, None])
    )[:, 0]
    np.testing.assert_allclose(composed, stepwise, atol=1e-12)
    t_inv, q_inv = xform.pose_inverse(t, q)
    t_id, q_id = xform.pose_multiply(t, q, t_inv, q_inv)
    np.testing.assert_allclose(t_id, 0.0, atol=1e-12)
    np.testing.assert_allclose(q_id, np.broadcast_to([1.0, 0, 0, 0], q_id.shape), atol=1e-12)
    h = xform.pose_to_matrix(t, q)
    np.testing.assert_allclose(h[..., :3, :3], m, atol=1e-15)
    np.testing.assert_allclose(
        xform.batch_transform_points_inverse(t, q, xform.batch_transform_points(t, q, p[:, None])),
        p[:, None],
        atol=1e-12,
    )
