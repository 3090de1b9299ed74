"""SO(2) and SE(2) ops: values against the closed forms in 50-digit arithmetic (mpmath),
the expm references of reference.py and jaxlie 1.5.0 (whose semantics the group objects
follow), to 1e-12 in float64, at random angles and at the singular ones (0, 1e-8, 1e-4,
pi - 1e-6 and exactly +-pi, both sides of the logarithm's branch cut); the group
identities; and every closed-form tangent and VJP against central differences and
against the derivatives derived from the element functions, at the singular angles too.
(Every op also runs through the per-op suites: test_values, test_gradients,
test_tangents, test_torch, test_jax, test_edge_cases, test_errors, ...)"""

import mpmath
import numpy as np
import pytest
from helpers import as_tuple, variant
from reference import reference, se2_matrix, so2_matrix

import xform
from xform.ops import FAMILIES

OPS_2D = [op.name for op in FAMILIES["SO(2) and SE(2)"]]
DIFFERENTIABLE_2D = [name for name in OPS_2D if xform.OPS[name].differentiable]
SINGULAR = [0.0, 1e-8, -1e-8, 1e-4, -1e-4, np.pi - 1e-6, -(np.pi - 1e-6), np.pi, -np.pi]
ANGLE_OPS = [
    "so2_exp", "so2_log", "se2_exp", "se2_log", "se2_left_jacobian",
    "se2_left_jacobian_inverse", "se2_right_jacobian", "se2_right_jacobian_inverse",
]  # fmt: skip
LOGS = ("so2_log", "se2_log")


def angles(rng, n_random=16):
    """The singular angles, then random ones in (-pi, pi)."""
    return np.concatenate([SINGULAR, rng.uniform(-np.pi, np.pi, n_random)])


def unit_complex(theta):
    """[cos, sin]; at exactly +-pi, [-1, +-0.0]: the two sides of atan2's branch cut."""
    z = np.stack([np.cos(theta), np.sin(theta)], -1)
    at_pi = np.abs(theta) == np.pi
    z[at_pi] = np.stack([-np.ones(at_pi.sum()), np.copysign(0.0, theta[at_pi])], -1)
    return z


def inputs(name, theta, rng, scale=None):
    """Arguments of op `name` whose angle is `theta` (the first rotation's, or the
    tangent's); other rotations random; unit complex numbers scaled by `scale`."""
    n = len(theta)
    z = unit_complex(theta) if scale is None else unit_complex(theta) * scale[:, None]
    args = []
    for operand in xform.OPS[name].operands:
        if operand.name == "theta":
            args.append(theta[:, None].copy())
        elif operand.name == "xi":
            args.append(np.concatenate([rng.normal(size=(n, 2)), theta[:, None]], -1))
        elif operand.name == "unit_complex":
            args.append(z)
        elif operand.name == "unit_complex2":
            args.append(unit_complex(rng.uniform(-np.pi, np.pi, n)))
        elif operand.element == (2, 2):
            args.append(so2_matrix(z))
        elif operand.element == (3, 3):
            args.append(se2_matrix(rng.normal(size=(n, 2)), z))
        else:  # positions and points
            args.append(rng.normal(size=(n, 2)))
    return args


# --- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OPS_2D)
def test_values_match_the_expm_references_at_singular_and_random_angles(name, rng):
    theta = angles(rng)
    scale = rng.uniform(0.5, 2.0, len(theta))
    for args in (inputs(name, theta, rng), inputs(name, theta, rng, scale)):
        for got, want in zip(as_tuple(getattr(xform, name)(*args)), reference(name, args)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


mpmath.mp.dps = 50


def closed_forms(theta):
    """The docs' closed forms at one angle, in 50-digit arithmetic: V (se2_exp's), V^-1
    (se2_log's), and the columns (I - V)/theta and (I - V^-1)/theta of J_l and J_l^-1,
    as complex numbers (a + i b standing for [[a, -b], [b, a]])."""
    t = mpmath.mpf(theta)
    h = t / 2
    v = mpmath.mpc(mpmath.sin(t) / t, (1 - mpmath.cos(t)) / t)
    v_inv = mpmath.mpc(h * mpmath.cos(h) / mpmath.sin(h), -h)
    return v, v_inv, (1 - v) / t, (1 - v_inv) / t


def as_matrix(c):
    return np.array([[float(c.real), -float(c.imag)], [float(c.imag), float(c.real)]])


def test_values_match_the_closed_forms_in_50_digits(rng):
    theta = np.array([a for a in angles(rng) if a != 0.0])  # 0/0 at zero; checked below
    xi = np.concatenate([rng.normal(size=(len(theta), 2)), theta[:, None]], -1)
    position = rng.normal(size=(len(theta), 2))
    z = unit_complex(theta)
    exp_position, exp_z = xform.se2_exp(xi)
    log = xform.se2_log(position, z)
    jl, jl_inv = xform.se2_left_jacobian(xi), xform.se2_left_jacobian_inverse(xi)
    for k, t in enumerate(theta):
        v, v_inv, column, column_inv = (as_matrix(c) for c in closed_forms(t))
        np.testing.assert_allclose(exp_position[k], v @ xi[k, :2], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(exp_z[k], [np.cos(t), np.sin(t)], rtol=0, atol=2.3e-16)
        np.testing.assert_allclose(log[k, :2], v_inv @ position[k], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(log[k, 2], t, rtol=1e-15, atol=0)
        for got, m, c in ((jl[k], v, column), (jl_inv[k], v_inv, column_inv)):
            np.testing.assert_allclose(got[:2, :2], m, rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(got[:2, 2], c @ xi[k, :2], rtol=1e-12, atol=1e-15)
            np.testing.assert_array_equal(got[2], [0.0, 0.0, 1.0])
    # at exactly zero: the limits V = I, (I - V)/theta = -K/2, (I - V^-1)/theta = K/2
    v = rng.normal(size=2)
    xi0 = np.array([*v, 0.0])
    half_turn = 0.5 * np.array([-v[1], v[0]])  # K v / 2
    np.testing.assert_array_equal(xform.se2_exp(xi0)[0], v)
    np.testing.assert_array_equal(xform.se2_log(v, np.array([1.0, 0.0])), xi0)
    np.testing.assert_allclose(xform.se2_left_jacobian(xi0)[:2, 2], -half_turn, rtol=1e-16)
    np.testing.assert_allclose(xform.se2_left_jacobian_inverse(xi0)[:2, 2], half_turn, rtol=1e-16)


def test_so2_values(rng):
    theta = angles(rng)
    z = unit_complex(theta) * rng.uniform(0.5, 2.0, (len(theta), 1))
    np.testing.assert_allclose(xform.so2_exp(theta[:, None]), unit_complex(theta), atol=2.3e-16)
    np.testing.assert_allclose(xform.so2_log(z)[:, 0], np.arctan2(z[:, 1], z[:, 0]), atol=1e-15)
    assert xform.so2_log(np.array([-1.0, 0.0]))[0] == np.pi
    assert xform.so2_log(np.array([-1.0, -0.0]))[0] == -np.pi
    p = rng.normal(size=(len(theta), 2))
    np.testing.assert_allclose(
        xform.so2_rotate(z, p), (so2_matrix(z) @ p[..., None])[..., 0], rtol=1e-14, atol=1e-15
    )
    np.testing.assert_array_equal(xform.so2_to_matrix(z), so2_matrix(z))
    np.testing.assert_array_equal(xform.so2_from_matrix(so2_matrix(z)), z)
    np.testing.assert_array_equal(xform.so2_inverse(z), z * [1.0, -1.0])
    np.testing.assert_allclose(
        np.linalg.norm(xform.so2_normalize(z), axis=-1), 1.0, rtol=0, atol=4.5e-16
    )


# --- parity with jaxlie ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jaxlie():
    jaxlie = pytest.importorskip("jaxlie")
    import jax

    jax.config.update("jax_enable_x64", True)
    return jaxlie


def test_so2_agrees_with_jaxlie(jaxlie, rng):
    theta = angles(rng)
    z = unit_complex(theta) * rng.uniform(0.5, 2.0, (len(theta), 1))  # non-unit too
    z2 = rng.normal(size=z.shape)
    p = rng.normal(size=z.shape)
    a, b = jaxlie.SO2(unit_complex=z), jaxlie.SO2(unit_complex=z2)
    pairs = [
        (xform.so2_exp(theta[:, None]), jaxlie.SO2.exp(theta[:, None]).unit_complex),
        (xform.so2_log(z), a.log()),
        (xform.so2_inverse(z), a.inverse().unit_complex),
        (xform.so2_multiply(z, z2), (a @ b).unit_complex),
        (xform.so2_rotate(z, p), a @ p),
        (xform.so2_to_matrix(z), a.as_matrix()),
        (xform.so2_from_matrix(so2_matrix(z)), jaxlie.SO2.from_matrix(so2_matrix(z)).unit_complex),
        (xform.so2_normalize(z), a.normalize().unit_complex),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-12, atol=1e-12)


def jaxlie_angles(rng, n_random=16):
    """The singular angles where jaxlie is accurate, and random ones with |theta| >= 0.1.
    Below that, jaxlie's SE2 loses digits to cancellation, where ours match the closed
    forms in 50 digits (above): its exp's (1 - cos t)/t errs by up to 3e-9 near t = 1e-8,
    its log's -(h sin t)/(cos t - 1) by 1e-7 near t = 3e-5, and its jlog's
    (I - V^-1^T)/t by 3e-3 near t = 3e-5 and still 3e-12 at t = 0.03."""
    magnitude = rng.uniform(0.1, np.pi, n_random)
    random = magnitude * rng.choice([-1.0, 1.0], n_random)
    return np.concatenate([[0.0, np.pi - 1e-6, -(np.pi - 1e-6), np.pi, -np.pi], random])


def test_se2_agrees_with_jaxlie(jaxlie, rng):
    theta = jaxlie_angles(rng)
    n = len(theta)
    xi = np.concatenate([rng.normal(size=(n, 2)), theta[:, None]], -1)
    t, t2, p = rng.normal(size=(n, 2)), rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    z2 = unit_complex(rng.uniform(-np.pi, np.pi, n))

    def se2(t, z):
        return jaxlie.SE2(unit_complex_xy=np.concatenate([z, t], -1))

    def fields(g):
        return np.asarray(g.translation()), np.asarray(g.rotation().unit_complex)

    for z in (unit_complex(theta), unit_complex(theta) * rng.uniform(0.5, 2.0, (n, 1))):
        a, b = se2(t, z), se2(t2, z2)
        from_matrix = jaxlie.SE2.from_matrix(a.as_matrix())
        pairs = [
            (xform.se2_log(t, z), a.log()),
            (xform.se2_adjoint(t, z), a.adjoint()),
            (xform.se2_to_matrix(t, z), a.as_matrix()),
            (xform.transform_points_2d(t, z, p), a @ p),
            (xform.se2_right_jacobian_inverse(xform.se2_log(t, z)), a.jlog()),
            *zip(xform.pose_multiply_2d(t, z, t2, z2), fields(a @ b)),
            *zip(xform.pose_inverse_2d(t, z), fields(a.inverse())),
            *zip(xform.se2_from_matrix(se2_matrix(t, z)), fields(from_matrix)),
        ]
        for ours, theirs in pairs:
            np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(xform.se2_exp(xi), fields(jaxlie.SE2.exp(xi))):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


# --- identities --------------------------------------------------------------------------------


def twists(rng, theta):
    return np.concatenate([rng.normal(size=(len(theta), 2)), theta[:, None]], -1)


def test_log_of_exp_and_exp_of_log(rng):
    theta = angles(rng)
    inside = np.abs(theta) < np.pi
    xi = twists(rng, theta)
    np.testing.assert_allclose(
        xform.se2_log(*xform.se2_exp(xi))[inside], xi[inside], rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(
        xform.so2_log(xform.so2_exp(theta[:, None]))[inside], theta[inside, None], atol=1e-15
    )
    t, z = rng.normal(size=(len(theta), 2)), unit_complex(theta)
    for got, want in zip(xform.se2_exp(xform.se2_log(t, z)), (t, z)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the logarithms are invariant to the scale of z
    scaled = z * rng.uniform(0.1, 10.0, (len(theta), 1))
    np.testing.assert_allclose(xform.se2_log(t, scaled), xform.se2_log(t, z), atol=1e-14)


def test_group_laws(rng):
    theta = angles(rng)
    t, z = rng.normal(size=(len(theta), 2)), unit_complex(theta)
    identity = (np.zeros(2), np.array([1.0, 0.0]))
    for got, want in zip(xform.pose_multiply_2d(t, z, *xform.pose_inverse_2d(t, z)), identity):
        np.testing.assert_allclose(got, np.broadcast_to(want, got.shape), atol=1e-14)
    p = rng.normal(size=(len(theta), 2))
    homogeneous = (
        xform.se2_to_matrix(t, z) @ np.concatenate([p, np.ones((len(p), 1))], -1)[..., None]
    )
    np.testing.assert_allclose(
        xform.transform_points_2d(t, z, p), homogeneous[:, :2, 0], atol=1e-14
    )
    for got, want in zip(xform.se2_from_matrix(xform.se2_to_matrix(t, z)), (t, z)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(xform.so2_multiply(z, xform.so2_inverse(z))[:, 1], 0.0)
    np.testing.assert_allclose(
        xform.so2_to_matrix(xform.so2_multiply(z, z[::-1])),
        xform.so2_to_matrix(z) @ xform.so2_to_matrix(z[::-1]),
        atol=1e-15,
    )


def test_conjugating_exp_by_a_pose_is_exp_of_the_adjoint(rng):
    """T exp(xi) T^-1 = exp(Ad_T xi)."""
    theta = angles(rng)
    t, z = rng.normal(size=(len(theta), 2)), unit_complex(theta)
    xi = twists(rng, rng.uniform(-np.pi, np.pi, len(theta)))
    conjugated = xform.pose_multiply_2d(
        *xform.pose_multiply_2d(t, z, *xform.se2_exp(xi)), *xform.pose_inverse_2d(t, z)
    )
    moved = xform.se2_exp((xform.se2_adjoint(t, z) @ xi[..., None])[..., 0])
    for got, want in zip(conjugated, moved):
        np.testing.assert_allclose(got, want, atol=1e-13)


def test_jacobian_identities(rng):
    theta = np.concatenate([angles(rng), rng.uniform(-2 * np.pi + 0.1, 2 * np.pi - 0.1, 16)])
    xi = twists(rng, theta)
    left, right = xform.se2_left_jacobian(xi), xform.se2_right_jacobian(xi)
    eye = np.broadcast_to(np.eye(3), left.shape)
    np.testing.assert_allclose(left, xform.se2_adjoint(*xform.se2_exp(xi)) @ right, atol=1e-13)
    np.testing.assert_allclose(right, xform.se2_left_jacobian(-xi), rtol=0, atol=0)
    np.testing.assert_allclose(xform.se2_left_jacobian_inverse(xi) @ left, eye, atol=1e-10)
    np.testing.assert_allclose(xform.se2_right_jacobian_inverse(xi) @ right, eye, atol=1e-10)


def test_jacobians_are_the_derivatives_of_exp_and_log(rng):
    """exp(xi + d) = exp(J_l(xi) d) exp(xi) = exp(xi) exp(J_r(xi) d) to first order, and
    jlog = J_r^-1(log T) is the derivative of log(T exp(d)) at d = 0; by central
    differences of the ops themselves."""
    theta = np.array([a for a in angles(rng) if abs(a) < 3.0])
    xi = twists(rng, theta)
    step = 1e-6
    eye = np.eye(3)
    t, z = rng.normal(size=(len(theta), 2)), unit_complex(theta)
    base_inverse = xform.pose_inverse_2d(*xform.se2_exp(xi))
    left, right, jlog = [], [], []
    for k in range(3):
        d = step * eye[k]
        plus, minus = xform.se2_exp(xi + d), xform.se2_exp(xi - d)
        left.append(
            xform.se2_log(*xform.pose_multiply_2d(*plus, *base_inverse))
            - xform.se2_log(*xform.pose_multiply_2d(*minus, *base_inverse))
        )
        right.append(
            xform.se2_log(*xform.pose_multiply_2d(*base_inverse, *plus))
            - xform.se2_log(*xform.pose_multiply_2d(*base_inverse, *minus))
        )
        jlog.append(
            xform.se2_log(*xform.pose_multiply_2d(t, z, *xform.se2_exp(d)))
            - xform.se2_log(*xform.pose_multiply_2d(t, z, *xform.se2_exp(-d)))
        )
    for columns, expected in (
        (left, xform.se2_left_jacobian(xi)),
        (right, xform.se2_right_jacobian(xi)),
        (jlog, xform.se2_right_jacobian_inverse(xform.se2_log(t, z))),
    ):
        np.testing.assert_allclose(np.stack(columns, -1) / (2 * step), expected, atol=1e-8)


# --- derivatives at the singular angles -------------------------------------------------------


def singular_inputs(name, seed=0):
    rng = np.random.default_rng(seed)
    return inputs(name, np.repeat(np.array(SINGULAR), 2), rng)


def directions(name, args, rng):
    """Random directions; for a logarithm at exactly +-pi, one that keeps z[1]'s sign, so
    that the angle stays on its side of the branch cut."""
    out = [rng.normal(size=a.shape) for a in args]
    for k, operand in enumerate(xform.OPS[name].operands):
        if name in LOGS and operand.name == "unit_complex":
            z = args[k]
            at_cut = (z[:, 0] < 0) & (z[:, 1] == 0)
            out[k][at_cut, 1] = np.copysign(
                np.abs(out[k][at_cut, 1]), np.copysign(1.0, z[at_cut, 1])
            )
    return out


def difference(name, args, d, step):
    """Central differences; at a logarithm's branch cut, the one-sided second-order
    difference (-3 f(0) + 4 f(h) - f(2h)) / 2h along d, which stays on one side."""
    fn = getattr(xform, name)

    def at(s):
        return as_tuple(fn(*[a + s * v for a, v in zip(args, d)]))

    central = [(p - m) / (2 * step) for p, m in zip(at(step), at(-step))]
    if name not in LOGS:
        return central
    z = args[[o.name for o in xform.OPS[name].operands].index("unit_complex")]
    at_cut = (z[:, 0] < 0) & (z[:, 1] == 0)
    one_sided = [
        (-3 * f0 + 4 * f1 - f2) / (2 * step) for f0, f1, f2 in zip(at(0.0), at(step), at(2 * step))
    ]
    return [np.where(at_cut[:, None], o, c) for o, c in zip(one_sided, central)]


@pytest.mark.parametrize("name", ANGLE_OPS)
def test_derivatives_at_singular_angles(name, rng):
    """The closed-form tangent against differences (step 1e-9, below the distance to the
    branch cut at pi - 1e-6) and against the derived tangent; the closed-form VJP against
    the derived VJP and, through <g, J d> = <J^T g, d>, against the tangent."""
    args = singular_inputs(name)
    d = directions(name, args, rng)
    closed, derived = variant(name, "closed"), variant(name, "derived")
    tangent = as_tuple(xform.jvp(closed, args, d))
    for got, expected, other in zip(
        tangent, difference(name, args, d, 1e-9), as_tuple(xform.jvp(derived, args, d))
    ):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, other, rtol=1e-12, atol=1e-12)
    g = tuple(rng.normal(size=r.shape) for r in tangent)
    grads = xform.vjp(closed, args, g)
    for got, other in zip(grads, xform.vjp(derived, args, g)):
        np.testing.assert_allclose(got, other, rtol=1e-12, atol=1e-12)
    forward = sum((a * b).sum(axis=tuple(range(1, a.ndim))) for a, b in zip(g, tangent))
    reverse = sum((a * b).sum(axis=tuple(range(1, a.ndim))) for a, b in zip(grads, d))
    np.testing.assert_allclose(forward, reverse, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ANGLE_OPS)
def test_singular_angles_in_float32(name, rng):
    args = [a.astype(np.float32) for a in singular_inputs(name)]
    args64 = [a.astype(np.float64) for a in args]  # the same values, float32's roundings
    for got, want in zip(as_tuple(getattr(xform, name)(*args)), reference(name, args64)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=4e-6)
    g = tuple(np.ones(r.shape, np.float32) for r in as_tuple(getattr(xform, name)(*args)))
    closed = xform.vjp(name, args, g)
    derived = xform.vjp(variant(name, "derived"), args, g)
    exact = xform.vjp(name, args64, tuple(x.astype(np.float64) for x in g))
    for a, b, c in zip(closed, derived, exact):
        assert a.dtype == np.float32 and np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-6 * max(1.0, np.abs(c).max()))
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(c).max()))


def test_analytic_limits_at_exactly_zero(rng):
    """At the identity: d exp(xi) = ([dvx, dvy], [0, d theta]), d log(t, z) = [dt, dz_1],
    and the Jacobians' tangents are +-ad(d)/2 (J_l = I + ad/2 + ..., J_l^-1 = I - ad/2 +
    ..., J_r(xi) = J_l(-xi)), exactly."""
    d = rng.normal(size=(1, 3))
    zero = np.zeros((1, 3))
    ad = np.array([[[0.0, -d[0, 2], d[0, 1]], [d[0, 2], 0.0, -d[0, 0]], [0.0, 0.0, 0.0]]])
    position, z = xform.jvp("se2_exp", [zero], [d])
    np.testing.assert_array_equal(position, d[:, :2])
    np.testing.assert_array_equal(z, [[0.0, d[0, 2]]])
    for name, sign in (
        ("se2_left_jacobian", 0.5),
        ("se2_left_jacobian_inverse", -0.5),
        ("se2_right_jacobian", -0.5),
        ("se2_right_jacobian_inverse", 0.5),
    ):
        np.testing.assert_allclose(xform.jvp(name, [zero], [d]), sign * ad, rtol=0, atol=1e-17)
    dt, dz = rng.normal(size=(1, 2)), rng.normal(size=(1, 2))
    one = np.array([[1.0, 0.0]])
    np.testing.assert_array_equal(
        xform.jvp("se2_log", [np.zeros((1, 2)), one], [dt, dz]), [[dt[0, 0], dt[0, 1], dz[0, 1]]]
    )
    np.testing.assert_array_equal(xform.jvp("so2_log", [one], [dz]), dz[:, 1:])


# --- frameworks, broadcasting, empty batches ---------------------------------------------------

FRAMEWORK_CASES = ["se2_exp", "se2_log", "se2_left_jacobian_inverse", "so2_log", "pose_inverse_2d"]


def near_singular_inputs(name):
    """The singular angles, but at exactly +-pi for a logarithm a step inside, since
    finite differences there would cross the branch cut."""
    theta = np.array([0.0, 1e-8, 1e-4, np.pi - 1e-3, np.pi, -np.pi])
    if name in LOGS:
        theta[np.abs(theta) == np.pi] *= 1 - 1e-4
    return inputs(name, theta, np.random.default_rng(3))


@pytest.mark.parametrize("name", FRAMEWORK_CASES)
def test_torch_gradcheck_near_singular_angles(name):
    torch = pytest.importorskip("torch")
    import xform.backends.torch as xt

    args = [torch.from_numpy(a).requires_grad_() for a in near_singular_inputs(name)]
    assert torch.autograd.gradcheck(getattr(xt, name), args, check_forward_ad=True)


@pytest.mark.parametrize("name", FRAMEWORK_CASES)
def test_jax_check_grads_near_singular_angles(name):
    pytest.importorskip("jax")
    import jax

    jax.config.update("jax_enable_x64", True)
    from helpers import check_grads

    import xform.backends.jax as xj

    check_grads(getattr(xj, name), tuple(near_singular_inputs(name)))


def test_broadcasting_poses_against_points(rng):
    """(3, 1) poses against (1, 4) points: a (3, 4) batch, the same as a loop, with each
    pose's gradient the sum over its points."""
    t, z, p = rng.normal(size=(3, 1, 2)), rng.normal(size=(3, 1, 2)), rng.normal(size=(1, 4, 2))
    out = xform.transform_points_2d(t, z, p)
    assert out.shape == (3, 4, 2)
    for i in range(3):
        for j in range(4):
            np.testing.assert_allclose(
                out[i, j], xform.transform_points_2d(t[i, 0], z[i, 0], p[0, j]), rtol=1e-15
            )
    g = rng.normal(size=out.shape)
    t_bar, z_bar, p_bar = xform.vjp("transform_points_2d", [t, z, p], g)
    assert t_bar.shape == t.shape and z_bar.shape == z.shape and p_bar.shape == p.shape
    np.testing.assert_allclose(t_bar, g.sum(1, keepdims=True), rtol=1e-14)
    conj_p = np.broadcast_to(p * [1.0, -1.0], g.shape)  # z_bar = sum g conj(p)
    expected = np.stack(
        [
            g[..., 0] * conj_p[..., 0] - g[..., 1] * conj_p[..., 1],
            g[..., 0] * conj_p[..., 1] + g[..., 1] * conj_p[..., 0],
        ],
        -1,
    ).sum(1, keepdims=True)
    np.testing.assert_allclose(z_bar, expected, rtol=1e-13)


def test_empty_batches_in_torch_and_jax(rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("jax")
    import jax

    jax.config.update("jax_enable_x64", True)
    import xform.backends.jax as xj
    import xform.backends.torch as xt

    t, z = torch.zeros((0, 2), requires_grad=True), torch.zeros((0, 2), requires_grad=True)
    xi = xt.se2_log(t, z)
    assert xi.shape == (0, 3)
    xi.sum().backward()
    assert t.grad.shape == (0, 2) and z.grad.shape == (0, 2)
    grad = jax.grad(lambda x: xj.se2_exp(x)[0].sum())(np.zeros((2, 0, 3)))
    assert grad.shape == (2, 0, 3)
