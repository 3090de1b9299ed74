"""Conversions and utilities: Euler angles (all 24 conventions against SciPy, gimbal lock
included), the 6D representation (pytorch3d's formulas and round trips), slerp (SciPy's
Slerp) and SE(3) interpolation, matrix_to_pose, special_procrustes (NumPy's SVD, the
Jacobian at a rotation), rigid registration (known poses recovered, a NumPy SVD
solution, gradients, vmap, errors) and uniform random rotations (a KS test, seeds) in
every framework."""

import warnings

import numpy as np
import pytest
from helpers import as_tuple, check_grads
from reference import normalized, random_rotations, skew, special_procrustes
from reference import rigid_registration_one as numpy_registration
from scipy import stats
from scipy.spatial.transform import Rotation, Slerp

import xform
from xform.ops import registration
from xform.ops.euler import CONVENTIONS

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import xform.backends.jax as xj  # noqa: E402
import xform.backends.torch as xt  # noqa: E402
from xform._define import derived  # noqa: E402

FRAMEWORKS = {
    "numpy": (xform, lambda a: a, np.asarray),
    "torch": (xt, torch.from_numpy, lambda t: t.detach().numpy()),
    "jax": (xj, jnp.asarray, np.asarray),
}


def same_rotation(q1, q2, atol):
    """Quaternions of one rotation: equal up to sign, per element."""
    q1, q2 = normalized(np.asarray(q1)), normalized(np.asarray(q2))
    dots = np.abs((q1 * q2).sum(-1))
    np.testing.assert_allclose(dots, 1.0, atol=atol)


def scipy_euler(matrices, convention):
    with warnings.catch_warnings():  # SciPy warns at gimbal lock, and sets the third angle 0
        warnings.simplefilter("ignore", UserWarning)
        return Rotation.from_matrix(matrices).as_euler(convention)


# --- Euler angles ------------------------------------------------------------------------


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_euler_to_rotation_matches_scipy(convention, rng):
    angles = rng.uniform(-np.pi, np.pi, size=(64, 3))
    expected = Rotation.from_euler(convention, angles)
    np.testing.assert_allclose(
        xform.euler_to_matrix(angles, convention), expected.as_matrix(), rtol=0, atol=1e-12
    )
    q = xform.euler_to_quaternion(angles, convention)
    np.testing.assert_allclose(np.linalg.norm(q, axis=-1), 1.0, atol=1e-12)
    same_rotation(q, expected.as_quat(scalar_first=True), atol=1e-12)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_rotation_to_euler_matches_scipy_ranges(convention, rng):
    matrices = random_rotations(rng, (64,))
    expected = scipy_euler(matrices, convention)
    np.testing.assert_allclose(
        xform.matrix_to_euler(matrices, convention), expected, rtol=0, atol=1e-12
    )
    q = Rotation.from_matrix(matrices).as_quat(scalar_first=True)
    q = q * rng.choice([-2.0, 0.5], size=(64, 1))  # any scale, either sign
    np.testing.assert_allclose(xform.quaternion_to_euler(q, convention), expected, atol=1e-12)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_gimbal_lock_sets_the_third_angle_to_zero_as_scipy(convention, rng):
    """The middle angle at its lock (0 or pi for symmetric sequences, +-pi/2 otherwise),
    exactly and within 1e-9: SciPy's angles, the same rotation, and finite gradients."""
    symmetric = convention[0].lower() == convention[2].lower()
    locks = (0.0, np.pi) if symmetric else (np.pi / 2, -np.pi / 2)
    angles = rng.uniform(-np.pi, np.pi, size=(8, 3))
    angles[:4, 1] = rng.choice(locks, size=4)
    angles[4:, 1] = rng.choice(locks, size=4) + rng.choice([-1e-9, 1e-9], size=4)
    matrices = Rotation.from_euler(convention, angles).as_matrix()
    got = xform.matrix_to_euler(matrices, convention)
    np.testing.assert_allclose(
        Rotation.from_euler(convention, got).as_matrix(), matrices, atol=1e-7
    )
    exact = scipy_euler(matrices[:4], convention)
    np.testing.assert_allclose(got[:4, 2], 0.0, atol=1e-12)
    np.testing.assert_allclose(got[:4], exact, atol=1e-7)
    for name, x in (("matrix_to_euler", matrices), ("euler_to_quaternion", angles)):
        op = xform.euler_to_quaternion if name == "euler_to_quaternion" else None
        result = (op or xform.matrix_to_euler)(x, convention)
        g = jnp.ones(result.shape)
        fn = getattr(xj, name)
        _, pullback = jax.vjp(lambda a, fn=fn: fn(a, convention), jnp.asarray(x))
        assert np.isfinite(np.asarray(pullback(g)[0])).all()


def test_euler_conventions_cover_scipy_all_24():
    expected = {a + b + c for a in "xyz" for b in "xyz" for c in "xyz" if a != b and b != c}
    assert set(CONVENTIONS) == expected | {s.upper() for s in expected}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("bad", ["xyy", "abc", "XyZ", "", 3, None])
def test_bad_convention_names_it_and_lists_the_valid_ones(framework, bad):
    module, to, _ = FRAMEWORKS[framework]
    with pytest.raises(ValueError) as info:
        module.euler_to_matrix(to(np.zeros((2, 3))), bad)
    message = str(info.value)
    assert repr(bad) in message and "euler_to_matrix" in message
    assert all(c in message for c in CONVENTIONS)


@pytest.mark.parametrize("convention", ["xyz", "ZYX", "zxz", "YXY"])
def test_euler_round_trips_in_scipy_ranges(convention, rng):
    """roma's test idea: angles in the convention's ranges round-trip through the matrix
    and the quaternion, in float64 and float32."""
    symmetric = convention[0].lower() == convention[2].lower()
    middle = rng.uniform(0.1, np.pi - 0.1, 32) if symmetric else rng.uniform(-1.4, 1.4, 32)
    angles = np.stack([rng.uniform(-3, 3, 32), middle, rng.uniform(-3, 3, 32)], -1)
    for dtype, atol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        a = angles.astype(dtype)
        back = xform.matrix_to_euler(xform.euler_to_matrix(a, convention), convention)
        assert back.dtype == dtype
        np.testing.assert_allclose(back, a, atol=atol)
        back = xform.quaternion_to_euler(xform.euler_to_quaternion(a, convention), convention)
        np.testing.assert_allclose(back, a, atol=atol)


@pytest.mark.parametrize("convention", ["xyz", "ZXZ"])
def test_euler_gradients(convention, rng):
    # Away from gimbal lock, where the angles' derivatives grow like 1/sin(middle angle).
    angles = rng.uniform(-1.2, 1.2, size=(3, 3))
    if convention[0].lower() == convention[2].lower():
        angles[:, 1] = rng.uniform(0.4, np.pi - 0.4, 3)
    args = (torch.from_numpy(angles).requires_grad_(),)
    for name in ("euler_to_quaternion", "euler_to_matrix"):
        fn = getattr(xt, name)
        assert torch.autograd.gradcheck(lambda a, fn=fn: fn(a, convention), args,
                                        check_forward_ad=True)  # fmt: skip
    q = jnp.asarray(Rotation.from_euler(convention, angles).as_quat(scalar_first=True))
    check_grads(lambda x: xj.quaternion_to_euler(x, convention), (q,))
    m = jnp.asarray(Rotation.from_euler(convention, angles).as_matrix())
    check_grads(lambda x: xj.matrix_to_euler(x, convention), (m,))


def test_euler_vmap_in_both_frameworks(rng):
    angles = rng.uniform(-1, 1, size=(4, 5, 3))
    expected = xform.euler_to_quaternion(angles, "XYZ")
    got = jax.vmap(lambda a: xj.euler_to_quaternion(a, "XYZ"))(jnp.asarray(angles))
    np.testing.assert_array_equal(np.asarray(got), expected)
    got = torch.func.vmap(lambda a: xt.euler_to_quaternion(a, "XYZ"))(torch.from_numpy(angles))
    np.testing.assert_array_equal(got.numpy(), expected)


# --- the 6D representation ----------------------------------------------------------------


def test_rotation_6d_is_pytorch3d_gram_schmidt_of_rows(rng):
    """pytorch3d's published formulas: b1 = a1/|a1|, b2 = normalise(a2 - (b1.a2) b1),
    b3 = b1 x b2, stacked as rows; and the 6D of a matrix is its first two rows."""
    d6 = rng.normal(size=(50, 6))
    m = xform.rotation_6d_to_matrix(d6)
    b1 = d6[:, :3] / np.linalg.norm(d6[:, :3], axis=-1, keepdims=True)
    u = d6[:, 3:] - (b1 * d6[:, 3:]).sum(-1, keepdims=True) * b1
    b2 = u / np.linalg.norm(u, axis=-1, keepdims=True)
    np.testing.assert_allclose(m[:, 0], b1, atol=1e-14)
    np.testing.assert_allclose(m[:, 1], b2, atol=1e-14)
    np.testing.assert_allclose(m[:, 2], np.cross(b1, b2), atol=1e-14)
    # Gram-Schmidt's rows lose orthogonality as a1 and a2 near parallel: b1 . b2 is
    # rounding times |a2| / |u| (a random draw reached 1.7e-14).
    condition = np.linalg.norm(d6[:, 3:], axis=-1) / np.linalg.norm(u, axis=-1)
    error = np.abs(m @ np.swapaxes(m, -1, -2) - np.eye(3)).max(axis=(-1, -2))
    assert np.all(error <= 1e-15 * (4 + condition)), (error, condition)
    assert np.all(np.abs(np.linalg.det(m) - 1.0) <= 1e-15 * (4 + condition))
    np.testing.assert_array_equal(xform.matrix_to_rotation_6d(m)[:, :3], m[:, 0])


def test_rotation_6d_round_trips_as_pytorch3d_tests(rng):
    """matrix -> 6D -> matrix is the identity on rotations; 6D -> matrix -> 6D -> matrix
    gives the same matrix (the 6D is not unique, its matrix is)."""
    matrices = random_rotations(rng, (40,))
    back = xform.rotation_6d_to_matrix(xform.matrix_to_rotation_6d(matrices))
    np.testing.assert_allclose(back, matrices, atol=1e-14)
    d6 = rng.normal(size=(40, 6))
    once = xform.rotation_6d_to_matrix(d6)
    twice = xform.rotation_6d_to_matrix(xform.matrix_to_rotation_6d(once))
    np.testing.assert_allclose(twice, once, atol=1e-14)


def test_rotation_6d_gradients_in_both_frameworks(rng):
    d6 = rng.normal(size=(4, 6))
    assert torch.autograd.gradcheck(
        xt.rotation_6d_to_matrix, (torch.from_numpy(d6).requires_grad_(),), check_forward_ad=True
    )
    check_grads(xj.rotation_6d_to_matrix, (jnp.asarray(d6),))


# --- slerp and SE(3) interpolation ------------------------------------------------------------


def test_slerp_matches_scipy_slerp(rng):
    q1 = Rotation.random(32, random_state=rng)
    q2 = Rotation.random(32, random_state=rng)
    t = rng.uniform(0, 1, 32)
    expected = np.stack(
        [Slerp([0.0, 1.0], Rotation.concatenate([a, b]))(s).as_matrix()
         for a, b, s in zip(q1, q2, t)]
    )  # fmt: skip
    got = xform.quaternion_slerp(q1.as_quat(scalar_first=True), q2.as_quat(scalar_first=True), t)
    np.testing.assert_allclose(xform.quaternion_to_matrix(got), expected, atol=1e-12)


def test_slerp_ends_and_shortest_arc(rng):
    q1 = rng.normal(size=(16, 4))
    q2 = rng.normal(size=(16, 4))
    np.testing.assert_allclose(xform.quaternion_slerp(q1, q2, 0.0), normalized(q1), atol=1e-15)
    at_one = xform.quaternion_slerp(q1, q2, 1.0)
    same_rotation(at_one, q2, atol=1e-14)
    # the shorter arc: the end is the sign of q2 nearer q1, whichever sign q2 has
    np.testing.assert_allclose(at_one, xform.quaternion_slerp(q1, -q2, 1.0), atol=1e-14)
    assert ((at_one * q1).sum(-1) >= 0).all()
    # any real t: the geodesic continues, at constant speed
    for t in (-0.5, 1.5, 3.0):
        angle = xform.quaternion_geodesic_distance(q1, xform.quaternion_slerp(q1, q2, t))
        full = xform.quaternion_geodesic_distance(q1, q2)
        wrapped = np.abs((abs(t) * full + np.pi) % (2 * np.pi) - np.pi)
        np.testing.assert_allclose(angle, wrapped, atol=1e-12)


@pytest.mark.parametrize("gap", [0.0, 1e-12, 1e-7])
def test_slerp_gradients_where_the_quaternions_coincide(gap, rng):
    """No division by sin(theta): finite and right as q2 -> q1, at t = 0, 1 and between."""
    q1 = normalized(rng.normal(size=(3, 4)))
    q2 = q1 + gap * rng.normal(size=(3, 4))
    for t in (0.0, 0.3, 1.0):
        args = [jnp.asarray(q1), jnp.asarray(q2), jnp.full((3,), t)]
        value = xj.quaternion_slerp(*args)
        np.testing.assert_allclose(np.asarray(value), q1, atol=10 * gap + 1e-15)
        jac = jax.jacrev(lambda a, b, s: xj.quaternion_slerp(a, b, s), argnums=(0, 1, 2))(*args)
        assert all(np.isfinite(np.asarray(j)).all() for j in jac)
        # d/dt at coincident ends is the (vanishing) relative rotation's
        assert np.abs(np.asarray(jac[2])).max() <= 10 * gap + 1e-15
    q2 = q1 + 1e-4 * rng.normal(size=(3, 4))
    args = tuple(torch.from_numpy(a).requires_grad_() for a in (q1, q2, np.full(3, 0.3)))
    assert torch.autograd.gradcheck(xt.quaternion_slerp, args, check_forward_ad=True)


def test_pose_interpolate_ends_and_rotation_part(rng):
    p1, p2 = rng.normal(size=(2, 10, 3))
    q1, q2 = normalized(rng.normal(size=(2, 10, 4)))
    t = rng.uniform(-1, 2, 10)
    p, q = xform.pose_interpolate(p1, q1, p2, q2, 0.0)
    np.testing.assert_allclose(p, p1, atol=1e-14)
    np.testing.assert_allclose(q, q1, atol=1e-15)
    p, q = xform.pose_interpolate(p1, q1, p2, q2, 1.0)
    np.testing.assert_allclose(p, p2, atol=1e-13)
    same_rotation(q, q2, atol=1e-14)
    _, q = xform.pose_interpolate(p1, q1, p2, q2, t)
    np.testing.assert_allclose(q, xform.quaternion_slerp(q1, q2, t), atol=1e-13)
    # a pure translation moves in a straight line
    p, _ = xform.pose_interpolate(p1, q1, p2, q1, t)
    np.testing.assert_allclose(p, p1 + t[:, None] * (p2 - p1), atol=1e-13)


def test_interpolation_vmap_in_both_frameworks(rng):
    q1, q2 = normalized(rng.normal(size=(2, 4, 6, 4)))
    t = rng.uniform(0, 1, (4, 6))
    expected = xform.quaternion_slerp(q1, q2, t)
    got = jax.vmap(xj.quaternion_slerp)(*map(jnp.asarray, (q1, q2, t)))
    np.testing.assert_array_equal(np.asarray(got), expected)
    got = torch.func.vmap(xt.quaternion_slerp)(*map(torch.from_numpy, (q1, q2, t)))
    np.testing.assert_array_equal(got.numpy(), expected)


# --- matrix_to_pose and the quaternion rate -----------------------------------------------------


def test_matrix_to_pose_inverts_pose_to_matrix(rng):
    p = rng.normal(size=(20, 3))
    q = normalized(rng.normal(size=(20, 4)))
    p_back, q_back = xform.matrix_to_pose(xform.pose_to_matrix(p, q))
    np.testing.assert_allclose(p_back, p, atol=1e-15)
    np.testing.assert_allclose(q_back, q * np.sign(q[:, :1]), atol=1e-14)


def test_quaternion_rate_gives_the_body_angular_velocity(rng):
    """For unit q moving as dq = q (0, omega) / 2, the rate is omega."""
    q = normalized(rng.normal(size=(20, 4)))
    omega = rng.normal(size=(20, 3))
    dq = xform.quaternion_multiply(q, np.concatenate([np.zeros((20, 1)), omega], -1)) / 2
    np.testing.assert_allclose(xform.quaternion_rate_to_angular_velocity(q, dq), omega, atol=1e-14)


def test_quaternion_rate_to_axis_angle_rate_is_curobos_jacobian_transpose(rng):
    """cuRobo's order (rate, current) and value: J^T g for J the derivative of
    q exp(delta) in the rotation vector delta at 0 (by differences), for any scale of q."""
    q = normalized(rng.normal(size=(6, 4)))
    g = rng.normal(size=(6, 4))
    step = 1e-6
    columns = []
    for i in range(3):
        delta = np.zeros((6, 3))
        delta[:, i] = step
        plus = xform.quaternion_multiply(q, xform.so3_exp(delta))
        minus = xform.quaternion_multiply(q, xform.so3_exp(-delta))
        columns.append(((plus - minus) / (2 * step) * g).sum(-1))
    expected = np.stack(columns, -1)
    scaled = q * rng.uniform(0.5, 2.0, size=(6, 1))
    got = xform.quaternion_rate_to_axis_angle_rate(g, scaled)
    np.testing.assert_allclose(got, expected, atol=1e-9)
    # cuRobo's keyword names
    np.testing.assert_allclose(
        xform.quaternion_rate_to_axis_angle_rate(quaternion_rate=g, current_quaternion=q),
        expected,
        atol=1e-9,
    )


# --- special_procrustes ---------------------------------------------------------------------


def test_procrustes_matches_numpy_svd_and_is_a_rotation(rng):
    m = rng.normal(size=(100, 3, 3))  # det < 0 for about half
    r = xform.special_procrustes(m)
    np.testing.assert_allclose(r, special_procrustes(m), atol=1e-11)
    np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-13)
    # it is the nearest: no random rotation is nearer
    others = random_rotations(rng, (100,))
    assert (np.linalg.norm(r - m, axis=(-2, -1)) <= np.linalg.norm(others - m, axis=(-2, -1))).all()


def test_procrustes_in_float32_is_accurate_to_float32_rounding(rng):
    """Warp's float32 svd3 missed by up to 2e-2 on about one noisy rotation in a thousand
    (its iteration not converging); xform's SVD runs in float64 for every input."""
    m = (random_rotations(rng, (20_000,)) + 0.3 * rng.normal(size=(20_000, 3, 3))).astype(
        np.float32
    )
    r = xform.special_procrustes(m)
    assert r.dtype == np.float32
    np.testing.assert_allclose(r, special_procrustes(m.astype(np.float64)), atol=1e-6)
    points = rng.normal(size=(500, 40, 3))
    rotation = random_rotations(rng, (500,))
    moved = np.einsum("bij,bnj->bni", rotation, points) + rng.normal(size=(500, 1, 3))
    t, q = xform.rigid_registration(points.astype(np.float32), moved.astype(np.float32))
    np.testing.assert_allclose(
        xform.quaternion_to_matrix(q.astype(np.float64)), rotation, atol=2e-5
    )


PROCRUSTES_EXAMPLE = np.array([[2.0, 0.3, 0.1], [0.2, 1.0, 0.4], [0.1, 0.5, 3.0]])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("scale", [1e-12, 1e-11, 1e-30, 1e12, 1e100])
def test_procrustes_is_scale_invariant_at_tiny_and_huge_scales(scale, dtype, rng):
    """The nearest rotation of s M is that of M. Warp's svd3 has absolute thresholds
    (1e-12 in float64): unnormalised, 302 in 1000 matrices at 1e-12 came back wrong, and
    entries near 1e100 overflowed."""
    if dtype == np.float32 and scale > 1e30:
        scale = 1e30  # float32 overflows past 3e38
    m = (scale * rng.normal(size=(1000, 3, 3))).astype(dtype)
    r = xform.special_procrustes(m)
    assert r.dtype == dtype
    # det(M) < 0 puts -|s_3| on the smallest singular value: |s_2| - |s_3| is the gap the
    # rotation's conditioning depends on; a random draw makes it small now and then.
    tolerance = 1e-6 if dtype == np.float32 else 1e-12
    s = np.linalg.svd(m.astype(np.float64), compute_uv=False)
    gap = np.where(np.linalg.det(m.astype(np.float64)) < 0, s[:, 1] - s[:, 2], s[:, 1]) / s[:, 0]
    error = np.abs(r - special_procrustes(m.astype(np.float64))).max(axis=(-2, -1))
    wrong = error > tolerance / gap
    assert not wrong.any(), f"{wrong.sum()} of 1000 wrong, the largest error {error.max():.3g}"
    example = xform.special_procrustes((scale * PROCRUSTES_EXAMPLE).astype(dtype))
    np.testing.assert_allclose(example[0], [0.99946151, 0.03274309, -0.00213983], atol=1e-6)
    unscaled = xform.special_procrustes(PROCRUSTES_EXAMPLE.astype(dtype))
    np.testing.assert_allclose(example, unscaled, atol=10 * tolerance)


@pytest.mark.parametrize("scale", [1e-12, 1e-11, 1e12])
def test_procrustes_derivative_scales_as_one_over_the_scale(scale, rng):
    """R(s M) = R(M), so dR at s M along dM is dR at M along dM / s: the JVP and the VJP
    at s M are those at M divided by s, in every framework, and match central differences
    of step s h."""
    m = random_rotations(rng, (8,)) + 0.3 * rng.normal(size=(8, 3, 3))
    dm, g = rng.normal(size=(2, 8, 3, 3))
    op = "special_procrustes"
    jvp_one = xform.jvp(op, (m,), (dm,))
    jvp_scaled = xform.jvp(op, (scale * m,), (dm,))
    np.testing.assert_allclose(scale * jvp_scaled, jvp_one, rtol=1e-9, atol=1e-11)
    h = 1e-6 * scale
    fd = (xform.special_procrustes(scale * m + h * dm)
          - xform.special_procrustes(scale * m - h * dm)) / (2 * h)  # fmt: skip
    np.testing.assert_allclose(scale * jvp_scaled, scale * fd, atol=1e-8)
    (vjp_one,) = xform.vjp(op, (m,), g)
    (vjp_numpy,) = xform.vjp(op, (scale * m,), g)
    x = torch.from_numpy(scale * m).requires_grad_()
    (vjp_torch,) = torch.autograd.grad((xt.special_procrustes(x) * torch.from_numpy(g)).sum(), x)
    vjp_jax = jax.grad(lambda x: (xj.special_procrustes(x) * g).sum())(jnp.asarray(scale * m))
    for vjp_scaled in (vjp_numpy, vjp_torch.numpy(), np.asarray(vjp_jax)):
        np.testing.assert_allclose(scale * vjp_scaled, vjp_one, rtol=1e-9, atol=1e-11)


def test_registration_of_point_sets_of_tiny_extent(rng):
    """Point sets 1e-7 across give moments near 1e-14: the rotation is still recovered."""
    p = 1e-7 * rng.normal(size=(200, 20, 3))
    r = random_rotations(rng, (200,))
    y = np.einsum("bij,bnj->bni", r, p) + 1e-7 * rng.normal(size=(200, 1, 3))
    _, q = xform.rigid_registration(p, y)
    np.testing.assert_allclose(pose_matrix(q).reshape(200, 3, 3), r, atol=1e-10)


@pytest.mark.parametrize("stretch", [1.0, 2.0, np.array([1.0, 1.0, 3.0])])
def test_procrustes_at_a_rotation_is_the_identity_along_the_tangent(stretch, rng):
    """At M = R S with S symmetric positive (a rotation itself: equal singular values), the
    derivative keeps tangent directions R Omega / S-scaled, and drops symmetric ones."""
    r = random_rotations(rng, (6,))
    s = np.diag(np.broadcast_to(stretch, 3).astype(float))
    m = r @ s
    np.testing.assert_allclose(xform.special_procrustes(m), r, atol=1e-14)
    omega = skew(rng.normal(size=(6, 3)))
    symmetric = rng.normal(size=(6, 3, 3))
    symmetric = symmetric + np.swapaxes(symmetric, -1, -2)
    (along,) = as_tuple(xform.jvp("special_procrustes", (m,), (r @ omega,)))
    (across,) = as_tuple(xform.jvp("special_procrustes", (m,), (r @ symmetric,)))
    if np.isscalar(stretch) or stretch.ndim == 0:
        np.testing.assert_allclose(along, r @ omega / stretch, atol=1e-13)
    assert np.isfinite(along).all()
    np.testing.assert_allclose(across, 0.0, atol=1e-13)
    # the identity: derivatives are finite and the JVP matches finite differences
    eps = 1e-6
    fd = (xform.special_procrustes(m + eps * r @ omega) - xform.special_procrustes(
        m - eps * r @ omega)) / (2 * eps)  # fmt: skip
    np.testing.assert_allclose(along, fd, atol=1e-8)
    identity = torch.eye(3, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(xt.special_procrustes, (identity,), check_forward_ad=True)


def test_procrustes_gradients_in_both_frameworks(rng):
    m = random_rotations(rng, (4,)) + 0.3 * rng.normal(size=(4, 3, 3))
    assert torch.autograd.gradcheck(
        xt.special_procrustes, (torch.from_numpy(m).requires_grad_(),), check_forward_ad=True
    )
    check_grads(xj.special_procrustes, (jnp.asarray(m),))


def test_procrustes_closed_form_equals_warps_adjoint_of_svd(rng):
    """At distinct singular values, where Warp's svd3 adjoint is defined."""
    m = random_rotations(rng, (8,)) @ np.diag([1.0, 2.0, 4.0]) + 0.1 * rng.normal(size=(8, 3, 3))
    op, plain = xform.OPS["special_procrustes"], derived(xform.OPS["special_procrustes"])
    dm, g = rng.normal(size=(2, 8, 3, 3))
    np.testing.assert_allclose(xform.jvp(op, (m,), (dm,)), xform.jvp(plain, (m,), (dm,)),
                               atol=1e-10)  # fmt: skip
    np.testing.assert_allclose(xform.vjp(op, (m,), (g,)), xform.vjp(plain, (m,), (g,)),
                               atol=1e-10)  # fmt: skip


# --- rigid registration ---------------------------------------------------------------------


def pose_matrix(q):
    return Rotation.from_quat(np.asarray(q).reshape(-1, 4), scalar_first=True).as_matrix()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scale", [False, True])
def test_registration_recovers_a_known_pose_to_1e10(weighted, scale, rng):
    batch, n = 5, 20
    p = rng.normal(size=(batch, n, 3)) + rng.normal(scale=50.0, size=(batch, 1, 3))
    r = random_rotations(rng, (batch,))
    t = rng.normal(size=(batch, 3))
    s = rng.uniform(0.5, 2.0, batch) if scale else np.ones(batch)
    y = s[:, None, None] * np.einsum("bij,bnj->bni", r, p) + t[:, None]
    w = rng.uniform(0.1, 2.0, size=(batch, n)) if weighted else None
    out = xform.rigid_registration(p, y, w, scale=scale)
    assert len(out) == (3 if scale else 2)
    np.testing.assert_allclose(out[0], t, atol=1e-10)
    np.testing.assert_allclose(pose_matrix(out[1]).reshape(batch, 3, 3), r, atol=1e-10)
    assert (out[1][:, 0] >= 0).all()
    if scale:
        np.testing.assert_allclose(out[2], s, atol=1e-10)


@pytest.mark.parametrize("n", [3, 7, 1000, 100_003])
def test_registration_matches_a_numpy_svd_solution(n, rng):
    """Noisy targets, weights, sums of many chunks (N = 100003: 317 of 316 summands)."""
    p = rng.normal(size=(n, 3))
    y = Rotation.random(random_state=rng).apply(p) * 1.3 + rng.normal(size=3)
    y += 0.1 * rng.normal(size=(n, 3))
    w = rng.uniform(0.1, 1.0, n)
    for weights in (w, None):
        for scale in (False, True):
            out = xform.rigid_registration(p, y, weights, scale=scale)
            t, r, s = numpy_registration(p, y, weights, scale)
            np.testing.assert_allclose(out[0], t, atol=1e-10)
            np.testing.assert_allclose(pose_matrix(out[1])[0], r, atol=1e-10)
            if scale:
                np.testing.assert_allclose(out[2], s, rtol=1e-10)


def test_registration_float32_and_broadcast_weights(rng):
    p = rng.normal(size=(3, 50, 3))
    r = random_rotations(rng, (3,))
    y = np.einsum("bij,bnj->bni", r, p) + 1.0
    w = rng.uniform(0.5, 1.0, 50)  # one weight per point, shared by the batch
    t32, q32 = xform.rigid_registration(p.astype(np.float32), y.astype(np.float32),
                                        w.astype(np.float32))  # fmt: skip
    assert t32.dtype == q32.dtype == np.float32
    np.testing.assert_allclose(t32, 1.0, atol=1e-5)
    t, q = xform.rigid_registration(p, y, np.broadcast_to(w, (3, 50)))
    np.testing.assert_allclose(t32, t, atol=1e-5)
    np.testing.assert_allclose(q32, q, atol=1e-5)


def test_registration_is_deterministic_and_empty_batches_work(rng):
    p, y = rng.normal(size=(2, 4, 5000, 3)).astype(np.float32)
    first = xform.rigid_registration(p, y, scale=True)
    for again in (xform.rigid_registration(p, y, scale=True) for _ in range(3)):
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
    t, q = xform.rigid_registration(np.zeros((0, 5, 3)), np.zeros((0, 5, 3)))
    assert t.shape == (0, 3) and q.shape == (0, 4)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_registration_errors_name_the_arguments(framework):
    module, to, _ = FRAMEWORKS[framework]
    p, y = to(np.zeros((2, 6, 3))), to(np.zeros((2, 5, 3)))
    with pytest.raises(ValueError, match=r"'points' has 6 points.*'targets' has 5"):
        module.rigid_registration(p, y)
    with pytest.raises(ValueError, match=r"'weights' has shape \(2, 5\); expected \(\.\.\., N\)"):
        module.rigid_registration(p, to(np.zeros((2, 6, 3))), to(np.zeros((2, 5))))
    with pytest.raises(ValueError, match=r"'targets' has shape \(6,\); expected \(\.\.\., N, 3\)"):
        module.rigid_registration(p, to(np.zeros(6)))
    with pytest.raises(TypeError, match="'scale' must be True or False"):
        module.rigid_registration(p, p, scale="yes")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_registration_non_arrays_raise_type_error_naming_the_argument(framework):
    """As every op's arguments: a TypeError naming the function and the argument, never
    an AttributeError from reading the shape of a list."""
    module, to, _ = FRAMEWORKS[framework]
    p = to(np.zeros((5, 3)))
    for bad in ([[0.0, 0.0, 0.0]] * 5, None, 1.5):
        for args, name in (((bad, p), "points"), ((p, bad), "targets"), ((p, p, bad), "weights")):
            if bad is None and name == "weights":
                continue  # no weights: all ones
            kind = f"{type(bad).__module__}.{type(bad).__qualname__}"
            with pytest.raises(
                TypeError, match=rf"rigid_registration: argument '{name}' is a {kind}"
            ):
                module.rigid_registration(*args)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scale", [False, True])
def test_registration_gradients_in_both_frameworks(weighted, scale, rng):
    p, y = rng.normal(size=(2, 2, 6, 3))
    w = rng.uniform(0.5, 1.5, size=(2, 6))
    arrays = (p, y, w) if weighted else (p, y)

    def run_torch(*a):
        return xt.rigid_registration(*a[:2], a[2] if weighted else None, scale=scale)

    def run_jax(*a):
        return xj.rigid_registration(*a[:2], a[2] if weighted else None, scale=scale)

    tensors = [torch.from_numpy(a).requires_grad_() for a in arrays]
    assert torch.autograd.gradcheck(run_torch, tensors, check_forward_ad=True)
    check_grads(run_jax, tuple(map(jnp.asarray, arrays)))


def test_registration_pose_closed_forms_equal_the_derived_ones(rng):
    """The pose-from-moments ops' closed tangent and VJP against Warp's adjoint of their
    element functions (svd3's adjoint: distinct singular values here)."""
    moment = random_rotations(rng, (6,)) @ np.diag([1.0, 2.0, 4.0])
    args = [moment, rng.uniform(1, 2, 6), rng.uniform(1, 2, 6), *rng.normal(size=(2, 6, 3))]
    for op in registration.REGISTRATION_POSE.values():
        x = args if len(op.operands) == 5 else [args[0], *args[2:]]
        dx = [rng.normal(size=a.shape) for a in x]
        gs = [rng.normal(size=r.shape) for r in as_tuple(op(*x))]
        for closed, plain in zip(
            (xform.jvp(op, x, dx), xform.vjp(op, x, gs)),
            (xform.jvp(derived(op), x, dx), xform.vjp(derived(op), x, gs)),
        ):
            for a, b in zip(as_tuple(closed), as_tuple(plain)):
                np.testing.assert_allclose(a, b, atol=1e-10)


def test_registration_vmap_over_point_sets(rng):
    p, y = rng.normal(size=(2, 4, 9, 3))
    w = rng.uniform(0.5, 1.5, size=(4, 9))
    expected = xform.rigid_registration(p, y, w, scale=True)
    got = jax.vmap(lambda a, b, c: xj.rigid_registration(a, b, c, scale=True))(
        *map(jnp.asarray, (p, y, w))
    )
    for a, b in zip(got, expected):
        np.testing.assert_allclose(np.asarray(a), b, atol=1e-13)
    got = torch.func.vmap(lambda a, b, c: xt.rigid_registration(a, b, c, scale=True))(
        *map(torch.from_numpy, (p, y, w))
    )
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), b, atol=1e-13)
    # a shared point set against a batch of targets
    got = jax.vmap(xj.rigid_registration, in_axes=(None, 0))(jnp.asarray(p[0]), jnp.asarray(y))
    expected = xform.rigid_registration(np.broadcast_to(p[0], y.shape), y)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(np.asarray(a), b, atol=1e-13)


def test_registration_under_jit_and_torch_compile(rng):
    p, y = rng.normal(size=(2, 3, 8, 3))
    expected = xform.rigid_registration(p, y)
    got = jax.jit(xj.rigid_registration)(jnp.asarray(p), jnp.asarray(y))
    for a, b in zip(got, expected):
        np.testing.assert_allclose(np.asarray(a), b, atol=1e-14)
    compiled = torch.compile(xt.rigid_registration, fullgraph=True)
    got = compiled(torch.from_numpy(p), torch.from_numpy(y))
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), b, atol=1e-14)


# --- random rotations -----------------------------------------------------------------------

SAMPLES = 20_000


def draws():
    """Each framework's draw of SAMPLES quaternions, twice from one seed, once from
    another."""
    return {
        "numpy": lambda seed: xform.random_quaternion(SAMPLES, seed=seed),
        "torch": lambda seed: xt.random_quaternion(
            (SAMPLES,), torch.Generator().manual_seed(seed), dtype=torch.float64
        ).numpy(),
        "jax": lambda seed: np.asarray(
            xj.random_quaternion((SAMPLES,), jax.random.key(seed), dtype=jnp.float64)
        ),
    }


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
def test_random_quaternions_are_haar_uniform_and_reproducible(framework):
    """On the unit sphere S^3 each squared component follows Beta(1/2, 3/2), and the
    rotation angle has density (1 - cos theta) / pi: KS tests at a fixed seed."""
    draw = draws()[framework]
    q = draw(7)
    assert q.shape == (SAMPLES, 4) and q.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(q, axis=-1), 1.0, atol=1e-14)
    for k in range(4):
        assert stats.kstest(q[:, k] ** 2, stats.beta(0.5, 1.5).cdf).pvalue > 1e-3
    angle = 2 * np.arccos(np.clip(np.abs(q[:, 0]), 0, 1))
    assert stats.kstest(angle, lambda a: (a - np.sin(a)) / np.pi).pvalue > 1e-3
    np.testing.assert_array_equal(draw(7), q)
    assert not np.array_equal(draw(8), q)


def test_the_uniformity_test_rejects_a_non_uniform_sampler():
    """The same KS test on normalised uniform-cube samples (a common mistake) fails."""
    cube = normalized(np.random.default_rng(7).uniform(-1, 1, size=(SAMPLES, 4)))
    assert stats.kstest(cube[:, 0] ** 2, stats.beta(0.5, 1.5).cdf).pvalue < 1e-6


def test_random_quaternion_shapes_dtypes_and_errors():
    assert xform.random_quaternion((2, 3)).shape == (2, 3, 4)
    assert xform.random_quaternion(()).shape == (4,)
    assert xform.random_quaternion(0).shape == (0, 4)
    assert xform.random_quaternion(5, dtype=np.float32).dtype == np.float32
    rng = np.random.default_rng(1)
    assert not np.array_equal(xform.random_quaternion(3, rng), xform.random_quaternion(3, rng))
    assert xt.random_quaternion(3).dtype == torch.get_default_dtype()
    assert xj.random_quaternion((2, 5), jax.random.key(0)).shape == (2, 5, 4)
    jitted = jax.jit(xj.random_quaternion, static_argnums=0)
    np.testing.assert_array_equal(
        jitted((3,), jax.random.key(4)), xj.random_quaternion((3,), jax.random.key(4))
    )
    with pytest.raises(TypeError, match="'shape' must be an int or a sequence of ints"):
        xform.random_quaternion(2.5)
    with pytest.raises(ValueError, match="negative"):
        xt.random_quaternion((2, -1))
    with pytest.raises(TypeError, match="float32 or float64"):
        xform.random_quaternion(2, dtype=np.int32)
