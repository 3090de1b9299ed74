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
    kind = xform._interop.array_kind(x)
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
    assert xform._interop.array_kind(y) == target
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
        assert xform._interop.array_kind(got) == kind
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
