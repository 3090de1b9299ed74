"""Every tangent (JVP) kernel, with the op's closed forms and as derived from its element
function alone, against central finite differences along a random direction, in float64,
and against the VJP through the adjoint identity <g, J v> = <J^T g, v>; the derived
products against the closed forms."""

import numpy as np
import pytest
from helpers import VARIANTS, as_tuple, variant
from reference import op_cases, random_args

import xform

DIFFERENTIABLE = [name for name, op in xform.OPS.items() if op.differentiable]
STEP = 1e-6


@pytest.mark.parametrize("which", VARIANTS)
@pytest.mark.parametrize(**op_cases(DIFFERENTIABLE))
def test_jvp_matches_finite_differences(name, leadings, which, rng):
    args = random_args(name, leadings, rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    fn = getattr(xform, name)
    got = as_tuple(xform.jvp(variant(name, which), args, tangents))
    plus = as_tuple(fn(*[a + STEP * t for a, t in zip(args, tangents)]))
    minus = as_tuple(fn(*[a - STEP * t for a, t in zip(args, tangents)]))
    for g, p, m in zip(got, plus, minus):
        expected = (p - m) / (2 * STEP)
        assert g.shape == expected.shape
        if expected.size:
            assert np.linalg.norm(g - expected) <= 1e-6 * np.linalg.norm(expected)


@pytest.mark.parametrize(**op_cases(DIFFERENTIABLE))
def test_jvp_is_the_transpose_of_vjp(name, leadings, rng):
    args = random_args(name, leadings, rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    results = as_tuple(getattr(xform, name)(*args))
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    forward = sum(
        float((g * d).sum()) for g, d in zip(cotangents, as_tuple(xform.jvp(name, args, tangents)))
    )
    reverse = sum(float((g * t).sum()) for g, t in zip(xform.vjp(name, args, cotangents), tangents))
    assert forward == pytest.approx(reverse, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(**op_cases(DIFFERENTIABLE))
def test_derived_products_equal_the_closed_forms(name, leadings, dtype, rng):
    """The tangent and VJP derived from the element function (Warp's adjoint of it) equal
    the op's closed forms, where it has them, to rounding."""
    args = [a.astype(dtype) for a in random_args(name, leadings, rng)]
    tangents = [rng.normal(size=a.shape).astype(dtype) for a in args]
    results = as_tuple(getattr(xform, name)(*args))
    cotangents = tuple(rng.normal(size=r.shape).astype(dtype) for r in results)
    closed, derived = variant(name, "closed"), variant(name, "derived")
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    pairs = [
        *zip(
            as_tuple(xform.jvp(closed, args, tangents)),
            as_tuple(xform.jvp(derived, args, tangents)),
        ),
        *zip(xform.vjp(closed, args, cotangents), xform.vjp(derived, args, cotangents)),
    ]
    for a, b in pairs:
        assert a.dtype == b.dtype == dtype
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_missing_tangents_count_as_zero(name, rng):
    op = xform.OPS[name]
    args = random_args(name, [(1,) if o.single else (2,) * len(o.batch) for o in op.operands], rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    tangents[0] = None
    zeros = [np.zeros_like(args[0]), *tangents[1:]]
    for a, b in zip(
        as_tuple(xform.jvp(name, args, tangents)), as_tuple(xform.jvp(name, args, zeros))
    ):
        np.testing.assert_array_equal(a, b)


def test_float32_jvp(rng):
    args = random_args("pose_multiply", [(4,), (4,), (4,), (1,)], rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    exact = xform.jvp("pose_multiply", args, tangents)
    single = xform.jvp(
        "pose_multiply",
        [a.astype(np.float32) for a in args],
        [t.astype(np.float32) for t in tangents],
    )
    for a, b in zip(exact, single):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())


def test_bad_tangent_raises(rng):
    args = random_args("pose_inverse", [(2,), (2,)], rng)
    with pytest.raises(
        ValueError, match=r"tangent of 'quaternion' has shape \(4,\); expected \(2, 4\)"
    ):
        xform.jvp("pose_inverse", args, [None, np.ones(4)])
    with pytest.raises(TypeError, match="cuda_matrix_to_quaternion is not differentiable"):
        xform.jvp("cuda_matrix_to_quaternion", [np.eye(3)], [np.eye(3)])
