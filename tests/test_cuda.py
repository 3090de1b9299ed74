"""Every op on a CUDA device, through Warp arrays, PyTorch and JAX: values against the
float64 reference, gradients and tangents against the CPU path (itself checked against
finite differences), gradcheck, vmap, a broadcast pose over many points (atomics into one
address), non-contiguous inputs, zero-copy interop, no host-device mixing, 0-d batches,
the groups, a kinematic chain and its dynamics.

The GPU's routes are walked on the CPU too (device "cpu"), so that CI, which has no GPU,
fails first where the GPU would: Warp arrays, whose allocations have no 0-d form; JAX's
Python FFI function behind xform's guard, which the GPU runs (and which gets XLA's
buffers, 0-d ones included, not Warp arrays); launches made whole and VJPs that add into
a broadcast operand's gradient with the GPU's strided runs (`_launch.tiling.gpu_route`). There
the cases are those with a 0-d operand, and a sample of the rest. The CUDA half is
skipped where Warp sees no CUDA device; `benchmarks/gpu_check.sh` runs it on a lent GPU.
"""

import contextlib
import dataclasses
import sys

import numpy as np
import pytest
import warp as wp
from helpers import VARIANTS, as_tuple, assert_matches, check_grads, variant
from reference import leading_cases, random_args, reference, vmap_args

import xform
from xform import _launch
from xform._op import Product

try:
    import torch
    import torch.func

    import xform.backends.torch as xt
except ImportError:
    torch = None

HAS_CUDA = wp.get_cuda_device_count() > 0
GPU = "cuda:0"
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch")

OPS = sorted(xform.OPS)
DIFFERENTIABLE = [n for n in OPS if xform.OPS[n].differentiable]
CASES = [(n, c) for n in OPS for c in leading_cases(n)[::2]]
GRAD_CASES = [(n, c) for n in DIFFERENTIABLE for c in leading_cases(n)[::2]]
# The GPU contracts a*b + c into one rounding (FMA) where the CPU build may not.
CLOSE = {"rtol": 1e-11, "atol": 1e-11}


def zero_d(case) -> bool:
    """A case with a 0-d operand (the GPU's failures were all of these)."""
    return () in case[1]


def sample(case) -> bool:
    """Every fifth op: the CPU's share of tests that are not about 0-d batches."""
    return OPS.index(case if isinstance(case, str) else case[0]) % 5 == 0


def on_devices(cases, on_cpu=zero_d):
    """pytest params (device, *case): every case on the GPU, and those `on_cpu` picks on
    the CPU along the GPU's route."""
    params = []
    for device, marks in (("cpu", ()), (GPU, needs_cuda)):
        for case in cases:
            if device == GPU or on_cpu(case):
                values = case if isinstance(case, tuple) else (case,)
                ident = "-".join(str(v) for v in values)
                params.append(pytest.param(device, *values, marks=marks, id=f"{device}-{ident}"))
    return params


DEVICES = [pytest.param("cpu", id="cpu"), pytest.param(GPU, marks=needs_cuda, id=GPU)]


@contextlib.contextmanager
def walked(device: str):
    """Around the calls on `device`: on the CPU, launches run as the GPU's do, and JAX
    traces xform's ops anew to take the GPU's route, the Python function behind xform's
    guard (not a native program). References are computed outside."""
    if device != "cpu":
        yield
        return
    jax = sys.modules.get("jax")
    jax_native = sys.modules.get("xform.backends.jax_native")
    forced = jax_native.forced("callback") if jax_native else contextlib.nullcontext()
    if jax:
        jax.clear_caches()
    try:
        with _launch.tiling.gpu_route(), forced:
            yield
    finally:
        if jax:
            jax.clear_caches()


def warp_arrays(arrays, device, dtype=None):
    return [
        wp.array(a, dtype=dtype or wp.dtype_from_numpy(np.asarray(a).dtype), device=device)
        for a in arrays
    ]


def tensors(arrays, device, requires_grad=False):
    return [
        torch.from_numpy(np.asarray(a)).to(device).requires_grad_(requires_grad) for a in arrays
    ]


def cotangents_for(name, args, rng):
    return tuple(rng.normal(size=r.shape) for r in as_tuple(getattr(xform, name)(*args)))


def assert_warp_like(got, want) -> None:
    """A Warp result has the shape of the NumPy one up to leading ones: Warp has no 0-d
    arrays, so a 0-d result is one element of shape (1,), and a 0-d operand (a scalar t)
    one of shape (1,), a batch of one."""
    assert isinstance(got, wp.array)
    assert got.size == want.size and ones_dropped(got.shape) == ones_dropped(want.shape), (
        got.shape,
        want.shape,
    )


def ones_dropped(shape) -> tuple:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


# --- Warp arrays ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("device", "name", "leadings"), on_devices(CASES))
def test_warp_values_match_reference(device, name, leadings, dtype, rng):
    args = random_args(name, leadings, rng, dtype)
    with walked(device):
        results = as_tuple(getattr(xform, name)(*warp_arrays(args, device)))
    for got, want in zip(results, reference(name, args)):
        assert_warp_like(got, want)
        assert str(got.device) == device
        assert_matches(got.numpy().reshape(want.shape), want, dtype)


@pytest.mark.parametrize("which", VARIANTS)
@pytest.mark.parametrize(("device", "name", "leadings"), on_devices(GRAD_CASES))
def test_warp_vjp_and_jvp_match_cpu(device, name, leadings, which, rng):
    """With the closed forms and as derived from the element function (Warp's adjoint,
    compiled for the GPU by NVRTC). A 0-d cotangent or tangent is a Warp array of one
    element, as Warp has no 0-d arrays (and a scalar operand a batch of one)."""
    op = variant(name, which)
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    expected_vjp = xform.vjp(name, args, cotangents)
    expected_jvp = as_tuple(xform.jvp(name, args, tangents))

    def on_device(arrays):
        return warp_arrays(arrays, device, wp.float64)

    with walked(device):
        vjp = xform.vjp(op, on_device(args), on_device(cotangents))
        jvp = as_tuple(xform.jvp(op, on_device(args), on_device(tangents)))
    for got, want in zip(vjp, expected_vjp):
        np.testing.assert_allclose(got.numpy().reshape(want.shape), want, **CLOSE)
    for got, want in zip(jvp, expected_jvp):
        np.testing.assert_allclose(got.numpy().reshape(want.shape), want, **CLOSE)


def test_warp_scalar_results_round_trip(rng):
    """A 0-d result comes as one element of shape (1,), and goes back as a cotangent;
    so does a scalar t of shape (1,) against quaternions of shape (4,)."""
    q = rng.normal(size=4)
    angle = xform.rotation_angle(wp.array(q, dtype=wp.float64))
    assert angle.shape == (1,)
    (grad,) = xform.vjp("rotation_angle", [wp.array(q, dtype=wp.float64)], [angle])
    want = xform.vjp("rotation_angle", [q], [np.asarray(xform.rotation_angle(q))])[0]
    np.testing.assert_allclose(grad.numpy(), want, rtol=1e-12)
    q1, q2 = rng.normal(size=(2, 4))
    t = wp.array(np.array([0.3]), dtype=wp.float64)
    args = [wp.array(q1, dtype=wp.float64), wp.array(q2, dtype=wp.float64), t]
    assert xform.quaternion_slerp(*args).shape == (1, 4)
    g = np.ones(4)
    got = xform.vjp("quaternion_slerp", args, [wp.array(g, dtype=wp.float64)])
    for a, b in zip(got, xform.vjp("quaternion_slerp", [q1, q2, np.array(0.3)], [g])):
        np.testing.assert_allclose(a.numpy().reshape(b.shape), b, rtol=1e-12)
    with pytest.raises(ValueError, match="cotangent of 'out_angle' has shape \\(2,\\)"):
        xform.vjp("rotation_angle", [wp.array(q, dtype=wp.float64)], [wp.zeros(2, wp.float64)])


SHARED = [
    ("transform_points", [(), (), (1 << 20,)]),  # one pose: every lane shares it
    ("batch_transform_points", [(1000,), (1,), (1000, 300)]),  # a shared quaternion
    ("batch_transform_points_inverse", [(300,), (300,), (300, 1000)]),
    ("pose_multiply", [(1,), (1,), (1 << 16,), (1 << 16,)]),  # cuRobo's TransformPose
]


@pytest.mark.parametrize(("device", "name", "leadings"), on_devices(SHARED, lambda c: True))
def test_warp_shared_gradients_match_cpu(device, name, leadings, rng):
    """Gradients that many launch indices add into: strided runs summed in registers,
    then lanes of a warp that share an element summed with shuffles (SHARED_ADD)."""
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    expected = xform.vjp(name, args, cotangents)
    arrays = warp_arrays([*args, *cotangents], device, wp.float64)
    with walked(device):
        got = xform.vjp(name, arrays[: len(args)], tuple(arrays[len(args) :]))
    for g, want in zip(got, expected):
        tolerance = {"rtol": 1e-9, "atol": 1e-11 * np.abs(want).max()}  # sums in other orders
        np.testing.assert_allclose(g.numpy().reshape(want.shape), want, **tolerance)


# Broadcast gradients the GPU sums in blocks (`_launch/blocks.py`), deterministic: one pose
# over 4M points (partial sums per chunk), a batch of poses over their points (a block per
# pose), one quaternion for a batch (partial sums per block), two single poses.
IN_BLOCKS = [
    ("transform_points", [(), (), (1 << 22,)]),
    ("batch_transform_points", [(2048,), (2048,), (2048, 2048)]),
    ("batch_transform_points", [(2048,), (1,), (2048, 1024)]),
    ("pose_multiply", [(1,), (1,), (1 << 20,), (1 << 20,)]),
]


def tile_of(name, leadings, product=Product.VJP, device="cuda:0"):
    op = xform.OPS[name]
    shapes = [(*lead, *o.element) for lead, o in zip(leadings, op.operands)]
    operands = _launch.buffers.prepare(op, [np.zeros(s) for s in shapes])
    operands = dataclasses.replace(operands, device=device)
    (tile,) = _launch.tiling.product_tiles(operands, product, 1)
    return tile


def test_which_gpu_vjps_sum_their_broadcast_gradients_in_blocks():
    """In blocks: an operand broadcast along the innermost dimension (contiguous along the
    others) or one element for the launch; not: one broadcast along an outer dimension
    only (those still add atomically, in strided runs), and nothing on the CPU's route."""
    for name, leadings in IN_BLOCKS + SHARED:
        assert tile_of(name, leadings).blocks, name
    (one_pose, pose_batch, one_quaternion, _) = IN_BLOCKS
    assert tile_of(*one_pose).blocks == (2048, 2048)  # 4M summands over SUM_BLOCKS chunks
    assert tile_of(*pose_batch).blocks == (2048, 1)
    shared_points = ("batch_transform_points", [(64,), (64,), (1, 4096)])
    assert not tile_of(*shared_points).blocks
    assert not tile_of(*one_pose, product=Product.FORWARD).blocks
    assert not tile_of(*one_pose, device="cpu").blocks
    with _launch.tiling.gpu_route():
        assert tile_of(*one_pose, device="cpu").blocks
    op = xform.OPS["batch_transform_points"]
    shapes = [(2048, 3), (1, 4), (2048, 1024, 3)]
    scratch = _launch.tiling.scratch_shapes(op, Product.VJP, shapes, 0, (True,) * 3, GPU)
    assert scratch == [(2048, 4)]  # the quaternion's: one partial sum per block


@pytest.mark.parametrize("device", DEVICES)
@needs_torch
def test_partial_sums_of_a_broadcast_gradient_through_torch_and_jax(jax_on, device, rng):
    """Where a broadcast gradient adds up partial sums (one pose over 64k points: 64
    chunks), those are arrays of the caller's: PyTorch's allocator's, outputs of JAX's
    FFI call (`tiling.scratch_shapes`)."""
    import xform.backends.jax as xj

    jax, where = jax_on
    args = random_args("transform_points", [(), (), (1 << 16,)], rng)
    cotangent = rng.normal(size=(1 << 16, 3))
    expected = xform.vjp("transform_points", args, cotangent)
    inputs = tensors(args, device, requires_grad=True)
    with walked(device):
        assert tile_of("transform_points", [(), (), (1 << 16,)], device=device).blocks[1] == 64
        out = xt.transform_points(*inputs)
        grads = torch.autograd.grad(out, inputs, torch.from_numpy(cotangent).to(device))
        arrays = [jax.device_put(a, where) for a in args]
        _, pullback = jax.vjp(jax.jit(xj.transform_points), *arrays)
        jax_grads = jax.jit(pullback)(cotangent)
    for got, got_jax, want in zip(grads, jax_grads, expected):
        tolerance = {"rtol": 1e-9, "atol": 1e-11 * np.abs(want).max()}
        np.testing.assert_allclose(got.cpu().numpy(), want, **tolerance)
        np.testing.assert_allclose(np.asarray(got_jax), want, **tolerance)


@needs_cuda
@pytest.mark.parametrize(("name", "leadings"), IN_BLOCKS)
def test_gpu_results_and_gradients_repeat_bit_for_bit(name, leadings, rng):
    """Run to run on the GPU, float32: the same bits, broadcast gradients included (summed
    in blocks, in order, where atomic adds would land in any order)."""
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    arrays = warp_arrays([*args, *cotangents], GPU, wp.float32)
    inputs, outputs = arrays[: len(args)], tuple(arrays[len(args) :])
    first = [x.numpy() for x in as_tuple(getattr(xform, name)(*inputs))]
    gradients = [g.numpy() for g in xform.vjp(name, inputs, outputs)]
    for _ in range(4):
        for a, b in zip(as_tuple(getattr(xform, name)(*inputs)), first):
            np.testing.assert_array_equal(a.numpy(), b)
        for a, b in zip(xform.vjp(name, inputs, outputs), gradients):
            np.testing.assert_array_equal(a.numpy(), b)
    expected = xform.vjp(name, args, [np.asarray(c.numpy(), np.float64) for c in outputs])
    for got, want in zip(gradients, expected):
        scale = np.abs(want).max()
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=2e-3, atol=2e-3 * scale)


def test_the_gpu_route_runs_strided_runs_on_the_cpu():
    """What the CPU half of this file relies on: the GPU's grid for a shared gradient that
    is not summed in blocks (those take strided runs; the rest, `blocks.py`)."""
    op = xform.OPS["transform_points"]
    plan = _launch.buffers.cached_plan(op, ((3,), (4,), (1 << 16, 3)), 0)
    (tile,) = _launch.tiling.tiles(plan, 1)
    assert _launch.tiling.run_shape(op, Product.VJP, "cpu", tile) == (_launch.tiling.CPU_RUN, 1)
    with _launch.tiling.gpu_route():
        assert _launch.tiling.run_shape(op, Product.VJP, "cpu", tile) == (
            _launch.tiling.GPU_RUN,
            (1 << 16) // _launch.tiling.GPU_RUN,
        )
        operands = _launch.buffers.prepare(op, [np.zeros(3), np.zeros(4), np.zeros((1 << 20, 3))])
        assert _launch.tiling.parts(operands) == 1


# --- PyTorch -------------------------------------------------------------------------------


@pytest.mark.parametrize(("device", "name", "leadings"), on_devices(GRAD_CASES))
@needs_torch
def test_torch_values_gradients_and_tangents_match_cpu(device, name, leadings, rng):
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    expected_vjp = xform.vjp(name, args, cotangents)
    expected_jvp = as_tuple(xform.jvp(name, args, tangents))
    inputs = tensors(args, device, requires_grad=True)
    with walked(device):
        results = as_tuple(getattr(xt, name)(*inputs))
        grads = torch.autograd.grad(results, inputs, tensors(cotangents, device))
        _, jvps = torch.func.jvp(
            lambda *a: getattr(xt, name)(*a),
            tuple(t.detach() for t in inputs),
            tuple(tensors(tangents, device)),
        )
    for got, want in zip(results, reference(name, args)):
        assert got.device.type == torch.device(device).type and got.shape == want.shape
        assert_matches(got.detach().cpu().numpy(), want, np.float64)
    for got, want in zip(grads, expected_vjp):
        np.testing.assert_allclose(got.cpu().numpy(), want, **CLOSE)
    for got, want in zip(as_tuple(jvps), expected_jvp):
        np.testing.assert_allclose(got.cpu().numpy(), want, **CLOSE)


@pytest.mark.parametrize(("device", "name"), on_devices(DIFFERENTIABLE, sample))
@needs_torch
def test_torch_gradcheck(device, name, rng):
    args = tensors(random_args(name, leading_cases(name)[3], rng), device, True)
    with walked(device):
        assert torch.autograd.gradcheck(getattr(xt, name), args, check_forward_ad=True)


@pytest.mark.parametrize(("device", "name"), on_devices(DIFFERENTIABLE, sample))
@needs_torch
def test_torch_vmap_of_grad(device, name, rng):
    stacked, mapped = vmap_args(name, rng)
    inputs = tensors(stacked, device)
    fn = getattr(xt, name)

    def loss(*a):
        return sum(r.square().sum() for r in as_tuple(fn(*a)))

    assert mapped[0]  # grad differentiates the first argument, mapped in every sample
    in_dims = tuple(0 if m else None for m in mapped)
    with walked(device):
        batched = torch.func.vmap(torch.func.grad(loss), in_dims=in_dims)(*inputs)
    for k in range(stacked[0].shape[0]):
        sample_args = [x[k] if m else x for x, m in zip(inputs, mapped)]
        torch.testing.assert_close(batched[k], torch.func.grad(loss)(*sample_args))


@pytest.mark.parametrize("device", DEVICES)
@needs_torch
def test_torch_one_pose_over_a_million_points(device, rng):
    """Every point adds into the same pose gradient: atomics into one address."""
    args = random_args("transform_points", [(), (), (1 << 20,)], rng)
    cotangent = rng.normal(size=(1 << 20, 3))
    expected = xform.vjp("transform_points", args, cotangent)
    inputs = tensors(args, device, requires_grad=True)
    with walked(device):
        out = xt.transform_points(*inputs)
        grads = torch.autograd.grad(out, inputs, torch.from_numpy(cotangent).to(device))
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-9, atol=1e-9)


@needs_cuda
@needs_torch
def test_torch_cuda_non_contiguous_inputs(rng):
    t, q, p = random_args("batch_transform_points", [(4,), (4,), (4, 9)], rng)
    wide = torch.from_numpy(np.concatenate([p, p], -1)).cuda()[..., ::2]
    assert not wide.is_contiguous()
    got = xt.batch_transform_points(*tensors([t, q], GPU), wide)
    want = xform.batch_transform_points(t, q, np.ascontiguousarray(wide.cpu().numpy()))
    np.testing.assert_allclose(got.cpu().numpy(), want, **CLOSE)


@needs_cuda
@needs_torch
def test_torch_cuda_values_gradients_and_current_stream(rng):
    args = random_args("batch_transform_points", [(4,), (4,), (4, 100)], rng)
    gpu = tensors(args, GPU, requires_grad=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = xt.batch_transform_points(*gpu)
        out.sum().backward()
    stream.synchronize()
    want = xform.batch_transform_points(*args)
    np.testing.assert_allclose(out.detach().cpu().numpy(), want, **CLOSE)
    expected = xform.vjp("batch_transform_points", args, np.ones((4, 100, 3)))
    for a, e in zip(gpu, expected):
        np.testing.assert_allclose(a.grad.cpu().numpy(), e, **CLOSE)


@needs_cuda
@needs_torch
def test_torch_cuda_graph_capture_with_buffers(rng):
    t, q, p = tensors(random_args("transform_points", [(1,), (1,), (1000,)], rng), GPU)
    out = torch.empty(1000, 3, dtype=torch.float64, device="cuda")
    xt.transform_points(t, q, p, out_points=out)  # warm-up: kernels loaded
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        xt.transform_points(t, q, p, out_points=out)
    p.copy_(p * 2)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, xt.transform_points(t, q, p), rtol=0, atol=0)


@needs_cuda
@needs_torch
def test_torch_cuda_and_cpu_mixed_raise(rng):
    t, q = [torch.from_numpy(a) for a in random_args("pose_inverse", [(2,), (2,)], rng)]
    with pytest.raises(ValueError, match="'quaternion' is on cuda:0 but 'position' is on cpu"):
        xt.pose_inverse(t, q.cuda())


@needs_cuda
def test_warp_cuda_and_cpu_mixed_raise(rng):
    t, q = random_args("pose_inverse", [(2,), (2,)], rng)
    q = wp.array(q, dtype=wp.float64, device=GPU)
    with pytest.raises(ValueError, match="'quaternion' is on cuda:0 but 'position' is on cpu"):
        xform.pose_inverse(wp.array(t, dtype=wp.float64, device="cpu"), q)


# --- JAX -----------------------------------------------------------------------------------


@pytest.fixture
def jax_on(device):
    """(jax, the JAX device of `device`)."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    pytest.importorskip("xform.backends.jax")
    if device == "cpu":
        return jax, jax.devices("cpu")[0]
    try:
        (gpu, *_) = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    return jax, gpu


@pytest.mark.parametrize(("device", "name", "leadings"), on_devices(GRAD_CASES))
def test_jax_values_gradients_and_tangents_match_cpu(jax_on, device, name, leadings, rng):
    import xform.backends.jax as xj

    jax, where = jax_on
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    expected_vjp = xform.vjp(name, args, cotangents)
    expected_jvp = as_tuple(xform.jvp(name, args, tangents))
    fn = jax.jit(getattr(xj, name))
    inputs = [jax.device_put(a, where) for a in args]
    single = len(cotangents) == 1
    with walked(device):
        results, pullback = jax.vjp(fn, *inputs)
        grads = jax.jit(pullback)(cotangents[0] if single else cotangents)
        _, jvps = jax.jit(lambda *a: jax.jvp(fn, a, tuple(tangents)))(*inputs)
        jax.block_until_ready((results, grads, jvps))
    for got, want in zip(as_tuple(results), reference(name, args)):
        assert got.devices() == {where} and got.shape == want.shape
        assert_matches(np.asarray(got), want, np.float64)
    for got, want in zip(grads, expected_vjp):
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)
    for got, want in zip(as_tuple(jvps), expected_jvp):
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)


@pytest.mark.parametrize(("device", "name"), on_devices(DIFFERENTIABLE, sample))
def test_jax_jit_vmap_grad(jax_on, device, name, rng):
    import xform.backends.jax as xj

    jax, where = jax_on
    stacked, mapped = vmap_args(name, rng)
    fn = getattr(xj, name)

    def loss(*a):
        return sum((r**2).sum() for r in as_tuple(fn(*a)))

    in_axes = tuple(0 if m else None for m in mapped)
    inputs = [jax.device_put(a, where) for a in stacked]
    with walked(device):
        batched = jax.block_until_ready(jax.jit(jax.vmap(jax.grad(loss), in_axes=in_axes))(*inputs))
    with jax.default_device(jax.devices("cpu")[0]):
        for k in range(stacked[0].shape[0]):
            sample_args = [a[k] if m else a for a, m in zip(stacked, mapped)]
            expected = jax.grad(loss)(*sample_args)
            np.testing.assert_allclose(np.asarray(batched[k]), np.asarray(expected), **CLOSE)


FALLBACK = [
    ("rotation_angle", [()]),
    ("quaternion_geodesic_distance", [(), ()]),
    ("quaternion_slerp", [(), (), ()]),
    ("pose_interpolate", [(), (), (), (), ()]),
    ("transform_points", [(), (), (5,)]),
]


@pytest.mark.parametrize(("name", "leadings"), FALLBACK)
def test_jax_through_warps_callable_takes_0d_arrays(name, leadings, rng):
    """Where xform's guard cannot be had, warp.jax_callable runs the Python function: it
    takes no 0-d arrays, so those go as one element (on the CPU here, as on the GPU)."""
    jax = pytest.importorskip("jax")
    xj = pytest.importorskip("xform.backends.jax")
    from xform.backends import jax_native

    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    fn = jax.jit(getattr(xj, name))
    jax.clear_caches()
    try:
        with jax_native.forced("warp"):
            results, pullback = jax.vjp(fn, *args)
            grads = pullback(cotangents[0] if len(cotangents) == 1 else cotangents)
    finally:
        jax.clear_caches()
    for got, want in zip(as_tuple(results), reference(name, args)):
        assert got.shape == want.shape
        assert_matches(np.asarray(got), want, np.float64)
    for got, want in zip(grads, xform.vjp(name, args, cotangents)):
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)


# --- groups and a kinematic chain ------------------------------------------------------------

GROUP_TANGENTS = {"SO2": 1, "SE2": 3, "SO3": 3, "SE3": 6}
GROUP_CASES = [(g, b) for g in GROUP_TANGENTS for b in ((), (3,))]


def group_outputs(group, tangents, points, t):
    """A round of a group's methods: compose, invert, log, act and interpolate (with a
    scalar t); the arrays of what they give."""
    x, y = group.exp(tangents[0]), group.exp(tangents[1])
    return [(x @ y.inverse()).log(), x.apply(points), x.interpolate(y, t).log()]


def group_inputs(name, batch, rng):
    dof = GROUP_TANGENTS[name]
    dim = 2 if name.endswith("2") else 3
    return rng.normal(size=(2, *batch, dof)) * 0.7, rng.normal(size=(*batch, dim)), 0.3


@pytest.mark.parametrize(("device", "name", "batch"), on_devices(GROUP_CASES, lambda c: c[1] == ()))
@needs_torch
def test_groups_through_torch_match_the_cpu(device, name, batch, rng):
    group = getattr(xform, name)
    tangents, points, t = group_inputs(name, batch, rng)

    def outputs_and_grads(where, route):
        x = tensors([tangents, points, np.array(t)], where, requires_grad=True)
        with route:
            out = group_outputs(group, x[0], x[1], x[2])
            grads = torch.autograd.grad(sum(o.sum() for o in out), x)
        return [o.detach().cpu().numpy() for o in out] + [g.cpu().numpy() for g in grads]

    want = outputs_and_grads("cpu", contextlib.nullcontext())
    got = outputs_and_grads(device, walked(device))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, **CLOSE)


@pytest.mark.parametrize(("device", "name", "batch"), on_devices(GROUP_CASES, lambda c: c[1] == ()))
def test_groups_through_jax_match_the_cpu(jax_on, device, name, batch, rng):
    jax, where = jax_on
    group = getattr(xform, name)
    tangents, points, t = group_inputs(name, batch, rng)

    def loss(tangents, points, t):
        return sum(o.sum() for o in group_outputs(group, tangents, points, t))

    def run(args):
        out = jax.jit(lambda *a: group_outputs(group, *a))(*args)
        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args)
        return [np.asarray(x) for x in [*out, *grads]]

    with jax.default_device(jax.devices("cpu")[0]):
        want = run([tangents, points, np.array(t)])
    with walked(device):
        got = run([jax.device_put(np.asarray(a), where) for a in (tangents, points, t)])
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, **CLOSE)


def kinematic_chain():
    from test_kinematics import TREE

    return xform.kinematics.Chain.from_urdf(TREE)


def chain_expected(chain, q):
    """Link poses and the tip's Jacobian on NumPy, and the gradient of the sum of the
    tip's position, which is the sum of the Jacobian's linear rows."""
    poses = chain.forward_kinematics(q)
    jacobian = np.asarray(chain.jacobian(q, "tip"))
    return [np.asarray(poses.position), np.asarray(poses.quaternion), jacobian], jacobian[
        ..., :3, :
    ].sum(-2)


@pytest.mark.parametrize("batch", [(), (4,)])
@pytest.mark.parametrize("device", DEVICES)
def test_kinematics_through_jax_match_numpy(jax_on, device, batch, rng):
    """Forward kinematics, the Jacobian (its link index a 0-d operand) and a gradient,
    jitted, with and without a batch."""
    jax, where = jax_on
    chain = kinematic_chain()
    q = rng.uniform(-1, 1, size=(*batch, chain.dof))
    want, want_grad = chain_expected(chain, q)

    def tip(q):
        return chain.forward_kinematics(q, links=["tip"]).position.sum()

    with walked(device):
        x = jax.device_put(q, where)
        poses = jax.jit(chain.forward_kinematics)(x)
        jacobian = jax.jit(lambda q: chain.jacobian(q, "tip"))(x)
        grad = jax.jit(jax.grad(tip) if not batch else jax.vmap(jax.grad(tip)))(x)
    for g, w in zip([poses.position, poses.quaternion, jacobian], want):
        assert g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g), w, **CLOSE)
    np.testing.assert_allclose(np.asarray(grad), want_grad, **CLOSE)


@pytest.mark.parametrize("batch", [(), (4,)])
@pytest.mark.parametrize("device", DEVICES)
@needs_torch
def test_kinematics_through_torch_match_numpy(device, batch, rng):
    chain = kinematic_chain()
    q = rng.uniform(-1, 1, size=(*batch, chain.dof))
    want, want_grad = chain_expected(chain, q)
    (x,) = tensors([q], device, requires_grad=True)
    with walked(device):
        poses = chain.forward_kinematics(x)
        jacobian = chain.jacobian(x, "tip")
        (grad,) = torch.autograd.grad(
            chain.forward_kinematics(x, links=["tip"]).position.sum(), [x]
        )
    for g, w in zip([poses.position, poses.quaternion, jacobian], want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.detach().cpu().numpy(), w, **CLOSE)
    np.testing.assert_allclose(grad.cpu().numpy(), want_grad, **CLOSE)


def dynamics_chain(floating):
    """Both ways forward dynamics' value is computed: the tree with mimic joints (the mass
    matrix factored) on a fixed base, the same tree without them (the articulated-body
    recursion) on a floating one."""
    from test_dynamics import OWN_TREE, TREE

    return xform.kinematics.Chain.from_urdf(OWN_TREE if floating else TREE, floating_base=floating)


def dynamics_expected(chain, q, v, a):
    """Inverse dynamics, the mass matrix and forward dynamics on NumPy, and the gradient
    in q of the sum of the torques."""
    tau = chain.inverse_dynamics(q, v, a)
    op = chain.dynamics_op("inverse_dynamics")
    args = chain.dynamics_arguments("inverse_dynamics", q, v, a)
    gradient = xform.vjp(op, args, np.ones_like(tau))[0]
    return [tau, chain.mass_matrix(q), chain.forward_dynamics(q, v, tau)], gradient


@pytest.mark.parametrize("floating", [False, True], ids=["fixed", "floating"])
@pytest.mark.parametrize("batch", [(), (4,)])
@pytest.mark.parametrize("device", DEVICES)
def test_dynamics_through_jax_match_numpy(jax_on, device, batch, floating, rng):
    """Inverse dynamics, the mass matrix, forward dynamics and a gradient, jitted, with
    and without a batch (the tables are 0-d operands)."""
    jax, where = jax_on
    chain = dynamics_chain(floating)
    from dynamics_reference import random_state

    q, v, a = random_state(chain, rng, batch)
    want, want_grad = dynamics_expected(chain, q, v, a)
    with walked(device):
        x, y, z = (jax.device_put(t, where) for t in (q, v, a))
        tau = jax.jit(chain.inverse_dynamics)(x, y, z)
        m = jax.jit(chain.mass_matrix)(x)
        acc = jax.jit(chain.forward_dynamics)(x, y, tau)
        grad = jax.jit(jax.grad(lambda q: chain.inverse_dynamics(q, y, z).sum()))(x)
    for g, w in zip([tau, m, acc], want):
        assert g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g), w, **CLOSE)
    np.testing.assert_allclose(np.asarray(grad), want_grad, **CLOSE)


@pytest.mark.parametrize("floating", [False, True], ids=["fixed", "floating"])
@pytest.mark.parametrize("batch", [(), (4,)])
@pytest.mark.parametrize("device", DEVICES)
@needs_torch
def test_dynamics_through_torch_match_numpy(device, batch, floating, rng):
    chain = dynamics_chain(floating)
    from dynamics_reference import random_state

    q, v, a = random_state(chain, rng, batch)
    want, want_grad = dynamics_expected(chain, q, v, a)
    x, y, z = tensors([q, v, a], device, requires_grad=True)
    with walked(device):
        tau = chain.inverse_dynamics(x, y, z)
        m = chain.mass_matrix(x)
        acc = chain.forward_dynamics(x, y, tau)
        (grad,) = torch.autograd.grad(tau.sum(), [x])
        derivatives = chain.inverse_dynamics_derivatives(x.detach(), y.detach(), z.detach())
    for g, w in zip([tau, m, acc], want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.detach().cpu().numpy(), w, **CLOSE)
    np.testing.assert_allclose(grad.cpu().numpy(), want_grad, **CLOSE)
    for g, w in zip(derivatives, chain.inverse_dynamics_derivatives(q, v, a)):
        np.testing.assert_allclose(g.cpu().numpy(), w, **CLOSE)


# --- user ops --------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@needs_torch
def test_user_ops_through_torch(device, rng):
    from test_define_op import POLAR, SCALED_ROTATE

    shapes = [(5, 4), (5, 3), (5,)]
    args = tensors([rng.normal(size=s) for s in shapes], device, requires_grad=True)
    (v,) = tensors([rng.normal(size=(6, 3))], device, requires_grad=True)
    with walked(device):
        assert torch.autograd.gradcheck(SCALED_ROTATE, args, check_forward_ad=True)
        assert torch.autograd.gradcheck(POLAR, [v], check_forward_ad=True)


@pytest.mark.parametrize("device", DEVICES)
def test_user_ops_through_jax(jax_on, device, rng):
    from test_define_op import POLAR, SCALED_ROTATE

    jax, where = jax_on
    args = [jax.device_put(rng.normal(size=s), where) for s in [(5, 4), (5, 3), (5,)]]
    with walked(device):
        check_grads(jax.jit(SCALED_ROTATE), args)
        check_grads(POLAR, [jax.device_put(rng.normal(size=(6, 3)), where)], modes=["rev"])


# --- interop ---------------------------------------------------------------------------


@needs_cuda
@needs_torch
def test_cuda_interop_is_zero_copy(rng):
    jax = pytest.importorskip("jax")
    try:
        (gpu, *_) = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    x = torch.from_numpy(rng.normal(size=(64, 3))).cuda()
    as_jax = xform.to_jax(x)
    assert as_jax.devices() == {gpu}
    assert as_jax.unsafe_buffer_pointer() == x.data_ptr()
    back = xform.to_torch(as_jax)
    assert back.device.type == "cuda" and back.data_ptr() == x.data_ptr()
    as_warp = xform.to_warp(x)
    assert str(as_warp.device) == GPU and as_warp.ptr == x.data_ptr()
    np.testing.assert_array_equal(np.asarray(as_jax), x.cpu().numpy())


# --- functions over ops: Euler conventions, registration (sums), random rotations -----------


def registration_problem(rng, batch=3, n=20_000):
    p, y = rng.normal(size=(2, batch, n, 3))
    w = rng.uniform(0.5, 1.5, size=(batch, n))
    return p, y, w


@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_warp_registration_matches_cpu_and_repeats_bit_for_bit(device, scale, rng):
    """Sums of 20000 points in chunks: the same values as the CPU to rounding, and the
    same bits call after call (partial sums in order, no atomics)."""
    arrays = registration_problem(rng)
    expected = xform.rigid_registration(*arrays, scale=scale)
    on_device = warp_arrays(arrays, device, wp.float64)
    with walked(device):
        first = [r.numpy() for r in xform.rigid_registration(*on_device, scale=scale)]
        again = [
            [r.numpy() for r in xform.rigid_registration(*on_device, scale=scale)] for _ in range(3)
        ]
    for got, want in zip(first, expected):
        np.testing.assert_allclose(got.reshape(want.shape), want, **CLOSE)
    for repeat in again:
        for a, b in zip(repeat, first):
            np.testing.assert_array_equal(a, b)


@needs_cuda
@needs_torch
def test_torch_cuda_registration_and_euler(rng):
    arrays = registration_problem(rng, batch=2, n=300)
    tensors_ = tensors(list(arrays), GPU, requires_grad=True)
    out = xt.rigid_registration(*tensors_, scale=True)
    for got, want in zip(out, xform.rigid_registration(*arrays, scale=True)):
        np.testing.assert_allclose(got.detach().cpu().numpy(), want, **CLOSE)
    small = tensors([a[:, :6] for a in arrays], GPU, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda p, y, w: xt.rigid_registration(p, y, w, scale=True), small, check_forward_ad=True
    )
    (angles,) = tensors([rng.uniform(-1, 1, size=(5, 3))], GPU, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a: xt.euler_to_quaternion(a, "ZYX"), [angles], check_forward_ad=True
    )
    generator = torch.Generator(device="cuda").manual_seed(5)
    q = xt.random_quaternion((1000,), generator, dtype=torch.float64)
    assert q.device.type == "cuda"
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(1000, dtype=q.dtype, device=q.device))


@pytest.mark.parametrize("device", DEVICES)
def test_jax_registration_jit_grad_vmap(jax_on, device, rng):
    import xform.backends.jax as xj

    jax, where = jax_on
    arrays = registration_problem(rng, batch=4, n=500)

    def loss(p, y, w):
        return sum((r**2).sum() for r in xj.rigid_registration(p, y, w, scale=True))

    with jax.default_device(jax.devices("cpu")[0]):
        expected = [np.asarray(g) for g in jax.grad(loss, argnums=(0, 1, 2))(*arrays)]
    inputs = [jax.device_put(a, where) for a in arrays]
    fn = jax.jit(lambda p, y, w: xj.rigid_registration(p, y, w, scale=True))
    with walked(device):
        results = jax.block_until_ready(fn(*inputs))
        grads = jax.block_until_ready(jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*inputs))
        batched = jax.block_until_ready(jax.jit(jax.vmap(loss))(*inputs))
    for got, want in zip(results, xform.rigid_registration(*arrays, scale=True)):
        assert got.devices() == {where}
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)
    assert batched.shape == (4,) and np.isfinite(np.asarray(batched)).all()


NATIVE_CUDA = """
import warnings, numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import xform, xform.backends.jax as xj
from xform.backends import jax_native
rng = np.random.default_rng(0)
gpu = jax.devices("gpu")[0]
cases = {
    "transform_points": [rng.normal(size=3), rng.normal(size=4), rng.normal(size=(100_000, 3))],
    "pose_multiply": [rng.normal(size=(7, 3)), rng.normal(size=(7, 4)),
                      rng.normal(size=(1, 3)), rng.normal(size=(7, 4))],
    "quaternion_to_matrix": [rng.normal(size=(5, 4))],
    "rotation_angle": [rng.normal(size=4)],
    "quaternion_slerp": [rng.normal(size=4), rng.normal(size=4), np.array(0.3)],
}
def products(name, args):
    f = getattr(xj, name)
    g = lambda *a: sum(jnp.sum(r) for r in jax.tree_util.tree_leaves(f(*a)))
    tangents = tuple(jnp.ones_like(a) for a in args)
    return [jax.jit(lambda *a: f(*a))(*args), jax.jit(jax.grad(g, argnums=0))(*args),
            jax.jit(lambda *a: jax.jvp(f, a, tangents))(*args)]
with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert jax_native.cuda_library() is not None
for name, args in cases.items():
    args = [jax.device_put(jnp.asarray(a), gpu) for a in args]
    native = [np.asarray(x) for x in jax.tree_util.tree_leaves(products(name, args))]
    jax.clear_caches()
    with jax_native.forced("callback"):
        callback = [np.asarray(x) for x in jax.tree_util.tree_leaves(products(name, args))]
    jax.clear_caches()
    # To rounding, not bit for bit: the one pose's gradient over 100k points is summed
    # with atomics, in an order that varies from run to run.
    for a, b in zip(native, callback):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(b).max()))
points, targets = (jax.device_put(jnp.asarray(rng.normal(size=(3, 30_000, 3))), gpu) for _ in "ab")
t, q = jax.jit(xj.rigid_registration)(points, targets)
assert np.all(np.isfinite(np.asarray(t)))
print("native cuda ok")
"""


@needs_cuda
def test_the_native_cuda_path_matches_the_python_function(tmp_path):
    """XFORM_JAX_CUDA=native: the programs launched on XLA's stream from C, against the
    Python function behind the guard, for forward, grad (a broadcast pose over 100k
    points) and jvp, 0-d batches included."""
    pytest.importorskip("jax")
    import os
    import subprocess
    import sys

    script = tmp_path / "native_cuda.py"
    script.write_text(NATIVE_CUDA)
    env = {**os.environ, "XFORM_JAX_CUDA": "native", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "native cuda ok" in done.stdout
