"""The groups, the manifold tools and the URDF reader, fuzzed as a demanding user would
(issue 38): infinite and NaN leaves, trees that do not match (None, dicts, lists, tuples,
namedtuples and the pytree nodes of JAX and PyTorch), arguments of mixed frameworks or in
conflict, boolean masks, and extreme numbers in a URDF. Each case has one right outcome,
known in advance from an independent reference: matrices and SciPy's expm / logm for the
group maths, hat-basis closed forms for gradients, NumPy's own indexing of an array of
ids for masks, 50-digit mpmath for URDF axes, and a rule table for which arguments are
wrong (then the error must name one of them)."""

import collections
import math
import re
import typing

import numpy as np
import pytest
import scipy.linalg
from conftest import SEED
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import xform
from xform import manifold
from xform.kinematics import Chain

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

mpmath = pytest.importorskip("mpmath")

GROUPS = (xform.SO2, xform.SE2, xform.SO3, xform.SE3, xform.Sim3)
FRAMEWORKS = ("numpy", "torch", "jax")
ARRAY = {  # float64 arrays of each framework from NumPy values (0-d too)
    "numpy": lambda x: np.array(x, dtype=np.float64),
    "torch": lambda x: torch.from_numpy(np.array(x, dtype=np.float64)),
    "jax": lambda x: jnp.asarray(np.array(x, dtype=np.float64)),
}
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def fuzz(function):
    return seed(SEED)(SETTINGS(given(data=st.data())(function)))


def numpy_of(x):
    return np.asarray(xform.to_numpy(x)) if xform._frameworks.kind(x) else np.asarray(x)


def in_framework(element, framework):
    return getattr(element, f"to_{framework}")()


def rng_of(data) -> np.random.Generator:
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="rng seed"))


# --- an independent reference for the group maths: matrices ------------------------------


def skew(v):
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]], dtype=float)


def hat_basis(cls) -> np.ndarray:
    """The Lie algebra's basis matrices G_k, in the tangent's coordinate order (SPEC:
    SO2 θ; SE2 [vx, vy, θ]; SO3 ω; SE3 [ρ, ω]; Sim3 [ρ, ω, σ]): exp(δ) = expm(Σ δ_k G_k)."""
    if cls is xform.SO2:
        return np.array([[[0.0, -1.0], [1.0, 0.0]]])
    if cls is xform.SO3:
        return np.array([skew(e) for e in np.eye(3)])
    if cls is xform.Sim3:  # SE3's, and the scale's diag(1, 1, 1, 0)
        return np.concatenate([hat_basis(xform.SE3), np.diag([1.0, 1.0, 1.0, 0.0])[None]])
    n = cls.matrix_dim
    rotations = hat_basis(xform.SO2 if cls is xform.SE2 else xform.SO3)
    basis = np.zeros((n - 1 + len(rotations), n, n))
    for i in range(n - 1):
        basis[i, i, n - 1] = 1.0  # a translation
    basis[n - 1 :, : n - 1, : n - 1] = rotations
    return basis


def rotation_matrix(rotation: np.ndarray) -> np.ndarray:
    """From a unit complex [c, s] or a unit quaternion [w, x, y, z], by the textbook
    formulas."""
    if rotation.shape[-1] == 2:
        c, s = rotation
        return np.array([[c, -s], [s, c]])
    w, x, y, z = rotation
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrices(element) -> np.ndarray:
    """The element's matrices `(*batch, n, n)`, built from its fields without xform."""
    fields = [numpy_of(a) for a in element._arrays]
    batch = element.shape
    out = np.zeros((*batch, element.matrix_dim, element.matrix_dim))
    for index in np.ndindex(*batch):
        rotation = rotation_matrix(rotation_field(fields)[index])
        if len(fields) == 1:
            out[index] = rotation
        else:
            n = element.matrix_dim
            scale = fields[2][index] if len(fields) == 3 else 1.0  # Sim3's (t, q, s)
            out[index][: n - 1, : n - 1] = scale * rotation
            out[index][: n - 1, n - 1] = fields[0][index]
            out[index][n - 1, n - 1] = 1.0
    return out


def rotation_field(fields: list) -> np.ndarray:
    """The unit complex or quaternion among an element's fields: its only one, or the
    second ((position, rotation), Sim3's (position, quaternion, scale))."""
    return fields[0] if len(fields) == 1 else fields[1]


def homogeneous(cls, point: np.ndarray) -> np.ndarray:
    return point if cls in (xform.SO2, xform.SO3) else np.append(point, 1.0)


def tangents(cls, rng, batch, largest_angle=2.5) -> np.ndarray:
    """Random tangents whose angles are at most `largest_angle`."""
    tangent = rng.normal(size=(*batch, cls.tangent_dim))
    rotation = {xform.SO2: slice(-1, None), xform.SE2: slice(-1, None), xform.Sim3: slice(3, 6)}
    rotation = tangent[..., rotation.get(cls, slice(-3, None))]
    norm = np.linalg.norm(rotation, axis=-1, keepdims=True)
    angle = rng.uniform(0, largest_angle, size=(*batch, 1))
    rotation *= angle / np.maximum(norm, 1e-300)
    return tangent


def element(cls, rng, batch, framework="numpy"):
    return in_framework(cls.sample_uniform(batch, seed=rng), framework)


# --- family: infinite and NaN leaves ---------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
@fuzz
def test_non_finite_leaves_have_zero_tangents_and_no_gradient(framework, data):
    """A tree of a pose, a cap that is ±inf or finite, and leaves full of inf and NaN that
    f does not use: zero tangents are exact zeros, rplus at them changes nothing, and the
    gradient of sum(min((T p)_x, cap)) is the closed form (row x of M G_k p for the pose
    where the cap is above, 1 for the cap where it is below), 0 for every unused leaf."""
    cls = data.draw(st.sampled_from(GROUPS), label="group")
    batch = data.draw(st.sampled_from([(), (3,), (2, 2)]), label="batch")
    rng = rng_of(data)
    pose = element(cls, rng, batch, framework)
    point = rng.normal(size=cls.space_dim)
    values = np.einsum("...ij,j->...i", matrices(pose), homogeneous(cls, point))[..., 0]
    caps = data.draw(
        st.lists(
            st.sampled_from([np.inf, -np.inf, 1e300, -1e300, 5.0, -5.0]),
            min_size=math.prod(batch),
            max_size=math.prod(batch),
        ),
        label="caps",
    )
    cap = np.reshape(caps, batch) + values  # ±inf stays, finite caps lie 5 from the value
    junk = np.array(data.draw(st.lists(st.sampled_from([np.inf, -np.inf, np.nan, 0.0, 1.0]))))
    tree = {
        "pose": pose,
        "cap": ARRAY[framework](cap),
        "unused": [ARRAY[framework](junk), (ARRAY[framework](np.full((2, 3), np.nan)), None)],
    }

    zeros = manifold.zero_tangents(tree)
    for leaf, zero in ((tree["cap"], zeros["cap"]), (tree["unused"][0], zeros["unused"][0])):
        assert xform._frameworks.kind(zero) == framework and zero.dtype == leaf.dtype
        np.testing.assert_array_equal(numpy_of(zero), np.zeros(leaf.shape))
    assert numpy_of(zeros["pose"]).shape == (*batch, cls.tangent_dim)
    np.testing.assert_array_equal(numpy_of(zeros["pose"]), 0.0)
    assert zeros["unused"][1][1] is None
    moved = manifold.rplus(tree, zeros)
    np.testing.assert_array_equal(numpy_of(moved["cap"]), cap)
    np.testing.assert_array_equal(numpy_of(moved["unused"][0]), junk)
    np.testing.assert_allclose(matrices(moved["pose"]), matrices(pose), rtol=0, atol=1e-15)
    if framework == "numpy":
        return

    minimum = {"torch": torch.minimum, "jax": jnp.minimum}[framework]
    p = ARRAY[framework](point)

    def f(t):
        return minimum((t["pose"] @ p)[..., 0], t["cap"]).sum()

    gradient = manifold.grad(f)(tree)
    rows = np.einsum("...ij,kjl,l->...ki", matrices(pose), hat_basis(cls), homogeneous(cls, point))[
        ..., 0
    ]
    below = (values < cap)[..., None]
    np.testing.assert_allclose(
        numpy_of(gradient["pose"]), np.where(below, rows, 0.0), rtol=0, atol=1e-12
    )
    np.testing.assert_array_equal(numpy_of(gradient["cap"]), np.where(cap < values, 1.0, 0.0))
    np.testing.assert_array_equal(numpy_of(gradient["unused"][0]), np.zeros(junk.shape))
    np.testing.assert_array_equal(numpy_of(gradient["unused"][1][0]), np.zeros((2, 3)))
    assert gradient["unused"][1][1] is None


# --- family: trees that match and trees that do not ------------------------------------------


class Named(typing.NamedTuple):
    first: typing.Any
    second: typing.Any


@jax.tree_util.register_pytree_node_class
class Pair:
    """A node registered with JAX's pytrees only."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def tree_flatten(self):
        return (self.first, self.second), None

    @classmethod
    def tree_unflatten(cls, _, children):
        return cls(*children)


CONTAINERS = ("dict", "list", "tuple", "named", "ordered", "deque", "pair")
KEYS = ("a", "b", "c", 3)


@st.composite
def layouts(draw, depth=0):
    """A tree's layout: ("group", cls, batch), ("array", shape), None, or (container,
    {key: layout})."""
    kinds = ["group", "array", "none"] + (list(CONTAINERS) if depth < 3 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "group":
        return ("group", draw(st.sampled_from(GROUPS)), draw(st.sampled_from([(), (2,)])))
    if kind == "array":
        return ("array", draw(st.sampled_from([(), (3,), (2, 2)])))
    if kind == "none":
        return None
    if kind in ("dict", "ordered"):
        keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3))
    else:
        keys = list(range(2 if kind in ("named", "pair") else draw(st.integers(0, 3))))
    return (kind, {key: draw(layouts(depth + 1)) for key in keys})


def build(layout, make):
    """The tree of `layout`, its leaves made by `make(leaf layout)`."""
    if layout is None:
        return None
    kind, content = layout[0], layout[1]
    if kind in ("group", "array"):
        return make(layout)
    children = {key: build(child, make) for key, child in content.items()}
    values = list(children.values())
    return {
        "dict": lambda: dict(children),
        "ordered": lambda: collections.OrderedDict(children),
        "list": lambda: values,
        "tuple": lambda: tuple(values),
        "named": lambda: Named(*values),
        "deque": lambda: collections.deque(values),
        "pair": lambda: Pair(*values),
    }[kind]()


def leaves(layout, path=()):
    """(path, leaf layout) of every group and array, in order."""
    if layout is None:
        return []
    if layout[0] in ("group", "array"):
        return [(path, layout)]
    return [item for key, child in layout[1].items() for item in leaves(child, (*path, key))]


def nodes(layout, path=()):
    """(path, layout) of every place."""
    found = [(path, layout)]
    if layout is not None and layout[0] not in ("group", "array"):
        for key, child in layout[1].items():
            found += nodes(child, (*path, key))
    return found


def get(tree, path):
    for key in path:
        tree = (tree.first, tree.second)[key] if isinstance(tree, Pair) else tree[key]
    return tree


def mutations(layout):
    """Every way to spoil `layout` at one place: (path of the difference, new layout)."""
    out = []
    for path, place in nodes(layout):
        replacements = []
        if place is None:
            replacements += [("array", (3,)), ("list", {})]
        elif place[0] in ("group", "array"):
            replacements += [None, ("list", {0: place})]
        else:
            kind, children = place
            replacements += [("array", (3,)), None]
            if kind in ("dict", "ordered"):
                extra = next(k for k in KEYS if k not in children)
                replacements.append((kind, {**children, extra: ("array", (3,))}))
                for key in children:
                    replacements.append((kind, {k: v for k, v in children.items() if k != key}))
            elif kind in ("list", "tuple", "deque"):
                replacements.append((kind, {**children, len(children): ("array", ())}))
                if children:
                    shorter = dict(list(children.items())[:-1])
                    replacements.append((kind, shorter))
        out += [(path, replace_at(layout, path, r)) for r in replacements]
    return out


def replace_at(layout, path, replacement):
    if not path:
        return replacement
    kind, children = layout
    return (kind, {**children, path[0]: replace_at(children[path[0]], path[1:], replacement)})


def path_text(path) -> str:
    return "".join(f"[{key!r}]" for key in path) or "the top level"


@pytest.mark.parametrize("framework", FRAMEWORKS)
@fuzz
def test_tree_structures_match_or_raise_naming_the_place(framework, data):
    """rplus and rminus over random trees (None, dicts, lists, tuples, namedtuples,
    OrderedDicts, deques (torch's pytree), a JAX pytree class) give each leaf's own
    result (groups: M expm(Σ δ_k G_k)); grad has None where the tree has None and the
    closed-form gradient elsewhere; a tangent tree spoilt at one place is a ValueError
    naming the argument and that place; a leaf of another framework in a gradient's
    argument is a TypeError naming its place."""
    layout = data.draw(layouts(), label="layout")
    rng = rng_of(data)

    def make_leaf(leaf):
        if leaf[0] == "group":
            return element(leaf[1], rng, leaf[2], framework)
        return ARRAY[framework](rng.normal(size=leaf[1]))

    def make_tangent(leaf):
        if leaf[0] == "group":
            return ARRAY[framework](tangents(leaf[1], rng, leaf[2]))
        return ARRAY[framework](rng.normal(size=leaf[1]))

    tree, delta = build(layout, make_leaf), build(layout, make_tangent)
    moved = manifold.rplus(tree, delta)
    for path, leaf in leaves(layout):
        x, d, result = get(tree, path), numpy_of(get(delta, path)), get(moved, path)
        if leaf[0] == "array":
            np.testing.assert_allclose(numpy_of(result), numpy_of(x) + d, rtol=0, atol=1e-15)
            continue
        algebra = np.einsum("...k,kij->...ij", d, hat_basis(leaf[1]))
        expected = matrices(x) @ np.vectorize(scipy.linalg.expm, signature="(n,n)->(n,n)")(algebra)
        np.testing.assert_allclose(matrices(result), expected, rtol=0, atol=1e-12)
    for path, place in nodes(layout):
        if place is None:
            assert get(moved, path) is None
    back = manifold.rminus(tree, moved)
    for path, _ in leaves(layout):
        np.testing.assert_allclose(
            numpy_of(get(back, path)), numpy_of(get(delta, path)), rtol=0, atol=1e-10
        )

    spoilt_path, spoilt = data.draw(st.sampled_from(mutations(layout)), label="mutation")
    spoilt_delta = build(spoilt, make_tangent)
    where = rf"'delta' does not have the structure of 'tree': at {path_text(spoilt_path)},"
    with pytest.raises(ValueError, match=escaped(where)):
        manifold.rplus(tree, spoilt_delta)
    with pytest.raises(ValueError, match=r"rminus: 'b' does not have the structure of 'a'"):
        manifold.rminus(tree, build(spoilt, make_leaf))

    if framework == "numpy" or not leaves(layout):
        return
    p = {cls: ARRAY[framework](np.linspace(0.5, 1.5, cls.space_dim)) for cls in GROUPS}

    def f(t):
        total = 0.0
        for path, leaf in leaves(layout):
            x = get(t, path)
            total = total + ((x @ p[leaf[1]]).sum() if leaf[0] == "group" else (x**2).sum())
        return total

    gradient = manifold.grad(f)(tree)
    for path, place in nodes(layout):
        if place is None:
            assert get(gradient, path) is None
    for path, leaf in leaves(layout):
        x, g = get(tree, path), numpy_of(get(gradient, path))
        if leaf[0] == "array":
            np.testing.assert_allclose(g, 2 * numpy_of(x), rtol=1e-14, atol=0)
            continue
        cls = leaf[1]
        point = homogeneous(cls, numpy_of(p[cls]))
        rows = np.einsum("...ij,kjl,l->...ki", matrices(x), hat_basis(cls), point)
        np.testing.assert_allclose(g, rows[..., : cls.space_dim].sum(-1), rtol=0, atol=1e-12)

    # one leaf of another framework among others: NumPy in a torch tree (JAX would take
    # it), torch in a JAX tree
    if len(leaves(layout)) < 2:
        return
    path, _ = data.draw(st.sampled_from(leaves(layout)), label="leaf of another framework")
    other = "numpy" if framework == "torch" else "torch"
    mixed = set_at(tree, path, in_other(get(tree, path), other))
    message = r"mix frameworks: .* at " + escaped(path_text(path)) + " of argument 0"
    with pytest.raises(TypeError, match=message):
        manifold.grad(f)(mixed)


def in_other(x, framework):
    if isinstance(x, xform.groups.LieGroup):
        return in_framework(x, framework)
    return ARRAY[framework](numpy_of(x).copy())


def set_at(tree, path, value):
    """`tree` with the leaf at `path` replaced (containers rebuilt, not mutated)."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(tree, Pair):
        children = [tree.first, tree.second]
        children[key] = set_at(children[key], rest, value)
        return Pair(*children)
    if isinstance(tree, dict):
        return type(tree)({**tree, key: set_at(tree[key], rest, value)})
    items = list(tree)
    items[key] = set_at(items[key], rest, value)
    if isinstance(tree, Named):
        return Named(*items)
    return type(tree)(items)


def escaped(text: str) -> str:
    return text.replace("[", r"\[").replace("]", r"\]")


# --- family: mixed-framework and conflicting arguments of the constructors -------------------

LIKES = {
    "none": None,
    "numpy64": np.zeros(1),
    "numpy32": np.zeros(1, np.float32),
    "numpy_int": np.zeros(1, np.int64),
    "torch64": torch.zeros(1, dtype=torch.float64),
    "torch32": torch.zeros(1),
    "jax64": jnp.zeros(1),
    "jax32": jnp.zeros(1, jnp.float32),
    "list": [0.0],
}
DTYPES = {
    "none": None,
    "np.float32": np.float32,
    "'float64'": "float64",
    "torch.float64": torch.float64,
    "torch.float32": torch.float32,
    "jnp.float32": jnp.float32,
    "np.int32": np.int32,
    "torch.int64": torch.int64,
    "'float16'": "float16",
}
BATCHES = {"()": (), "2": 2, "(2, 3)": (2, 3), "(0,)": (0,), "(-1,)": (-1,), "(2, -2)": (2, -2)}
BATCHES |= {"(2.5,)": (2.5,), "'x'": "x"}
# Sources of randomness: a fresh one per call, so that two calls of a reproducible
# source draw alike.
SEEDS = {
    "none": lambda: None,
    "int": lambda: 3,
    "SeedSequence": lambda: np.random.SeedSequence(3),
    "Generator": lambda: np.random.default_rng(3),
    "negative": lambda: -1,
}
GENERATORS = {
    "none": lambda: None,
    "torch": lambda: torch.Generator().manual_seed(5),
    "numpy": lambda: np.random.default_rng(5),
}
SOURCES = ("seed", "generator", "key")
PRNG_KEYS = {"none": lambda: None, "jax": lambda: jax.random.key(7), "numpy": lambda: np.zeros(2)}


def kind_of(array) -> str:
    return xform._frameworks.kind(array)


def float_name(dtype) -> str | None:
    name = str(dtype).removeprefix("torch.")
    try:
        return np.dtype(name).name
    except TypeError:
        return np.dtype(dtype).name


def constructor_faults(method, batch, like, dtype, seed, generator, key):
    """The rule table: (exception type, the argument names one of which it must name) for
    every fault of the arguments."""
    faults = []
    dims = (batch,) if isinstance(batch, int) else batch
    if not isinstance(dims, tuple) or any(not isinstance(n, int) for n in dims):
        faults.append((TypeError, {"batch_shape"}))
    elif min(dims, default=0) < 0:
        faults.append((ValueError, {"batch_shape"}))
    like_kind = None if like is None else kind_of(like)
    if like is not None and like_kind is None:
        faults.append((TypeError, {"like"}))
    if dtype is not None and float_name(dtype) not in ("float32", "float64"):
        faults.append((TypeError, {"dtype"}))
    if dtype is None and like_kind and float_name(like.dtype) not in ("float32", "float64"):
        faults.append((TypeError, {"like"}))
    if method == "identity":
        return faults
    given = {
        n for n, v in (("seed", seed), ("generator", generator), ("key", key)) if v is not None
    }
    if len(given) > 1:
        faults.append((TypeError, given))
    if generator is not None and not isinstance(generator, torch.Generator):
        faults.append((TypeError, {"generator"}))
    if key is not None and kind_of(key) != "jax":
        faults.append((TypeError, {"key"}))
    source = "torch" if generator is not None else "jax" if key is not None else None
    if source and like_kind and source != like_kind:
        faults.append((TypeError, {"like", "generator" if source == "torch" else "key"}))
    if not given and like_kind == "jax":
        faults.append((TypeError, {"key", "seed"}))
    if isinstance(seed, int) and seed < 0:
        faults.append((ValueError, {"seed"}))
    return faults


@fuzz
def test_constructor_arguments_fuzz(data):
    """identity and sample_uniform with every mix of batch shape, like, dtype and source
    of randomness: a fault is an error naming a faulty argument; otherwise the result is
    of the source's (else like's, else NumPy's) framework, of the dtype given (else
    like's, else the framework's default float), of the batch shape; the identity is
    exact, draws are unit rotations with translations in [-1, 1] (and Sim3's scales e^σ,
    σ in [-1, 1]), and a seeded source (seed, generator, key) draws alike twice."""
    cls = data.draw(st.sampled_from(GROUPS), label="group")
    method = data.draw(st.sampled_from(["identity", "sample_uniform"]), label="method")
    batch = BATCHES[data.draw(st.sampled_from(sorted(BATCHES)), label="batch_shape")]
    like = LIKES[data.draw(st.sampled_from(sorted(LIKES)), label="like")]
    dtype = DTYPES[data.draw(st.sampled_from(sorted(DTYPES)), label="dtype")]
    sources = {}
    if method == "sample_uniform":
        sources = {
            "seed": SEEDS[data.draw(st.sampled_from(sorted(SEEDS)), label="seed")],
            "generator": GENERATORS[data.draw(st.sampled_from(sorted(GENERATORS)), label="gen")],
            "key": PRNG_KEYS[data.draw(st.sampled_from(sorted(PRNG_KEYS)), label="key")],
        }
    fresh = {name: make() for name, make in sources.items()}
    faults = constructor_faults(method, batch, like, dtype, *(fresh.get(n) for n in SOURCES))

    def call(arguments):
        return getattr(cls, method)(batch, like=like, dtype=dtype, **arguments)

    if faults:
        with pytest.raises((TypeError, ValueError)) as raised:
            call(fresh)
        message = str(raised.value)
        assert f"{cls.__name__}.{method}" in message, message
        assert any(
            type(raised.value) is kind and any(f"'{n}'" in message for n in names)
            for kind, names in faults
        ), (message, faults)
        return

    result = call(fresh)
    framework = (
        "torch"
        if fresh.get("generator") is not None
        else "jax"
        if fresh.get("key") is not None
        else "numpy"
        if like is None
        else kind_of(like)
    )
    default = {
        "numpy": "float64",
        "torch": float_name(torch.get_default_dtype()),
        "jax": float_name(jnp.zeros(0).dtype),
    }[framework]
    expected_dtype = float_name(dtype) if dtype is not None else None
    expected_dtype = expected_dtype or (float_name(like.dtype) if like is not None else default)
    shape = (batch,) if isinstance(batch, int) else batch
    assert type(result) is cls and result.shape == shape
    for array in result._arrays:
        assert kind_of(array) == framework and float_name(array.dtype) == expected_dtype
    fields = [numpy_of(a).astype(np.float64) for a in result._arrays]
    tolerance = 1e-6 if expected_dtype == "float32" else 1e-14
    rotation = rotation_field(fields)
    np.testing.assert_allclose(np.linalg.norm(rotation, axis=-1), 1.0, atol=tolerance)
    if method == "identity":
        np.testing.assert_array_equal(rotation, np.eye(rotation.shape[-1])[0] + 0 * rotation)
        if len(fields) > 1:
            np.testing.assert_array_equal(fields[0], 0.0)
        if len(fields) == 3:
            np.testing.assert_array_equal(fields[2], 1.0)
        return
    if len(fields) > 1:
        assert np.all(np.abs(fields[0]) <= 1.0)
    if len(fields) == 3:  # e^sigma, sigma in [-1, 1]
        assert np.all((fields[2] >= np.exp(-1.0) - tolerance) & (fields[2] <= np.e + tolerance))
    reproducible = any(v is not None for v in fresh.values())
    if reproducible:
        again = call({name: make() for name, make in sources.items()})
        for a, b in zip(result._arrays, again._arrays):
            np.testing.assert_array_equal(numpy_of(a), numpy_of(b))


# --- family: 't' of interpolate --------------------------------------------------------------

T_SHAPES = [(), (1,), (3,), (4,), (2, 1), (2, 3), (5, 2, 3), (3, 1)]


@fuzz
def test_interpolate_t_fuzz(data):
    """interpolate with t a number, a list, or an array of any framework, dtype and shape,
    between elements of broadcasting batch shapes: a t of another framework or dtype is a
    TypeError, a shape that does not broadcast a ValueError, both naming 'G.interpolate'
    and 't'; otherwise the geodesic, against M_a expm(t logm(M_a^-1 M_b)) (SciPy)."""
    cls = data.draw(st.sampled_from(GROUPS), label="group")
    framework = data.draw(st.sampled_from(FRAMEWORKS), label="framework")
    full = data.draw(st.sampled_from([(), (3,), (2, 3)]), label="batch")
    a_batch = data.draw(st.sampled_from([full[i:] for i in range(len(full) + 1)]), label="a")
    rng = rng_of(data)
    a_numpy = cls.sample_uniform(a_batch, seed=rng)
    step = cls.exp(tangents(cls, rng, full, largest_angle=3.0))
    b_numpy = a_numpy @ step  # of batch `full`, within 3 rad of a
    a, b = in_framework(a_numpy, framework), in_framework(b_numpy, framework)
    kind = data.draw(
        st.sampled_from(["float", "int", "np.float64", "np.float32", "list", "array"]), label="t"
    )
    fault = None
    if kind == "array":
        t_framework = data.draw(st.sampled_from(FRAMEWORKS), label="t framework")
        t_dtype = data.draw(st.sampled_from(["float64", "float32"]), label="t dtype")
        t_shape = data.draw(st.sampled_from(T_SHAPES), label="t shape")
        values = rng.uniform(-0.5, 1.5, size=t_shape)
        t = ARRAY[t_framework](values)
        t = t.float() if t_dtype == "float32" and t_framework == "torch" else t
        t = t.astype(np.float32) if t_dtype == "float32" and t_framework != "torch" else t
        if t_framework != framework:
            fault = (TypeError, f"'t' is a {t_framework} array")
        elif t_dtype != "float64":
            fault = (TypeError, "'t' has dtype float32")
        else:
            try:
                np.broadcast_shapes(t_shape, a_batch, full)
            except ValueError:
                fault = (ValueError, re.escape(f"'t' has shape {t_shape}"))
    else:
        values = float(rng.uniform(-0.5, 1.5))
        t = {
            "float": values,
            "int": 1,
            "np.float64": np.float64(values),
            "np.float32": np.float32(values),
            "list": [values],
        }[kind]
        values = float(t) if kind != "list" else values
        if kind == "list":
            fault = (TypeError, "'t' is a builtins.list")
    if fault:
        with pytest.raises(fault[0], match=f"{cls.__name__}.interpolate: {fault[1]}"):
            a.interpolate(b, t)
        return
    result = a.interpolate(b, t)
    shape = np.broadcast_shapes(np.shape(values), a_batch, full)
    assert result.shape == shape and kind_of(result._arrays[0]) == framework
    m_a = np.broadcast_to(matrices(a_numpy), (*shape, cls.matrix_dim, cls.matrix_dim))
    m_b = np.broadcast_to(matrices(b_numpy), (*shape, cls.matrix_dim, cls.matrix_dim))
    t_all = np.broadcast_to(np.asarray(values, dtype=np.float64), shape)
    expected = np.empty(m_a.shape)
    for i in np.ndindex(*shape):
        relative = np.real(scipy.linalg.logm(np.linalg.solve(m_a[i], m_b[i])))
        expected[i] = m_a[i] @ scipy.linalg.expm(t_all[i] * relative)
    np.testing.assert_allclose(matrices(result), expected, rtol=0, atol=1e-9)


# --- family: boolean masks and other indices -------------------------------------------------


@st.composite
def indices(draw, batch):
    """An index of up to len(batch) + 1 items for a batch: ints in range (JAX clamps the
    others), slices, None, one Ellipsis, integer arrays, 0-d bools, and boolean masks of 1
    to 3 dimensions shaped for the axes they meet (overrunning the batch, sized 1 to 4 as
    the fields' axis may be). Half of them end with a mask over the batch's remaining axes
    and one item more: an index that counts a mask as one axis (issue 38) lets that item
    index the fields, where NumPy's rules raise an IndexError."""
    items, axis, ellipsis = [], 0, False
    for _ in range(draw(st.integers(1, len(batch) + 1))):
        size = batch[axis] if axis < len(batch) else 2
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis", "ints", "bool", "mask"]))
        if kind == "int":
            items.append(draw(st.integers(-size, size - 1)) if size else slice(None))
            axis += 1
        elif kind == "slice":
            items.append(slice(draw(st.integers(0, 2)), None, draw(st.integers(1, 2))))
            axis += 1
        elif kind == "none":
            items.append(None)
        elif kind == "ellipsis" and not ellipsis:
            items.append(Ellipsis)
            ellipsis = True
        elif kind == "ints":
            ints = draw(st.lists(st.integers(0, max(size - 1, 0)), max_size=3 if size else 0))
            items.append(np.array(ints, dtype=np.intp))
            axis += 1
        elif kind == "bool":
            items.append(draw(st.booleans()))
        else:
            ndim = draw(st.integers(1, 3))
            shape = tuple(
                batch[axis + i] if axis + i < len(batch) else draw(st.integers(1, 4))
                for i in range(ndim)
            )
            size = math.prod(shape)
            mask = draw(st.lists(st.booleans(), min_size=size, max_size=size))
            items.append(np.array(mask, dtype=bool).reshape(shape))
            axis += ndim
    if draw(st.booleans()):
        rest = batch[axis:]
        if rest:
            mask = draw(st.lists(st.booleans(), min_size=math.prod(rest), max_size=math.prod(rest)))
            items.append(np.array(mask, dtype=bool).reshape(rest))
        items.append(draw(st.sampled_from([0, slice(None), np.array([0])])))
    return tuple(items)


def index_in(index, framework):
    def convert(item):
        if isinstance(item, np.ndarray):
            return {"numpy": item, "torch": torch.from_numpy(item), "jax": jnp.asarray(item)}[
                framework
            ]
        return item

    return tuple(map(convert, index))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@fuzz
def test_indexing_fuzz(framework, data):
    """Indexing an element as its framework indexes an array of the batch's shape (of
    each element's id; NumPy's rules, with torch's and JAX's own placements of scalars
    among advanced indices): the same elements in the same batch shape, or the same
    error, an IndexError where the index takes more axes than the batch has (a mask
    takes as many as its dimensions); never an index into the fields' axis."""
    cls = data.draw(st.sampled_from(GROUPS), label="group")
    batch = data.draw(st.sampled_from([(3,), (2, 3), (2, 1, 3), (0, 2)]), label="batch")
    rng = rng_of(data)
    pose = element(cls, rng, batch, framework)
    index = index_in(data.draw(indices(batch), label="index"), framework)
    if framework == "jax":  # JAX's bool scalars among other indices: its own bugs (raises)
        index = tuple(i for i in index if not isinstance(i, bool))
    ids = ARRAY[framework](np.arange(math.prod(batch)).reshape(batch))
    try:
        chosen = numpy_of(ids[index]).astype(np.intp)
    except (IndexError, TypeError, ValueError) as error:
        with pytest.raises(type(error)):
            pose[index]
        return
    result = pose[index]
    assert result.shape == chosen.shape
    for field, indexed in zip(pose._arrays, result._arrays):
        flat = numpy_of(field).reshape(-1, *field.shape[len(batch) :])  # Sim3's scale: ()
        np.testing.assert_array_equal(numpy_of(indexed), flat[chosen])


# --- family: extreme numbers in a URDF -------------------------------------------------------

MAGNITUDES = [0.0, 5e-324, 1e-310, 1e-200, 1e-30, 0.5, 1.0, 7.0, 1e30, 1e200, 1e300]
MAGNITUDES += [1.7976931348623157e308]
NOT_FINITE = ["1e400", "-1e999", "nan", "inf"]


@fuzz
def test_urdf_extreme_numbers_fuzz(data):
    """A joint whose axis components range from the smallest subnormal to the largest
    double (and its origin from 0 to 1e300): the axis is the unit vector of the exact
    direction (mpmath, 50 digits) to 2 ulp, forward kinematics turns about it (revolute:
    [cos q/2, sin q/2 u]) or slides along it (prismatic: q u); a zero axis or a number
    that is not finite is a ValueError naming the joint."""
    components = [
        data.draw(st.sampled_from(MAGNITUDES)) * data.draw(st.sampled_from([1.0, -1.0]))
        for _ in range(3)
    ]
    texts = [repr(c) for c in components]
    spoil = data.draw(st.booleans(), label="a number that is not finite")
    if spoil:
        texts[data.draw(st.integers(0, 2))] = data.draw(st.sampled_from(NOT_FINITE))
    origin = [data.draw(st.sampled_from([0.0, -2.5, 1e10, 1e300])) for _ in range(3)]
    kind = data.draw(st.sampled_from(["revolute", "continuous", "prismatic"]), label="type")
    xml = f"""<robot name="r"><link name="a"/><link name="b"/>
      <joint name="extreme" type="{kind}"><parent link="a"/><child link="b"/>
      <origin xyz="{" ".join(map(repr, origin))}"/><axis xyz="{" ".join(texts)}"/>
      <limit lower="-1" upper="1" effort="1" velocity="1"/></joint></robot>"""
    if spoil:
        with pytest.raises(ValueError, match="joint 'extreme'.*finite"):
            Chain.from_urdf(xml)
        return
    if not any(components):
        with pytest.raises(ValueError, match="joint 'extreme' has the zero axis"):
            Chain.from_urdf(xml)
        return
    chain = Chain.from_urdf(xml)
    with mpmath.workdps(50):
        exact = [mpmath.mpf(c) for c in components]
        norm = mpmath.sqrt(sum(c * c for c in exact))
        unit = np.array([float(c / norm) for c in exact])
    axis = chain.model.axes[1]
    np.testing.assert_allclose(axis, unit, rtol=0, atol=4.5e-16)
    q = data.draw(st.floats(-3.0, 3.0), label="q")
    pose = chain.forward_kinematics(np.array([q]))[1]
    if kind == "prismatic":
        np.testing.assert_allclose(
            pose.position, np.array(origin) + q * unit, rtol=1e-15, atol=1e-15
        )
        np.testing.assert_array_equal(pose.quaternion, [1.0, 0.0, 0.0, 0.0])
    else:
        np.testing.assert_array_equal(pose.position, origin)
        rotation = [math.cos(q / 2), *(math.sin(q / 2) * unit)]
        np.testing.assert_allclose(pose.quaternion, rotation, rtol=0, atol=1e-15)
