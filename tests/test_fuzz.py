"""Bad input, fuzzed: every op (`xform.OPS`) and every function over ops
(`xform.ops.COMPOSITES`), through NumPy, PyTorch and JAX, with one array argument
spoiled in one of many ways (element shape, rank, broadcasting, dtype, mixed dtypes, byte
order, strides, type, meta tensors, aliased buffers). Each case has one right outcome,
known in advance: on clean input, the independent float64 reference (tests/reference.py)
and, through PyTorch and JAX, the NumPy path's result; on input that is valid but laid
out otherwise, the NumPy path's result on clean input; else a ValueError / TypeError
naming the function and the argument, raised before anything runs. Nothing else is
allowed.

Every op and every family is a case of its own, taken from the tables: one added is
fuzzed as soon as it exists (a family fails here until reference.py has its arguments and
reference, and STATIC_CHOICES its static arguments)."""

import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import SEED
from helpers import assert_matches
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from reference import FAMILY_REFERENCES, random_args, random_family_args, reference

import xform
from xform import Operand
from xform.ops import COMPOSITES
from xform.ops.euler import CONVENTIONS

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
xt = pytest.importorskip("xform.backends.torch")
xj = pytest.importorskip("xform.backends.jax")

FRONTS = {"numpy": xform, "torch": xt, "jax": xj}
SPOILS = (
    "none", "element", "rank", "broadcast", "dtype", "mixed", "byteswap", "strided",
    "type", "meta", "meta_one", "alias",
)  # fmt: skip
# Examples per op or family (53 of them): about 850 spoiled calls a run, in all.
EXAMPLES = 16
# The values a family's static (non-array) arguments may take, by parameter name.
STATIC_CHOICES = {"convention": CONVENTIONS, "scale": (False, True)}


@dataclass(frozen=True)
class Subject:
    """An op, or a family with its static arguments drawn, as the fuzz calls it: its array
    arguments (as operands: element shape and batch layout), in order."""

    name: str
    operands: tuple[Operand, ...]
    call: Callable  # call(front, *arrays)
    expected: Callable  # the float64 reference of the clean arrays
    result_buffers: tuple[str, ...] = ()


def op_subject(name: str) -> Subject:
    op = xform.OPS[name]
    functions = {"numpy": op, "torch": xt.function(op), "jax": xj.function(op)}
    return Subject(
        name,
        op.operands,
        lambda front, *arrays: functions[front](*arrays),
        lambda arrays: reference(name, arrays),
        op.result_buffers,
    )


def family_subject(name: str, draw) -> tuple[Subject, list[str]]:
    """The family with its static arguments drawn, and whether each optional array is
    given; and the names of the array arguments given, in order. Their shapes are those of
    the member ops' operands of the same names."""
    family = COMPOSITES[name]
    statics = {}
    for parameter, spec in family.signature.parameters.items():
        if parameter in family.arrays:
            if spec.default is None and draw(st.booleans(), label=f"without {parameter}"):
                statics[parameter] = None
            continue
        assert parameter in STATIC_CHOICES or spec.default is not spec.empty, (
            f"{name}'s static argument '{parameter}': add its values to STATIC_CHOICES"
        )
        choices = STATIC_CHOICES.get(parameter, (spec.default,))
        statics[parameter] = draw(st.sampled_from(choices), label=parameter)
    names = [a for a in family.arrays if a not in statics]
    members = {o.name: o for op in family.members for o in op.operands}
    missing = [a for a in names if a not in members]
    assert not missing, f"{name}: no member op has an operand named {missing}"

    def call(front, *arrays):
        return getattr(FRONTS[front], name)(**dict(zip(names, arrays)), **statics)

    def expected(arrays):
        arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
        return FAMILY_REFERENCES[name](**dict(zip(names, arrays)), **statics)

    return Subject(name, tuple(members[a] for a in names), call, expected), names


def leadings(operands, lead):
    out = []
    for o in operands:
        if o.single:
            out.append(())
        elif "..." in o.batch:
            out.append(lead)
        else:
            out.append((2,) * len(o.batch))
    return out


def expected_error(spoil):
    if spoil in ("element", "rank", "broadcast", "meta_one", "alias"):
        return ValueError
    if spoil in ("dtype", "mixed", "type"):
        return TypeError
    return None


def applicable(subject, clean, k, spoil, front, lead):
    operand, operands = subject.operands[k], subject.operands
    if spoil == "broadcast":  # (3,) against the others' (2,) or (2, 2)
        broadcast = sum(not o.single for o in operands) > 1 and 2 in lead
        return broadcast and "..." in operand.batch and not operand.single
    if spoil == "byteswap":
        return front != "torch"  # torch.from_numpy refuses it itself
    if spoil in ("meta", "meta_one"):
        return front == "torch" and (spoil == "meta" or len(operands) > 1)
    if spoil == "alias":
        return front == "torch" and bool(subject.result_buffers)
    if spoil in ("element", "rank"):  # a scalar has no element shape to spoil
        return len(operand.element) > 0
    if spoil == "type":  # a 0-d scalar's tolist() is a Python number, which is accepted
        return clean[k].ndim > 0
    if spoil == "mixed":
        return len(operands) > 1
    return True


def spoiled(subject, args, k, spoil, rng):
    args = list(args)
    a = args[k]
    if spoil == "element":
        args[k] = np.zeros((*a.shape[:-1], a.shape[-1] + 1))
    elif spoil == "rank":
        args[k] = np.zeros(subject.operands[k].element[1:])
    elif spoil == "broadcast":
        args[k] = np.zeros((3, *subject.operands[k].element))
    elif spoil == "dtype":
        args[k] = a.astype(rng.choice([np.int32, np.int64, np.float16, np.bool_]))
    elif spoil == "mixed":
        args[k] = a.astype(np.float32)
    elif spoil == "byteswap":
        args[k] = a.astype(a.dtype.newbyteorder(">" if sys.byteorder == "little" else "<"))
    elif spoil == "strided":
        args[k] = np.repeat(a[..., None], 2, -1)[..., 0]  # same values, not contiguous
    elif spoil == "type":
        args[k] = a.tolist()
    return args


def call(subject, front, args, spoil, clean):
    if front != "torch":  # NumPy arrays (as a JAX user passes them) into the JAX adapter
        return subject.call(front, *args)
    tensors = [x if isinstance(x, list) else torch.from_numpy(np.array(x)) for x in args]
    if spoil == "meta":
        tensors = [t.to("meta") for t in tensors]
    if spoil == "meta_one":
        tensors[0] = tensors[0].to("meta")
    if spoil == "alias":  # a result buffer that is an argument's memory
        clean_results = _as_tuple(subject.call("numpy", *clean))
        buffers = [None] * len(subject.result_buffers)
        flat = tensors[-1].reshape(-1)
        size = int(np.prod(clean_results[0].shape))
        if flat.numel() < size:
            flat = torch.cat([flat, torch.zeros(size - flat.numel(), dtype=flat.dtype)])
            tensors[-1] = flat[: tensors[-1].numel()].reshape(tensors[-1].shape)
        buffers[0] = flat[:size].reshape(clean_results[0].shape)
        return subject.call(front, *tensors, *buffers)
    return subject.call(front, *tensors)


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def fuzz(data, subject: Subject, clean_of):
    """One spoiled call of `subject`, whose clean arrays `clean_of(lead, rng)` gives."""
    front = data.draw(st.sampled_from(list(FRONTS)), label="front end")
    k = data.draw(st.integers(0, len(subject.operands) - 1), label="argument")
    lead = data.draw(st.sampled_from([(), (1,), (2,), (2, 2)]), label="batch")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="values"))
    clean = clean_of(lead, rng)
    choices = [s for s in SPOILS if applicable(subject, clean, k, s, front, lead)]
    spoil = data.draw(st.sampled_from(choices), label="spoil")
    args = spoiled(subject, clean, k, spoil, rng)
    error = expected_error(spoil)
    if error is not None:
        with pytest.raises(error) as raised:
            call(subject, front, args, spoil, clean)
        message = str(raised.value)
        assert subject.name in message, message
        if spoil not in ("meta_one", "alias"):
            assert f"'{subject.operands[k].name}'" in message, message
        return
    results = _as_tuple(call(subject, front, args, spoil, clean))
    if spoil == "none":  # the values themselves, from code that shares nothing with xform
        expected = _as_tuple(subject.expected(clean))
        assert len(results) == len(expected)
        for got, want in zip(results, expected):
            got = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
            assert got.shape == want.shape
            assert_matches(got, want, np.float64)
        if front == "numpy":
            return
    clean_results = _as_tuple(subject.call("numpy", *clean))
    assert len(results) == len(clean_results)
    for got, want in zip(results, clean_results):  # one kernel source, any layout
        assert tuple(got.shape) == want.shape
        if spoil == "meta":
            assert got.device.type == "meta"
            continue
        got = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", sorted(xform.OPS))
@seed(SEED)
@FUZZ_SETTINGS
@given(data=st.data())
def test_bad_input_fuzz_of_every_op(name, data):
    subject = op_subject(name)
    op = xform.OPS[name]
    fuzz(data, subject, lambda lead, rng: random_args(name, leadings(op.operands, lead), rng))


@pytest.mark.parametrize("name", sorted(COMPOSITES))
@seed(SEED)
@FUZZ_SETTINGS
@given(data=st.data())
def test_bad_input_fuzz_of_every_family(name, data):
    subject, names = family_subject(name, data.draw)

    def clean_of(lead, rng):
        arrays = random_family_args(name, lead, rng)
        return [arrays[a] for a in names]

    fuzz(data, subject, clean_of)



@pytest.mark.parametrize("front", sorted(FRONTS))
def test_a_number_beside_a_list_names_the_list(front):
    """Every op with a scalar operand, that operand given as a number (its natural
    spelling) beside another operand given as a list: the list is named, whichever its
    place. (The number was made an array like the first non-scalar argument, and a list
    there has no framework: an AttributeError.) Each call raises before any kernel runs."""
    arrays = {"numpy": np.asarray, "torch": torch.as_tensor, "jax": jax.numpy.asarray}[front]
    function = {"numpy": lambda op: op, "torch": xt.function, "jax": xj.function}[front]
    scalar_ops = [op for op in xform.OPS.values() if any(o.element == () for o in op.operands)]
    assert "quaternion_slerp" in {op.name for op in scalar_ops}
    for op in scalar_ops:
        clean = random_args(op.name, [()] * len(op.operands), np.random.default_rng(0))
        for k, operand in enumerate(op.operands):
            if operand.element == ():
                continue
            args = [
                0.3 if o.element == () else np.asarray(x).tolist() if j == k else arrays(x)
                for j, (o, x) in enumerate(zip(op.operands, clean))
            ]
            with pytest.raises(TypeError, match=f"'{operand.name}' is a builtins.list"):
                function(op)(*args)
