"""Comparison helpers shared by the tests."""

import numpy as np

import xform
from xform._define import derived

# Each op's derivatives as shipped (closed forms where it has them), and as derived from
# its element function alone.
VARIANTS = ("closed", "derived")


def variant(name: str, which: str) -> xform.Op:
    op = xform.OPS[name]
    return op if which == "closed" else derived(op)


# Normwise relative tolerance against the float64 reference, per dtype.
TOLERANCE = {np.float64: 1e-10, np.float32: 1e-5}


def relative_error(actual, expected) -> float:
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if actual.size == 0:
        return 0.0
    scale = max(1.0, float(np.abs(expected).max()))
    return float(np.abs(actual - expected).max()) / scale


def assert_matches(actual, expected, dtype) -> None:
    error = relative_error(actual, expected)
    assert error <= TOLERANCE[np.dtype(dtype).type], f"relative error {error:.3g}"


def as_tuple(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


# Central differences' step, float64. JAX's check_grads defaults to 1e-4, where the
# truncation error (step^2 times the third derivative) passes its 1e-5 tolerance wherever
# a draw makes the third derivative large: 6D columns nearly parallel, Euler angles near
# gimbal lock (one draw in eight failed there).
STEP = 1e-6


def check_grads(fn, args, modes=("fwd", "rev"), order: int = 1) -> None:
    """JAX's check_grads (first order unless told), in both modes, with the step above."""
    from jax.test_util import check_grads as check

    check(fn, args, order, modes=modes, eps=STEP)


def hessian_by_differences(gradient, x: np.ndarray, step: float = STEP) -> np.ndarray:
    """The Hessian at the vector x by central differences of `gradient` (NumPy in and
    out): column i is (gradient(x + step e_i) - gradient(x - step e_i)) / (2 step)."""
    columns = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = step
        columns.append((np.asarray(gradient(x + e)) - np.asarray(gradient(x - e))) / (2 * step))
    return np.stack(columns, -1)


def difference_tolerance(expected, cotangents, results) -> float:
    """How far a VJP may lie from `finite_difference_vjp`'s `expected`: 1e-6 relative,
    plus the differences' round-off, which is absolute: each component divides by 2 STEP
    the difference of two sums `sum(cotangent * result)`, whose terms are each rounded to
    a few ε of themselves (independently: their root sum of squares). It dominates where
    the gradient is small next to those terms (pose_interpolate's first pose at t ≈ 1:
    3.8e-10 off a gradient of 2.9e-4, seed 148703271); elsewhere it adds ~1e-10 relative."""
    terms = np.sqrt(sum(float(np.square(c * r).sum()) for c, r in zip(cotangents, results)))
    roundoff = 8.0 * np.finfo(np.float64).eps * terms / STEP
    return 1e-6 * float(np.linalg.norm(expected)) + roundoff * np.sqrt(expected.size)


def finite_difference_vjp(name, args, cotangents, k):
    """d/d args[k] of sum(cotangent * result), by central differences."""
    fn = getattr(xform, name)
    grad = np.zeros_like(args[k])
    for index in np.ndindex(args[k].shape):
        values = []
        for sign in (1.0, -1.0):
            shifted = [a.copy() for a in args]
            shifted[k][index] += sign * STEP
            results = as_tuple(fn(*shifted))
            values.append(sum(float((c * r).sum()) for c, r in zip(cotangents, results)))
        grad[index] = (values[0] - values[1]) / (2 * STEP)
    return grad
