"""Every bad-input line of the SPEC raises the right exception, naming the argument, the
shape or dtype it got and what was expected, before any kernel runs."""

import importlib
import re

import numpy as np
import pytest
import warp as wp
from reference import random_args

import xform
from xform._op import Composite
from xform.ops import COMPOSITES

pytestmark = pytest.mark.every_case  # the cases are the point

OPS = sorted(xform.OPS)


def good_leadings(name):
    op = xform.OPS[name]
    return [
        (1,) if o.single else (2,) * len(o.batch) if "..." not in o.batch else (2,)
        for o in op.operands
    ]


def bad_shapes(name):
    """(operand index, bad shape, why) triples for op `name`."""
    op = xform.OPS[name]
    good = [(*lead, *o.element) for lead, o in zip(good_leadings(name), op.operands)]
    cases = []
    for k, operand in enumerate(op.operands):
        wrong_element = (*good[k][:-1], good[k][-1] + 1)
        cases.append((k, wrong_element, "element"))
        if operand.element:  # a scalar operand's shape () is a single element
            cases.append((k, operand.element[1:] or (), "too few dims"))
        if operand.single:
            cases.append((k, (5, *operand.element), "batched single pose"))
            cases.append((k, (1, 1, *operand.element), "batched single pose"))
        elif "..." not in operand.batch:
            cases.append((k, (2, *good[k]), "extra leading dim"))
            cases.append((k, (3,) + good[k][1:], "batch mismatch"))
        elif sum(not o.single for o in op.operands) > 1:
            cases.append((k, (3, *operand.element), "does not broadcast"))
    return [(name, *case) for case in cases]


BAD_SHAPES = [case for name in OPS for case in bad_shapes(name)]


@pytest.mark.parametrize(("name", "k", "shape", "why"), BAD_SHAPES)
def test_bad_shape_raises_value_error_naming_argument(name, k, shape, why, rng):
    args = random_args(name, good_leadings(name), rng)
    args[k] = rng.normal(size=shape)
    operand = xform.OPS[name].operands[k]
    with pytest.raises(ValueError) as info:
        getattr(xform, name)(*args)
    message = str(info.value)
    assert f"'{operand.name}'" in message
    assert str(tuple(shape)) in message
    assert "expected" in message


def test_shape_message_is_specific():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "transform_points: argument 'position' has shape (5, 3); expected (3,) or (1, 3)"
        ),
    ):
        xform.transform_points(np.zeros((5, 3)), np.ones(4), np.zeros((5, 3)))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "batch_transform_points: argument 'points' has shape (4, 3); expected (B, N, 3)"
        ),
    ):
        xform.batch_transform_points(np.zeros((4, 3)), np.ones((4, 4)), np.zeros((4, 3)))
    with pytest.raises(
        ValueError,
        match=r"'quaternion2' has shape \(3, 4\), whose batch \(3,\) does not broadcast "
        r"with the batch \(2,\) so far \(from 'position', shape \(2, 3\)\)",
    ):
        xform.pose_multiply(np.zeros((2, 3)), np.ones((2, 4)), np.zeros((2, 3)), np.ones((3, 4)))


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("bad", [np.int64, np.int32, np.bool_, np.float16, np.complex128])
def test_non_float_dtype_raises_type_error_naming_argument(name, bad, rng):
    op = xform.OPS[name]
    for k, operand in enumerate(op.operands):
        args = random_args(name, good_leadings(name), rng)
        args[k] = args[k].astype(bad)
        with pytest.raises(TypeError, match=f"'{operand.name}' has dtype"):
            getattr(xform, name)(*args)


@pytest.mark.parametrize("name", [n for n in OPS if len(xform.OPS[n].operands) > 1])
def test_mixed_float_dtypes_raise_type_error_naming_argument(name, rng):
    op = xform.OPS[name]
    for k in range(1, len(op.operands)):
        args = random_args(name, good_leadings(name), rng)
        args[k] = args[k].astype(np.float32)
        with pytest.raises(TypeError, match=f"'{op.operands[k].name}' has dtype float32 but"):
            getattr(xform, name)(*args)


def test_non_array_arguments_raise_type_error():
    with pytest.raises(TypeError, match="'quaternion'.*list"):
        xform.quaternion_to_matrix([1.0, 0.0, 0.0, 0.0])
    with pytest.raises(TypeError, match="'position'.*float"):
        xform.pose_inverse(1.0, np.ones(4))


FAMILY_ARRAYS = [(f, a) for f, family in COMPOSITES.items() for a in family.arrays]


@pytest.mark.parametrize("front", ["xform", "xform.backends.torch", "xform.backends.jax"])
@pytest.mark.parametrize(("family", "argument"), FAMILY_ARRAYS)
def test_families_check_their_array_arguments_as_ops_do(family, argument, front):
    """Every family's array argument, through every front end: a non-array raises the
    ops' TypeError, naming the function and the argument, before the family reads it."""
    module = importlib.import_module(front)
    array = {"xform": np.zeros, "xform.backends.torch": pytest.importorskip("torch").zeros,
             "xform.backends.jax": pytest.importorskip("jax.numpy").zeros}[front]  # fmt: skip
    function = COMPOSITES[family]
    args = {name: array((4, 3)) for name in function.arrays}
    args[argument] = [[0.0, 0.0, 0.0]] * 4
    for name, parameter in function.signature.parameters.items():
        if name not in args and parameter.default is parameter.empty:
            args[name] = {"convention": "xyz"}[name]  # a static argument: give a valid one
    with pytest.raises(
        TypeError, match=rf"^{front}\.{family}: argument '{argument}' is a builtins"
    ):
        getattr(module, family)(**args)


def test_a_family_names_parameters_as_its_arrays():
    signature = COMPOSITES["rigid_registration"].signature
    with pytest.raises(ValueError, match="arrays .* must name parameters"):
        Composite("f", lambda call, points: None, signature, "doc", arrays=("point",))


def test_mixing_numpy_and_warp_raises_type_error():
    with pytest.raises(TypeError, match="mix array types"):
        xform.pose_inverse(np.zeros(3), wp.array(np.ones(4)))


def test_wrong_argument_count_raises_type_error():
    with pytest.raises(TypeError):
        xform.pose_inverse(np.zeros(3))
    with pytest.raises(TypeError):
        xform.pose_inverse(np.zeros(3), np.ones(4), np.ones(4))


def test_bad_cotangent_raises(rng):
    args = random_args("pose_inverse", [(2,), (2,)], rng)
    with pytest.raises(
        ValueError, match=r"cotangent of 'out_position' has shape \(3, 3\); expected \(2, 3\)"
    ):
        xform.vjp("pose_inverse", args, (np.ones((3, 3)), None))
    with pytest.raises(TypeError, match="cotangent of 'out_quaternion' has dtype float32"):
        xform.vjp("pose_inverse", args, (None, np.ones((2, 4), np.float32)))
    with pytest.raises(ValueError, match="expected 2 cotangents"):
        xform.vjp("pose_inverse", args, (np.ones((2, 3)),))


def test_inputs_untouched_after_an_error(rng):
    args = random_args("pose_multiply", [(2,), (2,), (2,), (3,)], rng)
    before = [a.copy() for a in args]
    with pytest.raises(ValueError):
        xform.pose_multiply(*args)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)
