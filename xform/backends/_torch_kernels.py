"""The PyTorch adapter's memory: tensors as the core's buffers and allocators, PyTorch's
current CUDA stream, cuRobo's preallocated buffers checked, and the core's three products
on tensors (`LAUNCHED`), which the Functions of `_torch_autograd.py` call."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import warp as wp

from xform import _launch
from xform._launch.layout import result_shapes
from xform._op import Op, Product

# --- memory: torch tensors as the core's buffers ------------------------------------------


TORCH_DTYPES = {wp.float32: torch.float32, wp.float64: torch.float64}


# The size by keyword and the device as a torch.device: a tuple given positionally is
# first tried as an int (a TypeError made and cleared), and a device's name is parsed, at
# each call (~15,500 instructions an allocation against ~10,500).
_DEVICES: dict = {}


def _empty(shape, scalar, device):
    tensor = torch.empty(size=shape, dtype=TORCH_DTYPES[scalar], device=_torch_device(device))
    return tensor, tensor.data_ptr()


def _zeros(shape, scalar, device):
    tensor = torch.zeros(size=shape, dtype=TORCH_DTYPES[scalar], device=_torch_device(device))
    return tensor, tensor.data_ptr()


def _torch_device(device) -> torch.device:
    found = _DEVICES.get(device)
    if found is None:
        found = _DEVICES[device] = torch.device(device)
    return found


def _into(buffers: Sequence[torch.Tensor | None], fallback):
    """An allocator that hands out the caller's buffers in order (None: a new tensor);
    allocators made from one iterator share its order."""
    queue = iter(buffers)

    def allocate(shape, scalar, device):
        buffer = next(queue, None)
        return fallback(shape, scalar, device) if buffer is None else (buffer, buffer.data_ptr())

    return allocate


@functools.lru_cache(maxsize=64)
def _names(dtype: torch.dtype, device: torch.device) -> tuple[str, str]:
    """The core's names of a dtype and a device ("float32", "cpu", "cuda:0")."""
    return str(dtype).removeprefix("torch."), str(device)


def _buffer(x):
    """The core's view of a tensor: its memory read in place (copied once by PyTorch, after
    the core's checks, if not contiguous). Anything else goes to the core's own checks."""
    if not isinstance(x, torch.Tensor):
        return x
    x = x.detach()
    dtype, device = _names(x.dtype, x.device)
    if x.is_contiguous():
        return _launch.buffers.Buffer(x.data_ptr(), tuple(x.shape), dtype, device, x)

    def copy():
        c = x.contiguous()
        return c.data_ptr(), c

    return _launch.buffers.Buffer(0, tuple(x.shape), dtype, device, x, copy)


def _check_buffer(op: Op, name: str, buffer, shapes, like: torch.Tensor) -> None:
    """A caller's buffer must be a tensor of one of `shapes`, and of `like`'s dtype and
    device; ValueError naming it otherwise."""
    if buffer is None:
        return
    if not isinstance(buffer, torch.Tensor):
        raise ValueError(
            f"{op.name}: buffer '{name}' must be a torch.Tensor or None, got "
            f"{type(buffer).__module__}.{type(buffer).__qualname__}"
        )
    problems = []
    if tuple(buffer.shape) not in shapes:
        expected = " or ".join(str(s) for s in dict.fromkeys(shapes))
        problems.append(f"shape {tuple(buffer.shape)}, expected {expected}")
    if buffer.dtype != like.dtype:
        problems.append(f"dtype {buffer.dtype}, expected {like.dtype}")
    if buffer.device != like.device:
        problems.append(f"device {buffer.device}, expected {like.device}")
    if problems:
        raise ValueError(f"{op.name}: buffer '{name}' has " + "; ".join(problems))


def _span(x: torch.Tensor) -> tuple[int, int]:
    """The bytes [start, stop) a tensor's elements occupy."""
    if x.numel() == 0:
        return 0, 0
    last = sum((n - 1) * s for n, s in zip(x.shape, x.stride()) if n > 0)
    return x.data_ptr(), x.data_ptr() + (last + 1) * x.element_size()


def _check_no_overlap(op: Op, written, read) -> None:
    """Result buffers (written) may share memory with nothing the call reads or writes:
    ValueError naming both otherwise."""
    seen = list(read)
    for name, buffer in written:
        start, stop = _span(buffer)
        for other, x in seen:
            if x.device == buffer.device and start < stop:
                other_start, other_stop = _span(x)
                if start < other_stop and other_start < stop:
                    raise ValueError(
                        f"{op.name}: buffer '{name}' shares memory with '{other}'; a result "
                        "buffer must not overlap an argument or another buffer"
                    )
        seen.append((name, buffer))


@functools.lru_cache(maxsize=64)
def _warp_stream(device: torch.device, handle: int) -> wp.Stream:
    """Warp's view of a PyTorch CUDA stream, made once per stream handle."""
    return wp.Stream(wp.device_from_torch(device), cuda_stream=handle)


_NO_STREAM = contextlib.nullcontext()


def _on_current_stream(tensors):
    """Launch on PyTorch's current CUDA stream where the first tensor is on CUDA; nothing
    on CPU. No synchronisation with Warp's own stream either: an event wait on a stream
    outside a CUDA graph capture would invalidate the capture."""
    # `is_cuda`, not `device.type`: ~0.2 us against ~0.9 us a call, on every launch
    first = next(t for t in tensors if isinstance(t, torch.Tensor))
    if not first.is_cuda:
        return _NO_STREAM
    current = torch.cuda.current_stream(first.device)
    return wp.ScopedStream(_warp_stream(current.device, current.cuda_stream), sync_enter=False)


def _detached(tensors):
    return [t.detach() if isinstance(t, torch.Tensor) else t for t in tensors]


# --- the core's three products, on tensors ------------------------------------------------


def _meta(operands) -> bool:
    """Whether these are meta tensors (shapes only: shape inference, tracing); checked,
    but nothing is launched."""
    return any(x.is_meta for x in operands if isinstance(x, torch.Tensor))


def _prepare(op: Op, operands, prefix: int):
    """The core's validated operands (dtype, shape, one device: meta included)."""
    return _launch.buffers.prepare(op, [_buffer(x) for x in operands], prefix)


def _repeat_key(arrays, prefix: int, *extra) -> tuple | None:
    """The key under which a call repeats an earlier one's launch (`_launch.repeats.repeat`): each
    array's shape, dtype and device, and `extra`, for contiguous tensors at prefix 0;
    None otherwise (numbers, non-contiguous tensors: the checked path each time)."""
    if prefix:
        return None
    key = []
    for x in arrays:
        if not isinstance(x, torch.Tensor) or not x.is_contiguous():
            return None
        key.append((x.shape, x.dtype, x.device))
    return (*key, *extra)


def _repeated(op: Op, kind: str, key: tuple | None, arrays):
    """`kind`'s product of these tensors through the launch an earlier call left under
    `key`; None where there is none (or no key)."""
    if key is None:
        return None
    return _launch.repeats.repeat(op, kind, key, [x.data_ptr() for x in arrays], _empty, _zeros)


def _forward(op: Op, operands, prefix: int = 0, buffers=()) -> list[torch.Tensor]:
    plain = not any(b is not None for b in buffers)
    key = _repeat_key(operands, prefix) if plain else None
    with _on_current_stream(operands):
        results = _repeated(op, Product.FORWARD, key, operands)
        if results is not None:
            return results
        if _meta(operands):
            _prepare(op, operands, prefix)
            return _fake_results(op, _detached(operands), prefix)
        prepared = _prepare(op, operands, prefix)
        return _launch.products.forward(prepared, _into(buffers, _empty), _zeros, repeat_key=key)


def _vjp(op: Op, operands, cotangents, needed, prefix: int = 0):
    arrays = [*operands, *cotangents]
    key = _repeat_key(arrays, prefix, tuple(needed))
    with _on_current_stream(operands):
        grads = _repeated(op, Product.VJP, key, arrays)
        if grads is not None:
            return grads
        if _meta(operands):
            _prepare(op, operands, prefix)
            return [x.new_empty(x.shape) if need else None for x, need in zip(operands, needed)]
        return _launch.products.vjp(
            _prepare(op, operands, prefix),
            [_buffer(g) for g in cotangents],
            _zeros,
            needed,
            allocate=_empty,
            repeat_key=key,
        )


def _jvp(op: Op, operands, tangents, prefix: int = 0):
    if _meta(operands):
        _prepare(op, operands, prefix)
        return _fake_results(op, _detached(operands), prefix)
    with _on_current_stream(operands):
        return _launch.products.jvp(
            _prepare(op, operands, prefix), [_buffer(t) for t in tangents], _empty, _zeros
        )


class KernelRoute(NamedTuple):
    """How a Function reaches the kernels: `forward(op, operands, prefix, buffers)`,
    `vjp(op, operands, cotangents, needed, prefix)`, `jvp(op, operands, tangents, prefix)`,
    each returning a list of tensors."""

    forward: Callable
    vjp: Callable
    jvp: Callable


# Eager: the kernels launch directly on the tensors' memory.
LAUNCHED = KernelRoute(_forward, _vjp, _jvp)


def _fake_results(op: Op, operands, prefix: int = 0) -> list[torch.Tensor]:
    _launch.buffers.check_dtypes(op, [str(x.dtype).removeprefix("torch.") for x in operands])
    shapes = result_shapes(op, [tuple(x.shape) for x in operands], prefix)
    return [operands[0].new_empty(shape) for shape in shapes]


def _check_buffers(op: Op, operands, buffers) -> None:
    """cuRobo's buffers: result buffers of the results' shapes, sharing no memory with
    anything else; gradient buffers of a shape cuRobo uses for them (the operand's, with
    or without a leading 1, or one element per result element, as its batch kernels), of
    the operands' dtype and device. Gradient buffers are never written: the backward
    returns fresh gradients, so that a buffer reused across training steps never aliases
    a gradient that autograd holds or another call overwrites."""
    r = len(op.result_buffers)
    result_buffers, grad_buffers = buffers[:r], buffers[r:]
    like = operands[0]
    shapes = result_shapes(op, [tuple(x.shape) for x in operands])
    for name, buffer, shape in zip(op.result_buffers, result_buffers, shapes):
        _check_buffer(op, name, buffer, [shape], like)
        if buffer is not None and not buffer.is_contiguous():
            raise ValueError(f"{op.name}: buffer '{name}' is not contiguous")
    batch = shapes[0][: len(shapes[0]) - len(op.results[0].element)]
    for name, buffer, operand, x in zip(op.gradient_buffers, grad_buffers, op.operands, operands):
        shape = tuple(x.shape)
        stripped = shape[1:] if shape[:1] == (1,) else shape
        accepted = [shape, (1, *shape), stripped, (*batch, *operand.element)]
        _check_buffer(op, name, buffer, accepted, x)
    written = [(name, b) for name, b in zip(op.result_buffers, result_buffers) if b is not None]
    if written:
        read = [(o.name, x) for o, x in zip(op.operands, operands)]
        _check_no_overlap(op, written, read)
