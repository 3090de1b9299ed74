"""Empty batches, NaN and Inf, non-contiguous and read-only inputs, zero-copy reads,
Warp arrays, zero-stride cotangents, and broadcasts too irregular for one launch grid."""

import numpy as np
import pytest
import warp as wp
from helpers import as_tuple, difference_tolerance, finite_difference_vjp
from reference import random_args, reference

import xform
from xform import _launch

pytestmark = pytest.mark.every_case  # the cases are the point

OPS = sorted(xform.OPS)
DIFFERENTIABLE = [n for n in OPS if xform.OPS[n].differentiable]


def leadings_with(name, batch):
    """Every operand given leading shape `batch` (cuRobo's single pose keeps (1,))."""
    op = xform.OPS[name]
    if op.operands[-1].batch == ("B", "N"):
        return [(batch[0],), (batch[0],), (batch[0], batch[-1])]
    return [(1,) if o.single else batch for o in op.operands]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("batch", [(0,), (2, 0), (0, 3)])
def test_empty_batches_give_empty_results(name, batch, rng):
    args = random_args(name, leadings_with(name, batch), rng)
    results = as_tuple(getattr(xform, name)(*args))
    for result, expected in zip(results, reference(name, args)):
        assert result.shape == expected.shape and result.size == 0
    if xform.OPS[name].differentiable:
        grads = xform.vjp(name, args, tuple(np.ones_like(r) for r in results))
        for grad, arg in zip(grads, args):
            assert grad.shape == arg.shape
            assert not np.any(grad)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_propagate_to_their_own_batch_element(name, bad, rng):
    op = xform.OPS[name]
    for k, operand in enumerate(op.operands):
        if operand.single:
            continue
        args = random_args(name, leadings_with(name, (3,)), rng)
        args[k][1] = bad
        results = as_tuple(getattr(xform, name)(*args))
        assert any(not np.all(np.isfinite(r[1])) for r in results)
        for r in results:
            assert np.all(np.isfinite(r[0])) and np.all(np.isfinite(r[2]))


@pytest.mark.parametrize("name", [n for n in OPS if any(o.single for o in xform.OPS[n].operands)])
def test_non_finite_single_pose_poisons_every_point(name, rng):
    args = random_args(name, leadings_with(name, (4,)), rng)
    args[1][0, 0] = np.nan
    assert np.all(np.isnan(getattr(xform, name)(*args)))


def non_contiguous(a: np.ndarray, rng) -> np.ndarray:
    """The same values, laid out with gaps: every other element of a larger array."""
    wide = rng.normal(size=(*a.shape[:-1], 2 * a.shape[-1]))
    wide[..., ::2] = a
    view = wide[..., ::2]
    assert not view.flags.c_contiguous
    return view


@pytest.mark.parametrize("name", OPS)
def test_non_contiguous_inputs_give_the_same_results(name, rng):
    args = random_args(name, leadings_with(name, (4,)), rng)
    expected = as_tuple(getattr(xform, name)(*args))
    for k in range(len(args)):
        strided = list(args)
        strided[k] = non_contiguous(args[k], rng)
        for got, want in zip(as_tuple(getattr(xform, name)(*strided)), expected):
            np.testing.assert_array_equal(got, want)
    transposed = [np.asfortranarray(a) for a in args]
    for got, want in zip(as_tuple(getattr(xform, name)(*transposed)), expected):
        np.testing.assert_array_equal(got, want)


def test_read_only_and_broadcast_views_are_accepted(rng):
    q = rng.normal(size=4)
    points = np.broadcast_to(rng.normal(size=3), (5, 3))
    assert not points.flags.writeable
    out = xform.transform_points(np.zeros(3), q, points)
    np.testing.assert_allclose(out, np.broadcast_to(out[0], (5, 3)), rtol=0, atol=0)


def test_contiguous_inputs_are_read_in_place(rng):
    op = xform.OPS["batch_transform_points"]
    args = random_args("batch_transform_points", [(2,), (2,), (2, 5)], rng)
    operands = _launch.buffers.prepare(op, args)
    for a, w in zip(args, operands.buffers):
        assert w.ptr == a.ctypes.data
    strided = non_contiguous(args[2], rng)
    copied = _launch.buffers.prepare(op, [args[0], args[1], strided])
    assert copied.buffers[2].ptr != strided.ctypes.data


@pytest.mark.parametrize("name", ["pose_multiply", "batch_transform_points", "quaternion_multiply"])
def test_repeated_calls_read_their_own_arrays(name, rng, monkeypatch):
    """Calls that repeat a signature (shapes and dtypes) launch the first call's kernel
    again without its checks (`_launch.repeats.repeat`): on each call's own arrays, into fresh
    results; non-contiguous, byte-swapped and mixed-dtype arrays of that shape still take
    the checked path, its copies and its errors."""
    leadings = leadings_with(name, (3, 4) if name != "batch_transform_points" else (3, 5))
    checked = []
    real = _launch.buffers.prepare
    monkeypatch.setattr(_launch.buffers, "prepare", lambda *a: checked.append(1) or real(*a))
    results = []
    for _ in range(3):
        args = random_args(name, leadings, rng)
        out = as_tuple(getattr(xform, name)(*args))
        for r, e in zip(out, reference(name, args)):
            np.testing.assert_allclose(r, e, rtol=1e-9, atol=1e-12)
        results.append(out)
    assert len(checked) <= 1  # once, where no earlier test has run this signature
    assert all(r is not s for r, s in zip(results[1], results[2]))

    args = random_args(name, leadings, rng)
    swapped = [a.astype(a.dtype.newbyteorder()) for a in args]
    strided = [non_contiguous(a, rng) for a in args]
    for variant in (swapped, strided):
        checked.clear()
        for r, e in zip(as_tuple(getattr(xform, name)(*variant)), reference(name, args)):
            np.testing.assert_allclose(r, e, rtol=1e-9, atol=1e-12)
        assert checked == [1]
    with pytest.raises(TypeError, match="dtype float32"):
        getattr(xform, name)(*args[:-1], args[-1].astype(np.float32))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_zero_stride_and_non_contiguous_cotangents(name, rng):
    args = random_args(name, leadings_with(name, (3,)), rng)
    results = as_tuple(getattr(xform, name)(*args))
    ones = tuple(np.broadcast_to(np.ones(()), r.shape) for r in results)
    dense = xform.vjp(name, args, tuple(np.ones(r.shape) for r in results))
    for a, b in zip(xform.vjp(name, args, ones), dense):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [wp.float32, wp.float64])
def test_warp_arrays_in_warp_arrays_out(dtype, rng):
    args = random_args("pose_multiply", [(5,), (5,), (1,), (5,)], rng)
    np_dtype = wp.dtype_to_numpy(dtype)
    warp_args = [wp.array(a.astype(np_dtype), dtype=dtype) for a in args]
    t, q = xform.pose_multiply(*warp_args)
    assert isinstance(t, wp.array) and isinstance(q, wp.array)
    assert t.shape == (5, 3) and q.shape == (5, 4) and t.dtype is dtype
    expected = xform.pose_multiply(*[a.astype(np_dtype) for a in args])
    np.testing.assert_array_equal(t.numpy(), expected[0])
    np.testing.assert_array_equal(q.numpy(), expected[1])


def test_warp_vector_arrays_are_read_as_their_components(rng):
    points = rng.normal(size=(6, 3))
    q = rng.normal(size=4)
    as_vectors = wp.array(points, dtype=wp.vec3d)
    out = xform.transform_points(wp.array(np.zeros(3)), wp.array(q), as_vectors)
    np.testing.assert_array_equal(out.numpy(), xform.transform_points(np.zeros(3), q, points))


@pytest.mark.parametrize("dtype", [wp.quatf, wp.quatd])
def test_warp_quaternion_arrays_are_refused_not_misread(dtype):
    """Warp's quat is stored [x, y, z, w]: read as xform's [w, x, y, z], Warp's identity
    would be a half turn about z. Refused, naming the argument and the order."""
    identity = wp.array([[0.0, 0.0, 0.0, 1.0]], dtype=dtype)
    with pytest.raises(TypeError, match=r"'quaternion'.*\[x, y, z, w\].*\[w, x, y, z\]"):
        xform.quaternion_to_matrix(identity)
    with pytest.raises(TypeError, match="'quaternion2'"):
        xform.quaternion_multiply(wp.array([[1.0, 0.0, 0.0, 0.0]]), identity)


def test_broadcast_patterns_deeper_than_one_grid(rng):
    """(2,1,2,1,2) against (1,2,1,2,1) leaves five dimensions that cannot merge: the launch
    is tiled over the outer ones. Values and gradients must still be right."""
    leadings = [(2, 1, 2, 1, 2), (1, 2, 1, 2, 1), (2, 1, 2, 1, 2), (1, 2, 1, 2, 1)]
    args = random_args("pose_multiply", leadings, rng)
    assert len(_launch.buffers.prepare(xform.OPS["pose_multiply"], args).plan.grid) == 5
    results = xform.pose_multiply(*args)
    for got, want in zip(results, reference("pose_multiply", args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    grads = xform.vjp("pose_multiply", args, cotangents)
    for k, grad in enumerate(grads):
        expected = finite_difference_vjp("pose_multiply", args, cotangents, k)
        tolerance = difference_tolerance(expected, cotangents, results)
        assert np.linalg.norm(grad - expected) <= tolerance


def test_batches_beyond_32_bit_indexing_are_refused_before_any_work(rng):
    huge = np.broadcast_to(rng.normal(size=3), (2**16, 2**16, 3))
    with pytest.raises(ValueError, match="more than 2147483647 elements"):
        xform.transform_points(np.zeros(3), np.ones(4), huge)


def test_launch_layer_reads_any_dlpack_buffer_in_place(rng):
    """The core launches on any DLPack-capable array: a torch tensor is read where it lies,
    and the results land in buffers of the caller's choosing."""
    torch = pytest.importorskip("torch")
    op = xform.OPS["pose_inverse"]
    t = torch.from_numpy(rng.normal(size=(4, 3)))
    q = torch.from_numpy(rng.normal(size=(4, 4)))
    operands = _launch.buffers.prepare(op, [t, q])
    assert [a.ptr for a in operands.buffers] == [t.data_ptr(), q.data_ptr()]

    def allocate(shape, scalar, device):
        out = torch.empty(shape, dtype=torch.float64)
        return out, out.data_ptr()

    t_inv, q_inv = _launch.products.forward(operands, allocate)
    expected = xform.pose_inverse(t.numpy(), q.numpy())
    np.testing.assert_array_equal(t_inv.numpy(), expected[0])
    np.testing.assert_array_equal(q_inv.numpy(), expected[1])


def test_gradients_not_needed_are_not_written_anywhere(rng):
    """Recorded launches keep their parameters between calls: a gradient not needed now
    must not be written through the pointer of an earlier call's gradient."""
    args = random_args("transform_points", [(1,), (1,), (64,)], rng)
    cotangent = rng.normal(size=(64, 3))
    first = xform.vjp("transform_points", args, cotangent)
    kept = [g.copy() for g in first]
    op = xform.OPS["transform_points"]
    operands = _launch.buffers.prepare(op, args)
    zeros = xform._dispatch.ALLOCATORS["numpy"][1]
    later = _launch.products.vjp(operands, [cotangent], zeros, needed=[False, False, True])
    assert later[0] is None and later[1] is None
    for before, after in zip(kept, first):
        np.testing.assert_array_equal(before, after)
