"""Second derivatives (SPEC, "Second-order derivatives"): every built-in op, float64, at
random points and at the singular angles, through PyTorch (`gradgradcheck`, and
`torch.func.hessian` against central differences of the gradient) and JAX
(`check_grads(order=2)` in both modes, `jax.hessian` under `jit` and `vmap`); user ops
with closed forms are differentiable twice, those without raise, as do third derivatives.

Each op is checked on one batch holding all its points at once (its kernels are
elementwise, so the Hessian is block diagonal): the rotation angles 0, 1e-8, 1e-4 and
pi - 1e-6 about random axes, each with q and -q, and random points. Where an op is not
differentiable at an angle (a distance at 0, which is |theta|), that angle is left out.
The differences step 1e-8 at the singular points: near pi, w is 5e-7 and a step of 1e-6
would cross w = 0, where the sign of w picks the branch of the logarithm.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import warp as wp
from helpers import as_tuple, hessian_by_differences
from reference import random_args, random_rotations, rotvec_quaternion

import xform
from xform import _second_order
from xform._op import Product
from xform.ops.euler import COMPOSITES as EULER
from xform.ops.quaternion import quat_matrix_vjp, quat_to_matrix, quat_to_matrix_tangent

torch = pytest.importorskip("torch")
xt = pytest.importorskip("xform.backends.torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

xj = pytest.importorskip("xform.backends.jax")

ANGLES = (0.0, 1e-8, 1e-4, math.pi - 1e-6)
# A few of the 96 Euler ops (their closed forms are three generic functions): both
# directions, quaternions and matrices, extrinsic and intrinsic, Tait-Bryan (a symmetric
# sequence is in gimbal lock at the identity, where it is not differentiable).
EULER_SAMPLE = [
    EULER["euler_to_quaternion"].run(lambda op, x: op, None, "xyz"),
    EULER["quaternion_to_euler"].run(lambda op, x: op, None, "ZYX"),
    EULER["euler_to_matrix"].run(lambda op, x: op, None, "zxz"),
    EULER["matrix_to_euler"].run(lambda op, x: op, None, "yzx"),
]
OPS = [op for op in xform.OPS.values() if op.differentiable] + EULER_SAMPLE
# Angles where an op is not differentiable: left out of its singular points.
KINKS = {
    "rotation_angle": (0.0, 1e-8),
    "quaternion_geodesic_distance": (0.0, 1e-8),
    # its gradient is set to zero at 0 and pi, where the angle is |.|-like
    "matrix_geodesic_distance": (0.0, 1e-8, math.pi - 1e-6),
}
# Ops whose arguments carry no rotation angle: random points only.
NO_ANGLE = {
    "so3_hat", "so3_vee", "se3_hat", "se3_vee", "rotation_6d_to_matrix",
    "special_procrustes", "similarity_of_moments", "rigid_pose_of_moment",
    "rigid_registration_sums", "rigid_registration_weighted_sums",
    "rigid_registration_moments", "rigid_registration_weighted_moments",
    EULER_SAMPLE[0].name, EULER_SAMPLE[2].name,
}  # fmt: skip


def ids(ops):
    return [op.name for op in ops]


def _unit_quaternions(rng, angles, signs) -> np.ndarray:
    axis = rng.normal(size=(len(angles), 3))
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)
    return signs[:, None] * rotvec_quaternion(np.asarray(angles)[:, None] * axis)


def _hamilton(a, b):
    return xform.quaternion_multiply(a, b)


def random_points(op: xform.Op, rng, count: int = 2) -> list[np.ndarray]:
    """Random arguments, as the first-order tests draw them (any quaternion, rotation
    matrices where an op reads one), with `count` elements each."""
    if op.name in xform.OPS:
        leading = [() if o.single else (count,) for o in op.operands]
        if op.operands[-1].batch[-1:] == ("N",):
            leading = [(count, 5) if "N" in o.batch else (count,) for o in op.operands]
        args = random_args(op.name, leading, rng)
        # Sums and variances away from 0, where the registration's pose divides by them.
        return [
            np.abs(a) + 1.0 if o.name in ("total", "variance") else a
            for o, a in zip(op.operands, args)
        ]
    element = op.operands[0].element
    if element == (3, 3):
        return [random_rotations(rng, (count,))]
    return [rng.normal(size=(count, *element))]


def singular_points(op: xform.Op, rng) -> list[np.ndarray] | None:
    """One batch of the op's arguments at every angle of ANGLES it is differentiable at,
    with q and -q: each quaternion (or rotation vector, matrix, twist) argument is at that
    angle from the one before it (the first from the identity), the others random."""
    if op.name in NO_ANGLE:
        return None
    angles = [a for a in ANGLES if a not in KINKS.get(op.name, ())]
    angles = np.repeat(angles, 2)
    signs = np.tile([1.0, -1.0], len(angles) // 2)
    count = len(angles)
    base = random_points(op, rng, count)
    if op.operands[0].single:  # transform_points: one pose; its points carry the batch
        return None
    if _planar(op):
        return _planar_singular_points(op, rng, signs * angles, base)
    previous = None
    args = []
    for o, x in zip(op.operands, base):
        rotation = o.element in ((4,), (3, 3), (4, 4)) and o.name not in ("quaternion_rate",)
        if o.name in ("omega", "axis_angle"):
            axis = rng.normal(size=(count, 3))
            x = angles[:, None] * axis / np.linalg.norm(axis, axis=-1, keepdims=True)
        elif o.name == "xi":
            axis = rng.normal(size=(count, 3))
            x = x.copy()
            x[:, 3:6] = angles[:, None] * axis / np.linalg.norm(axis, axis=-1, keepdims=True)
            if o.element == (7,):  # Sim(3): no scale change (sigma = 0) at every other point
                x[::2, 6] = 0.0
        elif rotation:
            q = _unit_quaternions(rng, angles, signs)
            if previous is not None:
                q = signs[:, None] * _hamilton(previous, q)
            previous = q
            if o.element == (3, 3):
                x = xform.quaternion_to_matrix(q)
            elif o.element == (4, 4):
                x = xform.pose_to_matrix(rng.normal(size=(count, 3)), q)
            else:
                x = q
        args.append(np.ascontiguousarray(x))
    return args


def _planar(op: xform.Op) -> bool:
    return op.name.startswith(("so2_", "se2_")) or op.name.endswith("_2d")


def _planar_singular_points(op: xform.Op, rng, thetas, base) -> list[np.ndarray]:
    """The 2D ops' arguments at the angles `thetas` (their signs for q and -q): a unit
    complex number at that angle from the one before it, an angle, a twist or a matrix."""
    count = len(thetas)
    total = np.zeros(count)
    args = []
    for o, x in zip(op.operands, base):
        if o.name == "theta":
            x = thetas[:, None]
        elif o.name == "xi":
            x = x.copy()
            x[:, 2] = thetas
        elif o.name.startswith("unit_complex"):
            total = total + thetas
            x = np.stack([np.cos(total), np.sin(total)], -1)
        elif o.name == "matrix":
            c, s = np.cos(thetas), np.sin(thetas)
            rotation = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)
            if o.element == (3, 3):
                x = np.zeros((count, 3, 3))
                x[:, :2, :2] = rotation
                x[:, :2, 2] = rng.normal(size=(count, 2))
                x[:, 2, 2] = 1.0
            else:
                x = rotation
        args.append(np.ascontiguousarray(x))
    return args


def points(op: xform.Op, rng) -> list[tuple[str, list[np.ndarray], float]]:
    """(what, arguments, difference step) to check the op at."""
    cases = [("random", random_points(op, rng), 1e-6)]
    singular = singular_points(op, rng)
    if singular is not None:
        cases.append(("singular", singular, 1e-8))
    return cases


# --- PyTorch ------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS, ids=ids(OPS))
def test_torch_gradgradcheck(op, rng):
    fn = xt.function(op)
    for what, args, step in points(op, rng):
        tensors = [torch.tensor(a, requires_grad=True) for a in args]
        assert torch.autograd.gradgradcheck(fn, tensors, eps=step, atol=1e-6, rtol=1e-5), what


def _loss(weights, results):
    """A scalar of the results: linear (fixed random weights) and quadratic, so that the
    gradient's own cotangent varies with the arguments too."""
    return sum((w * r).sum() + 0.5 * (r * r).sum() for w, r in zip(weights, results))


def _scalar_of(op, args):
    """A scalar function of all the arguments flattened into one vector (`_loss` of the
    results), and the vector."""
    shapes = [a.shape for a in args]
    sizes = [a.size for a in args]
    weights = [torch.tensor(np.random.default_rng(7).normal(size=r.shape)) for r in
               as_tuple(op(*args))]  # fmt: skip
    fn = xt.function(op)

    def scalar(z):
        parts = torch.split(z, sizes)
        return _loss(weights, as_tuple(fn(*[p.reshape(s) for p, s in zip(parts, shapes)])))

    return scalar, torch.tensor(np.concatenate([a.ravel() for a in args]))


@pytest.mark.parametrize("op", OPS, ids=ids(OPS))
def test_torch_hessian_is_the_difference_of_gradients(op, rng):
    for what, args, step in points(op, rng):
        scalar, z = _scalar_of(op, args)
        hessian = torch.func.hessian(scalar)(z)

        def gradient(z, scalar=scalar):
            z = z.clone().requires_grad_(True)
            return torch.autograd.grad(scalar(z), z)[0]

        differences = torch.from_numpy(
            hessian_by_differences(lambda z: gradient(torch.from_numpy(z)).numpy(), z.numpy(), step)
        )
        scale = max(1.0, float(hessian.abs().max()))
        error = float((hessian - differences).abs().max()) / scale
        assert error < 1e-5, f"{what}: relative error {error:.2e}"
        assert torch.allclose(hessian, hessian.T, atol=1e-9 * scale), what


# --- JAX ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS, ids=ids(OPS))
def test_jax_check_grads_order_two(op, rng):
    fn = xj.function(op)
    for what, args, step in points(op, rng):
        jargs = [jnp.asarray(a) for a in args]
        try:
            check_grads(fn, jargs, order=2, modes=("fwd", "rev"), eps=step, atol=1e-5, rtol=1e-5)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from None


HESSIAN_OPS = [xform.OPS[n] for n in ("transform_points", "pose_multiply", "se3_log", "so3_exp")]


@pytest.mark.parametrize("op", HESSIAN_OPS, ids=ids(HESSIAN_OPS))
def test_jax_hessian_under_jit_and_vmap(op, rng):
    args = [jnp.asarray(a) for a in random_points(op, rng, 3)]
    fn = xj.function(op)
    weights = [jnp.asarray(rng.normal(size=r.shape)) for r in as_tuple(fn(*args))]

    def scalar(x, *rest):
        return _loss(weights, as_tuple(fn(x, *rest)))

    expected = jax.jacrev(jax.jacrev(scalar))(*args)  # reverse over reverse
    got = jax.jit(jax.hessian(scalar))(*args)  # forward over reverse, compiled
    np.testing.assert_allclose(got, expected, atol=1e-10, rtol=1e-10)
    if op.operands[0].single:  # one pose: nothing to map over in its first argument
        return

    def element_scalar(x, w, *rest):
        return _loss(w, as_tuple(fn(x, *rest)))

    # Mapped over the batch, each element's Hessian: the diagonal blocks of the whole's.
    mapped = jax.vmap(jax.jit(jax.hessian(element_scalar)))(args[0], weights, *args[1:])
    size = math.prod(op.operands[0].element)
    blocks = np.asarray(expected).reshape(3, size, 3, size)
    for k in range(3):
        np.testing.assert_allclose(
            np.asarray(mapped[k]).reshape(size, size), blocks[k, :, k, :], atol=1e-10, rtol=1e-10
        )


# --- user ops, and what raises ----------------------------------------------------------------


@wp.func
def scaled_rotate(q: Any, v: Any, s: Any):
    return s * (wp.transpose(quat_to_matrix(q)) @ v)


@wp.func
def scaled_rotate_tangent(q: Any, v: Any, s: Any, dq: Any, dv: Any, ds: Any):
    rt = wp.transpose(quat_to_matrix(q))
    d_rt = wp.transpose(quat_to_matrix_tangent(q, dq))
    return ds * (rt @ v) + s * (d_rt @ v + rt @ dv)


@wp.func
def scaled_rotate_vjp(q: Any, v: Any, s: Any, g: Any):
    r = quat_to_matrix(q)
    rt_v = wp.transpose(r) @ v
    # <g, s R^T v> = s <R, v g^T>: the matrix's cotangent is s v g^T
    q_bar = quat_matrix_vjp(q, s * wp.outer(v, g))
    return q_bar, s * (r @ g), wp.dot(g, rt_v)


CLOSED = xform.define_op(
    "second_order_scaled_rotate",
    scaled_rotate,
    {"quaternion": (4,), "vector": (3,), "scale": ()},
    {"out": (3,)},
    tangent=scaled_rotate_tangent,
    vjp=scaled_rotate_vjp,
)
DERIVED = xform.define_op(
    "second_order_scaled_rotate_derived",
    scaled_rotate,
    {"quaternion": (4,), "vector": (3,), "scale": ()},
    {"out": (3,)},
)


def _user_args(rng, count=3):
    return [rng.normal(size=(count, 4)), rng.normal(size=(count, 3)), rng.normal(size=(count,))]


def test_a_user_op_with_closed_forms_is_differentiable_twice(rng):
    args = [torch.tensor(a, requires_grad=True) for a in _user_args(rng)]
    assert torch.autograd.gradgradcheck(xt.function(CLOSED), args, atol=1e-6, rtol=1e-5)
    check_grads(xj.function(CLOSED), [jnp.asarray(a) for a in _user_args(rng)], order=2,
                modes=("fwd", "rev"), eps=1e-6, atol=1e-6, rtol=1e-6)  # fmt: skip


def test_one_closed_form_is_enough(rng):
    """A VJP alone (its tangent is the VJP transposed) or a tangent alone."""
    for keep in ("tangent", "vjp"):
        op = xform.define_op(
            f"second_order_only_{keep}",
            scaled_rotate,
            {"quaternion": (4,), "vector": (3,), "scale": ()},
            {"out": (3,)},
            **{keep: scaled_rotate_tangent if keep == "tangent" else scaled_rotate_vjp},
        )
        args = [torch.tensor(a, requires_grad=True) for a in _user_args(rng)]
        assert torch.autograd.gradgradcheck(xt.function(op), args, atol=1e-6, rtol=1e-5)


def _second_derivatives(op, rng):
    """Every way to differentiate one op twice, each a thunk."""
    args = _user_args(rng)
    t = [torch.tensor(a, requires_grad=True) for a in args]
    j = [jnp.asarray(a) for a in args]
    torch_fn, jax_fn = xt.function(op), xj.function(op)

    def torch_double_backward():
        (g,) = torch.autograd.grad(torch_fn(*t).pow(2).sum(), t[0], create_graph=True)
        torch.autograd.grad(g.pow(2).sum(), t[0])

    def torch_hessian():
        torch.func.hessian(lambda q: torch_fn(q, *t[1:]).pow(2).sum())(t[0].detach())

    def torch_forward_over_forward():
        f = torch.func.jacfwd(lambda q: torch_fn(q, *t[1:]).pow(2).sum())
        torch.func.jacfwd(f)(t[0].detach())

    def jax_hessian():
        jax.hessian(lambda q: (jax_fn(q, *j[1:]) ** 2).sum())(j[0])

    def jax_reverse_over_reverse():
        jax.jacrev(jax.grad(lambda q: (jax_fn(q, *j[1:]) ** 2).sum()))(j[0])

    def jax_forward_over_forward():
        jax.jacfwd(jax.jacfwd(lambda q: (jax_fn(q, *j[1:]) ** 2).sum()))(j[0])

    return [torch_double_backward, torch_hessian, torch_forward_over_forward, jax_hessian,
            jax_reverse_over_reverse, jax_forward_over_forward]  # fmt: skip


def test_a_user_op_without_closed_forms_raises_naming_what_to_supply(rng):
    for second in _second_derivatives(DERIVED, rng):
        with pytest.raises(xform.HigherDerivativeError) as info:
            second()
        message = str(info.value)
        assert DERIVED.name in message and "tangent=" in message and "vjp=" in message, message


def test_third_derivatives_raise(rng):
    q = torch.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    (g,) = torch.autograd.grad(xt.quaternion_to_matrix(q).pow(3).sum(), q, create_graph=True)
    (h,) = torch.autograd.grad(g.pow(2).sum(), q, create_graph=True)
    with pytest.raises(xform.HigherDerivativeError, match="quaternion_to_matrix: third"):
        torch.autograd.grad(h.sum(), q)
    f = lambda q: (xj.quaternion_to_matrix(q) ** 3).sum()  # noqa: E731
    with pytest.raises(xform.HigherDerivativeError, match="quaternion_to_matrix: third"):
        jax.jacfwd(jax.hessian(f))(jnp.asarray(q.detach().numpy()))


def test_second_derivatives_of_a_broadcast_pose_sum_over_its_points(rng):
    """The VJP op's results are shaped like the operands: the pose's Hessian blocks sum
    over the points that share it (against the same pose given once per point)."""
    t, q, p = rng.normal(size=(3,)), rng.normal(size=(4,)), rng.normal(size=(6, 3))
    w = rng.normal(size=(6, 3))

    identity = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)

    def scalar(t, q, p):
        return (torch.tensor(w) * xt.pose_multiply(t, q, p, identity)[0]).sum()

    args = [torch.tensor(a) for a in (t, q, p)]
    shared = torch.func.hessian(scalar, argnums=(0, 1))(*args)
    each = torch.func.hessian(
        lambda t, q, p: scalar(t.expand(6, 3), q.expand(6, 4), p), argnums=(0, 1)
    )(*args)
    for a, b in zip(shared, each):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, atol=1e-12, rtol=1e-12)


def test_product_ops_are_ops(rng):
    """The VJP op of an op computes its VJP; the tangent op its tangent (NumPy path)."""
    op = xform.OPS["transform_points"]
    args = [rng.normal(size=(3,)), rng.normal(size=(1, 4)), rng.normal(size=(5, 3))]
    g = rng.normal(size=(5, 3))
    vjp_op, tangent_op = (_second_order.product_op(op, p) for p in (Product.VJP, Product.TANGENT))
    for got, want in zip(vjp_op(*args, g), xform.vjp(op, args, g)):
        np.testing.assert_allclose(got, want, atol=1e-13, rtol=0)
    dx = [rng.normal(size=a.shape) for a in args]
    np.testing.assert_allclose(tangent_op(*args, *dx), xform.jvp(op, args, dx), atol=1e-13, rtol=0)


# --- through the groups ---------------------------------------------------------------------


def _twist_and_points(rng):
    xi = rng.normal(size=6)
    xi[3:] *= 1e-9  # its rotation near the identity, where the coefficients are 0/0
    return xi, rng.normal(size=(20, 3)), rng.normal(size=(20, 3))


@pytest.mark.parametrize("twist", ["random", "near identity"])
def test_hessian_through_the_groups(twist, rng):
    """jax.hessian and torch.func.hessian of a loss through `SE3.exp(xi) @ points`: equal
    to each other and to differences of the gradient, at a random twist and at one whose
    rotation is 1e-9."""
    xi, points, targets = _twist_and_points(rng)
    if twist == "random":
        xi[3:] *= 1e9

    def jax_loss(xi):
        return jnp.square(xform.SE3.exp(xi) @ jnp.asarray(points) - targets).sum()

    def torch_loss(xi):
        moved = xform.SE3.exp(xi) @ torch.from_numpy(points)
        return (moved - torch.from_numpy(targets)).square().sum()

    jax_hessian = np.asarray(jax.jit(jax.hessian(jax_loss))(jnp.asarray(xi)))
    torch_hessian = torch.func.hessian(torch_loss)(torch.from_numpy(xi)).numpy()
    differences = hessian_by_differences(jax.grad(jax_loss), xi)
    scale = max(1.0, np.abs(differences).max())
    np.testing.assert_allclose(jax_hessian / scale, differences / scale, atol=1e-6)
    np.testing.assert_allclose(torch_hessian, jax_hessian, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(jax_hessian, jax_hessian.T, atol=1e-10 * scale)
