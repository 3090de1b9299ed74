"""The JAX adapter: values, check_grads in both modes, quaternion gradients against an
independent jnp formula, jit with changing sizes, vmap (one launch) composed with grad,
jvp, linearize, trace-time errors, parity with PyTorch, and shard_map over 2 devices."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import as_tuple, assert_matches, check_grads
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

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

xj = pytest.importorskip("xform.backends.jax")


def sample_cases(names, every=3):
    return [(n, c) for n in names for c in leading_cases(n)[::every]]


CASES = sample_cases(OP_NAMES)
GRAD_CASES = sample_cases(DIFFERENTIABLE)


def ids(cases):
    return [f"{n}-{c}" for n, c in cases]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("name", "leadings"), CASES, ids=ids(CASES))
def test_values_match_reference_and_numpy_path(name, leadings, dtype, rng):
    args = random_args(name, leadings, rng, dtype)
    results = as_tuple(jax.jit(getattr(xj, name))(*map(jnp.asarray, args)))
    for got, via_numpy, want in zip(
        results, as_tuple(getattr(xform, name)(*args)), reference(name, args)
    ):
        assert got.dtype == dtype
        np.testing.assert_array_equal(np.asarray(got), via_numpy)
        assert_matches(np.asarray(got), want, dtype)


@pytest.mark.parametrize(("name", "leadings"), GRAD_CASES, ids=ids(GRAD_CASES))
def test_check_grads_reverse_and_forward(name, leadings, rng):
    args = tuple(map(jnp.asarray, random_args(name, leadings, rng)))
    check_grads(getattr(xj, name), args)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_grad_and_jvp_identical_to_numpy_core(name, rng):
    args = random_args(name, leading_cases(name)[2], rng)
    results = as_tuple(getattr(xform, name)(*args))
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    _, pullback = jax.vjp(getattr(xj, name), *map(jnp.asarray, args))
    grads = pullback(cotangents if len(results) > 1 else cotangents[0])
    for g, e in zip(grads, xform.vjp(name, args, cotangents)):
        np.testing.assert_array_equal(np.asarray(g), e)
    directions = [rng.normal(size=a.shape) for a in args]
    _, tangents = jax.jvp(getattr(xj, name), tuple(args), tuple(directions))
    for t, e in zip(as_tuple(tangents), as_tuple(xform.jvp(name, args, directions))):
        np.testing.assert_array_equal(np.asarray(t), e)


# --- quaternion gradients against an independent jnp formula ---------------------------


def unit_rotation(q):
    """The rotation matrix of q / |q|, differentiable in pure jax."""
    return formulas.rotation_matrix(jnp, q / ((q * q).sum(-1)[..., None] ** 0.5))


PURE_JAX = {
    "transform_points": lambda t, q, p: p @ unit_rotation(q.reshape(4)).T + t.reshape(3),
    "batch_transform_points": lambda t, q, p: (
        jnp.einsum("bij,bnj->bni", unit_rotation(q), p) + t[:, None]
    ),
    "quaternion_to_matrix": unit_rotation,
    "pose_inverse": lambda t, q: -jnp.einsum("...ji,...j->...i", unit_rotation(q), t),
    "pose_multiply": lambda t, q, t2, q2: jnp.einsum("...ij,...j->...i", unit_rotation(q), t2) + t,
}


@pytest.mark.parametrize("name", sorted(PURE_JAX))
def test_quaternion_gradients_match_jnp_on_the_sphere_tangent(name, rng):
    leadings = {"transform_points": [(1,), (1,), (6,)]}.get(
        name, [(5,)] * len(xform.OPS[name].operands)
    )
    if name == "batch_transform_points":
        leadings = [(5,), (5,), (5, 4)]
    args = random_args(name, leadings, rng)
    k = [o.name for o in xform.OPS[name].operands].index("quaternion")
    args[k] /= np.linalg.norm(args[k], axis=-1, keepdims=True)
    args = list(map(jnp.asarray, args))

    def first_result(fn):
        return lambda *a: as_tuple(fn(*a))[0]

    ours_fn, pure_fn = first_result(getattr(xj, name)), PURE_JAX[name]
    np.testing.assert_allclose(ours_fn(*args), pure_fn(*args), rtol=1e-12, atol=1e-12)
    g = jnp.asarray(rng.normal(size=ours_fn(*args).shape))
    ours = jax.grad(lambda *a: (ours_fn(*a) * g).sum(), argnums=k)(*args)
    pure = jax.grad(lambda *a: (pure_fn(*a) * g).sum(), argnums=k)(*args)
    q = args[k]

    def tangent(v):
        return v - (v * q).sum(-1, keepdims=True) * q

    np.testing.assert_allclose(tangent(ours), tangent(pure), rtol=1e-10, atol=1e-10)


# --- jit, vmap, composition ------------------------------------------------------------


def test_jit_with_changing_sizes(rng):
    t, q = map(jnp.asarray, random_args("transform_points", [(), (), ()], rng)[:2])
    fn = jax.jit(xj.transform_points)
    for n in (1, 7, 300):
        points = rng.normal(size=(n, 3))
        np.testing.assert_array_equal(
            np.asarray(fn(t, q, jnp.asarray(points))),
            xform.transform_points(np.asarray(t), np.asarray(q), points),
        )


@pytest.mark.parametrize(
    "name", POINT_AND_POSE_OPS + ["quaternion_to_matrix", "matrix_to_quaternion"]
)
def test_vmap_matches_a_loop(name, rng):
    args, mapped = vmap_args(name, rng)
    in_axes = tuple(0 if m else None for m in mapped)
    fn = getattr(xj, name)
    batched = as_tuple(jax.vmap(fn, in_axes=in_axes)(*args))
    for i in range(4):
        sample = [a[i] if m else a for a, m in zip(args, mapped)]
        for b, s in zip(batched, as_tuple(fn(*sample))):
            np.testing.assert_array_equal(np.asarray(b[i]), np.asarray(s))


@pytest.mark.parametrize("name", POINT_AND_POSE_OPS)
def test_jit_grad_of_vmap_and_vmap_of_grad_match_a_loop(name, rng):
    args, mapped = vmap_args(name, rng)
    in_axes = tuple(0 if m else None for m in mapped)
    fn = getattr(xj, name)
    argnums = tuple(range(len(args)))

    def loss(*inputs):
        return sum((r**2).sum() for r in as_tuple(fn(*inputs)))

    def batched_loss(*inputs):
        return sum((r**2).sum() for r in as_tuple(jax.vmap(fn, in_axes=in_axes)(*inputs)))

    summed = jax.jit(jax.grad(batched_loss, argnums=argnums))(*args)
    per_sample = jax.vmap(jax.grad(loss, argnums=argnums), in_axes=in_axes)(*args)
    loop = [
        jax.grad(loss, argnums=argnums)(*[a[i] if m else a for a, m in zip(args, mapped)])
        for i in range(4)
    ]
    for k, m in enumerate(mapped):
        stacked = np.stack([np.asarray(g[k]) for g in loop])
        np.testing.assert_allclose(per_sample[k], stacked, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            summed[k], stacked if m else stacked.sum(0), rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_jacfwd_jacrev_and_linearize(name, rng):
    args = tuple(map(jnp.asarray, random_args(name, leading_cases(name)[1], rng)))
    argnums = tuple(range(len(args)))
    fn = getattr(xj, name)
    forward = as_tuple(jax.jacfwd(fn, argnums=argnums)(*args))
    reverse = as_tuple(jax.jacrev(fn, argnums=argnums)(*args))
    for f_out, r_out in zip(forward, reverse):
        for f, r in zip(f_out, r_out):
            np.testing.assert_allclose(f, r, rtol=1e-12, atol=1e-12)
    directions = tuple(jnp.asarray(rng.normal(size=a.shape)) for a in args)
    _, linear = jax.linearize(fn, *args)
    _, tangents = jax.jvp(fn, args, directions)
    for a, b in zip(as_tuple(linear(*directions)), as_tuple(tangents)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_vmap_is_one_launch(rng, monkeypatch):
    from xform import _launch

    launches = []
    real = _launch.products.forward
    monkeypatch.setattr(
        _launch.products, "forward", lambda *a, **k: launches.append(1) or real(*a, **k)
    )
    q = jnp.asarray(rng.normal(size=(256, 4)))
    jax.block_until_ready(jax.jit(jax.vmap(xj.quaternion_to_matrix))(q))
    assert len(launches) == 1


def test_eager_calls_compile_once_per_shape(rng, monkeypatch):
    """An eager call runs the primitive's compiled form, traced (and shape-checked) once
    per shape, not a new FFI call each time."""
    checks = []
    real = xj._check
    monkeypatch.setattr(xj, "_check", lambda *a: checks.append(1) or real(*a))
    t, q, p = map(jnp.asarray, random_args("transform_points", [(), (), (11,)], rng))
    first = xj.transform_points(t, q, p)
    traced = len(checks)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(xj.transform_points(t, q, p)), first)
    assert len(checks) == traced


def test_a_failure_inside_the_ffi_call_raises_instead_of_crashing(rng, monkeypatch):
    """xform's Python FFI function (the native handler's fallback) turns an exception
    in the launch into an XLA error. (The native handler's: test_jax_native.py.)"""
    from xform import _launch
    from xform.backends import jax_native

    def broken(*args, **kwargs):
        raise RuntimeError("launch failed")

    jax.clear_caches()
    monkeypatch.setattr(_launch.products, "forward", broken)
    t, q, p = map(jnp.asarray, random_args("transform_points", [(), (), (13,)], rng))
    with (
        jax_native.forced("callback"),
        pytest.raises(Exception, match=r"xform\.transform_points \(forward\).*launch failed"),
    ):
        jax.block_until_ready(jax.jit(xj.transform_points)(t, q, p))
    jax.clear_caches()


def test_cuda_matrix_to_quaternion_stops_gradients(rng):
    (m,) = random_args("cuda_matrix_to_quaternion", [(3,)], rng)
    grad = jax.grad(lambda m: xj.cuda_matrix_to_quaternion(m).sum())(jnp.asarray(m))
    assert not np.any(grad)
    np.testing.assert_array_equal(xj.cuda_matrix_to_quaternion(m), xj.matrix_to_quaternion(m))


def test_empty_batches(rng):
    t, q, p = map(jnp.asarray, random_args("batch_transform_points", [(0,), (0,), (0, 5)], rng))
    assert xj.batch_transform_points(t, q, p).shape == (0, 5, 3)
    grads = jax.grad(lambda *a: xj.batch_transform_points(*a).sum(), argnums=(0, 1, 2))(t, q, p)
    assert [g.shape for g in grads] == [(0, 3), (0, 4), (0, 5, 3)]


# --- numbers for scalar operands: weakly typed ----------------------------------------------

SCALAR_OPERAND_OPS = [n for n in OP_NAMES if any(o.element == () for o in xform.OPS[n].operands)]


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("name", SCALAR_OPERAND_OPS)
def test_numbers_for_scalar_operands_take_the_arrays_dtype_under_every_transform(name, x64, rng):
    """A Python number for a scalar operand takes the other arguments' dtype (SPEC). Under
    jit, grad or jvp it arrives as JAX's weakly typed scalar (a tracer, or a typed literal
    whose primal has no shape), which must too, x64 on or off; so must a weakly typed
    array (jnp.asarray(0.3)). A strongly typed scalar of another dtype still raises."""
    op = xform.OPS[name]
    k = next(i for i, o in enumerate(op.operands) if o.element == ())
    args = [a.astype(np.float32) for a in random_args(name, [()] * len(op.operands), rng)]
    number = float(args[k])
    weights = [rng.normal(size=r.element) for r in op.results]

    def with_scalar(arrays, s):
        return [*arrays[:k], s, *arrays[k + 1 :]]

    def expected(s):
        return reference(name, with_scalar([a.astype(np.float64) for a in args], s))

    h = 1e-6
    want_grad = sum(
        ((up - down) * w).sum() / (2 * h)
        for up, down, w in zip(expected(number + h), expected(number - h), weights)
    )
    with jax.enable_x64(x64):
        arrays = [jnp.asarray(a) for a in args]
        function = xj.function(op)

        def call(s):
            return as_tuple(function(*with_scalar(arrays, s)))

        def total(s):
            return sum((r * w).sum() for r, w in zip(call(s), weights))

        for results in (call(number), jax.jit(call)(number), call(jnp.asarray(number))):
            for got, want in zip(results, expected(number)):
                assert got.dtype == jnp.float32
                assert_matches(np.asarray(got), want, np.float32)
        grads = (
            jax.grad(total)(number),
            jax.jit(jax.grad(total))(number),
            jax.jvp(total, (number,), (1.0,))[1],
        )
        for grad in grads:
            np.testing.assert_allclose(float(grad), want_grad, rtol=1e-4, atol=1e-4)
        if x64:
            with pytest.raises(TypeError, match=f"'{op.operands[k].name}' has dtype float64"):
                call(jnp.asarray(number, jnp.float64))


# --- errors at trace time ------------------------------------------------------------------


def test_errors_are_raised_at_trace_time(rng):
    t, q = map(jnp.asarray, random_args("pose_inverse", [(2,), (2,)], rng))
    with pytest.raises(
        ValueError, match=r"'quaternion' has shape \(2, 3\); expected \(\.\.\., 4\)"
    ):
        jax.jit(xj.pose_inverse).lower(t, t)
    with pytest.raises(
        TypeError, match="'quaternion' has dtype float32 but 'position' has float64"
    ):
        jax.jit(xj.pose_inverse).lower(t, q.astype(jnp.float32))
    with pytest.raises(TypeError, match="'position' has dtype int32"):
        xj.pose_inverse(t.astype(jnp.int32), q)
    with pytest.raises(TypeError, match="'quaternion' is a builtins.list; expected a JAX or NumPy"):
        xj.pose_inverse(t, [1.0, 0.0, 0.0, 0.0])


def test_curobo_buffers_raise_type_error(rng):
    t, q, p = map(jnp.asarray, random_args("transform_points", [(), (), (4,)], rng))
    with pytest.raises(TypeError, match="out_points given, but JAX arrays are immutable"):
        xj.transform_points(t, q, p, out_points=jnp.zeros((4, 3)))
    with pytest.raises(TypeError, match="buffers are not accepted"):
        xj.transform_points(t, q, p, jnp.zeros((4, 3)))


# --- one kernel source: parity with PyTorch ------------------------------------------------


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_same_values_and_gradients_as_torch(name, rng):
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("xform.backends.torch")
    args = random_args(name, leading_cases(name)[2], rng)
    results = as_tuple(getattr(xj, name)(*map(jnp.asarray, args)))
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    _, pullback = jax.vjp(getattr(xj, name), *map(jnp.asarray, args))
    jax_grads = pullback(cotangents if len(results) > 1 else cotangents[0])
    torch_args = [torch.from_numpy(a).requires_grad_() for a in args]
    torch_results = as_tuple(getattr(xt, name)(*torch_args))
    torch_grads = torch.autograd.grad(
        torch_results, torch_args, [torch.from_numpy(c) for c in cotangents]
    )
    for a, b in zip(results, torch_results):
        np.testing.assert_array_equal(np.asarray(a), b.detach().numpy())
    for a, b in zip(jax_grads, torch_grads):
        np.testing.assert_array_equal(np.asarray(a), b.numpy())


# --- several devices -------------------------------------------------------------------------

SHARDED = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import Mesh, PartitionSpec as P
    import xform, xform.backends.jax as xj

    assert len(jax.devices()) == 2, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("scenes",))
    rng = np.random.default_rng(0)
    t, q, p = rng.normal(size=(8, 3)), rng.normal(size=(8, 4)), rng.normal(size=(8, 16, 3))

    def loss(t, q, p):
        return (xj.batch_transform_points(t, q, p) ** 2).sum()

    @jax.jit
    def sharded(t, q, p):
        def local(t, q, p):
            out = xj.batch_transform_points(t, q, p)
            grads = jax.grad(loss, argnums=(0, 1))(t, q, p)
            return out, *grads
        return jax.shard_map(local, mesh=mesh, in_specs=(P("scenes"),) * 3,
                             out_specs=(P("scenes"),) * 3)(t, q, p)

    out, gt, gq = sharded(t, q, p)
    assert len(out.sharding.device_set) == 2
    np.testing.assert_array_equal(np.asarray(out), xform.batch_transform_points(t, q, p))
    out_ref = xform.batch_transform_points(t, q, p)
    expected = xform.vjp("batch_transform_points", (t, q, p), 2 * out_ref)
    np.testing.assert_allclose(np.asarray(gt), expected[0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gq), expected[1], rtol=1e-12)
    print("sharded ok")
    """
)


def test_shard_map_over_two_cpu_devices():
    result = subprocess.run(
        [sys.executable, "-c", SHARDED], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "sharded ok" in result.stdout
