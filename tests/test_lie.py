"""The SO(3)/SE(3) toolkit: values against independent float64 references to 1e-12, the
group identities, the peers (jaxlie, roma) where conventions match, and the singular
points (the identity and 180 degrees) in both dtypes and every framework: right values,
finite gradients, equal to finite differences wherever the function is differentiable
and to the analytic limit at exactly zero."""

import numpy as np
import pytest
from helpers import as_tuple
from reference import random_args, reference, rotation_matrix, skew, standardized
from scipy.spatial.transform import Rotation

import xform
from xform.ops import FAMILIES

LIE_FAMILIES = ("Quaternion algebra", "SO(3)", "SE(3)", "Distances")
LIE_OPS = [op.name for family in LIE_FAMILIES for op in FAMILIES[family]]
# the second wave's leading shapes: a batch, a broadcast pair, and none
LEADINGS = [(5,), (2, 1), ()]


def leadings_for(name, lead):
    n = len(xform.OPS[name].operands)
    if n == 1 or lead != (2, 1):
        return [lead] * n
    return [(2, 1), (1, 3)] + [lead] * (n - 2)


@pytest.mark.parametrize("lead", LEADINGS)
@pytest.mark.parametrize("name", LIE_OPS)
def test_float64_values_match_the_references_to_1e12(name, lead, rng):
    args = random_args(name, leadings_for(name, lead), rng)
    for got, want in zip(as_tuple(getattr(xform, name)(*args)), reference(name, args)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# --- identities ------------------------------------------------------------------------------


def tangents(rng, n, limit=np.pi):
    """Rotation vectors with |omega| uniform in [0, limit), random axes."""
    axes = rng.normal(size=(n, 3))
    axes /= np.linalg.norm(axes, axis=-1, keepdims=True)
    return axes * rng.uniform(0, limit, size=(n, 1))


def test_left_jacobian_is_rotation_times_right_jacobian(rng):
    w = tangents(rng, 50, 2 * np.pi - 0.1)
    np.testing.assert_allclose(
        xform.so3_left_jacobian(w),
        xform.axis_angle_to_matrix(w) @ xform.so3_right_jacobian(w),
        atol=1e-13,
    )


def test_jacobians_times_their_inverses_are_the_identity(rng):
    w = tangents(rng, 50, 2 * np.pi - 0.1)
    xi = np.concatenate([rng.normal(size=(50, 3)), w], -1)
    for forward, inverse, x, n in (
        (xform.so3_left_jacobian, xform.so3_left_jacobian_inverse, w, 3),
        (xform.so3_right_jacobian, xform.so3_right_jacobian_inverse, w, 3),
        (xform.se3_left_jacobian, xform.se3_left_jacobian_inverse, xi, 6),
        (xform.se3_right_jacobian, xform.se3_right_jacobian_inverse, xi, 6),
    ):
        np.testing.assert_allclose(
            inverse(x) @ forward(x), np.broadcast_to(np.eye(n), (50, n, n)), atol=1e-10
        )


def test_log_of_exp_is_the_identity_inside_pi(rng):
    w = tangents(rng, 200, np.pi - 1e-6)
    np.testing.assert_allclose(xform.so3_log(xform.so3_exp(w)), w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        xform.matrix_to_axis_angle(xform.axis_angle_to_matrix(w)), w, atol=1e-9
    )
    xi = np.concatenate([rng.normal(size=(200, 3)), w], -1)
    np.testing.assert_allclose(xform.se3_log(*xform.se3_exp(xi)), xi, rtol=1e-11, atol=1e-11)


def test_exp_of_log_is_the_identity(rng):
    t, q = rng.normal(size=(100, 3)), rng.normal(size=(100, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    t2, q2 = xform.se3_exp(xform.se3_log(t, q))
    np.testing.assert_allclose(t2, t, atol=1e-12)
    np.testing.assert_allclose(q2, standardized(q), atol=1e-12)
    np.testing.assert_allclose(xform.so3_exp(xform.so3_log(q)), standardized(q), atol=1e-12)


def test_conjugating_exp_by_a_pose_is_exp_of_the_adjoint(rng):
    """T exp(xi) T^-1 = exp(Ad_T xi)."""
    t, q = rng.normal(size=(50, 3)), rng.normal(size=(50, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    xi = np.concatenate([rng.normal(size=(50, 3)), tangents(rng, 50)], -1)
    conjugated = xform.pose_multiply(
        *xform.pose_multiply(t, q, *xform.se3_exp(xi)), *xform.pose_inverse(t, q)
    )
    moved = xform.se3_exp((xform.se3_adjoint(t, q) @ xi[..., None])[..., 0])
    np.testing.assert_allclose(conjugated[0], moved[0], atol=1e-12)
    np.testing.assert_allclose(standardized(conjugated[1]), moved[1], atol=1e-12)


def test_log_is_invariant_to_the_scale_and_sign_of_q(rng):
    q = rng.normal(size=(100, 4))
    log = xform.so3_log(q)
    np.testing.assert_allclose(xform.so3_log(-q), log, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(xform.so3_log(3 * q), log, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(
        xform.so3_log(q / np.linalg.norm(q, axis=-1, keepdims=True)), log, rtol=1e-14, atol=1e-15
    )
    assert np.all(np.linalg.norm(log, axis=-1) <= np.pi)


def test_hat_and_vee(rng):
    xi = rng.normal(size=(10, 6))
    np.testing.assert_array_equal(xform.so3_vee(xform.so3_hat(xi[:, 3:])), xi[:, 3:])
    np.testing.assert_array_equal(xform.se3_vee(xform.se3_hat(xi)), xi)
    v = rng.normal(size=(10, 3))
    np.testing.assert_allclose(
        xform.so3_hat(xi[:, 3:]) @ v[..., None], np.cross(xi[:, 3:], v)[..., None], atol=1e-15
    )


def test_distances_lie_in_zero_to_pi_and_are_symmetric(rng):
    q1, q2 = rng.normal(size=(100, 4)), rng.normal(size=(100, 4))
    d = xform.quaternion_geodesic_distance(q1, q2)
    assert np.all((d >= 0) & (d <= np.pi))
    np.testing.assert_allclose(xform.quaternion_geodesic_distance(q2, q1), d, atol=1e-14)
    np.testing.assert_allclose(xform.quaternion_geodesic_distance(q1, -q2), d, atol=1e-14)
    r1 = Rotation.from_quat(q1, scalar_first=True).as_matrix()
    r2 = Rotation.from_quat(q2, scalar_first=True).as_matrix()
    np.testing.assert_allclose(xform.matrix_geodesic_distance(r1, r2), d, atol=1e-12)
    np.testing.assert_allclose(
        xform.rotation_angle(q1), np.linalg.norm(xform.so3_log(q1), axis=-1), atol=1e-14
    )


# --- the peers, where conventions match -------------------------------------------------------


def test_agrees_with_jaxlie(rng):
    jaxlie = pytest.importorskip("jaxlie")
    import jax

    jax.config.update("jax_enable_x64", True)
    w = tangents(rng, 20)
    xi = np.concatenate([rng.normal(size=(20, 3)), w], -1)
    for k in range(20):
        so3 = jaxlie.SO3.exp(w[k])
        np.testing.assert_allclose(
            xform.so3_exp(w[k]), standardized(np.asarray(so3.wxyz)), atol=1e-12
        )
        np.testing.assert_allclose(xform.so3_log(np.asarray(so3.wxyz)), w[k], atol=1e-12)
        se3 = jaxlie.SE3.exp(xi[k])
        t, q = xform.se3_exp(xi[k])
        np.testing.assert_allclose(t, np.asarray(se3.translation()), atol=1e-12)
        np.testing.assert_allclose(q, standardized(np.asarray(se3.rotation().wxyz)), atol=1e-12)
        np.testing.assert_allclose(xform.se3_log(t, q), np.asarray(se3.log()), atol=1e-12)
        np.testing.assert_allclose(xform.se3_adjoint(t, q), np.asarray(se3.adjoint()), atol=1e-12)


def test_agrees_with_roma(rng):
    roma = pytest.importorskip("roma")
    torch = pytest.importorskip("torch")
    w = tangents(rng, 50)
    q1, q2 = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    q1 /= np.linalg.norm(q1, axis=-1, keepdims=True)
    q2 /= np.linalg.norm(q2, axis=-1, keepdims=True)

    def xyzw(q):
        return torch.from_numpy(np.roll(q, -1, -1))

    def wxyz(q):
        return np.roll(q.numpy(), 1, -1)

    np.testing.assert_allclose(
        xform.so3_exp(w),
        standardized(wxyz(roma.rotvec_to_unitquat(torch.from_numpy(w)))),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        xform.so3_log(q1), roma.unitquat_to_rotvec(xyzw(q1)).numpy(), atol=1e-12
    )
    np.testing.assert_allclose(
        xform.axis_angle_to_matrix(w),
        roma.rotvec_to_rotmat(torch.from_numpy(w)).numpy(),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        xform.quaternion_multiply(q1, q2), wxyz(roma.quat_product(xyzw(q1), xyzw(q2))), atol=1e-14
    )
    r1 = roma.unitquat_to_rotmat(xyzw(q1))
    r2 = roma.unitquat_to_rotmat(xyzw(q2))
    np.testing.assert_allclose(
        xform.matrix_geodesic_distance(r1.numpy(), r2.numpy()),
        roma.rotmat_geodesic_distance(r1, r2).numpy(),
        atol=1e-7,  # roma uses acos-like formulas: accurate to ~sqrt(eps) near 0 and pi
    )


# --- singular points ---------------------------------------------------------------------------

AXES = 24
SINGULAR_ANGLES = {"zero": 0.0, "1e-8": 1e-8, "1e-4": 1e-4, "pi-1e-6": np.pi - 1e-6, "pi": np.pi}


def singular_tangents(angle, seed=0):
    axes = np.random.default_rng(seed).normal(size=(AXES, 3))
    return axes / np.linalg.norm(axes, axis=-1, keepdims=True) * angle


def singular_quaternions(angle):
    """The unit quaternions of those rotations, their negatives, and (at pi) w = 0."""
    q = Rotation.from_rotvec(singular_tangents(angle)).as_quat(scalar_first=True)
    if angle == np.pi:
        q[:, 0] = 0.0
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
    return np.concatenate([q, -q])


def singular_inputs(name, angle):
    """Inputs of op `name` at the singular point `angle`, float64."""
    op = xform.OPS[name]
    args = []
    for operand in op.operands:
        if operand.element == (4,):
            args.append(singular_quaternions(angle))
        elif operand.element == (3, 3):
            args.append(
                Rotation.from_rotvec(np.concatenate([singular_tangents(angle)] * 2)).as_matrix()
            )
        elif operand.element == (6,):
            w = np.concatenate([singular_tangents(angle)] * 2)
            args.append(np.concatenate([np.random.default_rng(1).normal(size=w.shape), w], -1))
        else:
            args.append(np.concatenate([singular_tangents(angle)] * 2))
    if len(args) == 2 and name.endswith("geodesic_distance"):  # distance to the identity
        args[0] = np.broadcast_to(
            np.eye(3) if args[0].shape[-1] == 3 else [1.0, 0, 0, 0], args[0].shape
        ).copy()
    if name == "se3_log":
        args[0] = np.random.default_rng(2).normal(size=args[0].shape)
    return args


SINGULAR_OPS = [
    "so3_exp", "so3_log", "axis_angle_to_matrix", "matrix_to_axis_angle", "so3_left_jacobian",
    "so3_left_jacobian_inverse", "so3_right_jacobian", "so3_right_jacobian_inverse", "se3_exp",
    "se3_log", "se3_left_jacobian", "se3_left_jacobian_inverse", "rotation_angle",
    "quaternion_geodesic_distance", "matrix_geodesic_distance",
]  # fmt: skip
# Where the function is not differentiable, finite differences do not apply: the angle
# and distances at 0 and pi (|.| and a maximum), the logarithm at pi (its branch cut).
NOT_DIFFERENTIABLE = {
    ("rotation_angle", "zero"), ("quaternion_geodesic_distance", "zero"),
    ("matrix_geodesic_distance", "zero"), ("rotation_angle", "pi"),
    ("quaternion_geodesic_distance", "pi"), ("matrix_geodesic_distance", "pi"),
    ("so3_log", "pi"), ("matrix_to_axis_angle", "pi"), ("se3_log", "pi"),
    ("so3_exp", "pi"), ("se3_exp", "pi"),  # w >= 0 flips the sign there
}  # fmt: skip
SINGULAR_CASES = [(n, a) for n in SINGULAR_OPS for a in SINGULAR_ANGLES]
DISTANCES = {"rotation_angle", "quaternion_geodesic_distance", "matrix_geodesic_distance"}
KINK_AT_ZERO = DISTANCES
KINK_AT_PI = DISTANCES | {"so3_log", "matrix_to_axis_angle", "se3_log", "so3_exp", "se3_exp"}


def up_to_sign(got, ref):
    """`got` with each element's sign chosen to match `ref` best."""
    flat_got, flat_ref = got.reshape(len(got), -1), ref.reshape(len(ref), -1)
    sign = np.where((flat_got * flat_ref).sum(-1) < 0, -1.0, 1.0)
    return (flat_got * sign[:, None]).reshape(got.shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("name", "angle"), SINGULAR_CASES)
def test_singular_points_numpy(name, angle, dtype, rng):
    args64 = singular_inputs(name, SINGULAR_ANGLES[angle])
    args = [a.astype(dtype) for a in args64]
    results = as_tuple(getattr(xform, name)(*args))
    want = reference(name, args64)
    tolerance = 1e-11 if dtype == np.float64 else 2e-5
    for got, ref in zip(results, want):
        if name == "se3_log" and angle == "pi":
            continue  # checked below
        if angle == "pi" and (name in ("so3_log", "matrix_to_axis_angle") or ref.shape[-1] == 4):
            # At pi, log(q) and -log(q) are both right, and so are q and -q (w = 0).
            got = up_to_sign(got.astype(np.float64), ref)
        np.testing.assert_allclose(
            got, ref, rtol=tolerance, atol=tolerance * max(1, np.abs(ref).max())
        )
    cotangents = tuple(rng.normal(size=r.shape).astype(dtype) for r in results)
    grads = xform.vjp(name, args, cotangents)
    for grad in grads:
        assert np.all(np.isfinite(grad)), f"non-finite gradient of {name} at {angle}"
    tangent_dirs = [rng.normal(size=a.shape).astype(dtype) for a in args]
    for tangent in as_tuple(xform.jvp(name, args, tangent_dirs)):
        assert np.all(np.isfinite(tangent))
    if name == "se3_log" and angle == "pi":  # two logarithms: check that it is one
        t, q = xform.se3_exp(results[0].astype(np.float64))
        np.testing.assert_allclose(t, args64[0], atol=tolerance * 10)
        np.testing.assert_allclose(up_to_sign(q, args64[1]), args64[1], atol=tolerance * 10)
    if dtype == np.float32 or (name, angle) in NOT_DIFFERENTIABLE:
        return
    # Central differences in float64, with a step well below the distance to the nearest
    # point where the function is not differentiable (0 or pi), so that it stays on one
    # side of it.
    step = difference_step(name, angle)
    directions = [rng.normal(size=a.shape) for a in args64]
    plus = as_tuple(getattr(xform, name)(*[a + step * d for a, d in zip(args64, directions)]))
    minus = as_tuple(getattr(xform, name)(*[a - step * d for a, d in zip(args64, directions)]))
    pushed = as_tuple(xform.jvp(name, args64, directions))
    for got, p, m in zip(pushed, plus, minus):
        np.testing.assert_allclose(got, (p - m) / (2 * step), rtol=1e-5, atol=1e-6)
    # The VJP is the tangent's transpose: <vjp(g), d> = <g, jvp(d)>, the JVP being checked
    # against the differences just above.
    pulled = sum(
        float((g * d).sum()) for g, d in zip(xform.vjp(name, args64, cotangents), directions)
    )
    pushed = sum(float((c * t).sum()) for c, t in zip(cotangents, pushed))
    assert pulled == pytest.approx(pushed, rel=1e-9, abs=1e-9)


def difference_step(name: str, angle: str) -> float:
    """Central differences' step, float64: well below the distance to the nearest point
    where the function is not differentiable (0 or pi), so that it stays on one side."""
    theta = SINGULAR_ANGLES[angle]
    return min(
        1e-7,
        1e-4 * theta if name in KINK_AT_ZERO else np.inf,
        1e-3 * (np.pi - theta) if name in KINK_AT_PI else np.inf,
    )


def test_analytic_limits_at_exactly_zero(rng):
    w0 = np.zeros((1, 3))
    d = rng.normal(size=(1, 3))
    np.testing.assert_allclose(
        xform.jvp("so3_exp", [w0], [d]), np.concatenate([[[0.0]], d / 2], -1), atol=1e-15
    )
    np.testing.assert_allclose(xform.jvp("axis_angle_to_matrix", [w0], [d]), skew(d), atol=1e-15)
    np.testing.assert_allclose(xform.jvp("so3_left_jacobian", [w0], [d]), skew(d) / 2, atol=1e-15)
    np.testing.assert_allclose(
        xform.jvp("so3_left_jacobian_inverse", [w0], [d]), -skew(d) / 2, atol=1e-15
    )
    identity = np.array([[1.0, 0, 0, 0]])
    dq = rng.normal(size=(1, 4))
    np.testing.assert_allclose(xform.jvp("so3_log", [identity], [dq]), 2 * dq[:, 1:], atol=1e-15)
    np.testing.assert_allclose(
        xform.jvp("matrix_to_axis_angle", [np.eye(3)[None]], [skew(d)]), d, atol=1e-15
    )
    rho = rng.normal(size=(1, 3))
    t, q = xform.jvp("se3_exp", [np.zeros((1, 6))], [np.concatenate([rho, d], -1)])
    np.testing.assert_allclose(t, rho, atol=1e-15)
    np.testing.assert_allclose(q, np.concatenate([[[0.0]], d / 2], -1), atol=1e-15)
    for name in ("rotation_angle",):  # not differentiable at the identity: a zero gradient
        (grad,) = xform.vjp(name, [identity], np.ones(1))
        np.testing.assert_array_equal(grad, np.zeros((1, 4)))
    # (both at the identity, so that the relative rotation is exactly the identity)
    for grad in xform.vjp("quaternion_geodesic_distance", [identity, identity], np.ones(1)):
        np.testing.assert_array_equal(grad, np.zeros((1, 4)))
    for grad in xform.vjp("matrix_geodesic_distance", [np.eye(3)[None]] * 2, np.ones(1)):
        np.testing.assert_array_equal(grad, np.zeros((1, 3, 3)))


@pytest.mark.parametrize(("name", "angle"), SINGULAR_CASES)
def test_singular_points_in_torch_and_jax(name, angle):
    """The same kernels as the NumPy path (same values, bit for bit), and finite gradients
    (no NaN at the identity), in float64 and float32; in float64 where the function is
    differentiable, the gradients against central differences of the loss."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import xform.backends.jax as xj
    import xform.backends.torch as xt

    for dtype in (np.float64, np.float32):
        args = [a.astype(dtype) for a in singular_inputs(name, SINGULAR_ANGLES[angle])]
        expected = as_tuple(getattr(xform, name)(*args))
        inputs = [torch.from_numpy(a).requires_grad_() for a in args]
        results = as_tuple(getattr(xt, name)(*inputs))
        for got, want in zip(results, expected):
            np.testing.assert_array_equal(got.detach().numpy(), want)
        sum(r.sum() for r in results).backward()
        assert all(torch.isfinite(x.grad).all() for x in inputs), (name, dtype)

        def loss(*a):
            return sum(r.sum() for r in as_tuple(getattr(xj, name)(*a)))

        for got, want in zip(as_tuple(jax.jit(getattr(xj, name))(*args)), expected):
            np.testing.assert_array_equal(np.asarray(got), want)
        grads = jax.grad(loss, argnums=tuple(range(len(args))))(*args)
        assert all(np.all(np.isfinite(np.asarray(g))) for g in grads), (name, dtype)
        for g, t in zip(grads, inputs):
            np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-6, atol=1e-6)
        if dtype == np.float32 or (name, angle) in NOT_DIFFERENTIABLE:
            continue
        step = difference_step(name, angle)
        directions = [np.random.default_rng(3).normal(size=a.shape) for a in args]

        def numpy_loss(*a):
            return sum(float(r.sum()) for r in as_tuple(getattr(xform, name)(*a)))

        plus = numpy_loss(*[a + step * d for a, d in zip(args, directions)])
        minus = numpy_loss(*[a - step * d for a, d in zip(args, directions)])
        expected = (plus - minus) / (2 * step)
        for framework, gradients in (("torch", [t.grad.numpy() for t in inputs]),
                                     ("jax", [np.asarray(g) for g in grads])):  # fmt: skip
            got = sum(float((g * d).sum()) for g, d in zip(gradients, directions))
            rounding = 1e-15 * max(abs(plus), abs(minus)) / step  # the differences' own
            assert got == pytest.approx(expected, rel=1e-5, abs=1e-6 + rounding), framework


def test_float32_round_trip_over_a_dense_sweep(rng):
    """so3_log(so3_exp(omega)) in float32 to 1e-6 relative over |omega| in [0, pi - 1e-3]."""
    n = 200_000
    axes = rng.normal(size=(n, 3))
    axes /= np.linalg.norm(axes, axis=-1, keepdims=True)
    angles = np.linspace(0.0, np.pi - 1e-3, n)
    w = (axes * angles[:, None]).astype(np.float32)
    back = xform.so3_log(xform.so3_exp(w)).astype(np.float64)
    exact = w.astype(np.float64)
    scale = np.maximum(np.linalg.norm(exact, axis=-1), np.finfo(np.float32).tiny)
    error = np.linalg.norm(back - exact, axis=-1) / scale
    worst = error[angles > 0].max()
    at = angles[np.argmax(np.where(angles > 0, error, 0))]
    print(f"float32 so3_log(so3_exp(omega)): worst relative error {worst:.3g} at |omega| {at:.6f}")
    assert worst <= 1e-6
    assert np.all(back[angles == 0] == 0)


# --- every framework's vmap ---------------------------------------------------------------------


@pytest.mark.parametrize("name", LIE_OPS)
def test_vmap_in_torch_and_jax_matches_a_loop(name, rng):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import xform.backends.jax as xj
    import xform.backends.torch as xt

    args = random_args(name, [(4,)] * len(xform.OPS[name].operands), rng)
    loop = [as_tuple(getattr(xform, name)(*[a[i] for a in args])) for i in range(4)]
    torched = as_tuple(torch.func.vmap(getattr(xt, name))(*[torch.from_numpy(a) for a in args]))
    jaxed = as_tuple(jax.vmap(getattr(xj, name))(*args))
    for i in range(4):
        for t, j, want in zip(torched, jaxed, loop[i]):
            np.testing.assert_allclose(t[i].numpy(), want, rtol=1e-14, atol=1e-14)
            np.testing.assert_allclose(np.asarray(j[i]), want, rtol=1e-14, atol=1e-14)


def test_quaternion_algebra(rng):
    q, p = rng.normal(size=(10, 4)), rng.normal(size=(10, 4))
    one = np.array([1.0, 0, 0, 0])
    np.testing.assert_allclose(
        xform.quaternion_multiply(q, xform.quaternion_inverse(q)),
        np.broadcast_to(one, q.shape),
        atol=1e-14,
    )
    np.testing.assert_allclose(
        xform.quaternion_normalize(3 * q), q / np.linalg.norm(q, axis=-1, keepdims=True), atol=1e-15
    )
    s = xform.quaternion_standardize(q)
    assert np.all(s[:, 0] >= 0) and np.all(np.abs(s) == np.abs(q))
    v = rng.normal(size=(10, 3))
    np.testing.assert_allclose(
        xform.quaternion_rotate(q, v), (rotation_matrix(q) @ v[..., None])[..., 0], atol=1e-13
    )
    np.testing.assert_allclose(
        xform.quaternion_conjugate(xform.quaternion_multiply(q, p)),
        xform.quaternion_multiply(xform.quaternion_conjugate(p), xform.quaternion_conjugate(q)),
        atol=1e-14,
    )
