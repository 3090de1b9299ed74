"""Zero-copy conversions between every pair of array kinds, dispatch of the top-level ops
on the caller's array kind, and the jax_to_torch / torch_to_jax bridges."""

import numpy as np
import pytest
import warp as wp
from helpers import as_tuple
from reference import leading_cases, random_args

import xform

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

xt = pytest.importorskip("xform.backends.torch")
xj = pytest.importorskip("xform.backends.jax")

KINDS = ["numpy", "warp", "torch", "jax"]


def aligned_numpy(values: np.ndarray) -> np.ndarray:
    """A copy of `values` whose buffer starts on a 64-byte boundary (JAX aliases only such
    buffers)."""
    raw = np.empty(values.nbytes + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start : start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def make(kind: str, values: np.ndarray):
    values = aligned_numpy(values)
    return {
        "numpy": lambda: values,
        "warp": lambda: wp.array(values, dtype=wp.float64, device="cpu"),
        "torch": lambda: torch.from_numpy(values).clone(),  # torch allocates 64-byte aligned
        "jax": lambda: jnp.asarray(values),
    }[kind]()


def pointer(x) -> int:
    kind = xform._frameworks.kind(x)
    return {
        "numpy": lambda: x.ctypes.data,
        "warp": lambda: x.ptr,
        "torch": lambda: x.data_ptr(),
        "jax": lambda: x.unsafe_buffer_pointer(),
    }[kind]()


CONVERT = {
    "numpy": xform.to_numpy,
    "warp": xform.to_warp,
    "torch": xform.to_torch,
    "jax": xform.to_jax,
}


@pytest.mark.parametrize("source", KINDS)
@pytest.mark.parametrize("target", KINDS)
def test_conversions_share_memory(source, target, rng):
    values = rng.normal(size=(16, 3))
    x = make(source, values)
    y = CONVERT[target](x)
    assert xform._frameworks.kind(y) == target
    assert pointer(y) == pointer(x)
    np.testing.assert_array_equal(xform.to_numpy(y), values)


def test_writes_are_seen_through_the_view(rng):
    t = torch.from_numpy(rng.normal(size=(4, 3)))
    w = xform.to_warp(t)
    n = xform.to_numpy(w)
    t.add_(1.0)
    np.testing.assert_array_equal(n, t.numpy())


def test_non_contiguous_and_requires_grad_inputs(rng):
    t = torch.from_numpy(rng.normal(size=(6, 4))).requires_grad_()
    j = xform.to_jax(t[:, ::2])  # JAX takes compact layouts only: a copy
    np.testing.assert_array_equal(np.asarray(j), t.detach().numpy()[:, ::2])
    w = xform.to_warp(t[:, ::2])  # Warp keeps the strides: shared
    assert w.ptr == t.data_ptr() and not w.is_contiguous
    np.testing.assert_array_equal(w.numpy(), t.detach().numpy()[:, ::2])


def test_read_only_numpy_to_jax_is_a_copy(rng):
    """NumPy's view of a JAX array is read-only, which DLPack cannot export: to_jax copies
    it, so that a round trip through NumPy works."""
    values = rng.normal(size=(5, 3))
    read_only = xform.to_numpy(jnp.asarray(values))
    assert not read_only.flags.writeable
    np.testing.assert_array_equal(np.asarray(xform.to_jax(read_only)), values)
    frozen = values.copy()
    frozen.setflags(write=False)
    np.testing.assert_array_equal(np.asarray(xform.to_jax(frozen)), values)


def test_conversion_of_other_objects_raises():
    with pytest.raises(
        TypeError, match="expected a NumPy, Warp, PyTorch or JAX array, got builtins.list"
    ):
        xform.to_jax([1.0, 2.0])


# --- dispatch ------------------------------------------------------------------------------

OPS = sorted(xform.OPS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", OPS)
def test_dispatch_returns_the_callers_kind(name, kind, rng):
    args = random_args(name, leading_cases(name)[2], rng)
    expected = as_tuple(getattr(xform, name)(*args))
    results = as_tuple(getattr(xform, name)(*[make(kind, a) for a in args]))
    for got, want in zip(results, expected):
        assert xform._frameworks.kind(got) == kind
        np.testing.assert_array_equal(xform.to_numpy(got), want)


def test_dispatch_inside_jax_transforms(rng):
    t, q, p = map(jnp.asarray, random_args("transform_points", [(), (), (5,)], rng))
    grads = jax.jit(jax.grad(lambda t: xform.transform_points(t, q, p).sum()))(t)
    np.testing.assert_allclose(grads, np.full(3, 5.0))


def test_dispatch_keeps_torch_autograd(rng):
    t, q, p = [
        torch.from_numpy(a).requires_grad_()
        for a in random_args("transform_points", [(), (), (5,)], rng)
    ]
    xform.transform_points(t, q, p).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np.full(3, 5.0))


def test_mixed_kinds_raise_type_error(rng):
    t, q, p = random_args("transform_points", [(), (), (5,)], rng)
    with pytest.raises(
        TypeError, match="mix array types 'position': torch, 'quaternion': torch, 'points': jax"
    ):
        xform.transform_points(torch.from_numpy(t), torch.from_numpy(q), jnp.asarray(p))


# --- bridges -------------------------------------------------------------------------------


def test_jax_to_torch_matches_the_torch_adapter_in_float32(rng):
    args = [a.astype(np.float32) for a in random_args("transform_points", [(1,), (1,), (50,)], rng)]
    bridged = xform.jax_to_torch(xj.transform_points)
    via_jax = [torch.from_numpy(a).requires_grad_() for a in args]
    via_torch = [torch.from_numpy(a).requires_grad_() for a in args]
    target = torch.from_numpy(rng.normal(size=(50, 3)).astype(np.float32))
    ((bridged(*via_jax) - target) ** 2).mean().backward()
    ((xt.transform_points(*via_torch) - target) ** 2).mean().backward()
    for a, b in zip(via_jax, via_torch):
        assert a.grad.dtype == torch.float32
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)


def test_jax_to_torch_pytrees_and_zero_copy_outputs(rng):
    def fn(pose, points):
        moved = xj.transform_points(pose["t"], pose["q"], points)
        return {"moved": moved, "norms": (moved**2).sum(-1)}

    t, q, p = random_args("transform_points", [(), (), (8,)], rng)
    pose = {"t": torch.from_numpy(t).requires_grad_(), "q": torch.from_numpy(q).requires_grad_()}
    points = torch.from_numpy(p).requires_grad_()
    out = xform.jax_to_torch(fn)(pose, points)
    assert set(out) == {"moved", "norms"} and out["norms"].shape == (8,)
    (out["moved"].sum() + out["norms"].sum()).backward()
    reference = [a.detach().clone().requires_grad_() for a in (pose["t"], pose["q"], points)]
    moved = xt.transform_points(*reference)
    (moved.sum() + (moved**2).sum()).backward()
    for a, b in zip((pose["t"], pose["q"], points), reference):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)


@jax.jit  # eager, JAX would compile every operation anew under each transform
def pose_and_points_function(pose, points):
    """A JAX function of pytrees: a dict in, a tuple out."""
    w, v = pose["q"][0], pose["q"][1:]
    turned = points + 2 * w * jnp.cross(v, points) + 2 * jnp.cross(v, jnp.cross(v, points))
    moved = turned + pose["t"]
    return moved, (moved**2).sum(-1) * w


def pose_and_points(rng, n=6):
    t, q, p = random_args("transform_points", [(), (), (n,)], rng)
    return {"t": t, "q": q}, p


def as_torch(tree):
    return jax.tree_util.tree_map(torch.from_numpy, tree)


def assert_trees_equal(got, want, rtol=1e-13):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=rtol, atol=1e-13)


def test_jax_to_torch_forward_mode_matches_jax_jvp(rng):
    """torch.func.jvp, torch.autograd.forward_ad and torch.func.jacfwd through the bridge
    give JAX's tangents (jax.jvp, jax.jacfwd)."""
    import torch.autograd.forward_ad as fwAD

    primals, tangents = pose_and_points(rng), pose_and_points(rng)
    bridged = xform.jax_to_torch(pose_and_points_function)
    want = jax.jvp(pose_and_points_function, primals, tangents)[1]
    assert_trees_equal(torch.func.jvp(bridged, as_torch(primals), as_torch(tangents))[1], want)
    with fwAD.dual_level():
        duals = jax.tree_util.tree_map(fwAD.make_dual, as_torch(primals), as_torch(tangents))
        dual_out = bridged(*duals)
        assert_trees_equal([fwAD.unpack_dual(o).tangent for o in dual_out], want)
    argnums = (0, 1)
    assert_trees_equal(
        torch.func.jacfwd(bridged, argnums)(*as_torch(primals)),
        jax.jacfwd(pose_and_points_function, argnums)(*primals),
    )


def test_jax_to_torch_forward_mode_with_a_missing_tangent_and_integers(rng):
    """An integer argument passes through (no tangent); an integer result gets none."""

    def scaled(x, k):
        return jnp.sin(x) * k, k * 2

    x, dx = rng.normal(size=(2, 5))
    k = np.arange(5)
    bridged = xform.jax_to_torch(scaled)
    out, (tangent, int_tangent) = torch.func.jvp(
        lambda x: bridged(x, torch.from_numpy(k)), (torch.from_numpy(x),), (torch.from_numpy(dx),)
    )
    np.testing.assert_allclose(tangent.numpy(), np.cos(x) * k * dx, rtol=1e-14)
    assert out[1].dtype == torch.int64 and not int_tangent.any()


def test_jax_to_torch_under_vmap_grad_and_jacrev(rng):
    """torch.func.vmap (jax.vmap inside), vmap of grad, and jacrev through the bridge
    equal JAX's own."""
    bridged = xform.jax_to_torch(pose_and_points_function)
    pose, _ = pose_and_points(rng)
    points = rng.normal(size=(3, 6, 3))  # three point sets, one shared pose
    in_dims = (None, 0)

    def loss(fn):
        return lambda pose, points: sum((o**2).sum() for o in fn(pose, points))

    assert_trees_equal(
        torch.func.vmap(bridged, in_dims)(*as_torch((pose, points))),
        jax.vmap(pose_and_points_function, in_dims)(pose, points),
    )
    assert_trees_equal(
        torch.func.vmap(torch.func.grad(loss(bridged), (0, 1)), in_dims)(*as_torch((pose, points))),
        jax.vmap(jax.grad(loss(pose_and_points_function), (0, 1)), in_dims)(pose, points),
    )
    assert_trees_equal(
        torch.func.jacrev(bridged, (0, 1))(*as_torch((pose, points[0]))),
        jax.jacrev(pose_and_points_function, (0, 1))(pose, points[0]),
    )


def test_jax_to_torch_second_derivatives_raise_clearly(rng):
    bridged = xform.jax_to_torch(xj.so3_exp)
    omega = torch.from_numpy(rng.normal(size=3)).requires_grad_()
    (g,) = torch.autograd.grad(bridged(omega).sum(), omega, create_graph=True)
    with pytest.raises(RuntimeError, match="jax_to_torch: reverse mode over a derivative"):
        g.sum().backward()
    with pytest.raises(RuntimeError, match="jax_to_torch: forward mode over a derivative"):
        torch.func.hessian(lambda w: bridged(w).sum())(omega.detach())


def test_torch_to_jax_under_jit_grad_matches_jax_adapter(rng):
    t, q, p = map(jnp.asarray, random_args("transform_points", [(1,), (1,), (30,)], rng))

    def torch_loss(t, q, p):
        return (xt.transform_points(t, q, p) ** 2).sum()

    def jax_loss(t, q, p):
        return (xj.transform_points(t, q, p) ** 2).sum()

    bridged = xform.torch_to_jax(torch_loss)
    np.testing.assert_allclose(jax.jit(bridged)(t, q, p), jax_loss(t, q, p), rtol=1e-13)
    got = jax.jit(jax.grad(bridged, argnums=(0, 1, 2)))(t, q, p)
    want = jax.grad(jax_loss, argnums=(0, 1, 2))(t, q, p)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_torch_to_jax_pytrees_and_vmap(rng):
    def fn(d):
        return {"double": d["x"] * 2, "sum": (d["x"] ** 2).sum()}

    bridged = xform.torch_to_jax(fn)
    x = jnp.asarray(rng.normal(size=(4, 3)))
    out = jax.jit(bridged)({"x": x})
    np.testing.assert_array_equal(out["double"], 2 * x)
    np.testing.assert_allclose(jax.grad(lambda x: bridged({"x": x})["sum"])(x), 2 * x)
    per_row = jax.vmap(lambda row: bridged({"x": row})["sum"])(x)
    np.testing.assert_allclose(per_row, (x**2).sum(-1), rtol=1e-13)


def test_bridges_keep_bounded_caches_of_user_functions():
    """Each user function given to torch_to_jax costs a cache entry holding it and two
    FFI targets: the cache is bounded, and the op products' cache does not grow."""
    pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    from xform.backends import _jax_ffi, bridges

    assert bridges._differentiable_call.cache_info().maxsize is not None
    before = _jax_ffi.ffi_callable.cache_info().currsize
    doubled = xform.torch_to_jax(lambda x: 2 * x)
    np.testing.assert_allclose(doubled(jax.numpy.ones(3)), 2.0)
    assert _jax_ffi.ffi_callable.cache_info().currsize == before


def test_jax_to_torch_inside_torch_compile_equals_eager(rng):
    """Dynamo breaks the graph around the bridge, so compiled code calling it gives eager
    mode's results: roma's test_jvp_torch_compile through the bridge (torch.func.jvp of a
    Procrustes at degenerate singular values, inside torch.compile), a compiled forward
    and backward, and torch.func.grad and vmap inside torch.compile."""
    roma = pytest.importorskip("roma")
    bridged = xform.jax_to_torch(xj.special_procrustes)
    m = torch.eye(3, dtype=torch.float64).expand(5, 3, 3).clone()
    dm = torch.from_numpy(rng.normal(size=(5, 3, 3)))

    def tangent(m, dm):
        return torch.func.jvp(bridged, (m,), (dm,))[1]

    eager = tangent(m, dm)
    torch._dynamo.reset()
    compiled = torch.compile(tangent)(m, dm)
    assert torch.isfinite(compiled).all()
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    # the tangent itself, against roma's (an independent implementation)
    reference = torch.func.jvp(roma.special_procrustes, (m,), (dm,))[1]
    torch.testing.assert_close(eager, reference, rtol=0, atol=1e-9)

    def loss(x):
        return (bridged(torch.sin(x)) * x).sum()

    x = torch.from_numpy(rng.normal(size=(5, 3, 3)))
    eager_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager_loss, compiled_loss = loss(eager_x), torch.compile(loss)(compiled_x)
    eager_loss.backward()
    compiled_loss.backward()
    # Inductor's C++ for sin, cos and the product rule's multiply-add may round differently
    # from eager mode's (vector maths, fused multiply-adds, whichever the host's compiler
    # and ISA allow: CI once differed by 0.6 ulp of the largest term), so the parts outside
    # the bridge agree to a few ulps of the largest term, not bit for bit.
    eps = torch.finfo(torch.float64).eps
    terms = bridged(torch.sin(x)) * x
    torch.testing.assert_close(
        compiled_loss, eager_loss, rtol=0, atol=16 * eps * terms.abs().sum().item()
    )
    few_ulps = 16 * eps * eager_x.grad.abs().max().item()
    torch.testing.assert_close(compiled_x.grad, eager_x.grad, rtol=0, atol=few_ulps)
    gradient = torch.compile(lambda x: torch.func.grad(loss)(x))(x)
    torch.testing.assert_close(gradient, eager_x.grad, rtol=0, atol=few_ulps)
    mapped = torch.compile(lambda x: torch.func.vmap(bridged)(x))(x)
    torch.testing.assert_close(mapped, bridged(x), rtol=0, atol=0)
