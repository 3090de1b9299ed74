"""Bad input, fuzzed: every op, through NumPy, PyTorch and JAX, with one operand spoiled in
one of many ways (element shape, rank, broadcasting, dtype, mixed dtypes, byte order,
strides, type, meta tensors, aliased buffers). Each case has one right outcome, known in
advance: the result the NumPy path gives on clean input, or a ValueError / TypeError
naming the operand, raised before anything runs. Nothing else is allowed."""

import sys

import numpy as np
import pytest
from conftest import SEED
from helpers import assert_matches
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from reference import random_args, reference

import xform

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
xt = pytest.importorskip("xform.backends.torch")
xj = pytest.importorskip("xform.backends.jax")

OPS = sorted(xform.OPS)
FRONTS = ("numpy", "torch", "jax")
SPOILS = (
    "none", "element", "rank", "broadcast", "dtype", "mixed", "byteswap", "strided",
    "type", "meta", "meta_one", "alias",
)  # fmt: skip
EXAMPLES = 1000


def leadings(op, lead):
    out = []
    for o in op.operands:
        if o.single:
            out.append(())
        elif "..." in o.batch:
            out.append(lead)
        else:
            out.append((2,) * len(o.batch))
    return out


def expected_error(op, k, spoil):
    if spoil in ("element", "rank", "broadcast", "meta_one", "alias"):
        return ValueError
    if spoil in ("dtype", "mixed", "type"):
        return TypeError
    return None


def applicable(op, k, spoil, front, lead):
    operand = op.operands[k]
    if spoil == "broadcast":  # (3,) against the others' (2,) or (2, 2)
        broadcast = sum(not o.single for o in op.operands) > 1 and 2 in lead
        return broadcast and "..." in operand.batch and not operand.single
    if spoil == "byteswap":
        return front != "torch"  # torch.from_numpy refuses it itself
    if spoil in ("meta", "meta_one"):
        return front == "torch" and (spoil == "meta" or len(op.operands) > 1)
    if spoil == "alias":
        return front == "torch" and bool(op.result_buffers)
    if spoil in ("element", "rank"):  # a scalar has no element shape to spoil
        return len(operand.element) > 0
    if spoil == "type":  # a 0-d scalar's tolist() is a Python number, which is accepted
        return len(operand.element) > 0 or leadings(op, lead)[k] != ()
    if spoil == "mixed":
        return len(op.operands) > 1
    return True


def spoiled(op, args, k, spoil, rng):
    args = list(args)
    a = args[k]
    if spoil == "element":
        args[k] = np.zeros((*a.shape[:-1], a.shape[-1] + 1))
    elif spoil == "rank":
        args[k] = np.zeros(op.operands[k].element[1:])
    elif spoil == "broadcast":
        args[k] = np.zeros((3, *op.operands[k].element))
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


def call(op, front, args, spoil):
    if front == "numpy":
        return op(*args)
    if front == "jax":  # NumPy arrays (as a JAX user passes them) into the JAX adapter
        return xj.function(op)(*args)
    tensors = [x if isinstance(x, list) else torch.from_numpy(np.array(x)) for x in args]
    if spoil == "meta":
        tensors = [t.to("meta") for t in tensors]
    if spoil == "meta_one":
        tensors[0] = tensors[0].to("meta")
    function = xt.function(op)
    if spoil == "alias":  # a result buffer that is an argument's memory
        results = [r for r in _as_tuple(op(*args))]
        buffers = [None] * len(op.result_buffers)
        flat = tensors[-1].reshape(-1)
        size = int(np.prod(results[0].shape))
        if flat.numel() < size:
            flat = torch.cat([flat, torch.zeros(size - flat.numel(), dtype=flat.dtype)])
            tensors[-1] = flat[: tensors[-1].numel()].reshape(tensors[-1].shape)
        buffers[0] = flat[:size].reshape(results[0].shape)
        return function(*tensors, *buffers)
    return function(*tensors)


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_bad_input_fuzz(data):
    name = data.draw(st.sampled_from(OPS), label="op")
    op = xform.OPS[name]
    front = data.draw(st.sampled_from(FRONTS), label="front end")
    k = data.draw(st.integers(0, len(op.operands) - 1), label="operand")
    lead = data.draw(st.sampled_from([(), (1,), (2,), (2, 2)]), label="batch")
    spoil = data.draw(
        st.sampled_from([s for s in SPOILS if applicable(op, k, s, front, lead)]), label="spoil"
    )
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="values"))
    clean = random_args(name, leadings(op, lead), rng)
    args = spoiled(op, clean, k, spoil, rng)
    error = expected_error(op, k, spoil)
    if error is not None:
        with pytest.raises(error) as raised:
            call(op, front, args, spoil)
        message = str(raised.value)
        assert op.name in message, message
        if spoil not in ("meta_one", "alias"):
            assert f"'{op.operands[k].name}'" in message, message
        return
    results = _as_tuple(call(op, front, args, spoil))
    # Against the independent float64 reference (not the op on the clean arguments, which
    # is the call itself where nothing is spoilt).
    want = reference(name, clean)
    for got, w in zip(results, want):
        assert tuple(got.shape) == w.shape
        if spoil == "meta":
            assert got.device.type == "meta"
            continue
        got = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
        assert_matches(got, w, np.float64)
