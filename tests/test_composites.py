"""Functions over ops (`xform.ops.COMPOSITES`: the Euler conventions, rigid registration)
in `xform.vjp` and `xform.jvp`: the chain rule through the ops they call."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import as_tuple

import xform

STEP = 1e-6


def _directional(fn, args, direction, k):
    """d/dt fn(args with args[k] + t direction) at 0, by central differences."""
    plus, minus = list(args), list(args)
    plus[k] = args[k] + STEP * direction
    minus[k] = args[k] - STEP * direction
    return [(a - b) / (2 * STEP) for a, b in zip(as_tuple(fn(*plus)), as_tuple(fn(*minus)))]


def _point_sets(rng, batch=2, count=7):
    points = rng.normal(size=(batch, count, 3))
    rotation = xform.quaternion_to_matrix(xform.random_quaternion((batch,), 5))
    targets = np.einsum("bij,bnj->bni", rotation, points) + 0.01 * rng.normal(size=points.shape)
    return points, targets


@pytest.mark.parametrize(
    ("name", "statics"), [("quaternion_to_euler", ("ZYX",)), ("rigid_registration", (None, True))]
)
def test_vjp_and_jvp_take_functions_over_ops(name, statics, rng):
    """The README's `xform.vjp(name, ...)` for every function of the toolkit table: the
    chain rule through the ops it calls, against central differences."""
    registration = name == "rigid_registration"
    arrays = list(_point_sets(rng)) if registration else [rng.normal(size=(3, 4))]
    args = (*arrays, *statics)
    fn = getattr(xform, name)
    results = as_tuple(fn(*args))
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    grads = xform.vjp(name, args, cotangents)
    assert len(grads) == len(args) and all(g is None for g in grads[len(arrays) :])
    tangents = [rng.normal(size=a.shape) for a in arrays]
    pushed = as_tuple(xform.jvp(name, args, [*tangents, *[None] * len(statics)]))
    for k, direction in enumerate(tangents):
        expected = _directional(lambda *a: fn(*a, *statics), arrays, direction, k)
        got = float((grads[k] * direction).sum())
        want = sum(float((c * e).sum()) for c, e in zip(cotangents, expected))
        assert got == pytest.approx(want, rel=1e-6, abs=1e-8)
    # The tangent with every array moving at once, against differences along them all.
    plus = fn(*[a + STEP * t for a, t in zip(arrays, tangents)], *statics)
    minus = fn(*[a - STEP * t for a, t in zip(arrays, tangents)], *statics)
    for p, a, b in zip(pushed, as_tuple(plus), as_tuple(minus)):
        np.testing.assert_allclose(p, (a - b) / (2 * STEP), atol=1e-7)
