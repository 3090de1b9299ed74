"""The launch plan, by property: for any broadcast-compatible shapes, the element each
launch index reads is exactly the one NumPy broadcasting names, and always in bounds."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xform
from xform._launch.layout import plan_launch

dims = st.lists(st.integers(0, 3), min_size=0, max_size=5)


def element_read(plan, k, flat):
    """Replay the kernel's index arithmetic (with tiling over outer grid dims) in Python."""
    index = np.unravel_index(flat, plan.grid) if plan.grid else ()
    return sum(int(i) * s for i, s in zip(index, plan.strides[k]))


def check_plan(op, shapes, broadcast_views, prefix=0):
    plan = plan_launch(op, shapes, prefix)
    assert math.prod(plan.grid) == plan.size
    for k, view in enumerate(broadcast_views):
        expected = view.reshape(-1)
        got = [element_read(plan, k, i) for i in range(plan.size)]
        np.testing.assert_array_equal(got, expected)
        count = math.prod(shapes[k][: len(shapes[k]) - len(op.operands[k].element)])
        assert all(0 <= g < max(1, count) for g in got)
    return plan


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_variadic_broadcast_matches_numpy(data):
    op = xform.OPS["pose_multiply"]
    batch = data.draw(dims)
    leadings = []
    for _ in op.operands:
        ndim = data.draw(st.integers(0, len(batch)))
        own = batch[len(batch) - ndim :]
        leadings.append(tuple(n if data.draw(st.booleans()) else 1 for n in own))
    shapes = [(*lead, *o.element) for lead, o in zip(leadings, op.operands)]
    full = np.broadcast_shapes(*leadings)
    views = [np.broadcast_to(np.arange(math.prod(lead)).reshape(lead), full) for lead in leadings]
    plan = check_plan(op, shapes, views)
    assert plan.batch_shape == full


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 4), st.integers(0, 4), st.lists(st.booleans(), min_size=3, max_size=3))
def test_batch_layout_matches_numpy(b, n, keep):
    op = xform.OPS["batch_transform_points"]
    bp, bq, bx = (b if k else 1 for k in keep)
    shapes = [(bp, 3), (bq, 4), (bx, n, 3)]
    full = (np.broadcast_shapes((bp,), (bq,), (bx,))[0], n)
    views = [
        np.broadcast_to(np.arange(bp)[:, None], full),
        np.broadcast_to(np.arange(bq)[:, None], full),
        np.broadcast_to(np.arange(bx * n).reshape(bx, n), full),
    ]
    plan = check_plan(op, shapes, views)
    assert plan.batch_shape == full


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_mapped_prefix_dimensions_lead_and_broadcast(data):
    """Dimensions a vmap adds stand before every operand's own batch, broadcast by size 1,
    and lead the result: the single pose of transform_points becomes one pose per map."""
    op = xform.OPS["transform_points"]
    mapped = data.draw(st.integers(0, 3))
    points = tuple(data.draw(dims))
    sizes = [mapped if data.draw(st.booleans()) else 1 for _ in op.operands]
    shapes = [(sizes[0], 1, 3), (sizes[1], 4), (sizes[2], *points, 3)]
    full = (np.broadcast_shapes(*[(s,) for s in sizes])[0], *points)
    views = [
        np.broadcast_to(np.arange(sizes[0]).reshape(-1, *[1] * len(points)), full),
        np.broadcast_to(np.arange(sizes[1]).reshape(-1, *[1] * len(points)), full),
        np.broadcast_to(np.arange(sizes[2] * math.prod(points)).reshape(sizes[2], *points), full),
    ]
    plan = check_plan(op, shapes, views, prefix=1)
    assert plan.batch_shape == full


@pytest.mark.parametrize(
    ("name", "shapes", "grid", "strides"),
    [
        # one pose over N points: one dimension, the pose read again and again
        ("transform_points", [(3,), (1, 4), (100, 3)], (100,), ((0,), (0,), (1,))),
        # equal batches merge into one dimension
        ("pose_inverse", [(2, 3, 3), (2, 3, 4)], (6,), ((1,), (1,))),
        # a pose per batch over its points: two dimensions
        ("batch_transform_points", [(4, 3), (4, 4), (4, 9, 3)], (4, 9), ((1, 0), (1, 0), (9, 1))),
        # a broadcast row against a column
        ("pose_to_matrix", [(2, 1, 3), (1, 5, 4)], (2, 5), ((1, 0), (0, 1))),
    ],
)
def test_common_cases_coalesce(name, shapes, grid, strides):
    plan = plan_launch(xform.OPS[name], shapes)
    assert plan.grid == grid
    assert plan.strides == strides
