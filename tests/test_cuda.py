"""Every op on a CUDA device, through Warp arrays, PyTorch and JAX: values against the
float64 reference, gradients and tangents against the CPU path (itself checked against
finite differences), gradcheck, vmap, a broadcast pose over many points (atomics into one
address), non-contiguous inputs, zero-copy interop, and no host-device mixing.

Skipped where Warp sees no CUDA device; run on a GPU machine when one is at hand."""

import numpy as np
import pytest
import warp as wp
from helpers import VARIANTS, as_tuple, assert_matches, check_grads, variant
from reference import leading_cases, random_args, reference, vmap_args

import xform

try:
    import torch
    import torch.func
    import xform.backends.torch as xt
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="needs a CUDA device")

OPS = sorted(xform.OPS)
DIFFERENTIABLE = [n for n in OPS if xform.OPS[n].differentiable]
CASES = [(n, c) for n in OPS for c in leading_cases(n)[::2]]
GRAD_CASES = [(n, c) for n in DIFFERENTIABLE for c in leading_cases(n)[::2]]
# The GPU contracts a*b + c into one rounding (FMA) where the CPU build may not.
CLOSE = {"rtol": 1e-11, "atol": 1e-11}


def ids(cases):
    return [f"{n}-{c}" for n, c in cases]


def cotangents_for(name, args, rng):
    return tuple(rng.normal(size=r.shape) for r in as_tuple(getattr(xform, name)(*args)))


# --- Warp arrays ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("name", "leadings"), CASES, ids=ids(CASES))
def test_warp_cuda_values_match_reference(name, leadings, dtype, rng):
    args = random_args(name, leadings, rng, dtype)
    gpu = [wp.array(a, dtype=wp.dtype_from_numpy(a.dtype), device="cuda:0") for a in args]
    for got, want in zip(as_tuple(getattr(xform, name)(*gpu)), reference(name, args)):
        assert isinstance(got, wp.array) and str(got.device) == "cuda:0"
        assert_matches(got.numpy().reshape(want.shape), want, dtype)


@pytest.mark.parametrize("which", VARIANTS)
@pytest.mark.parametrize(("name", "leadings"), GRAD_CASES, ids=ids(GRAD_CASES))
def test_warp_cuda_vjp_and_jvp_match_cpu(name, leadings, which, rng):
    """With the closed forms and as derived from the element function (Warp's adjoint,
    compiled for the GPU by NVRTC)."""
    op = variant(name, which)
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    tangents = [rng.normal(size=a.shape) for a in args]

    def gpu(arrays):
        return [wp.array(a, dtype=wp.float64, device="cuda:0") for a in arrays]

    for got, want in zip(
        xform.vjp(op, gpu(args), gpu(cotangents)), xform.vjp(name, args, cotangents)
    ):
        np.testing.assert_allclose(got.numpy().reshape(want.shape), want, **CLOSE)
    expected = as_tuple(xform.jvp(name, args, tangents))
    for got, want in zip(as_tuple(xform.jvp(op, gpu(args), gpu(tangents))), expected):
        np.testing.assert_allclose(got.numpy().reshape(want.shape), want, **CLOSE)


@pytest.mark.parametrize(
    ("name", "leadings"),
    [
        ("transform_points", [(), (), (1 << 20,)]),  # one pose: every lane shares it
        ("batch_transform_points", [(1000,), (1,), (1000, 300)]),  # a shared quaternion
        ("batch_transform_points_inverse", [(300,), (300,), (300, 1000)]),
        ("pose_multiply", [(1,), (1,), (1 << 16,), (1 << 16,)]),  # cuRobo's TransformPose
    ],
)
def test_warp_cuda_shared_gradients_match_cpu(name, leadings, rng):
    """Gradients that many launch indices add into: strided runs summed in registers,
    then lanes of a warp that share an element summed with shuffles (SHARED_ADD)."""
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    gpu = [wp.array(a, dtype=wp.float64, device="cuda:0") for a in (*args, *cotangents)]
    got = xform.vjp(name, gpu[: len(args)], tuple(gpu[len(args) :]))
    for g, want in zip(got, xform.vjp(name, args, cotangents)):
        tolerance = {"rtol": 1e-9, "atol": 1e-11 * np.abs(want).max()}  # sums in other orders
        np.testing.assert_allclose(g.numpy().reshape(want.shape), want, **tolerance)


# --- PyTorch -------------------------------------------------------------------------------


torch_cuda = pytest.mark.skipif(
    torch is None or not torch.cuda.is_available(), reason="needs PyTorch with CUDA"
)


def cuda_tensors(arrays, requires_grad=False):
    return [torch.from_numpy(np.asarray(a)).cuda().requires_grad_(requires_grad) for a in arrays]


@pytest.mark.parametrize(("name", "leadings"), GRAD_CASES, ids=ids(GRAD_CASES))
@torch_cuda
def test_torch_cuda_values_gradients_and_tangents_match_cpu(name, leadings, rng):
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    inputs = cuda_tensors(args, requires_grad=True)
    results = as_tuple(getattr(xt, name)(*inputs))
    for got, want in zip(results, reference(name, args)):
        assert got.device.type == "cuda"
        assert_matches(got.detach().cpu().numpy(), want, np.float64)
    grads = torch.autograd.grad(results, inputs, cuda_tensors(cotangents))
    for got, want in zip(grads, xform.vjp(name, args, cotangents)):
        np.testing.assert_allclose(got.cpu().numpy(), want, **CLOSE)
    _, jvps = torch.func.jvp(
        lambda *a: getattr(xt, name)(*a),
        tuple(t.detach() for t in inputs),
        tuple(cuda_tensors(tangents)),
    )
    for got, want in zip(as_tuple(jvps), as_tuple(xform.jvp(name, args, tangents))):
        np.testing.assert_allclose(got.cpu().numpy(), want, **CLOSE)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@torch_cuda
def test_torch_cuda_gradcheck(name, rng):
    args = cuda_tensors(random_args(name, leading_cases(name)[3], rng), True)
    assert torch.autograd.gradcheck(getattr(xt, name), args, check_forward_ad=True)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@torch_cuda
def test_torch_cuda_vmap_of_grad(name, rng):
    stacked, mapped = vmap_args(name, rng)
    inputs = cuda_tensors(stacked)
    fn = getattr(xt, name)

    def loss(*a):
        return sum(r.square().sum() for r in as_tuple(fn(*a)))

    assert mapped[0]  # grad differentiates the first argument, mapped in every sample
    in_dims = tuple(0 if m else None for m in mapped)
    batched = torch.func.vmap(torch.func.grad(loss), in_dims=in_dims)(*inputs)
    for k in range(stacked[0].shape[0]):
        sample = [x[k] if m else x for x, m in zip(inputs, mapped)]
        torch.testing.assert_close(batched[k], torch.func.grad(loss)(*sample))


@torch_cuda
def test_torch_cuda_one_pose_over_a_million_points(rng):
    """Every point adds into the same pose gradient: atomics into one address."""
    args = random_args("transform_points", [(), (), (1 << 20,)], rng)
    cotangent = rng.normal(size=(1 << 20, 3))
    inputs = cuda_tensors(args, requires_grad=True)
    out = xt.transform_points(*inputs)
    grads = torch.autograd.grad(out, inputs, torch.from_numpy(cotangent).cuda())
    for got, want in zip(grads, xform.vjp("transform_points", args, cotangent)):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-9, atol=1e-9)


@torch_cuda
def test_torch_cuda_non_contiguous_inputs(rng):
    t, q, p = random_args("batch_transform_points", [(4,), (4,), (4, 9)], rng)
    wide = torch.from_numpy(np.concatenate([p, p], -1)).cuda()[..., ::2]
    assert not wide.is_contiguous()
    got = xt.batch_transform_points(*cuda_tensors([t, q]), wide)
    want = xform.batch_transform_points(t, q, np.ascontiguousarray(wide.cpu().numpy()))
    np.testing.assert_allclose(got.cpu().numpy(), want, **CLOSE)


@torch_cuda
def test_torch_cuda_values_gradients_and_current_stream(rng):
    args = random_args("batch_transform_points", [(4,), (4,), (4, 100)], rng)
    gpu = cuda_tensors(args, requires_grad=True)
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


@torch_cuda
def test_torch_cuda_graph_capture_with_buffers(rng):
    t, q, p = cuda_tensors(random_args("transform_points", [(1,), (1,), (1000,)], rng))
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


@torch_cuda
def test_torch_cuda_and_cpu_mixed_raise(rng):
    t, q = [torch.from_numpy(a) for a in random_args("pose_inverse", [(2,), (2,)], rng)]
    with pytest.raises(ValueError, match="'quaternion' is on cuda:0 but 'position' is on cpu"):
        xt.pose_inverse(t, q.cuda())


def test_warp_cuda_and_cpu_mixed_raise(rng):
    t, q = random_args("pose_inverse", [(2,), (2,)], rng)
    q = wp.array(q, dtype=wp.float64, device="cuda:0")
    with pytest.raises(ValueError, match="'quaternion' is on cuda:0 but 'position' is on cpu"):
        xform.pose_inverse(wp.array(t, dtype=wp.float64, device="cpu"), q)


# --- JAX -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jax_gpu():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    try:
        (gpu, *_) = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    pytest.importorskip("xform.backends.jax")
    return jax, gpu


@pytest.mark.parametrize(("name", "leadings"), GRAD_CASES, ids=ids(GRAD_CASES))
def test_jax_gpu_values_gradients_and_tangents_match_cpu(jax_gpu, name, leadings, rng):
    import xform.backends.jax as xj

    jax, gpu = jax_gpu
    args = random_args(name, leadings, rng)
    cotangents = cotangents_for(name, args, rng)
    tangents = [rng.normal(size=a.shape) for a in args]
    fn = jax.jit(getattr(xj, name))
    inputs = [jax.device_put(a, gpu) for a in args]
    results, pullback = jax.vjp(fn, *inputs)
    for got, want in zip(as_tuple(results), reference(name, args)):
        assert got.devices() == {gpu}
        assert_matches(np.asarray(got), want, np.float64)
    single = len(cotangents) == 1
    grads = jax.jit(pullback)(cotangents[0] if single else cotangents)
    for got, want in zip(grads, xform.vjp(name, args, cotangents)):
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)
    _, jvps = jax.jit(lambda *a: jax.jvp(fn, a, tuple(tangents)))(*inputs)
    for got, want in zip(as_tuple(jvps), as_tuple(xform.jvp(name, args, tangents))):
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_jax_gpu_jit_vmap_grad(jax_gpu, name, rng):
    import xform.backends.jax as xj

    jax, gpu = jax_gpu
    stacked, mapped = vmap_args(name, rng)
    fn = getattr(xj, name)

    def loss(*a):
        return sum((r**2).sum() for r in as_tuple(fn(*a)))

    in_axes = tuple(0 if m else None for m in mapped)
    inputs = [jax.device_put(a, gpu) for a in stacked]
    batched = jax.jit(jax.vmap(jax.grad(loss), in_axes=in_axes))(*inputs)
    with jax.default_device(jax.devices("cpu")[0]):
        for k in range(stacked[0].shape[0]):
            sample = [a[k] if m else a for a, m in zip(stacked, mapped)]
            expected = jax.grad(loss)(*sample)
            np.testing.assert_allclose(np.asarray(batched[k]), np.asarray(expected), **CLOSE)


# --- user ops --------------------------------------------------------------------------


@torch_cuda
def test_user_ops_on_cuda_through_torch(rng):
    from test_define_op import POLAR, SCALED_ROTATE

    shapes = [(5, 4), (5, 3), (5,)]
    args = cuda_tensors([rng.normal(size=s) for s in shapes], requires_grad=True)
    assert torch.autograd.gradcheck(SCALED_ROTATE, args, check_forward_ad=True)
    (v,) = cuda_tensors([rng.normal(size=(6, 3))], requires_grad=True)
    assert torch.autograd.gradcheck(POLAR, [v], check_forward_ad=True)


def test_user_ops_on_gpu_through_jax(jax_gpu, rng):
    from test_define_op import POLAR, SCALED_ROTATE

    jax, gpu = jax_gpu
    args = [jax.device_put(rng.normal(size=s), gpu) for s in [(5, 4), (5, 3), (5,)]]
    check_grads(jax.jit(SCALED_ROTATE), args)
    check_grads(POLAR, [jax.device_put(rng.normal(size=(6, 3)), gpu)], modes=["rev"])


# --- interop ---------------------------------------------------------------------------


@torch_cuda
def test_cuda_interop_is_zero_copy(jax_gpu, rng):
    jax, gpu = jax_gpu
    x = torch.from_numpy(rng.normal(size=(64, 3))).cuda()
    as_jax = xform.to_jax(x)
    assert as_jax.devices() == {gpu}
    assert as_jax.unsafe_buffer_pointer() == x.data_ptr()
    back = xform.to_torch(as_jax)
    assert back.device.type == "cuda" and back.data_ptr() == x.data_ptr()
    as_warp = xform.to_warp(x)
    assert str(as_warp.device) == "cuda:0" and as_warp.ptr == x.data_ptr()
    np.testing.assert_array_equal(np.asarray(as_jax), x.cpu().numpy())


# --- functions over ops: Euler conventions, registration (sums), random rotations -----------


def registration_problem(rng, batch=3, n=20_000):
    p, y = rng.normal(size=(2, batch, n, 3))
    w = rng.uniform(0.5, 1.5, size=(batch, n))
    return p, y, w


@pytest.mark.parametrize("scale", [False, True])
def test_warp_cuda_registration_matches_cpu_and_repeats_bit_for_bit(scale, rng):
    """Sums of 20000 points in chunks: the same values as the CPU to rounding, and the
    same bits call after call (partial sums in order, no atomics)."""
    arrays = registration_problem(rng)
    expected = xform.rigid_registration(*arrays, scale=scale)
    gpu = [wp.array(a, dtype=wp.float64, device="cuda:0") for a in arrays]
    first = [r.numpy() for r in xform.rigid_registration(*gpu, scale=scale)]
    for got, want in zip(first, expected):
        np.testing.assert_allclose(got.reshape(want.shape), want, **CLOSE)
    for _ in range(3):
        again = xform.rigid_registration(*gpu, scale=scale)
        for a, b in zip(again, first):
            np.testing.assert_array_equal(a.numpy(), b)


@torch_cuda
def test_torch_cuda_registration_and_euler(rng):
    arrays = registration_problem(rng, batch=2, n=300)
    tensors = cuda_tensors(list(arrays), requires_grad=True)
    out = xt.rigid_registration(*tensors, scale=True)
    for got, want in zip(out, xform.rigid_registration(*arrays, scale=True)):
        np.testing.assert_allclose(got.detach().cpu().numpy(), want, **CLOSE)
    small = cuda_tensors([a[:, :6] for a in arrays], requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda p, y, w: xt.rigid_registration(p, y, w, scale=True), small, check_forward_ad=True
    )
    (angles,) = cuda_tensors([rng.uniform(-1, 1, size=(5, 3))], requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a: xt.euler_to_quaternion(a, "ZYX"), [angles], check_forward_ad=True
    )
    generator = torch.Generator(device="cuda").manual_seed(5)
    q = xt.random_quaternion((1000,), generator, dtype=torch.float64)
    assert q.device.type == "cuda"
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(1000, dtype=q.dtype, device=q.device))


def test_jax_gpu_registration_jit_grad_vmap(jax_gpu, rng):
    import xform.backends.jax as xj

    jax, gpu = jax_gpu
    arrays = registration_problem(rng, batch=4, n=500)
    inputs = [jax.device_put(a, gpu) for a in arrays]
    fn = jax.jit(lambda p, y, w: xj.rigid_registration(p, y, w, scale=True))
    for got, want in zip(fn(*inputs), xform.rigid_registration(*arrays, scale=True)):
        assert got.devices() == {gpu}
        np.testing.assert_allclose(np.asarray(got), want, **CLOSE)

    def loss(p, y, w):
        return sum((r**2).sum() for r in xj.rigid_registration(p, y, w, scale=True))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*inputs)
    with jax.default_device(jax.devices("cpu")[0]):
        expected = jax.grad(loss, argnums=(0, 1, 2))(*arrays)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), **CLOSE)
    batched = jax.jit(jax.vmap(loss))(*inputs)
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
}
def products(name, args):
    f = getattr(xj, name)
    g = lambda *a: sum(jnp.sum(r) for r in jax.tree_util.tree_leaves(f(*a)))
    tangents = tuple(jnp.ones_like(a) for a in args)
    return [jax.jit(lambda *a: f(*a))(*args), jax.jit(jax.grad(g, argnums=(0, 1)))(*args),
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


def test_the_native_cuda_path_matches_warps_callable_bit_for_bit(tmp_path):
    """XFORM_JAX_CUDA=native: the programs launched on XLA's stream from C, against
    warp.jax_callable, for forward, grad (a broadcast pose over 100k points) and jvp."""
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
