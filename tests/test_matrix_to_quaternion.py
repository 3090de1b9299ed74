"""matrix_to_quaternion and cuda_matrix_to_quaternion on the hard cases: identity, exact
and near 180-degree rotations about many axes, tiny angles; w >= 0; leading dims kept."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import xform

CONVERTERS = [xform.matrix_to_quaternion, xform.cuda_matrix_to_quaternion]


def random_axes(rng, n):
    axes = rng.normal(size=(n, 3))
    axes /= np.linalg.norm(axes, axis=-1, keepdims=True)
    # Coordinate axes and diagonals too: they make ties between the diagonal entries.
    special = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1]], float)
    return np.concatenate([axes, special / np.linalg.norm(special, axis=-1, keepdims=True)])


def axis_angle_quaternion(axes, angles):
    return np.concatenate([np.cos(angles / 2)[:, None], axes * np.sin(angles / 2)[:, None]], -1)


def assert_same_rotation(q, expected, tol):
    """Equal up to rounding; where w is ~0 the sign of the quaternion is free."""
    assert np.all(q[..., 0] >= 0)
    err = np.minimum(np.abs(q - expected).max(-1), np.abs(q + expected).max(-1))
    sign_fixed = np.abs(expected[..., 0]) > 10 * tol
    err = np.where(sign_fixed, np.abs(q - expected).max(-1), err)
    assert err.max() <= tol, f"max error {err.max():.3g}"


@pytest.mark.parametrize("convert", CONVERTERS)
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
@pytest.mark.parametrize(
    "angle",
    [0.0, 1e-9, 1e-6, 1e-3, 0.7, np.pi / 2, 2.5, np.pi - 1e-3, np.pi - 1e-6, np.pi - 1e-9, np.pi],
)
def test_rotations_about_many_axes(convert, dtype, tol, angle, rng):
    axes = random_axes(rng, 24)
    expected = axis_angle_quaternion(axes, np.full(len(axes), angle))
    matrices = Rotation.from_quat(expected, scalar_first=True).as_matrix()
    q = convert(matrices.astype(dtype))
    assert q.dtype == dtype
    assert_same_rotation(q.astype(np.float64), expected, tol)


@pytest.mark.parametrize("convert", CONVERTERS)
def test_identity(convert):
    q = convert(np.eye(3))
    np.testing.assert_array_equal(q, [1.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("convert", CONVERTERS)
def test_exact_half_turns_are_exact(convert):
    """diag(1,-1,-1) is 180 degrees about x: exactly (0, 1, 0, 0) up to sign."""
    for axis in range(3):
        m = -np.eye(3)
        m[axis, axis] = 1.0
        expected = np.zeros(4)
        expected[axis + 1] = 1.0
        q = convert(m)
        assert np.array_equal(np.abs(q), expected)


@pytest.mark.parametrize("convert", CONVERTERS)
@pytest.mark.parametrize("leading", [(), (1,), (5,), (2, 3), (2, 1, 4)])
def test_leading_dims_preserved_and_w_nonnegative(convert, leading, rng):
    n = int(np.prod(leading, dtype=int))
    rotations = Rotation.random(n, random_state=rng)
    matrices = rotations.as_matrix().reshape(*leading, 3, 3)
    q = convert(matrices)
    assert q.shape == (*leading, 4)
    assert np.all(q[..., 0] >= 0)
    expected = rotations.as_quat(scalar_first=True, canonical=True).reshape(*leading, 4)
    np.testing.assert_allclose(q, expected, atol=1e-12)


@pytest.mark.parametrize("convert", CONVERTERS)
def test_round_trip_through_quaternion_to_matrix(convert, rng):
    q = rng.normal(size=(100, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    back = convert(xform.quaternion_to_matrix(q))
    np.testing.assert_allclose(back, q * np.sign(q[:, :1]), atol=1e-12)
