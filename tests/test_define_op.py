"""Ops that users define from their own Warp functions with `xform.define_op`: values
against float64 NumPy references, derivatives against finite differences (with closed
forms and without), and every framework's transforms, as for the built-ins."""

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import warp as wp
from helpers import as_tuple, check_grads
from reference import rotation_matrix

import xform
from xform._op import Product
from xform.ops.quaternion import quat_rotate, quat_rotate_tangent, quat_rotate_vjp

# --- two user ops, as a user writes them (each well under 15 lines) ----------------------


@wp.func
def scaled_rotate(quaternion: Any, points: Any, scale: Any):
    return scale * quat_rotate(quaternion, points)


SCALED_ROTATE = xform.define_op(
    "scaled_rotate",
    scaled_rotate,
    operands={"quaternion": (4,), "points": (3,), "scale": ()},
    results={"out_points": (3,)},
    doc="scale * R(q) p",
)


@wp.func
def polar(vector: Any):
    length = wp.length(vector)
    return length, vector / length


POLAR_RESULTS = {"length": (), "direction": (3,)}
POLAR = xform.define_op("polar", polar, operands={"vector": (3,)}, results=POLAR_RESULTS)

# --- and one with closed-form derivatives ---------------------------------------------------


@wp.func
def scaled_rotate_tangent(q: Any, p: Any, s: Any, dq: Any, dp: Any, ds: Any):
    return ds * quat_rotate(q, p) + s * quat_rotate_tangent(q, dq, p, dp)


@wp.func
def scaled_rotate_vjp(q: Any, p: Any, s: Any, g: Any):
    q_bar, p_bar = quat_rotate_vjp(q, p, g)
    return s * q_bar, s * p_bar, wp.dot(quat_rotate(q, p), g)


SCALED_ROTATE_CLOSED = xform.define_op(
    "scaled_rotate",
    scaled_rotate,
    operands={"quaternion": (4,), "points": (3,), "scale": ()},
    results={"out_points": (3,)},
    tangent=scaled_rotate_tangent,
    vjp=scaled_rotate_vjp,
)


def scaled_rotate_reference(q, p, s):
    return np.asarray(s)[..., None] * (rotation_matrix(q) @ p[..., None])[..., 0]


def polar_reference(v):
    length = np.linalg.norm(v, axis=-1)
    return length, v / length[..., None]


CASES = {
    "scaled_rotate": (SCALED_ROTATE, scaled_rotate_reference),
    "scaled_rotate_closed": (SCALED_ROTATE_CLOSED, scaled_rotate_reference),
    "polar": (POLAR, polar_reference),
}
# Leading shapes per operand, broadcast ones included (the scale is a scalar element).
SHAPES = {
    "scaled_rotate": [
        [(5,), (5,), (5,)],
        [(5,), (2, 5), ()],
        [(1, 4), (3, 1), (3, 4)],
        [(), (), ()],
    ],
    "polar": [[(5,)], [(2, 3)], [()]],
}


def shapes(case):
    return SHAPES["polar" if case == "polar" else "scaled_rotate"]


def arguments(case, leadings, rng, dtype=np.float64):
    op = CASES[case][0]
    return [
        rng.normal(size=(*lead, *o.element)).astype(dtype) for o, lead in zip(op.operands, leadings)
    ]


ALL = [(case, k) for case in CASES for k in range(len(shapes(case)))]


def case_args(case, k, rng, dtype=np.float64):
    return arguments(case, shapes(case)[k], rng, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("case", "k"), ALL)
def test_numpy_values_match_the_reference(case, k, dtype, rng):
    op, reference = CASES[case]
    args = case_args(case, k, rng, dtype)
    got = as_tuple(op(*args))
    for g, want in zip(got, as_tuple(reference(*[a.astype(np.float64) for a in args]))):
        assert g.dtype == dtype and g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-12 if dtype == np.float64 else 1e-5, atol=1e-5)


STEP = 1e-6


@pytest.mark.parametrize(("case", "k"), ALL)
def test_vjp_and_jvp_match_central_differences(case, k, rng):
    op = CASES[case][0]
    args = case_args(case, k, rng)
    results = as_tuple(op(*args))
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    tangents = [rng.normal(size=a.shape) for a in args]
    plus = as_tuple(op(*[a + STEP * t for a, t in zip(args, tangents)]))
    minus = as_tuple(op(*[a - STEP * t for a, t in zip(args, tangents)]))
    for got, p, m in zip(as_tuple(xform.jvp(op, args, tangents)), plus, minus):
        np.testing.assert_allclose(got, (p - m) / (2 * STEP), rtol=1e-6, atol=1e-7)
    # <g, J t> from the differences, against <J^T g, t> from the VJP
    directional = sum(float((g * (p - m)).sum()) for g, p, m in zip(cotangents, plus, minus))
    pulled = sum(float((b * t).sum()) for b, t in zip(xform.vjp(op, args, cotangents), tangents))
    assert pulled == pytest.approx(directional / (2 * STEP), rel=1e-6)
    for grad, arg in zip(xform.vjp(op, args, cotangents), args):
        assert grad.shape == arg.shape  # broadcast dimensions summed


@pytest.mark.parametrize("k", range(len(SHAPES["scaled_rotate"])))
def test_closed_forms_equal_the_derived_derivatives(k, rng):
    args = case_args("scaled_rotate", k, rng)
    cotangent = rng.normal(size=SCALED_ROTATE(*args).shape)
    tangents = [rng.normal(size=a.shape) for a in args]
    np.testing.assert_allclose(
        xform.jvp(SCALED_ROTATE_CLOSED, args, tangents),
        xform.jvp(SCALED_ROTATE, args, tangents),
        rtol=1e-12,
        atol=1e-12,
    )
    for a, b in zip(
        xform.vjp(SCALED_ROTATE_CLOSED, args, cotangent), xform.vjp(SCALED_ROTATE, args, cotangent)
    ):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_numbers_for_scalar_operands_take_the_arrays_dtype(rng):
    q, p, _ = case_args("scaled_rotate", 0, rng, np.float32)
    want = scaled_rotate_reference(q.astype(np.float64), p.astype(np.float64), 2.0)
    got = SCALED_ROTATE(q, p, 2.0)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    torch = pytest.importorskip("torch")
    got = SCALED_ROTATE(torch.from_numpy(q), torch.from_numpy(p), 2)
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="argument 'points' is a builtins.float"):
        SCALED_ROTATE(q, 1.0, 2.0)  # numbers only where the element is a scalar


def test_warp_arrays_in_warp_arrays_out(rng):
    v = rng.normal(size=(6, 3))
    length, direction = POLAR(wp.array(v, dtype=wp.vec3d))
    assert isinstance(length, wp.array) and isinstance(direction, wp.array)
    want = polar_reference(v)
    np.testing.assert_allclose(length.numpy(), want[0], rtol=1e-12)
    np.testing.assert_allclose(direction.numpy().reshape(6, 3), want[1], rtol=1e-12)


def test_an_op_is_typed_documented_and_built_ins_are_ops():
    assert isinstance(SCALED_ROTATE, xform.Op)
    assert SCALED_ROTATE.key != SCALED_ROTATE_CLOSED.key  # one name, two ops, both usable
    assert "scale * R(q) p" in SCALED_ROTATE.docstring("none")
    assert [o.name for o in SCALED_ROTATE.operands] == ["quaternion", "points", "scale"]
    # Each built-in is an op of its own (its own kernels) and a function of xform of its name.
    assert len({op.key for op in xform.OPS.values()}) == len(xform.OPS)
    for name, op in xform.OPS.items():
        function = getattr(xform, name)
        assert isinstance(op, xform.Op) and function.__name__ == name
        assert function.__signature__ == op.signature


def test_help_shows_the_ops_own_documentation():
    import pydoc

    assert SCALED_ROTATE.__doc__.startswith("scale * R(q) p")
    assert "Arguments:\n    quaternion: (..., 4)" in SCALED_ROTATE.__doc__
    text = pydoc.render_doc(SCALED_ROTATE, renderer=pydoc.plaintext)
    assert "scaled_rotate" in text and "scale * R(q) p" in text
    assert xform.Op.__doc__.startswith("An op:")  # the class keeps its own


def _notebook_cell(factor: float):
    """What a notebook cell does when run: make a @wp.func and define an op of it."""

    @wp.func
    def cell_function(x: Any):
        return type(x[0])(2.0) * x

    @wp.func
    def cell_other(x: Any):
        return type(x[0])(3.0) * x

    return xform.define_op("notebook_op", cell_function if factor == 2 else cell_other,
                           {"x": (3,)}, {"y": (3,)})  # fmt: skip


def test_defining_the_same_op_again_returns_it(rng):
    """A cell run twice defines nothing new: no Warp modules, no torch custom ops."""
    from xform._registry import DEFINED

    first = _notebook_cell(2)
    count = len(DEFINED)
    again = _notebook_cell(2)
    assert again is first and len(DEFINED) == count
    other = _notebook_cell(3)  # a different definition of the name: a new op, both usable
    assert other is not first and len(DEFINED) == count + 1
    x = rng.normal(size=(2, 3))
    np.testing.assert_array_equal(first(x), 2 * x)
    np.testing.assert_array_equal(other(x), 3 * x)
    # A function made by a factory: the same code, different captured constants.
    five, seven, five_again = _captured(5.0), _captured(7.0), _captured(5.0)
    assert five is five_again and five is not seven
    np.testing.assert_array_equal(seven(x), 7 * x)


def _captured(factor: float):
    @wp.func
    def captured_scale(x: Any):
        return type(x[0])(factor) * x

    return xform.define_op("captured_op", captured_scale, {"x": (3,)}, {"y": (3,)})


# --- errors --------------------------------------------------------------------------------


def test_bad_shapes_and_dtypes_name_the_operand(rng):
    q, p, s = case_args("scaled_rotate", 0, rng)
    expected = r"argument 'points' has shape \(5, 2\); expected \(\.\.\., 3\)"
    with pytest.raises(ValueError, match=expected):
        SCALED_ROTATE(q, p[:, :2], s)
    with pytest.raises(ValueError, match="argument 'scale' has shape"):
        SCALED_ROTATE(q, p, np.ones((4,)))
    with pytest.raises(TypeError, match="argument 'scale' has dtype float32"):
        SCALED_ROTATE(q, p, s.astype(np.float32))
    expected = r"cotangent of 'length' has shape \(3,\); expected \(5,\)"
    with pytest.raises(ValueError, match=expected):
        xform.vjp(POLAR, [p], (np.ones(3), None))


def test_ops_of_one_name_keep_their_own_kernels(rng):
    @wp.func
    def triple(x: Any):
        return type(x[0])(3.0) * x

    @wp.func
    def double(x: Any):
        return type(x[0])(2.0) * x

    first = xform.define_op("multiply", double, {"x": (3,)}, {"y": (3,)})
    second = xform.define_op("multiply", triple, {"x": (3,)}, {"y": (3,)})
    third = xform.define_op("multiply_1", triple, {"x": (3,)}, {"y": (3,)})
    assert len({first.key, second.key, third.key}) == 3
    x = rng.normal(size=(4, 3))
    np.testing.assert_array_equal(first(x), 2 * x)
    np.testing.assert_array_equal(second(x), 3 * x)
    np.testing.assert_array_equal(xform.vjp(second, [x], np.ones_like(x))[0], 3 * np.ones_like(x))
    np.testing.assert_array_equal(xform.vjp(first, [x], np.ones_like(x))[0], 2 * np.ones_like(x))


PARTLY = xform.define_op(
    "scaled_rotate_points_only",
    scaled_rotate,
    operands={"quaternion": (4,), "points": (3,), "scale": ()},
    results={"out_points": (3,)},
    differentiable=("points",),
)


def test_operands_left_out_of_differentiable_have_zero_derivatives(rng):
    q, p, s = case_args("scaled_rotate", 0, rng)
    tangents = [rng.normal(size=q.shape), np.zeros_like(p), rng.normal(size=s.shape)]
    np.testing.assert_array_equal(xform.jvp(PARTLY, [q, p, s], tangents), np.zeros_like(p))
    g = rng.normal(size=p.shape)
    grads = xform.vjp(PARTLY, [q, p, s], g)
    assert grads[0] is None and grads[2] is None
    np.testing.assert_allclose(grads[1], xform.vjp(SCALED_ROTATE, [q, p, s], g)[1], rtol=1e-12)
    torch = pytest.importorskip("torch")
    inputs = [torch.from_numpy(a).requires_grad_() for a in (q, p, s)]
    PARTLY(*inputs).sum().backward()
    assert inputs[0].grad is None and inputs[2].grad is None
    np.testing.assert_allclose(
        inputs[1].grad.numpy(), xform.vjp(PARTLY, [q, p, s], np.ones_like(p))[1]
    )
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    grads = jax.grad(lambda *a: PARTLY(*a).sum(), argnums=(0, 1, 2))(q, p, s)
    np.testing.assert_array_equal(np.asarray(grads[0]), np.zeros_like(q))
    np.testing.assert_array_equal(np.asarray(grads[2]), np.zeros_like(s))


def test_numbers_for_scalar_operands_with_warp_arrays(rng):
    q, p, _ = case_args("scaled_rotate", 0, rng, np.float32)
    got = SCALED_ROTATE(wp.array(q, dtype=wp.vec4f), wp.array(p, dtype=wp.vec3f), 2.0)
    assert isinstance(got, wp.array) and got.dtype == wp.float32 and got.shape == (5, 3)
    want = scaled_rotate_reference(q.astype(np.float64), p.astype(np.float64), 2.0)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_build_failure_names_the_op_and_its_declaration(rng):
    wrong = xform.define_op("wrong_results", polar, {"vector": (3,)}, {"length": ()})
    with pytest.raises(TypeError, match=r"xform.wrong_results: Warp could not build .*return"):
        wrong(rng.normal(size=(2, 3)))


def test_define_op_checks_its_arguments():
    for name in ("not a name", "cuadrado_ñ"):  # the second: no C++ symbol, no torch schema
        with pytest.raises(ValueError, match="must be an ASCII Python identifier"):
            xform.define_op(name, polar, {"vector": (3,)}, {"length": ()})
    for work in (0.5, "2", True, float("nan")):
        with pytest.raises(ValueError, match="work must be a number of at least 1"):
            xform.define_op("bad", polar, {"vector": (3,)}, POLAR_RESULTS, work=work)
    for unroll in (-1, 2.0, True, "16"):
        with pytest.raises(ValueError, match="max_unroll must be None or an int >= 0"):
            xform.define_op("bad", polar, {"vector": (3,)}, POLAR_RESULTS, max_unroll=unroll)
    with pytest.raises(TypeError, match="must be a @wp.func"):
        xform.define_op("bad", lambda v: v, {"vector": (3,)}, {"length": ()})
    with pytest.raises(ValueError, match="takes 1 arguments; expected 2"):
        xform.define_op("bad", polar, {"a": (3,), "b": (3,)}, {"length": ()})
    with pytest.raises(ValueError, match="element shape"):
        xform.define_op("bad", polar, {"vector": (3, 3, 3)}, {"length": ()})
    with pytest.raises(ValueError, match="differentiable names"):
        xform.define_op("bad", polar, {"vector": (3,)}, {"length": ()}, differentiable=("v",))
    with pytest.raises(ValueError, match="tangent 'scaled_rotate' takes 3 arguments; expected 2"):
        xform.define_op("bad", polar, {"vector": (3,)}, {"length": ()}, tangent=scaled_rotate)
    with pytest.raises(ValueError, match="no op named 'polar'; the built-in ops are"):
        xform.vjp("polar", [np.ones(3)], np.ones(()))
    with pytest.raises(ValueError, match="is not an ASCII Python identifier"):
        xform.define_op("bad", polar, {"lambda": (3,)}, {"length": ()})
    batch = xform.Operand((3,), ("B", "B"))
    with pytest.raises(ValueError, match="a group twice"):
        xform.define_op("bad", polar, {"vector": batch}, {"length": ()})
    vector = xform.Operand((3,), ("B",))
    with pytest.raises(ValueError, match="must list the operands' groups"):
        xform.define_op("bad", polar, {"vector": vector}, {"length": xform.Result((), ("M",))})
    count = len(xform._registry.DEFINED)
    with pytest.raises(ValueError):
        xform.define_op("bad", polar, {"vector": vector}, {"length": ()})
    assert len(xform._registry.DEFINED) == count  # nothing half-made


# --- sums: results that leave out a group of the operands' --------------------------------


@wp.func
def weighted_point(point: Any, weight: Any):
    return weight * point, weight


POINTS = xform.Operand((3,), ("...", "N"))
WEIGHTED_SUM = xform.define_op(
    "test_weighted_sum",
    weighted_point,
    operands={"points": POINTS, "weights": xform.Operand((), ("...", "N"))},
    results={"total": xform.Result((3,), ("...",)), "weight": xform.Result((), ("...",))},
    doc="sum_n w_n p_n and sum_n w_n, per leading index.",
)


@pytest.mark.parametrize(
    "shape", [(7,), (2, 7), (3, 1000), (1,), (0,), (4, 0), (2, 3, 5), (3, 40_000), (100_003,)]
)
def test_a_summing_op_sums_over_the_left_out_group(shape, rng):
    """Sums of one chunk, of many (40000 = 200 chunks of 200), of none (zeros), with
    the weights broadcast along N, in float64 and float32."""
    p = rng.normal(size=(*shape, 3))
    w = rng.uniform(size=shape)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        total, weight = WEIGHTED_SUM(p.astype(dtype), w.astype(dtype))
        assert total.shape == (*shape[:-1], 3) and total.dtype == dtype
        scale = max(1.0, np.sqrt(shape[-1]))
        close = {"rtol": tol, "atol": tol * scale}
        np.testing.assert_allclose(total, (w[..., None] * p).sum(-2), **close)
        np.testing.assert_allclose(weight, w.sum(-1), **close)
    if shape[-1]:
        total, _ = WEIGHTED_SUM(p, w[..., :1])
        np.testing.assert_allclose(total, w[..., :1] * p.sum(-2), atol=1e-12 * scale)


def test_a_summing_op_differentiates_every_way(rng):
    p, w = rng.normal(size=(3, 5, 3)), rng.uniform(size=(3, 5))
    dp, dw = rng.normal(size=p.shape), rng.normal(size=w.shape)
    total, weight = xform.jvp(WEIGHTED_SUM, (p, w), (dp, dw))
    np.testing.assert_allclose(total, (dw[..., None] * p + w[..., None] * dp).sum(-2), atol=1e-13)
    np.testing.assert_allclose(weight, dw.sum(-1), atol=1e-13)
    g, gw = rng.normal(size=(3, 3)), rng.normal(size=3)
    gp, gww = xform.vjp(WEIGHTED_SUM, (p, w), (g, gw))
    np.testing.assert_allclose(gp, w[..., None] * g[:, None], atol=1e-13)
    np.testing.assert_allclose(gww, (p * g[:, None]).sum(-1) + gw[:, None], atol=1e-13)
    # a large VJP split over threads (runs of points that cross from one sum into the
    # next: 20,000 is no multiple of a run), and one whose sums all fall into one result
    p, w = rng.normal(size=(4, 20_000, 3)), rng.uniform(size=(4, 20_000))
    g4, gw4 = rng.normal(size=(4, 3)), rng.normal(size=4)
    gp, gww = xform.vjp(WEIGHTED_SUM, (p, w), (g4, gw4))
    np.testing.assert_allclose(gp, w[..., None] * g4[:, None], atol=1e-13)
    np.testing.assert_allclose(gww, (p * g4[:, None]).sum(-1) + gw4[:, None], atol=1e-13)
    gp, _ = xform.vjp(WEIGHTED_SUM, (p[0], w[0]), (g[0], gw[0]))
    np.testing.assert_allclose(gp, w[0, :, None] * g[0], atol=1e-13)


def test_a_summing_op_in_torch_and_jax(rng):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")

    jax.config.update("jax_enable_x64", True)
    p, w = rng.normal(size=(2, 50, 3)), rng.uniform(size=(2, 50))
    tensors = [torch.from_numpy(a).requires_grad_() for a in (p, w)]
    assert torch.autograd.gradcheck(WEIGHTED_SUM, tensors, check_forward_ad=True)
    mapped = torch.func.vmap(WEIGHTED_SUM)(*tensors)
    expected = WEIGHTED_SUM(p, w)
    for a, b in zip(mapped, expected):
        np.testing.assert_allclose(a.detach().numpy(), b, atol=1e-13)
    arrays = [jax.numpy.asarray(a) for a in (p, w)]
    check_grads(WEIGHTED_SUM, arrays)
    mapped = jax.jit(jax.vmap(WEIGHTED_SUM, in_axes=(0, None)))(arrays[0], arrays[1][0])
    expected = WEIGHTED_SUM(p, np.broadcast_to(w[0], w.shape))
    for a, b in zip(mapped, expected):
        np.testing.assert_allclose(np.asarray(a), b, atol=1e-13)


def test_summed_groups_must_be_named_and_last():
    with pytest.raises(ValueError, match="must come last"):
        xform.define_op(
            "bad", weighted_point,
            {"points": xform.Operand((3,), ("N", "B")), "weights": xform.Operand((), ("N", "B"))},
            {"total": xform.Result((3,), ("B",)), "weight": xform.Result((), ("B",))},
        )  # fmt: skip
    with pytest.raises(ValueError, match="must list the operands' groups"):
        xform.define_op(
            "bad", weighted_point, {"points": POINTS, "weights": xform.Operand((), ("...", "N"))},
            {"total": xform.Result((3,), ("N",)), "weight": xform.Result((), ("N",))},
        )  # fmt: skip
    with pytest.raises(ValueError, match="does not loop over runs"):
        xform.define_op(
            "bad", weighted_point, {"points": POINTS, "weights": xform.Operand((), ("...", "N"))},
            {"total": xform.Result((3,), ("...",)), "weight": xform.Result((), ("...",))},
            runs=True,
        )  # fmt: skip


def test_a_non_differentiable_user_op(rng):
    results = {"length": (), "direction": (3,)}
    op = xform.define_op("polar_values", polar, {"vector": (3,)}, results, differentiable=())
    v = rng.normal(size=(4, 3))
    np.testing.assert_allclose(op(v)[0], np.linalg.norm(v, axis=-1))
    with pytest.raises(TypeError, match="polar_values is not differentiable"):
        xform.vjp(op, [v], (np.ones(4), None))


POLAR_WITHOUT = xform.define_op(
    "polar_without_derivatives", polar, {"vector": (3,)}, POLAR_RESULTS,
    not_differentiable="no derivatives here; differentiate polar instead",
)  # fmt: skip
WITHOUT = r"xform\.polar_without_derivatives: no derivatives here; differentiate polar instead"


def test_not_differentiable_raises_in_every_framework_and_serves_constants(rng):
    """Results of an op made `not_differentiable` are values, not constants: every way of
    differentiating them raises HigherDerivativeError with the op's name and sentence
    (never a silent zero); calling it on constants gives the values, in every framework."""
    v = rng.normal(size=(4, 3))
    want = POLAR(v)
    for got, w in zip(POLAR_WITHOUT(v), want):
        np.testing.assert_array_equal(got, w)
    assert "HigherDerivativeError" in POLAR_WITHOUT.__doc__
    got = POLAR_WITHOUT(wp.array(v, dtype=wp.vec3d))
    np.testing.assert_array_equal(got[0].numpy(), want[0])
    with pytest.raises(xform.HigherDerivativeError, match=WITHOUT):
        xform.vjp(POLAR_WITHOUT, [v], (np.ones(4), np.ones((4, 3))))
    with pytest.raises(xform.HigherDerivativeError, match=WITHOUT):
        xform.jvp(POLAR_WITHOUT, [v], [np.ones((4, 3))])
    torch = pytest.importorskip("torch")
    x = torch.tensor(v, requires_grad=True)
    length, direction = POLAR_WITHOUT(x)
    assert length.requires_grad and direction.requires_grad
    with pytest.raises(xform.HigherDerivativeError, match=WITHOUT):
        (length.sum() + direction.sum()).backward()
    with pytest.raises(xform.HigherDerivativeError, match=WITHOUT):
        torch.autograd.grad(direction.sum(), x)
    with pytest.raises(xform.HigherDerivativeError, match=WITHOUT):
        torch.func.grad(lambda x: POLAR_WITHOUT(x)[0].sum())(x.detach())
    with pytest.raises(xform.HigherDerivativeError, match=WITHOUT):
        torch.func.jvp(lambda x: POLAR_WITHOUT(x)[1], (x.detach(),), (torch.ones_like(x),))
    held = POLAR_WITHOUT(x.detach())
    assert not held[0].requires_grad
    np.testing.assert_array_equal(held[0].numpy(), want[0])
    with torch.no_grad():
        np.testing.assert_array_equal(POLAR_WITHOUT(x)[1].numpy(), want[1])
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jv = jax.numpy.asarray(v)
    for differentiate in (
        lambda: jax.grad(lambda x: POLAR_WITHOUT(x)[0].sum())(jv),
        lambda: jax.jit(jax.grad(lambda x: POLAR_WITHOUT(x)[1].sum()))(jv),
        lambda: jax.jvp(lambda x: POLAR_WITHOUT(x)[0], (jv,), (jv,)),
        lambda: jax.jacfwd(lambda x: POLAR_WITHOUT(x)[0])(jv),
        lambda: jax.vmap(jax.grad(lambda x: POLAR_WITHOUT(x)[0]))(jv),
    ):
        with pytest.raises(xform.HigherDerivativeError, match=WITHOUT):
            differentiate()
    np.testing.assert_array_equal(np.asarray(jax.jit(POLAR_WITHOUT)(jv)[0]), want[0])
    held = jax.grad(lambda x: POLAR_WITHOUT(jax.lax.stop_gradient(x))[0].sum() + x.sum())(jv)
    np.testing.assert_array_equal(np.asarray(held), 1.0)


def test_not_differentiable_takes_a_sentence_and_no_closed_forms():
    with pytest.raises(ValueError, match="not_differentiable must be a str"):
        xform.define_op("bad", polar, {"vector": (3,)}, POLAR_RESULTS, not_differentiable=True)
    with pytest.raises(ValueError, match="takes no tangent= or vjp="):
        xform.define_op(
            "bad", scaled_rotate, {"quaternion": (4,), "points": (3,), "scale": ()},
            {"out_points": (3,)}, vjp=scaled_rotate_vjp, not_differentiable="why",
        )  # fmt: skip
    with pytest.raises(ValueError, match="not_differentiable needs differentiable operands"):
        xform.define_op(
            "bad", polar, {"vector": (3,)}, POLAR_RESULTS, differentiable=(),
            not_differentiable="why",
        )  # fmt: skip


# --- PyTorch -----------------------------------------------------------------------------

TORCH_CASES = [(case, k) for case, k in ALL if k < 3]


@pytest.mark.parametrize(("case", "k"), TORCH_CASES)
def test_torch_gradcheck_reverse_and_forward(case, k, rng):
    torch = pytest.importorskip("torch")
    op = CASES[case][0]
    args = [torch.from_numpy(a).requires_grad_() for a in case_args(case, k, rng)]
    assert torch.autograd.gradcheck(op, args, check_forward_ad=True)


@pytest.mark.parametrize("case", list(CASES))
def test_torch_vmap_and_compile(case, rng):
    torch = pytest.importorskip("torch")
    op = CASES[case][0]
    stacked = [torch.from_numpy(a) for a in case_args(case, 0, rng)]  # a batch of 5 samples
    mapped = torch.func.vmap(op)(*stacked)
    for k in range(5):
        for got, want in zip(as_tuple(mapped), as_tuple(op(*[a[k] for a in stacked]))):
            torch.testing.assert_close(got[k], want, rtol=1e-12, atol=0)

    def loss(*args):
        return sum((r**2).sum() for r in as_tuple(op(*args)))

    inputs = [a.clone().requires_grad_() for a in stacked]
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")(*inputs)
    eager = loss(*inputs)
    torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=0)
    for a, b in zip(torch.autograd.grad(compiled, inputs), torch.autograd.grad(eager, inputs)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=0)


# --- JAX ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("case", "k"), TORCH_CASES)
def test_jax_check_grads_jit_vmap(case, k, rng):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)

    op = CASES[case][0]
    args = case_args(case, k, rng)
    check_grads(op, args)
    jitted = as_tuple(jax.jit(op)(*args))
    for got, want in zip(jitted, as_tuple(op(*args))):
        np.testing.assert_array_equal(np.asarray(got), want)

    def loss(*a):
        return sum((r**2).sum() for r in as_tuple(op(*a)))

    grads = jax.grad(loss, argnums=tuple(range(len(args))))(*args)
    results = as_tuple(op(*args))
    for g, want in zip(grads, xform.vjp(op, args, tuple(2 * r for r in results))):
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-12, atol=1e-12)
    batch = [np.stack([a, 2 * a]) for a in args]
    mapped = as_tuple(jax.vmap(op)(*batch))
    for j, r in enumerate(as_tuple(op(*[2 * a for a in args]))):
        np.testing.assert_allclose(np.asarray(mapped[j][1]), r, rtol=1e-12)


SHARDED = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, numpy as np, warp as wp
    from typing import Any
    from jax.sharding import Mesh, PartitionSpec as P
    import xform

    @wp.func
    def polar(vector: Any):
        length = wp.length(vector)
        return length, vector / length

    POLAR = xform.define_op("polar", polar, {"vector": (3,)}, {"length": (), "direction": (3,)})
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    v = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)

    def local(v):
        return jax.grad(lambda v: POLAR(v)[0].sum())(v)

    grads = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("batch"), out_specs=P("batch")))(v)
    assert len(grads.sharding.device_set) == 2
    direction = v / np.linalg.norm(v, axis=-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(grads), direction, rtol=1e-6)
    print("sharded ok")
    """
)


def test_jax_shard_map_over_two_cpu_devices(tmp_path):
    pytest.importorskip("jax")
    script = tmp_path / "sharded.py"  # Warp reads a function's source from its file
    script.write_text(SHARDED)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "sharded ok" in result.stdout


def test_heavy_elements_split_over_the_threads_sooner(rng, monkeypatch):
    """`work` weighs an element in the CPU split: an op of work w splits from
    PARALLEL_MIN_ELEMENTS / w elements, its products too, with the same values."""
    from xform import _launch, _second_order

    monkeypatch.setattr(_launch.threads, "THREADS", 2)
    heavy = xform.define_op("polar_heavy", polar, {"vector": (3,)}, POLAR_RESULTS, work=64)
    light = xform.define_op("polar_light", polar, {"vector": (3,)}, POLAR_RESULTS)
    count = _launch.tiling.PARALLEL_MIN_ELEMENTS // 64
    vectors = rng.normal(size=(count, 3))
    for op, parts in ((heavy, 2), (light, 1)):
        assert _launch.tiling.parts(_launch.buffers.prepare(op, [vectors])) == parts
    closed = xform.define_op(
        "scaled_rotate_heavy", scaled_rotate, {"quaternion": (4,), "points": (3,), "scale": ()},
        {"out_points": (3,)}, scaled_rotate_tangent, scaled_rotate_vjp, work=64,
    )  # fmt: skip
    vjp, tangent = (_second_order.product_op(closed, p) for p in (Product.VJP, Product.TANGENT))
    assert vjp.work == tangent.work == 64
    for split, serial in zip(heavy(vectors), light(vectors)):
        np.testing.assert_array_equal(split, serial)
    cotangents = [rng.normal(size=count), rng.normal(size=(count, 3))]
    np.testing.assert_array_equal(
        xform.vjp(heavy, [vectors], cotangents)[0], xform.vjp(light, [vectors], cotangents)[0]
    )


def test_max_unroll_caps_the_unrolling_of_kernels_that_do_not_differentiate(rng):
    """`max_unroll` reaches the Warp module of the kernels that run the function and its
    closed forms; the kernels that run Warp's adjoint keep unrolling (their loops must)."""
    from xform._launch import codegen, source

    op = xform.define_op(
        "scaled_rotate_rolled", scaled_rotate, {"quaternion": (4,), "points": (3,), "scale": ()},
        {"out_points": (3,)}, scaled_rotate_tangent, scaled_rotate_vjp, max_unroll=1,
    )  # fmt: skip
    q = np.array([1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(op(q, rng.normal(size=(2, 3)), 2.0).shape, (2, 3))
    forward = wp.get_module(source.module_name(op, "forward", wp.float64))
    assert forward.options["max_unroll"] == 1
    derived = xform._define.derived(op)
    xform.vjp(derived, (q, rng.normal(size=(2, 3)), 2.0), rng.normal(size=(2, 3)))
    adjoint = wp.get_module(source.module_name(derived, "vjp", wp.float64))
    assert adjoint.options["max_unroll"] == codegen.ADJOINT_MAX_UNROLL
