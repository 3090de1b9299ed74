"""The group objects: parity with jaxlie (the reference for semantics) to 1e-12, every
framework's transforms over functions that take and return groups, batches, exactness at
the identity and at pi, and bad input."""

import jax
import jax.numpy as jnp
import jaxlie
import numpy as np
import pytest
import torch

import xform
from xform import manifold

jax.config.update("jax_enable_x64", True)

GROUPS = {"SO3": (xform.SO3, jaxlie.SO3), "SE3": (xform.SE3, jaxlie.SE3)}
if hasattr(xform, "SE2"):
    GROUPS |= {"SO2": (xform.SO2, jaxlie.SO2), "SE2": (xform.SE2, jaxlie.SE2)}
NAMES = list(GROUPS)
# Groups without a jaxlie peer: the laws, the frameworks' transforms and the batches below
# cover them too (tests/test_sim3.py has the rest, against closed forms and NumPy).
GROUPS |= {"Sim3": (xform.Sim3, None)}
ALL = [*NAMES, "Sim3"]


# --- storage layouts: the only thing undone between xform and jaxlie ----------------------


def to_jaxlie(element):
    """The jaxlie element of the same group and values (float64 JAX arrays)."""
    cls = GROUPS[type(element).__name__][1]
    fields = [np.asarray(xform.to_numpy(a)) for a in element._arrays]
    if cls is jaxlie.SE3:
        position, quaternion = fields
        return jaxlie.SE3(jnp.asarray(np.concatenate([quaternion, position], -1)))
    if cls is jaxlie.SE2:
        position, unit_complex = fields
        return jaxlie.SE2(jnp.asarray(np.concatenate([unit_complex, position], -1)))
    return cls(jnp.asarray(fields[0]))


def from_jaxlie(element):
    cls = {v[1]: v[0] for v in GROUPS.values()}[type(element)]
    parameters = np.asarray(element.parameters())
    if cls.__name__ in ("SE3", "SE2"):
        split = 4 if cls.__name__ == "SE3" else 2
        return cls(parameters[..., split:], parameters[..., :split])
    return cls(parameters)


def same_element(a, b):
    """Two elements' values, equal to 1e-12 (quaternions up to their sign: q and -q are
    one rotation)."""
    for x, y in zip(a._arrays, b._arrays):
        x, y = np.asarray(xform.to_numpy(x)), np.asarray(xform.to_numpy(y))
        if x.ndim > len(a.shape) and x.shape[-1] == 4:  # a quaternion field
            y = y * np.where((x * y).sum(-1, keepdims=True) < 0, -1.0, 1.0)
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-12)


def sample(name, rng, shape=(6,)):
    return GROUPS[name][0].sample_uniform(shape, seed=rng)


def away_from_zero(name, rng, shape=(6,)):
    """Elements whose angles are at least 0.1: jaxlie's SE2 exp, log and jlog lose digits
    to cancellation at small angles (jlog 3e-3 at 3e-5; measured against closed forms in
    50 digits in test_lie2d.py), where xform's are exact; tests of xform at small angles
    are below and in test_lie2d.py."""
    cls = GROUPS[name][0]
    tangent = tangents(name, rng, shape)
    return cls.exp(tangent)


def tangents(name, rng, shape=(6,)):
    """Tangents whose angles lie in +-[0.1, 3)."""
    cls = GROUPS[name][0]
    tangent = rng.normal(size=(*shape, cls.tangent_dim))
    angle = rng.uniform(0.1, 3.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    if name in ("SO2", "SE2"):
        tangent[..., -1] = angle
    else:
        rotation = slice(3, 6) if name == "Sim3" else slice(-3, None)
        w = tangent[..., rotation]
        tangent[..., rotation] = w / np.linalg.norm(w, axis=-1, keepdims=True) * angle[..., None]
    return tangent


# --- parity with jaxlie ---------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_values_match_jaxlie_to_1e12(name, rng):
    cls, peer = GROUPS[name]
    a = away_from_zero(name, rng)
    b = a @ away_from_zero(name, rng)  # a^-1 b too
    pa, pb = to_jaxlie(a), to_jaxlie(b)
    tangent = tangents(name, rng)
    points = rng.normal(size=(6, cls.space_dim))

    same_element(cls.exp(tangent), from_jaxlie(peer.exp(jnp.asarray(tangent))))
    same_element(a.inverse(), from_jaxlie(pa.inverse()))
    same_element(a @ b, from_jaxlie(pa @ pb))
    same_element(a.multiply(b), from_jaxlie(pa.multiply(pb)))
    same_element(cls.from_matrix(a.as_matrix()), a)
    same_element(cls.from_matrix(np.asarray(pa.as_matrix())), from_jaxlie(pa))
    for ours, theirs in (
        (a.log(), pa.log()),
        (a @ points, pa @ jnp.asarray(points)),
        (a.apply(points), pa.apply(jnp.asarray(points))),
        (a.adjoint(), pa.adjoint()),
        (a.as_matrix(), pa.as_matrix()),
        (a.jlog(), pa.jlog()),
        (manifold.rminus(a, b), jaxlie.manifold.rminus(pa, pb)),
    ):
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=0, atol=1e-12)
    delta = 0.3 * tangents(name, rng)
    same_element(manifold.rplus(a, delta), from_jaxlie(jaxlie.manifold.rplus(pa, delta)))


@pytest.mark.parametrize("name", NAMES)
def test_manifold_grad_matches_jaxlie(name, rng):
    cls, _ = GROUPS[name]
    a = away_from_zero(name, rng)
    b = a @ away_from_zero(name, rng)
    weights = jnp.asarray(rng.normal(size=(cls.tangent_dim,)))

    def loss(x, y):
        return jnp.sum((x.inverse() @ y).log() ** 2 * weights) + jnp.sum(
            (x @ jnp.ones(cls.space_dim)) ** 3
        )

    ours = manifold.grad(loss, argnums=(0, 1))(a.to_jax(), b.to_jax())
    theirs = jaxlie.manifold.grad(loss, argnums=(0, 1))(to_jaxlie(a), to_jaxlie(b))
    for x, y in zip(ours, theirs):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-12)

    # the same function in torch, through torch.func
    tweights = torch.from_numpy(np.asarray(weights))

    def torch_loss(x, y):
        ones = torch.ones(cls.space_dim, dtype=torch.float64)
        return ((x.inverse() @ y).log() ** 2 * tweights).sum() + ((x @ ones) ** 3).sum()

    value, gradients = manifold.value_and_grad(torch_loss, argnums=(0, 1))(
        a.to_torch(), b.to_torch()
    )
    for x, y in zip(gradients, theirs):
        np.testing.assert_allclose(x.numpy(), y, rtol=0, atol=1e-12)
    np.testing.assert_allclose(float(value), float(loss(a.to_jax(), b.to_jax())), rtol=1e-13)


# --- group identities, through the objects ------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_group_axioms(name, rng):
    cls, _ = GROUPS[name]
    a, b, c = (sample(name, rng) for _ in range(3))
    identity = cls.identity((6,))
    same_element(a @ identity, a)
    same_element(identity @ a, a)
    same_element((a @ b) @ c, a @ (b @ c))
    same_element(a @ a.inverse(), identity)
    same_element(cls.exp(a.log()), a)
    tangent = 0.5 * rng.normal(size=(6, cls.tangent_dim))
    # T exp(xi) T^-1 = exp(Ad_T xi)
    same_element(
        a @ cls.exp(tangent) @ a.inverse(),
        cls.exp(np.einsum("...ij,...j->...i", a.adjoint(), tangent)),
    )
    same_element(manifold.rplus(a, manifold.rminus(a, b)), b)
    points = rng.normal(size=(6, cls.space_dim))
    np.testing.assert_allclose((a @ b) @ points, a @ (b @ points), atol=1e-12)
    np.testing.assert_allclose(a.as_matrix() @ b.as_matrix(), (a @ b).as_matrix(), atol=1e-12)
    same_element(a.interpolate(b, 0.0), a)
    same_element(a.interpolate(b, 1.0), b)
    halfway = a.interpolate(b, 0.5)
    np.testing.assert_allclose(manifold.rminus(a, halfway), 0.5 * manifold.rminus(a, b), atol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_jlog_is_the_derivative_of_log_at_a_right_perturbation(name, rng):
    cls, _ = GROUPS[name]
    a = sample(name, rng, ())
    jacobian = jax.jacfwd(lambda d: manifold.rplus(a.to_jax(), d).log())(jnp.zeros(cls.tangent_dim))
    np.testing.assert_allclose(jacobian, a.jlog(), atol=1e-12)


def test_se3_agrees_with_the_functional_api(rng):
    a = sample("SE3", rng, ())
    points = rng.normal(size=(10, 3))
    np.testing.assert_array_equal(
        a @ points, xform.transform_points(a.position, a.quaternion, points)
    )
    b = sample("SE3", rng, (6,))
    np.testing.assert_array_equal(
        (a @ b).position, xform.pose_multiply(a.position, a.quaternion, b.position, b.quaternion)[0]
    )


def test_so3_conversions_round_trip(rng):
    a = sample("SO3", rng)
    same_element(xform.SO3.from_quaternion_xyzw(a.as_quaternion_xyzw()), a)
    same_element(xform.SO3.from_rotation_6d(a.as_rotation_6d()), a)
    for convention in ("xyz", "ZYX", "zxz"):
        same_element(xform.SO3.from_euler(a.as_euler(convention), convention), a)
    b = sample("SE3", rng)
    for layout in ("xyz_wxyz", "wxyz_xyz", "xyz_xyzw"):
        same_element(xform.SE3.from_parameters(b.parameters(layout), layout), b)
    np.testing.assert_array_equal(b.parameters("wxyz_xyz"), to_jaxlie(b).parameters())
    same_element(xform.SE3.from_rotation_and_translation(b.rotation(), b.translation()), b)


# --- exactness at the identity and at pi ----------------------------------------------------


@pytest.mark.parametrize("angle", [0.0, 1e-8, 1e-4, np.pi - 1e-6])
@pytest.mark.parametrize("name", NAMES)
def test_exact_values_and_gradients_at_the_singular_angles(name, angle, rng):
    cls, peer = GROUPS[name]
    if name in ("SO2", "SE2"):
        tangent = np.concatenate([rng.normal(size=cls.tangent_dim - 1), [angle]])
    else:
        axis = rng.normal(size=3)
        axis *= angle / np.linalg.norm(axis)
        tangent = np.concatenate([rng.normal(size=cls.tangent_dim - 3), axis])
    near_pi = angle > 3
    element = cls.exp(tangent)
    np.testing.assert_allclose(element.log(), tangent, rtol=0, atol=1e-9 if near_pi else 1e-14)

    def loss(t):
        return jnp.sum(cls.exp(t).log() ** 2)

    # log(exp(t)) = t: the gradient is 2 t, exactly wherever log is smooth
    gradient = jax.grad(loss)(jnp.asarray(tangent))
    np.testing.assert_allclose(gradient, 2 * tangent, rtol=0, atol=1e-5 if near_pi else 1e-12)
    if name in ("SO3", "SE3"):  # against jaxlie's autodiff (its SE2 loses digits at small angles)
        peer_gradient = jax.grad(lambda t: jnp.sum(peer.exp(t).log() ** 2))(jnp.asarray(tangent))
        np.testing.assert_allclose(gradient, peer_gradient, atol=1e-4 if near_pi else 1e-7)
    # torch, through the same objects
    t = torch.tensor(tangent, requires_grad=True)
    (cls.exp(t).log() ** 2).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), gradient, rtol=0, atol=1e-12)
    # jacobians of exp and log through the objects, forward mode
    jacobian = jax.jacfwd(lambda t: cls.exp(t).log())(jnp.asarray(tangent))
    np.testing.assert_allclose(jacobian, np.eye(cls.tangent_dim), atol=1e-5 if near_pi else 1e-12)


def test_log_at_exactly_pi_and_at_q_and_minus_q():
    q = np.array([0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(np.abs(xform.SO3(q).log()), [0, 0, np.pi], atol=1e-15)
    r = xform.SO3.sample_uniform((5,), seed=3)
    np.testing.assert_allclose(xform.SO3(-r.quaternion).log(), r.log(), atol=1e-15)
    gradient = jax.grad(lambda q: jnp.sum(xform.SO3(q).log()))(jnp.asarray(q))
    assert np.all(np.isfinite(gradient))


# --- frameworks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_jax_transforms_take_and_return_groups(name, rng):
    cls, _ = GROUPS[name]
    a, b = sample(name, rng).to_jax(), sample(name, rng).to_jax()
    jitted = jax.jit(lambda x, y: (x @ y).inverse())(a, b)
    assert isinstance(jitted, cls)
    same_element(jitted, (a @ b).inverse())
    mapped = jax.vmap(lambda x, y: x @ y)(a, b)
    same_element(mapped, a @ b)
    gradient = jax.grad(lambda x: jnp.sum(x.log() ** 2))(a)
    assert isinstance(gradient, cls)  # a tree of the fields' cotangents, as jaxlie
    assert [g.shape for g in gradient._arrays] == [f.shape for f in a._arrays]
    tangent = jnp.asarray(tangents(name, rng, ()) * 0.3)
    jacobian = jax.jacfwd(lambda t: cls.exp(t).log())(tangent)
    np.testing.assert_allclose(jacobian, np.eye(cls.tangent_dim), atol=1e-12)

    def step(carry, xi):
        carry = carry @ cls.exp(xi)
        return carry, carry.log()

    steps = jnp.asarray(0.1 * rng.normal(size=(5, cls.tangent_dim)))
    final, logs = jax.lax.scan(step, cls.identity(like=jnp.zeros(1)), steps)
    assert isinstance(final, cls) and logs.shape == (5, cls.tangent_dim)
    np.testing.assert_allclose(final.log(), logs[-1], atol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_torch_func_takes_and_returns_groups(name, rng):
    cls, _ = GROUPS[name]
    a, b = sample(name, rng).to_torch(), sample(name, rng).to_torch()
    mapped = torch.func.vmap(lambda x, y: x @ y)(a, b)
    assert isinstance(mapped, cls)
    same_element(mapped, a @ b)
    gradient = torch.func.grad(lambda x: (x.log() ** 2).sum())(a)
    assert isinstance(gradient, cls)
    expected = jax.grad(lambda x: jnp.sum(x.log() ** 2))(a.to_jax())
    for ours, theirs in zip(gradient._arrays, expected._arrays):
        np.testing.assert_allclose(ours.numpy(), theirs, atol=1e-12)
    jacobian = torch.func.jacrev(lambda x: x.inverse().log())(a[0])
    assert isinstance(jacobian, cls)


def test_torch_compile_of_a_function_of_an_se3(rng):
    a, b = sample("SE3", rng).to_torch(), sample("SE3", rng).to_torch()
    compiled = torch.compile(lambda x, y: x.multiply(y).inverse(), fullgraph=True)
    result = compiled(a, b)
    assert isinstance(result, xform.SE3)
    same_element(result, (a @ b).inverse())
    points = torch.from_numpy(rng.normal(size=(6, 3)))
    applied = torch.compile(lambda x, p: x.apply(p).sum() + x.log().sum(), fullgraph=True)
    np.testing.assert_allclose(float(applied(a, points)), float((a @ points).sum() + a.log().sum()))


def test_mixed_pipeline_torch_group_to_jax_and_back(rng):
    """A group built from torch tensors, used in a jitted JAX function, with its gradient
    back in torch through jax_to_torch."""
    points = jnp.asarray(rng.normal(size=(20, 3)))

    @jax.jit
    def loss(position, quaternion):
        return jnp.sum((xform.SE3(position, quaternion) @ points) ** 2)

    position = torch.tensor(rng.normal(size=3), requires_grad=True)
    quaternion = torch.tensor(rng.normal(size=4), requires_grad=True)
    pose = xform.SE3(position, quaternion)
    value = loss(*pose.to_jax()._arrays)
    torch_loss = xform.jax_to_torch(loss)
    torch_value = torch_loss(pose.position, pose.quaternion)
    torch_value.backward()
    np.testing.assert_allclose(float(torch_value), float(value), rtol=1e-13)
    expected = jax.grad(loss, argnums=(0, 1))(*pose.to_jax()._arrays)
    np.testing.assert_allclose(position.grad.numpy(), expected[0], atol=1e-11)
    np.testing.assert_allclose(quaternion.grad.numpy(), expected[1], atol=1e-11)


def test_gradient_of_a_tree_with_one_leaf_of_each_framework_names_both(rng):
    """With as many torch leaves as JAX ones neither is the odd one out: the TypeError
    names a place of each."""
    tree = [sample("SO2", rng).to_torch(), jnp.asarray(rng.normal(size=()))]
    message = r"mix frameworks: .* at \[0\] of argument 0.* at \[1\] of argument 0"
    with pytest.raises(TypeError, match=message):
        manifold.grad(lambda t: t[0].log().sum() + t[1] ** 2)(tree)


# --- batches ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_batches(name, rng):
    cls, _ = GROUPS[name]
    a = sample(name, rng, (4, 3))
    assert a.shape == (4, 3) and len(a) == 4 and a.dtype == np.float64
    same_element(a[1], cls(*(f[1] for f in a._arrays)))
    assert a[1:3].shape == (2, 3) and a[..., 0].shape == (4,) and a[None].shape == (1, 4, 3)
    assert a[np.array([0, 2])].shape == (2, 3)
    with pytest.raises(IndexError):
        a[0, 0, 0]
    assert a.reshape(12).shape == (12,) and a.reshape(-1, 2).shape == (6, 2)
    same_element(a.reshape(12)[5], a[1, 2])
    with pytest.raises(TypeError, match="unbatched"):
        len(a[0, 0])
    # broadcasting between the operands of binary methods
    b = sample(name, rng, (3,))
    same_element(a @ b, a @ cls(*(np.broadcast_to(f, (4, *f.shape)) for f in b._arrays)))
    assert (a @ np.zeros((3, cls.space_dim))).shape == (4, 3, cls.space_dim)
    empty = sample(name, rng, (0,))
    assert (empty @ empty).shape == (0,) and empty.log().shape == (0, cls.tangent_dim)
    assert "xform." + name in repr(a)
    with pytest.raises(AttributeError, match="immutable"):
        a.quaternion = None


def test_float32_and_frameworks_keep_their_dtype_and_kind(rng):
    a = xform.SE3.sample_uniform((3,), seed=rng, dtype=np.float32)
    assert a.dtype == np.float32 and (a @ a).dtype == np.float32
    t = xform.SE3.sample_uniform(
        (3,), generator=torch.Generator().manual_seed(0), dtype=torch.float32
    )
    assert isinstance(t.position, torch.Tensor) and t.dtype == torch.float32
    j = xform.SE3.sample_uniform((3,), key=jax.random.key(0))
    assert isinstance(j.position, jax.Array)
    assert isinstance(xform.SO3.identity((2,), like=torch.zeros(1)).quaternion, torch.Tensor)
    np.testing.assert_array_equal(xform.SE3.identity().quaternion, [1, 0, 0, 0])


# --- bad input --------------------------------------------------------------------------------


def test_bad_input_names_the_group_and_the_argument(rng):
    with pytest.raises(ValueError, match=r"SE3: 'quaternion' has shape \(5, 3\)"):
        xform.SE3(np.zeros((5, 3)), np.zeros((5, 3)))
    with pytest.raises(TypeError, match=r"SO3: 'quaternion' has dtype int64"):
        xform.SO3(np.zeros((5, 4), dtype=np.int64))
    with pytest.raises(TypeError, match="SE3: 'position' is a builtins.list"):
        xform.SE3([0.0, 0.0, 0.0], np.zeros(4))
    with pytest.raises(TypeError, match="fields mix frameworks"):
        xform.SE3(torch.zeros(3, dtype=torch.float64), np.zeros(4))
    with pytest.raises(TypeError, match="fields mix dtypes"):
        xform.SE3(np.zeros(3, np.float32), np.zeros(4))
    with pytest.raises(ValueError, match="do not broadcast"):
        xform.SE3(np.zeros((2, 3)), np.zeros((3, 4)))
    a, b = sample("SE3", rng), sample("SO3", rng)
    with pytest.raises(TypeError, match=r"SE3.multiply: 'other' is an xform.SO3"):
        a @ b
    with pytest.raises(TypeError, match="'other' holds torch arrays"):
        a @ a.to_torch()
    with pytest.raises(ValueError, match=r"SE3.apply: 'points' has shape \(4, 2\)"):
        a @ np.zeros((4, 2))
    with pytest.raises(TypeError, match="'points' is a torch array"):
        a @ torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"SE3.exp: 'tangent' has shape \(3,\)"):
        xform.SE3.exp(np.zeros(3))
    with pytest.raises(ValueError, match="layout"):
        a.parameters("xyzw")


# --- issue 38: defects found by fuzzing -------------------------------------------------------


def test_manifold_grad_through_an_infinite_leaf():
    """Zero tangents are zeros, not `x * 0`: an infinite cap leaves the minimum to the
    pose (d(T p)_x / d[rho, omega] at the identity = [1, 0, 0, 0, p_z, -p_y]) and has no
    gradient itself; with a finite cap of 1e9 the same."""
    expected = [1.0, 0.0, 0.0, 0.0, 3.0, -2.0]
    p = jnp.array([1.0, 2.0, 3.0])
    for cap in (jnp.inf, 1e9):
        gradient = manifold.grad(lambda d: jnp.minimum((d["T"] @ p)[0], d["cap"]))(
            {"T": xform.SE3.identity(like=p), "cap": jnp.array(cap)}
        )
        np.testing.assert_array_equal(gradient["T"], expected)
        np.testing.assert_array_equal(gradient["cap"], 0.0)
    tp = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    gradient = manifold.grad(lambda d: torch.minimum((d["T"] @ tp)[0], d["cap"]))(
        {"T": xform.SE3.identity(like=tp), "cap": torch.tensor(np.inf, dtype=torch.float64)}
    )
    np.testing.assert_array_equal(gradient["T"].numpy(), expected)
    assert float(gradient["cap"]) == 0.0
    zeros = manifold.zero_tangents([np.array([np.inf, -np.inf, np.nan]), torch.tensor(np.inf)])
    np.testing.assert_array_equal(zeros[0], 0.0)
    assert float(zeros[1]) == 0.0


def test_seeded_draws_are_reproducible_in_every_framework():
    like = torch.zeros(1, dtype=torch.float64)
    for cls in (xform.SO2, xform.SE2, xform.SO3, xform.SE3):
        first = cls.sample_uniform((3,), seed=7, like=like)
        again = cls.sample_uniform((3,), seed=7, like=like)
        other = cls.sample_uniform((3,), seed=8, like=like)
        for a, b, c in zip(first._arrays, again._arrays, other._arrays):
            assert isinstance(a, torch.Tensor) and a.dtype == torch.float64
            torch.testing.assert_close(a, b, rtol=0, atol=0)
            assert not torch.equal(a, c)
        jax_like = jnp.zeros(1)
        first, again = (cls.sample_uniform((3,), seed=7, like=jax_like) for _ in range(2))
        for a, b in zip(first._arrays, again._arrays):
            assert isinstance(a, jax.Array)
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"seed": 0, "key": "key"}, ("seed", "key")),
        ({"seed": 0, "generator": "generator"}, ("seed", "generator")),
        ({"generator": "generator", "key": "key"}, ("generator", "key")),
        ({"generator": "generator", "like": np.zeros(1)}, ("generator", "like")),
        ({"generator": "generator", "like": jnp.zeros(1)}, ("generator", "like")),
        ({"key": "key", "like": np.zeros(1)}, ("key", "like")),
        ({"key": "key", "like": torch.zeros(1)}, ("key", "like")),
        ({"generator": np.random.default_rng(0)}, ("generator",)),
        ({"key": np.zeros(2, np.uint32)}, ("key",)),
        ({"like": jnp.zeros(1)}, ("key", "seed")),
    ],
)
def test_conflicting_sources_of_randomness_raise(arguments, names):
    values = {"key": jax.random.key(0), "generator": torch.Generator().manual_seed(0)}
    arguments = {k: values.get(v, v) if isinstance(v, str) else v for k, v in arguments.items()}
    for cls in (xform.SO2, xform.SE2, xform.SO3, xform.SE3):
        with pytest.raises(TypeError, match=f"{cls.__name__}.sample_uniform") as raised:
            cls.sample_uniform((2,), **arguments)
        assert all(f"'{name}'" in str(raised.value) for name in names), raised.value


def test_manifold_trees_must_match():
    T, d = xform.SE3.identity(), np.zeros(6)
    with pytest.raises(ValueError, match=r"'delta' does not have the structure of 'tree'"):
        manifold.rplus([T, T], [d])
    with pytest.raises(ValueError, match=r"'delta' has the keys \['b'\], which 'tree' lacks"):
        manifold.rplus({"a": T}, {"a": d, "b": d})
    with pytest.raises(ValueError, match=r"at \['a'\]\[1\], 'tree' has an xform.SE3"):
        manifold.rplus({"a": (T, T)}, {"a": (d, None)})
    with pytest.raises(ValueError, match=r"'b' does not have the structure of 'a'"):
        manifold.rminus([T.to_torch()], [T.to_torch(), T.to_torch()])
    with pytest.raises(ValueError, match=r"'delta' does not have the structure of 'tree'"):
        manifold.rplus([T.to_jax()], {"x": jnp.zeros(6)})


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
def test_none_leaves_are_empty_subtrees_as_in_jax(framework):
    T = getattr(xform.SE3.sample_uniform((2,), seed=1), f"to_{framework}")()
    delta = 0.1 * np.arange(12.0).reshape(2, 6)
    delta = {"numpy": np.asarray, "torch": torch.from_numpy, "jax": jnp.asarray}[framework](delta)
    tree = {"T": T, "nothing": None, "list": [None, T]}
    moved = manifold.rplus(tree, {"T": delta, "nothing": None, "list": [None, delta]})
    assert moved["nothing"] is None and moved["list"][0] is None
    same_element(moved["T"], T.to_numpy() @ xform.SE3.exp(np.asarray(delta)))
    same_element(moved["list"][1], moved["T"])
    zeros = manifold.zero_tangents(tree)
    assert zeros["nothing"] is None and zeros["list"][0] is None
    assert tuple(zeros["T"].shape) == (2, 6)
    back = manifold.rminus(tree, moved)
    assert back["nothing"] is None
    np.testing.assert_allclose(np.asarray(back["T"]), np.asarray(delta), atol=1e-12)
    if framework != "numpy":
        ones = {"torch": torch.ones, "jax": jnp.ones}[framework](3, dtype=T.dtype)
        gradient = manifold.grad(lambda t: (t["T"] @ ones).sum() + (t["list"][1] @ ones).sum())(
            tree
        )
        assert gradient["nothing"] is None and gradient["list"][0] is None
        np.testing.assert_allclose(np.asarray(gradient["T"]), np.asarray(gradient["list"][1]))


def test_a_boolean_mask_never_indexes_the_fields():
    T = xform.SE3.sample_uniform((2, 3), seed=0)
    mask = np.ones((2, 3), bool)
    with pytest.raises(IndexError, match=r"too many indices \(3\) for batch shape \(2, 3\)"):
        T[mask, 0]
    with pytest.raises(IndexError):
        T.to_torch()[torch.from_numpy(mask), 0]
    with pytest.raises(IndexError):
        T[np.ones(2, bool), 0, 0]
    assert T[mask].shape == (6,) and T[np.array([True, False])].shape == (1, 3)
    assert T[..., np.array([True, False, True])].shape == (2, 2)
    assert T[True].shape == (1, 2, 3) and T[0, True, 1].shape == (1,)


@pytest.mark.parametrize("name", NAMES)
def test_interpolate_checks_t_alike_in_every_group(name, rng):
    cls, _ = GROUPS[name]
    a, b = sample(name, rng, (3,)), sample(name, rng, (3,))
    where = f"{name}.interpolate"
    with pytest.raises(ValueError, match=rf"{where}: 't' has shape \(4,\)"):
        a.interpolate(b, np.zeros(4))
    with pytest.raises(ValueError, match=rf"{where}: 't' has shape \(4,\)"):
        a.to_torch().interpolate(b.to_torch(), torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=rf"{where}: 't' has shape \(4,\)"):
        a.to_jax().interpolate(b.to_jax(), jnp.zeros(4))
    with pytest.raises(TypeError, match=rf"{where}: 't' is a torch array"):
        a.interpolate(b, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match=rf"{where}: 't' is a numpy array"):
        a.to_jax().interpolate(b.to_jax(), np.zeros(3))
    with pytest.raises(TypeError, match=rf"{where}: 't' has dtype float32"):
        a.interpolate(b, np.zeros(3, np.float32))
    with pytest.raises(TypeError, match=rf"{where}: 't' is a builtins.list"):
        a.interpolate(b, [0.5, 0.5, 0.5])
    same_element(a.interpolate(b, np.float32(1)), b)
    same_element(a.to_torch().interpolate(b.to_torch(), 1), b)


def test_identity_takes_any_frameworks_dtype_and_names_bad_shapes():
    t = torch.zeros(1)
    for dtype in (torch.float64, np.float64, "float64", jnp.float64):
        identity = xform.SE3.identity((2,), like=t, dtype=dtype)
        assert identity.dtype == torch.float64 and isinstance(identity.position, torch.Tensor)
        assert xform.SO3.identity(dtype=dtype).dtype == np.float64
        assert xform.SO2.identity(like=jnp.zeros(1), dtype=dtype).dtype == jnp.float64
    assert xform.SE3.sample_uniform((2,), seed=0, dtype=torch.float32).dtype == np.float32
    with pytest.raises(TypeError, match=r"SE3.identity: 'dtype' is int32"):
        xform.SE3.identity(like=t, dtype=torch.int32)
    with pytest.raises(TypeError, match=r"SE3.identity: 'like' has dtype int64"):
        xform.SE3.identity(like=np.zeros(1, np.int64))
    for like in (None, t, jnp.zeros(1)):
        with pytest.raises(ValueError, match=r"SE3.identity: 'batch_shape' \(2, -1\) has a neg"):
            xform.SE3.identity((2, -1), like=like)
        with pytest.raises(ValueError, match=r"SO2.sample_uniform: 'batch_shape' \(-3,\)"):
            xform.SO2.sample_uniform(-3, like=like, seed=0)
    with pytest.raises(TypeError, match=r"SE3.identity: 'batch_shape' must be an int"):
        xform.SE3.identity((2.5,))
