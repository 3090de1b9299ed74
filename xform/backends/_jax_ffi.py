"""The FFI calls that run xform's kernels on XLA's buffers, for the JAX adapter's
primitives (`jax.py`): the targets are xform's own (`jax_native`), a program of recorded
launches run from C or a Python function behind a guard in C that reads XLA's buffers
straight into the core's, on CPU and CUDA alike; `warp.jax_callable` only where that
library cannot be had."""

from __future__ import annotations

import ctypes
import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

from xform import _launch
from xform._launch.runner import run_product
from xform._op import Op

from . import jax_native

# --- running the core's launches inside an FFI call --------------------------------------


@functools.cache
def _callback(op: Op, product: str, prefix: int, needed: tuple[bool, ...], scalars: tuple):
    """The function a `warp.jax_callable` runs: Warp arrays in (views of XLA's buffers,
    inputs then outputs). Warp has no 0-d arrays: the inputs that `scalars` flags (one
    flag per input) arrive as one element and are read as 0-d."""
    run = run_product(op, product, prefix, needed)
    count = len(scalars)  # the inputs: the outputs (with any partial sums) follow

    def callback(*arrays):
        try:
            inputs = [
                _launch.buffers.Buffer(a.ptr or 0, (), a.dtype.__name__, str(a.device), a)
                if scalars[k]
                else a
                for k, a in enumerate(arrays[:count])
            ]
            run(inputs, [(a.ptr, a.zero_) for a in arrays[count:]])
        except BaseException as exc:  # Warp's FFI wrapper turns Exceptions into XLA errors
            raise RuntimeError(f"xform.{op.name} ({product}): {_described(exc)}") from None

    return callback


def _described(exc: BaseException) -> str:
    """`repr(exc)`, or its type's name where that raises (a second Ctrl-C, say)."""
    try:
        return repr(exc)
    except BaseException:
        return type(exc).__name__


# --- the Python function behind xform's guard (jax_native.python_target) ---------------------


class _XlaBuffer(ctypes.Structure):
    """One of XLA's buffers, as the guard hands it over (`PythonBuffer` in jax_native.cpp)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int64),
        ("rank", ctypes.c_int64),
        ("dims", ctypes.POINTER(ctypes.c_int64)),
    ]


_GUARDED = ctypes.CFUNCTYPE(
    None, ctypes.POINTER(_XlaBuffer), ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
)  # fmt: skip
_XLA_DTYPES = {11: "float32", 12: "float64"}  # XLA_FFI_DataType F32, F64
_CANCELLED, _INTERNAL = 1, 13  # XLA_FFI_Error_Code
_guarded_functions = []  # the ctypes functions XLA holds addresses of, kept alive
_streams: dict = {}  # Warp's views of XLA's CUDA streams, by (device, handle)


def _warp_stream(device: str, handle: int) -> wp.Stream:
    stream = _streams.get((device, handle))
    if stream is None:
        if len(_streams) > 64:  # streams come and go with XLA's clients: keep a few
            _streams.clear()
        stream = _streams[device, handle] = wp.Stream(device, cuda_stream=handle)
    return stream


def _zero_fill(buffer: _launch.buffers.Buffer) -> None:
    nbytes = np.dtype(buffer.dtype).itemsize * math.prod(buffer.shape)
    if buffer.device == "cpu":
        ctypes.memset(buffer.ptr, 0, nbytes)
    else:  # on the current stream, which the call has made XLA's
        wp.array(ptr=buffer.ptr, dtype=wp.uint8, shape=(nbytes,), device=buffer.device).zero_()


@functools.cache
def _guarded(op: Op, product: str, prefix: int, needed: tuple[bool, ...]) -> int:
    """The address of a Python function that runs one product of `op` on XLA's buffers,
    for `jax_native`'s guard to call (see `PythonFunction` in jax_native.cpp): it reports
    its outcome as its very last step, so that an exception escaping it, wherever it is
    raised, fails the call instead of returning outputs that were never written."""
    run = run_product(op, product, prefix, needed)

    def function(buffers, inputs, outputs, stream, device, message, capacity, outcome):
        try:
            where = "cpu" if device < 0 else f"cuda:{device}"
            arrays = [
                _launch.buffers.Buffer(b.data or 0, tuple(b.dims[: b.rank]), _XLA_DTYPES[b.dtype],
                               where, None)
                for b in buffers[: inputs + outputs]
            ]  # fmt: skip
            results = [(b.ptr, functools.partial(_zero_fill, b)) for b in arrays[inputs:]]
            if device >= 0:
                with wp.ScopedStream(_warp_stream(where, stream), sync_enter=False):
                    run(arrays[:inputs], results)
            else:
                run(arrays[:inputs], results)
            outcome[0] = 1
        except BaseException as exc:  # a Ctrl-C included: the launches it started are done
            text = f"xform.{op.name} ({product}): {_described(exc)}".encode()
            text = text[: capacity - 1] + b"\0"
            ctypes.memmove(message, text, len(text))
            outcome[1] = _CANCELLED if isinstance(exc, KeyboardInterrupt) else _INTERNAL
            outcome[0] = 2

    guarded = _GUARDED(function)
    _guarded_functions.append(guarded)
    return ctypes.cast(guarded, ctypes.c_void_p).value


@functools.cache
def ffi_callable(run, name: str, signature: tuple, num_outputs: int, vmap_method=None):
    """`make_ffi_callable`, made once per op product (a bounded set: `run` is one of
    `_callback`'s, one per op, product and mapped prefix)."""
    return make_ffi_callable(run, name, signature, num_outputs, vmap_method)


def make_ffi_callable(run, name: str, signature: tuple, num_outputs: int, vmap_method=None):
    """A `warp.jax_callable` running `run(*warp_arrays)` inside an XLA FFI call, for one
    signature: a (Warp scalar type, rank) pair per input, then per output. `run` gets
    views of XLA's buffers (inputs, then outputs to fill) on XLA's stream. `vmap_method`
    is JAX's, for callers without a batching rule of their own. Each registers an FFI
    target with XLA, for the process's life: callers keyed on user functions bound
    their caches."""
    names = [f"arg{i}" for i in range(len(signature))]

    def call(*arrays):
        run(*arrays)

    call.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
    )
    call.__annotations__ = {
        n: wp.array(dtype=scalar, ndim=rank) for n, (scalar, rank) in zip(names, signature)
    }
    call.__name__ = call.__qualname__ = name
    return wp.jax_callable(
        call,
        num_outputs=num_outputs,
        graph_mode=wp.JaxCallableGraphMode.NONE,
        vmap_method=vmap_method,
    )


def call_ffi(callable_, inputs, out_shapes):
    """Call an `ffi_callable` on JAX inputs, with the given output shapes."""
    first = len(inputs)
    names = [f"arg{i}" for i in range(first, first + len(out_shapes))]
    return list(callable_(*inputs, output_dims=dict(zip(names, out_shapes))))


def _run(op: Op, product: str, prefix: int, needed, inputs, out_shapes, cpu=False):
    """Run one product through the FFI (on CPU where `cpu`, else on CUDA), or without a
    launch when nothing is to compute."""
    dtype = inputs[0].dtype
    if not out_shapes:
        return []
    if any(0 in shape for shape in out_shapes) or any(
        x.size == 0 for x in inputs[: len(op.operands)]
    ):  # nothing to compute, or sums over no summands
        return [jnp.zeros(shape, dtype) for shape in out_shapes]
    # An op that sums over groups, and a GPU VJP summed in blocks over chunks, take their
    # partial sums as further outputs, dropped here: XLA owns their memory, in order on
    # its stream.
    count = len(out_shapes)
    operand_shapes = [x.shape for x in inputs[: len(op.operands)]]
    out_shapes = [
        *out_shapes,
        *_launch.tiling.scratch_shapes(
            op, product, operand_shapes, prefix, needed, "cpu" if cpu else "cuda:0"
        ),
    ]
    results = [jax.ShapeDtypeStruct(shape, dtype) for shape in out_shapes]
    native = jax_native.library() if cpu else jax_native.cuda_library()
    if native is not None:  # a program of the launches, run with no Python per call
        program = jax_native.program(
            op, product, prefix, needed, tuple(tuple(x.shape) for x in inputs),
            tuple(map(tuple, out_shapes)), np.dtype(dtype), "cpu" if cpu else "cuda:0",
        )  # fmt: skip
        if program is not None:  # named by its key: the same in every process
            call = jax.ffi.ffi_call(jax_native.TARGET if cpu else jax_native.TARGET_CUDA, results)
            return list(call(*inputs, program=np.int64(program[1])))[:count]
    guard = jax_native.python_target("cpu" if cpu else "CUDA")
    if guard is not None:
        target, token = guard
        callback = _guarded(op, product, prefix, needed)
        outputs = jax.ffi.ffi_call(target, results)(
            *inputs, callback=np.int64(callback), token=np.int64(token)
        )
        return list(outputs)[:count]
    # warp.jax_callable, which takes no 0-d arrays: those go as one element.
    scalar = wp.dtype_from_numpy(np.dtype(dtype))
    scalars = tuple(x.ndim == 0 for x in inputs)
    callable_ = ffi_callable(
        _callback(op, product, prefix, needed, scalars),
        f"xform_{op.key}_{product}",
        tuple((scalar, max(len(s), 1)) for s in [*(x.shape for x in inputs), *out_shapes]),
        len(out_shapes),
    )
    flat = [x.reshape(1) if x.ndim == 0 else x for x in inputs]
    outputs = call_ffi(callable_, flat, [s or (1,) for s in out_shapes])
    return [x.reshape(s) for x, s in zip(outputs[:count], out_shapes)]
