"""Every VJP, with the op's closed forms and as derived from its element function alone,
against central finite differences of the forward op, in float64, on fresh random inputs,
broadcast pose arguments included: the sums over broadcast dimensions must be right.
Every VJP is also, exactly, the transpose of the tangent kernel."""

import numpy as np
import pytest
from helpers import VARIANTS, as_tuple, difference_tolerance, finite_difference_vjp, variant
from reference import leading_cases, op_cases, random_args

import xform

DIFFERENTIABLE = [name for name, op in xform.OPS.items() if op.differentiable]


@pytest.mark.parametrize("which", VARIANTS)
@pytest.mark.parametrize(**op_cases(DIFFERENTIABLE))
def test_vjp_matches_finite_differences(name, leadings, which, rng):
    args = random_args(name, leadings, rng)
    results = as_tuple(getattr(xform, name)(*args))
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    grads = xform.vjp(variant(name, which), args, cotangents)
    assert len(grads) == len(args)
    for k, (arg, grad) in enumerate(zip(args, grads)):
        assert grad.shape == arg.shape and grad.dtype == arg.dtype
        expected = finite_difference_vjp(name, args, cotangents, k)
        if expected.size == 0:
            continue
        error = np.linalg.norm(grad - expected)
        tolerance = difference_tolerance(expected, cotangents, results)
        assert error <= tolerance, (
            f"gradient of {xform.OPS[name].operands[k].name}: {error:.3g} off, beyond "
            f"{tolerance:.3g} (norm {np.linalg.norm(expected):.3g})"
        )


@pytest.mark.parametrize("name", ["pose_multiply", "pose_inverse", "get_inv_transform"])
def test_missing_cotangent_counts_as_zero(name, rng):
    leadings = leading_cases(name)[2]
    args = random_args(name, leadings, rng)
    results = as_tuple(getattr(xform, name)(*args))
    first = rng.normal(size=results[0].shape)
    with_zero = xform.vjp(name, args, (first, np.zeros_like(results[1])))
    with_none = xform.vjp(name, args, (first, None))
    for a, b in zip(with_zero, with_none):
        np.testing.assert_array_equal(a, b)


def test_float32_vjp_agrees_with_float64(rng):
    args = random_args("pose_multiply", [(5,), (5,), (1,), (5,)], rng)
    cotangents = (rng.normal(size=(5, 3)), rng.normal(size=(5, 4)))
    exact = xform.vjp("pose_multiply", args, cotangents)
    single = xform.vjp(
        "pose_multiply",
        [a.astype(np.float32) for a in args],
        tuple(c.astype(np.float32) for c in cotangents),
    )
    for a, b in zip(exact, single):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())


def test_broadcast_pose_gradient_is_the_sum_over_points(rng):
    """One pose over many points: its gradient sums every point's contribution, and
    equals the gradient of the same pose repeated per point, summed."""
    t, q, p = rng.normal(size=(1, 3)), rng.normal(size=(1, 4)), rng.normal(size=(1, 1000, 3))
    g = rng.normal(size=(1, 1000, 3))
    shared = xform.vjp("batch_transform_points", (t, q, p), g)
    repeated = xform.vjp(
        "batch_transform_points",
        (np.repeat(t, 1000, 0), np.repeat(q, 1000, 0), p.reshape(1000, 1, 3)),
        g.reshape(1000, 1, 3),
    )
    for k in (0, 1):  # sums in another order: rounding scales with the summands' size
        scale = np.abs(repeated[k]).sum(0).max()
        np.testing.assert_allclose(
            shared[k], repeated[k].sum(0, keepdims=True), rtol=1e-12, atol=1e-13 * scale
        )
    np.testing.assert_allclose(shared[2], repeated[2].reshape(1, 1000, 3), rtol=1e-12)


def test_non_differentiable_op_has_no_vjp(rng):
    m = random_args("cuda_matrix_to_quaternion", [(2,)], rng)[0]
    with pytest.raises(TypeError, match="cuda_matrix_to_quaternion is not differentiable"):
        xform.vjp("cuda_matrix_to_quaternion", (m,), np.ones((2, 4)))


@pytest.mark.parametrize(
    ("name", "leadings"),
    [
        ("transform_points", [(1,), (1,), (50_000,)]),  # one pose over every point
        ("batch_transform_points", [(200,), (1,), (200, 250)]),  # shared quaternion
        ("batch_transform_points", [(1,), (200,), (1, 250)]),  # shared position and points
        ("pose_multiply", [(40_000,), (40_000,), (1,), (40_000,)]),
    ],
)
def test_parallel_adjoint_equals_the_serial_one(name, leadings, rng, monkeypatch):
    """Large CPU adjoints run in chunks on several threads, broadcast operands summing
    per-chunk partials; the result must be the serial adjoint's, up to summation order."""
    from xform import _launch

    args = random_args(name, leadings, rng)
    cotangents = tuple(rng.normal(size=r.shape) for r in as_tuple(getattr(xform, name)(*args)))
    monkeypatch.setattr(_launch.threads, "THREADS", 2)
    parallel = xform.vjp(name, args, cotangents)
    monkeypatch.setattr(_launch.threads, "THREADS", 1)
    serial = xform.vjp(name, args, cotangents)
    for p, s in zip(parallel, serial):
        np.testing.assert_allclose(p, s, rtol=1e-11, atol=1e-11 * np.abs(s).max())


@pytest.mark.parametrize("which", VARIANTS)
@pytest.mark.parametrize(**op_cases(DIFFERENTIABLE))
def test_vjp_is_the_transpose_of_the_tangent_kernel(name, leadings, which, rng):
    """Column by column: the k-th entry of J^T g is <g, J e_k>, from the tangent kernel
    (separate code, itself checked against finite differences) along each unit input.
    Gradients of dense operands are stored, not added, into arrays that are never
    zeroed: here they start as NaN, so an element left unwritten would show, and an
    operand wrongly taken as dense would lose the sum over its broadcast."""
    from xform import _launch

    args = random_args(name, leadings, rng)
    cotangents = tuple(rng.normal(size=r.shape) for r in as_tuple(getattr(xform, name)(*args)))

    def filled(value):
        def allocate(shape, scalar, device):
            array = np.full(shape, value)
            return array, array.ctypes.data

        return allocate

    op = variant(name, which)
    operands = _launch.buffers.prepare(op, args)
    grads = _launch.products.vjp(operands, cotangents, filled(0.0), allocate=filled(np.nan))
    for k, (arg, grad) in enumerate(zip(args, grads)):
        expected = np.zeros_like(arg)
        for index in np.ndindex(arg.shape):
            tangents = [np.zeros_like(a) for a in args]
            tangents[k][index] = 1.0
            column = as_tuple(xform.jvp(op, args, tangents))
            expected[index] = sum(float((g * c).sum()) for g, c in zip(cotangents, column))
        np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "leadings"),
    [
        ("transform_points", [(1,), (1,), (1000,)]),
        ("batch_transform_points", [(3,), (1,), (3, 77)]),
        ("batch_transform_points_inverse", [(1,), (5,), (1, 40)]),
    ],
)
def test_strided_runs_give_the_same_gradients(name, leadings, rng, monkeypatch):
    """On a GPU, a VJP that adds into a shared gradient gives each thread every step-th
    index (SHARED_ADD sums the lanes that share an element before adding). The same
    kernels run that way here, on CPU, must give the same gradients."""
    from xform import _launch

    args = random_args(name, leadings, rng)
    cotangent = rng.normal(size=getattr(xform, name)(*args).shape)
    expected = xform.vjp(name, args, cotangent)

    def strided(op, kind, device, tile):
        return (3, -(-tile.count // 3)) if kind == "vjp" else (1, 1)

    monkeypatch.setattr(_launch.kernels, "run_shape", strided)
    monkeypatch.setattr(_launch.kernels, "_local", type(_launch.kernels._local)())  # none kept
    for got, want in zip(xform.vjp(name, args, cotangent), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
