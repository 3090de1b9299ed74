"""The PyTorch adapter: values, gradcheck (reverse, forward and batched), quaternion
gradients against an independent pure-torch formula, torch.func.jvp / vmap / grad,
torch.compile, cuRobo's buffers and classes, and parity with the NumPy path."""

import numpy as np
import pytest
from conftest import taken
from helpers import as_tuple, assert_matches
from reference import (
    DIFFERENTIABLE,
    OP_NAMES,
    POINT_AND_POSE_OPS,
    leading_cases,
    random_args,
    reference,
    vmap_args,
)

import xform
from benchmarks import formulas

torch = pytest.importorskip("torch")
xt = pytest.importorskip("xform.backends.torch")
fwAD = pytest.importorskip("torch.autograd.forward_ad")


def tensors(arrays, requires_grad=False):
    # np.array, not np.ascontiguousarray, which makes a 0-d array 1-d
    return [torch.from_numpy(np.array(a)).requires_grad_(requires_grad) for a in arrays]


def sample_cases(name, every=3):
    """A spread of the leading-shape cases, broadcast ones included."""
    return leading_cases(name)[::every]


CASES = [(n, c) for n in OP_NAMES for c in sample_cases(n)]
GRAD_CASES = [(n, c) for n in DIFFERENTIABLE for c in sample_cases(n)]


def ids(cases):
    return [f"{n}-{c}" for n, c in cases]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("name", "leadings"), CASES, ids=ids(CASES))
def test_values_match_reference_and_numpy_path(name, leadings, dtype, rng):
    args = random_args(name, leadings, rng, dtype)
    results = as_tuple(getattr(xt, name)(*tensors(args)))
    numpy_results = as_tuple(getattr(xform, name)(*args))
    for got, via_numpy, want in zip(results, numpy_results, reference(name, args)):
        assert isinstance(got, torch.Tensor) and got.dtype == torch.from_numpy(args[0]).dtype
        np.testing.assert_array_equal(got.numpy(), via_numpy)  # one kernel, same bits
        assert_matches(got.numpy(), want, dtype)


@pytest.mark.parametrize(("name", "leadings"), GRAD_CASES, ids=ids(GRAD_CASES))
def test_gradcheck_reverse_and_forward(name, leadings, rng):
    """Batched gradients are checked through torch.func below (vmap of grad and of jvp,
    jacrev, jacfwd): gradcheck's own batched checks use the legacy vmap, which never
    calls an autograd.Function's vmap rule."""
    args = tensors(random_args(name, leadings, rng), requires_grad=True)
    assert torch.autograd.gradcheck(getattr(xt, name), args, check_forward_ad=True)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradients_identical_to_numpy_vjp(name, rng):
    args = random_args(name, leading_cases(name)[1], rng)
    inputs = tensors(args, requires_grad=True)
    results = as_tuple(getattr(xt, name)(*inputs))
    cotangents = [rng.normal(size=tuple(r.shape)) for r in results]
    grads = torch.autograd.grad(results, inputs, [torch.from_numpy(c) for c in cotangents])
    for g, expected in zip(grads, xform.vjp(name, args, tuple(cotangents))):
        np.testing.assert_array_equal(g.numpy(), expected)


# --- quaternion gradients against an independent pure-torch formula ----------------------


def unit_rotation(q):
    """The rotation matrix of q / |q|, differentiable in pure torch."""
    return formulas.rotation_matrix(torch, q / ((q * q).sum(-1)[..., None] ** 0.5))


PURE_TORCH = {
    "transform_points": lambda t, q, p: p @ unit_rotation(q.reshape(4)).T + t.reshape(3),
    "batch_transform_points": lambda t, q, p: (
        (unit_rotation(q)[:, None] @ p[..., None])[..., 0] + t[:, None]
    ),
    "batch_transform_points_inverse": lambda t, q, p: (
        unit_rotation(q).transpose(-1, -2)[:, None] @ (p - t[:, None])[..., None]
    )[..., 0],
    "quaternion_to_matrix": lambda q: unit_rotation(q),
    "pose_to_matrix": lambda t, q: torch.cat(
        [
            torch.cat([unit_rotation(q), t[..., None]], -1),
            torch.tensor([0.0, 0, 0, 1], dtype=t.dtype).expand(*t.shape[:-1], 1, 4),
        ],
        -2,
    ),
    "pose_inverse": lambda t, q: -(unit_rotation(q).transpose(-1, -2) @ t[..., None])[..., 0],
    "pose_multiply": lambda t, q, t2, q2: (unit_rotation(q) @ t2[..., None])[..., 0] + t,
}


def tangent_part(g, q):
    """Projection onto the tangent space of the unit sphere at unit q."""
    return g - (g * q).sum(-1, keepdim=True) * q


@pytest.mark.parametrize("name", sorted(PURE_TORCH))
def test_quaternion_gradients_match_pure_torch_on_the_sphere_tangent(name, rng):
    leadings = {"transform_points": [(1,), (1,), (6,)]}.get(name, leading_cases(name)[2])
    args = random_args(name, leadings, rng)
    q_index = [o.name for o in xform.OPS[name].operands].index("quaternion")
    args[q_index] /= np.linalg.norm(args[q_index], axis=-1, keepdims=True)
    ours_in = tensors(args, requires_grad=True)
    pure_in = tensors(args, requires_grad=True)
    ours = as_tuple(getattr(xt, name)(*ours_in))[0]
    pure = PURE_TORCH[name](*pure_in)
    torch.testing.assert_close(ours, pure, rtol=1e-12, atol=1e-12)
    g = torch.from_numpy(rng.normal(size=tuple(ours.shape)))
    (ours_q,) = torch.autograd.grad(ours, ours_in[q_index], g)
    (pure_q,) = torch.autograd.grad(pure, pure_in[q_index], g)
    q = ours_in[q_index].detach()
    torch.testing.assert_close(
        tangent_part(ours_q, q), tangent_part(pure_q, q), rtol=1e-10, atol=1e-10
    )


# --- forward mode, vmap, grad ----------------------------------------------------------


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_func_jvp_matches_reference(name, rng):
    args = random_args(name, leading_cases(name)[2], rng)
    directions = [rng.normal(size=a.shape) for a in args]
    primals, tangents = torch.func.jvp(
        getattr(xt, name), tuple(tensors(args)), tuple(tensors(directions))
    )
    for got, want in zip(as_tuple(primals), as_tuple(getattr(xform, name)(*args))):
        np.testing.assert_array_equal(got.numpy(), want)
    for got, want in zip(as_tuple(tangents), as_tuple(xform.jvp(name, args, directions))):
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("name", POINT_AND_POSE_OPS + ["matrix_to_quaternion"])
def test_vmap_of_jvp_matches_a_loop(name, rng):
    """Forward mode over a batch of tangents (one jvp per column of a Jacobian)."""
    args = random_args(name, leading_cases(name)[2], rng)
    directions = [np.stack([rng.normal(size=a.shape) for _ in range(3)]) for a in args]
    fn = getattr(xt, name)
    primals = tuple(tensors(args))

    def tangent_of(*ds):
        return torch.func.jvp(fn, primals, ds)[1]

    batched = as_tuple(torch.func.vmap(tangent_of)(*tensors(directions)))
    for i in range(3):
        expected = as_tuple(xform.jvp(name, args, [d[i] for d in directions]))
        for b, e in zip(batched, expected):
            np.testing.assert_allclose(b[i].numpy(), e, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_jacfwd_and_jacrev_agree(name, rng):
    """jacrev is vmap over the VJP, jacfwd vmap over the JVP: both batching rules."""
    args = tensors(random_args(name, leading_cases(name)[2], rng))
    argnums = tuple(range(len(args)))
    fn = getattr(xt, name)
    forward = as_tuple(torch.func.jacfwd(fn, argnums=argnums)(*args))
    reverse = as_tuple(torch.func.jacrev(fn, argnums=argnums)(*args))
    for f_out, r_out in zip(forward, reverse):
        for f, r in zip(f_out, r_out):
            torch.testing.assert_close(f, r, rtol=1e-12, atol=1e-12)


def test_calls_that_no_autograd_sees_build_no_graph(rng):
    """Without grad mode or inputs that require grad, a call skips Function.apply; with
    them, it records its node. (Dual numbers without requires_grad: the next test.)"""
    args = random_args("batch_transform_points", [(2,), (2,), (2, 5)], rng)
    inputs = tensors(args, requires_grad=True)
    with torch.no_grad():
        untracked = xt.batch_transform_points(*inputs)
    plain = xt.batch_transform_points(*tensors(args))
    tracked = xt.batch_transform_points(*inputs)
    assert untracked.grad_fn is None and plain.grad_fn is None
    assert tracked.grad_fn is not None
    for out in (untracked, plain, tracked):
        np.testing.assert_array_equal(out.detach().numpy(), xform.batch_transform_points(*args))


def test_forward_ad_dual_numbers(rng):
    args = random_args("pose_multiply", [(3,), (3,), (1,), (3,)], rng)
    directions = [rng.normal(size=a.shape) for a in args]
    with fwAD.dual_level():
        duals = [fwAD.make_dual(a, d) for a, d in zip(tensors(args), tensors(directions))]
        outs = xt.pose_multiply(*duals)
        tangents = [fwAD.unpack_dual(o).tangent for o in outs]
    for got, want in zip(tangents, xform.jvp("pose_multiply", args, directions)):
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize(
    "name", POINT_AND_POSE_OPS + ["quaternion_to_matrix", "matrix_to_quaternion"]
)
def test_vmap_matches_a_loop(name, rng):
    args, mapped = vmap_args(name, rng)
    in_dims = tuple(0 if m else None for m in mapped)
    fn = getattr(xt, name)
    batched = as_tuple(torch.func.vmap(fn, in_dims=in_dims)(*tensors(args)))
    for i in range(4):
        sample = [torch.from_numpy(a[i] if m else a) for a, m in zip(args, mapped)]
        for b, s in zip(batched, as_tuple(fn(*sample))):
            torch.testing.assert_close(b[i], s, rtol=0, atol=0)


@pytest.mark.parametrize("name", POINT_AND_POSE_OPS)
def test_vmap_of_grad_matches_a_loop(name, rng):
    args, mapped = vmap_args(name, rng)
    in_dims = tuple(0 if m else None for m in mapped)
    fn = getattr(xt, name)
    everything = tuple(range(len(args)))

    def loss(*inputs):
        return sum((r**2).sum() for r in as_tuple(fn(*inputs)))

    batched = torch.func.vmap(torch.func.grad(loss, argnums=everything), in_dims=in_dims)(
        *tensors(args)
    )
    for i in range(4):
        sample = [torch.from_numpy(a[i] if m else a) for a, m in zip(args, mapped)]
        for b, s in zip(batched, torch.func.grad(loss, argnums=everything)(*sample)):
            torch.testing.assert_close(b[i], s, rtol=1e-12, atol=1e-12)


def test_nested_vmap(rng):
    q = torch.from_numpy(rng.normal(size=(3, 5, 4)))
    nested = torch.func.vmap(torch.func.vmap(xt.quaternion_to_matrix))(q)
    torch.testing.assert_close(nested, xt.quaternion_to_matrix(q), rtol=0, atol=0)


def test_vmap_launches_once(rng, monkeypatch):
    from xform import _launch

    launches = []
    real = _launch.products.forward
    monkeypatch.setattr(
        _launch.products, "forward", lambda *a, **k: launches.append(1) or real(*a, **k)
    )
    q = torch.from_numpy(rng.normal(size=(64, 4)))
    torch.func.vmap(xt.quaternion_to_matrix)(q)
    assert len(launches) == 1


# --- the protocol ----------------------------------------------------------------------


def test_needs_input_grad_skips_unrequested_gradients(rng, monkeypatch):
    from xform import _launch

    seen = []
    real = _launch.products.vjp
    monkeypatch.setattr(
        _launch.products,
        "vjp",
        lambda ops, cot, zeros, needed=None, **kwargs: (
            seen.append(tuple(needed)) or real(ops, cot, zeros, needed, **kwargs)
        ),
    )
    t, q, p = tensors(random_args("transform_points", [(1,), (1,), (5,)], rng))
    p.requires_grad_(True)
    xt.transform_points(t, q, p).sum().backward()
    assert seen == [(False, False, True)]
    assert t.grad is None and q.grad is None and p.grad is not None


def test_zero_stride_gradient_from_sum(rng):
    args = tensors(random_args("pose_inverse", [(4,), (4,)], rng), requires_grad=True)
    t_inv, q_inv = xt.pose_inverse(*args)
    (t_inv.sum() + q_inv.sum()).backward()
    expected = xform.vjp(
        "pose_inverse", [a.detach().numpy() for a in args], (np.ones((4, 3)), np.ones((4, 4)))
    )
    for a, e in zip(args, expected):
        np.testing.assert_array_equal(a.grad.numpy(), e)


def test_non_contiguous_inputs(rng):
    x = torch.from_numpy(rng.normal(size=(3, 10, 6)))[..., ::2]
    t, q = tensors(random_args("transform_points", [(), (), ()], rng)[:2])
    assert not x.is_contiguous()
    torch.testing.assert_close(
        xt.transform_points(t, q, x), xt.transform_points(t, q, x.contiguous()), rtol=0, atol=0
    )


def test_inputs_are_read_in_place(rng, monkeypatch):
    from xform import _launch

    pointers = []
    real_forward, real_repeat = _launch.products.forward, _launch.repeats.repeat

    def forward(ops, *args, **kwargs):
        pointers.extend(a.ptr for a in ops.buffers)
        return real_forward(ops, *args, **kwargs)

    def repeat(op, kind, key, arrays, *args):
        pointers.extend(arrays)
        return real_repeat(op, kind, key, arrays, *args)

    monkeypatch.setattr(_launch.products, "forward", forward)
    monkeypatch.setattr(_launch.repeats, "repeat", repeat)
    for _ in range(2):  # the checked call, then its repeat
        pointers.clear()
        args = tensors(random_args("pose_multiply", [(3,), (3,), (3,), (3,)], rng))
        xt.pose_multiply(*args)
        assert pointers[:4] == [a.data_ptr() for a in args]


def _checked_calls(monkeypatch) -> list[str]:
    """The names of the products on tensors that take the checked path from now on
    (each records its launch for repeats). This thread's remembered launches start
    empty: a table that earlier tests filled to its bound is cleared by the next call
    that records, which would check a repeated call again."""
    from xform import _launch
    from xform._launch import repeats

    monkeypatch.setattr(repeats._local, "repeats", {}, raising=False)
    calls = []
    for name in ("forward", "vjp"):
        real = getattr(_launch.products, name)

        def checked(operands, *args, _real=real, _name=name, **kwargs):
            if isinstance(operands.buffers[0].owner, torch.Tensor):
                calls.append(_name)
            return _real(operands, *args, **kwargs)

        monkeypatch.setattr(_launch.products, name, checked)
    return calls


def test_repeated_calls_launch_again_on_this_calls_tensors(rng, monkeypatch):
    """A call that repeats an earlier one's shapes, dtypes and devices skips the checks
    and the plan: its own inputs are read, fresh results written, a broadcast operand's
    gradient zeroed again and a dense one's stored whole, whatever the earlier call
    left in memory, and a change of dtype, shape, contiguity or needed gradients takes
    the checked path."""
    checked = _checked_calls(monkeypatch)
    shapes = [(1,), (1,), (64,)]  # one pose, broadcast over the points
    for dtype in (np.float64, np.float32, np.float64):
        checked.clear()
        for _ in range(3):
            position, quaternion, points = tensors(
                random_args("transform_points", shapes, rng, dtype), requires_grad=True
            )
            out = xt.transform_points(position, quaternion, points)
            cotangent = torch.from_numpy(rng.standard_normal(tuple(out.shape)).astype(dtype))
            grads = torch.autograd.grad(out, (position, quaternion, points), cotangent)
            arrays = [t.detach().numpy().astype(np.float64) for t in (position, quaternion, points)]
            np.testing.assert_allclose(
                out.detach().numpy(), reference("transform_points", arrays)[0], rtol=1e-5, atol=1e-5
            )
            expected = xform.vjp("transform_points", arrays, [cotangent.numpy().astype(np.float64)])
            for g, e in zip(grads, expected):
                np.testing.assert_allclose(g.numpy(), e, rtol=1e-4, atol=1e-4)
        # Checked at most once per signature (not at all where an earlier test ran it).
        assert checked in ([], ["forward", "vjp"])

    checked.clear()
    position, quaternion, points = tensors(random_args("transform_points", shapes, rng))
    xt.transform_points(position, quaternion, points)  # a repeat by now
    assert checked == []
    xt.transform_points(position, quaternion, points[::2])  # another shape
    wide = torch.from_numpy(np.repeat(points.numpy(), 2, axis=0))
    xt.transform_points(position, quaternion, wide[::2])  # the same shape, strided
    assert checked == ["forward", "forward"]
    with pytest.raises(TypeError, match="'points' has dtype float32 but 'position' has float64"):
        xt.transform_points(position, quaternion, points.float())

    checked.clear()
    points.requires_grad_(True)
    out = xt.transform_points(position, quaternion, points)
    (g,) = torch.autograd.grad(out, points, torch.ones_like(out))  # only the points' needed
    assert checked == ["vjp"]
    np.testing.assert_allclose(g.numpy(), torch.autograd.grad(
        xt.transform_points(position, quaternion, points), points, torch.ones_like(out)
    )[0].numpy())  # fmt: skip


def test_repeated_calls_on_threads_are_independent(rng):
    """Each thread keeps its own launches: threads repeating calls of one signature at
    once each get their own results."""
    import concurrent.futures

    position, quaternion = tensors(random_args("transform_points", [(1,), (1,), (8,)], rng)[:2])
    inputs = [torch.from_numpy(rng.standard_normal((257, 3))) for _ in range(8)]
    expected = [xt.transform_points(position, quaternion, p) for p in inputs]

    def run(k):
        return [xt.transform_points(position, quaternion, inputs[k]) for _ in range(200)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for k, outs in enumerate(pool.map(run, range(8))):
            for out in outs:
                torch.testing.assert_close(out, expected[k], rtol=0, atol=0)


def test_cuda_matrix_to_quaternion_is_marked_non_differentiable(rng):
    (m,) = tensors(random_args("cuda_matrix_to_quaternion", [(3,)], rng), requires_grad=True)
    q = xt.cuda_matrix_to_quaternion(m)
    assert not q.requires_grad
    np.testing.assert_array_equal(q.numpy(), xt.matrix_to_quaternion(m).detach().numpy())


def test_float32_in_float32_out_and_mixed_dtypes_raise(rng):
    t, q = tensors(random_args("pose_inverse", [(2,), (2,)], rng, np.float32))
    assert all(r.dtype == torch.float32 for r in xt.pose_inverse(t, q))
    with pytest.raises(
        TypeError, match="'quaternion' has dtype float64 but 'position' has float32"
    ):
        xt.pose_inverse(t, q.double())
    with pytest.raises(TypeError, match="'position' has dtype int64"):
        xt.pose_inverse(t.long(), q)


def test_bad_shapes_and_types_raise(rng):
    t, q = tensors(random_args("pose_inverse", [(2,), (2,)], rng))
    with pytest.raises(
        ValueError, match=r"'quaternion' has shape \(2, 3\); expected \(\.\.\., 4\)"
    ):
        xt.pose_inverse(t, t)
    with pytest.raises(TypeError, match="'quaternion' is a numpy.ndarray; expected a torch.Tensor"):
        xt.pose_inverse(t, q.numpy())


def test_empty_batches(rng):
    t, q, p = tensors(random_args("batch_transform_points", [(0,), (0,), (0, 5)], rng), True)
    out = xt.batch_transform_points(t, q, p)
    assert out.shape == (0, 5, 3)
    out.sum().backward()
    assert t.grad.shape == (0, 3) and p.grad.shape == (0, 5, 3)


def test_torch_quaternion_to_matrix_agrees(rng):
    (q,) = tensors(random_args("quaternion_to_matrix", [(2, 3)], rng), requires_grad=True)
    pure = xt.torch_quaternion_to_matrix(q)
    ours = xt.quaternion_to_matrix(q)
    torch.testing.assert_close(pure, ours, rtol=1e-12, atol=1e-12)
    g = torch.from_numpy(rng.normal(size=(2, 3, 3, 3)))
    torch.testing.assert_close(
        torch.autograd.grad(pure, q, g)[0],
        torch.autograd.grad(ours, q, g)[0],
        rtol=1e-12,
        atol=1e-12,
    )


# --- cuRobo compatibility ----------------------------------------------------------------


def test_result_buffer_receives_the_result_and_is_returned(rng):
    t, q, p = tensors(random_args("batch_transform_points", [(2,), (2,), (2, 4)], rng), True)
    buffer = torch.empty(2, 4, 3, dtype=torch.float64)
    out = xt.batch_transform_points(t, q, p, out_points=buffer)
    assert out.data_ptr() == buffer.data_ptr() and out.shape == buffer.shape
    torch.testing.assert_close(buffer, xt.batch_transform_points(t, q, p), rtol=0, atol=0)
    assert out.grad_fn is not None and buffer.grad_fn is None  # no history on the buffer
    out.sum().backward()
    assert p.grad is not None


def test_transform_point_class_with_buffers_then_backward(rng):
    t, q, p = tensors(random_args("transform_points", [(1,), (1,), (50,)], rng), True)
    out = torch.empty(50, 3, dtype=torch.float64)
    adj = [
        torch.full((1, 3), torch.nan, dtype=torch.float64),
        torch.full((1, 4), torch.nan, dtype=torch.float64),
        torch.full((50, 3), torch.nan, dtype=torch.float64),
    ]
    y = xt.TransformPoint.apply(t, q, p, out, *adj)
    assert y is out
    y.sum().backward()
    expected = xform.vjp(
        "transform_points", [a.detach().numpy() for a in (t, q, p)], np.ones((50, 3))
    )
    for a, workspace, e in zip((t, q, p), adj, expected):
        np.testing.assert_allclose(a.grad.numpy(), e, rtol=1e-12)
        assert torch.isnan(workspace).all()  # gradient buffers are never written


def test_transform_pose_broadcasts_pose_one_without_reading_out_of_bounds(rng):
    """cuRobo's TransformPose.backward read out of bounds for a broadcast pose 1."""
    args = tensors(random_args("pose_multiply", [(1,), (1,), (64,), (64,)], rng), True)
    out_t, out_q = xt.TransformPose.apply(*args, None, None, None, None, None, None)
    assert out_t.shape == (64, 3)
    (out_t.sum() + out_q.sum()).backward()
    assert args[0].grad.shape == (1, 3) and args[1].grad.shape == (1, 4)
    assert torch.autograd.gradcheck(
        lambda *a: xt.TransformPose.apply(*a, *[None] * 6),
        [
            a.detach()[:3].requires_grad_() if a.shape[0] > 1 else a.detach().requires_grad_()
            for a in args
        ],
    )


@pytest.mark.parametrize(
    ("cls", "name", "leadings"),
    [
        ("TransformPoint", "transform_points", [(1,), (1,), (5,)]),
        ("BatchTransformPoint", "batch_transform_points", [(2,), (2,), (2, 5)]),
        ("TransformPose", "pose_multiply", [(1,), (1,), (5,), (5,)]),
        ("BatchTransformPose", "pose_multiply", [(5,), (5,), (5,), (5,)]),
        ("PoseInverse", "pose_inverse", [(5,), (5,)]),
        ("QuatToMatrix", "quaternion_to_matrix", [(5,)]),
        ("MatrixToQuaternion", "matrix_to_quaternion", [(5,)]),
    ],
)
def test_curobo_classes(cls, name, leadings, rng):
    args = tensors(random_args(name, leadings, rng), requires_grad=True)
    n_buffers = {1: 2, 2: 4, 3: 4, 4: 6}[len(args)]
    results = as_tuple(getattr(xt, cls).apply(*args, *[None] * n_buffers))
    for got, want in zip(results, as_tuple(getattr(xt, name)(*args))):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    sum(r.sum() for r in results).backward()
    assert all(a.grad is not None for a in args)


def test_bad_buffers_raise_value_error(rng):
    t, q, p = tensors(random_args("transform_points", [(1,), (1,), (5,)], rng))
    with pytest.raises(
        ValueError, match=r"buffer 'out_points' has shape \(4, 3\), expected \(5, 3\)"
    ):
        xt.transform_points(t, q, p, out_points=torch.empty(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="buffer 'out_points' has dtype torch.float32"):
        xt.transform_points(t, q, p, out_points=torch.empty(5, 3))
    with pytest.raises(ValueError, match=r"buffer 'out_gq' has shape \(2, 4\), expected \(1, 4\)"):
        xt.transform_points(t, q, p, out_gq=torch.empty(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="not contiguous"):
        xt.transform_points(t, q, p, out_points=torch.empty(3, 5, dtype=torch.float64).T)


# --- torch.compile ------------------------------------------------------------------------


def compile_loss(name):
    fn = getattr(xt, name)

    def loss(*inputs):
        return sum((r**2).sum() for r in as_tuple(fn(*inputs)))

    return loss


@pytest.mark.parametrize("name", OP_NAMES)
def test_compile_fullgraph_aot_eager(name, rng):
    torch._dynamo.reset()
    args = random_args(name, leading_cases(name)[2], rng)
    differentiable = xform.OPS[name].differentiable
    eager_in = tensors(args, requires_grad=differentiable)
    compiled_in = tensors(args, requires_grad=differentiable)
    loss = compile_loss(name)
    eager = loss(*eager_in)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")(*compiled_in)
    torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=0)
    if differentiable:
        for a, b in zip(
            torch.autograd.grad(compiled, compiled_in), torch.autograd.grad(eager, eager_in)
        ):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=0)


def test_compile_fullgraph_inductor(rng):
    torch._dynamo.reset()
    args = random_args("pose_multiply", [(5,), (5,), (1,), (5,)], rng)

    def loss(t, q, t2, q2, points):
        t12, q12 = xt.pose_multiply(t, q, t2, q2)
        return (xt.batch_transform_points(t12, q12, points) ** 2).mean()

    points = rng.normal(size=(5, 8, 3))
    eager_in = tensors([*args, points], requires_grad=True)
    compiled_in = tensors([*args, points], requires_grad=True)
    eager = loss(*eager_in)
    compiled = torch.compile(loss, fullgraph=True)(*compiled_in)
    torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=0)
    for a, b in zip(
        torch.autograd.grad(compiled, compiled_in), torch.autograd.grad(eager, eager_in)
    ):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_compiled_call_with_result_buffer(rng):
    torch._dynamo.reset()
    t, q, p = tensors(random_args("transform_points", [(1,), (1,), (5,)], rng))
    buffer = torch.empty(5, 3, dtype=torch.float64)
    fn = torch.compile(
        lambda t, q, p, b: xt.transform_points(t, q, p, out_points=b),
        fullgraph=True,
        backend="aot_eager",
    )
    fn(t, q, p, buffer)
    torch.testing.assert_close(buffer, xt.transform_points(t, q, p), rtol=0, atol=0)


# --- torch.func transforms and forward AD inside torch.compile ------------------------------


def transform_cases(rng):
    """Every op, and each op family with its static arguments bound: label -> (fn, args,
    args mapped over a leading dimension, in_dims)."""
    cases = {}
    for name in OP_NAMES:
        mapped_args, mapped = vmap_args(name, rng, size=2)
        cases[name] = (
            getattr(xt, name),
            tuple(tensors(random_args(name, leading_cases(name)[2], rng))),
            tuple(tensors(mapped_args)),
            tuple(0 if m else None for m in mapped),
        )

    def family(label, fn, first, *rest):  # the first argument mapped over two samples
        cases[label] = (
            fn,
            tuple(tensors([first[0], *rest])),
            tuple(tensors([first, *rest])),
            (0, *[None] * len(rest)),
        )

    rotations = np.stack([random_args("matrix_to_quaternion", [(5,)], rng)[0] for _ in "ab"])
    points, targets = rng.normal(size=(2, 2, 3, 6, 3))
    family(
        "euler_to_quaternion",
        lambda a: xt.euler_to_quaternion(a, "XYZ"),
        rng.normal(size=(2, 5, 3)),
    )
    family("euler_to_matrix", lambda a: xt.euler_to_matrix(a, "zyx"), rng.normal(size=(2, 5, 3)))
    family(
        "quaternion_to_euler",
        lambda q: xt.quaternion_to_euler(q, "ZXZ"),
        rng.normal(size=(2, 5, 4)),
    )
    family("matrix_to_euler", lambda m: xt.matrix_to_euler(m, "xyz"), rotations)
    family(
        "rigid_registration",
        lambda p, y, w: xt.rigid_registration(p, y, w, scale=True),
        np.stack([points, points + 0.1]),
        targets,
        rng.uniform(0.5, 2.0, size=(3, 6)),
    )
    return cases


def four_transforms(cases):
    """torch.func.jvp, torch.func.grad, torch.func.vmap(grad) and forward AD
    (`torch.autograd.forward_ad`) of every case, in one function: one compile covers them
    all (a compile per op would cost over a minute). The loss weights every result by
    fixed random weights."""

    def every_case(inputs):
        return {label: as_tuple(fn(*inputs[label])) for label, (fn, *_) in cases.items()}

    def run(args, tangents, mapped_args, weights):
        def loss(inputs):
            return sum(
                (w * r).sum()
                for label, results in every_case(inputs).items()
                for w, r in zip(weights[label], results)
            )

        in_dims = {label: case[3] for label, case in cases.items()}
        with fwAD.dual_level():
            duals = {
                label: tuple(fwAD.make_dual(a, t) for a, t in zip(args[label], tangents[label]))
                for label in cases
            }
            dual_tangents = {
                label: [fwAD.unpack_dual(r).tangent for r in results]
                for label, results in every_case(duals).items()
            }
        return {
            "jvp": torch.func.jvp(every_case, (args,), (tangents,))[1],
            "grad": torch.func.grad(loss)(args),
            "vmap(grad)": torch.func.vmap(torch.func.grad(loss), in_dims=(in_dims,))(mapped_args),
            "forward_ad": dual_tangents,
        }

    return run


def test_func_transforms_and_forward_ad_inside_compile(rng):
    """For every op and op family (this run's share of them: conftest.taken), the four
    transforms compiled (fullgraph) equal eager mode's, value for value; a None tangent
    (a non-differentiable result) stays None. Before issue 27 was fixed, jvp and forward
    AD gave zero tangents here, and grad raised."""
    torch._dynamo.reset()
    cases = {label: case for label, case in transform_cases(rng).items() if taken(label)}
    args = {label: case[1] for label, case in cases.items()}
    mapped_args = {label: case[2] for label, case in cases.items()}
    tangents = {
        label: tuple(torch.from_numpy(rng.normal(size=a.shape)) for a in case[1])
        for label, case in cases.items()
    }
    weights = {
        label: [torch.from_numpy(rng.normal(size=r.shape)) for r in as_tuple(fn(*inputs))]
        for label, (fn, inputs, *_) in cases.items()
    }
    run = four_transforms(cases)
    eager = run(args, tangents, mapped_args, weights)
    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")(
        args, tangents, mapped_args, weights
    )
    for transform, per_case in eager.items():
        for label, want in per_case.items():
            got = compiled[transform][label]
            assert len(got) == len(want), (transform, label)
            for k, (g, w) in enumerate(zip(got, want)):
                where = f"{label}: {transform}, value {k}"
                assert (g is None) == (w is None), where
                if w is not None:
                    torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-14, msg=where)


def test_dynamo_loads_at_the_first_compile_and_a_failing_op_leaves_the_others():
    """In a fresh process (one for both checks: each costs a torch.compile from cold):
    importing the adapter does not load torch._dynamo (the custom ops and marks wait for
    its first import); a torch.compile afterwards still gets the forward-mode rule; and
    one op whose registration fails at Dynamo's import leaves torch.compile working for
    the others, while compiling that op raises, naming it."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys, torch
        import xform.backends.torch as xt
        from xform.backends import _torch_compile
        assert "torch._dynamo" not in sys.modules
        original = _torch_compile._register_custom_ops

        def failing(op):
            if op.name == "so3_log":
                raise RuntimeError("planted")
            return original(op)

        _torch_compile._register_custom_ops = failing
        omega, tangent = torch.randn(2, 4, 3, dtype=torch.float64)
        jvp = lambda w, t: torch.func.jvp(xt.so3_exp, (w,), (t,))[1]
        compiled = torch.compile(jvp, fullgraph=True, backend="aot_eager")(omega, tangent)
        torch.testing.assert_close(compiled, jvp(omega, tangent), rtol=1e-12, atol=1e-14)
        assert compiled.abs().max() > 0.01
        try:
            torch.compile(xt.so3_log, fullgraph=True, backend="aot_eager")(xt.so3_exp(omega))
        except Exception as error:
            assert "so3_log cannot be traced" in str(error) and "planted" in str(error), error
        else:
            raise AssertionError("compiling so3_log did not raise")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_a_derivative_custom_op_is_not_differentiated_itself(rng):
    """The JVP and VJP custom ops (what a trace records; the Function around them
    differentiates them) have no derivative of their own: called where autograd records,
    they raise, where torch's fallback would warn and drop the gradient; with grad off
    they give the op's derivative."""
    import torch._dynamo  # noqa: F401  (the custom ops are registered at its import)

    from xform.backends._torch_compile import CUSTOM_OPS

    (so3_exp,) = [op for op in CUSTOM_OPS if op.name == "so3_exp"]
    custom = CUSTOM_OPS[so3_exp]
    omega = torch.from_numpy(rng.normal(size=(4, 3))).requires_grad_(True)
    tangent = torch.from_numpy(rng.normal(size=(4, 3)))
    cotangent = torch.from_numpy(rng.normal(size=(4, 4)))
    with pytest.raises(RuntimeError, match="has no derivative of its own"):
        custom.vjp(omega, cotangent, [True], 0)
    with pytest.raises(RuntimeError, match="has no derivative of its own"):
        custom.jvp(omega, tangent, 0)
    with torch.no_grad():
        (gradient,) = custom.vjp(omega, cotangent, [True], 0)
        tangent_out = custom.jvp(omega, tangent, 0)
    (expected,) = torch.autograd.grad(xt.so3_exp(omega), omega, cotangent)
    torch.testing.assert_close(gradient, expected, rtol=1e-12, atol=1e-14)
    _, expected = torch.func.jvp(xt.so3_exp, (omega.detach(),), (tangent,))
    torch.testing.assert_close(tangent_out, expected, rtol=1e-12, atol=1e-14)


def test_func_jvp_inside_compile_issue_example(rng):
    """The reported case, through the default backend (inductor): a batch of identities,
    whose tangent is far from zero."""
    torch._dynamo.reset()
    m = torch.eye(3, dtype=torch.float64).expand(5, 3, 3).clone()
    dm = torch.from_numpy(rng.normal(size=(5, 3, 3)))
    compiled = torch.compile(
        lambda m, dm: torch.func.jvp(xt.special_procrustes, (m,), (dm,))[1], fullgraph=True
    )(m, dm)
    eager = torch.func.jvp(xt.special_procrustes, (m,), (dm,))[1]
    assert eager.abs().max() > 0.1
    torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=1e-14)


SECOND_DERIVATIVES = {
    "hessian": torch.func.hessian,
    "grad-of-grad": lambda f: torch.func.grad(lambda x: torch.func.grad(f)(x).sum()),
}


@pytest.mark.parametrize("which", SECOND_DERIVATIVES)
def test_second_derivatives_inside_compile_equal_eager(which, rng):
    """Forward over reverse and reverse over reverse inside torch.compile(fullgraph=True)
    run the products' own custom ops and equal eager mode (which test_second_order checks
    against differences)."""
    torch._dynamo.reset()
    w = torch.from_numpy(rng.normal(size=(3, 4)))
    second = SECOND_DERIVATIVES[which](lambda omega: (w * xt.so3_exp(omega)).square().sum())
    compiled = torch.compile(second, fullgraph=True, backend="aot_eager")
    omega = torch.from_numpy(rng.normal(size=(3, 3)))
    eager = second(omega)
    assert eager.abs().max() > 0.1
    torch.testing.assert_close(compiled(omega), eager, rtol=1e-12, atol=1e-13)
