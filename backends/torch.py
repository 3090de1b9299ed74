"""PyTorch adapter: every op of xform's table as a `torch.autograd.Function`, generated
from the table, plus cuRobo's functional API and class names.

How each PyTorch transform reaches the core's kernels:

- reverse mode: `backward` calls the adjoint launch (a VJP Function, so that it can
  itself be vmapped); `ctx.needs_input_grad` skips gradients nobody asked for;
- forward mode (`torch.func.jvp`, `torch.autograd.forward_ad`): `jvp` calls the op's
  tangent kernel;
- `torch.func.vmap`: the `vmap` staticmethod moves the mapped dimension to the front of
  every operand (a size-1 one for unmapped operands) and calls the same op with one more
  "mapped prefix" dimension: one launch serves the whole batch;
- `torch.compile(fullgraph=True)`: Dynamo refuses to trace a Function with a custom `jvp`
  (and outside its own autograd support it would inline `forward`, dropping the `jvp` and
  `vmap` rules), while a `torch.library.custom_op` has no forward-mode rule (its tangents
  come out zero) and its `register_autograd` fails under `torch.func.grad`. So while
  compiling, each call goes to the same Function, built over custom ops (`xform::<op>`,
  `xform_jvp::<op>`, `xform_vjp::<op>`, with fake implementations) instead of direct
  launches, and wrapped in a function marked `torch.compiler.allow_in_graph`: Dynamo
  records it as one node, and AOTAutograd runs the Function under whatever the graph
  holds (backward, `torch.func.grad`, `jvp`, `vmap`, `jacfwd`, `jacrev`, forward AD), so
  every rule applies exactly as in eager mode and the compiled graph holds the custom ops.
  Both paths run the same kernels.

Second derivatives (double backward, `gradgradcheck`, `torch.func.hessian`,
`jacfwd(jacrev(f))`), eager or compiled: the VJP and JVP Functions are differentiable
again, through the op's products made ops of their own (`xform._products`); where an op
has no closed-form derivatives, and for third derivatives, they raise
`xform.HigherDerivativeError` (never a silently wrong second derivative).

Tensors are read and written in place through DLPack; only non-contiguous inputs are
copied. On CUDA every launch goes to `torch.cuda.current_stream()`, with no host
synchronisation, so calls with preallocated buffers can be captured in a CUDA graph.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.autograd.forward_ad as forward_ad
import warp as wp

from xform import _launch, _products
from xform._api import ArrayArguments, numbers_as_arrays
from xform._functions import family_function
from xform._layout import result_shapes
from xform._op import Op, Product
from xform._random import sample_shape
from xform._registry import on_define
from xform.ops import COMPOSITES, OPS

__all__ = [
    *OPS,
    *COMPOSITES,
    "random_quaternion",
    "torch_quaternion_to_matrix",
    "TransformPoint",
    "BatchTransformPoint",
    "TransformPose",
    "BatchTransformPose",
    "PoseInverse",
    "QuatToMatrix",
    "MatrixToQuaternion",
]

# --- memory: torch tensors as the core's buffers ------------------------------------------


TORCH_DTYPES = {wp.float32: torch.float32, wp.float64: torch.float64}


def _empty(shape, scalar, device):
    tensor = torch.empty(shape, dtype=TORCH_DTYPES[scalar], device=device)
    return tensor, tensor.data_ptr()


def _zeros(shape, scalar, device):
    tensor = torch.zeros(shape, dtype=TORCH_DTYPES[scalar], device=device)
    return tensor, tensor.data_ptr()


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
        return _launch.Buffer(x.data_ptr(), tuple(x.shape), dtype, device, x)

    def copy():
        c = x.contiguous()
        return c.data_ptr(), c

    return _launch.Buffer(0, tuple(x.shape), dtype, device, x, copy)


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


def _on_current_stream(device: torch.device):
    """Launch on PyTorch's current CUDA stream; nothing on CPU. No synchronisation with
    Warp's own stream either: an event wait on a stream outside a CUDA graph capture would
    invalidate the capture."""
    if device.type != "cuda":
        return _NO_STREAM
    current = torch.cuda.current_stream(device)
    return wp.ScopedStream(_warp_stream(current.device, current.cuda_stream), sync_enter=False)


def _detached(tensors):
    return [t.detach() if isinstance(t, torch.Tensor) else t for t in tensors]


def _device_of(tensors) -> torch.device:
    return next(t.device for t in tensors if isinstance(t, torch.Tensor))


# --- the core's three products, on tensors ------------------------------------------------


def _meta(operands) -> bool:
    """Whether these are meta tensors (shapes only: shape inference, tracing); checked,
    but nothing is launched."""
    return any(x.device.type == "meta" for x in operands if isinstance(x, torch.Tensor))


def _prepare(op: Op, operands, prefix: int):
    """The core's validated operands (dtype, shape, one device: meta included)."""
    return _launch.prepare(op, [_buffer(x) for x in operands], prefix)


def _repeat_key(arrays, prefix: int, *extra) -> tuple | None:
    """The key under which a call repeats an earlier one's launch (`_launch.repeat`): each
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
    return _launch.repeat(op, kind, key, [x.data_ptr() for x in arrays], _empty, _zeros)


def _forward(op: Op, operands, prefix: int = 0, buffers=()) -> list[torch.Tensor]:
    plain = not any(b is not None for b in buffers)
    key = _repeat_key(operands, prefix) if plain else None
    with _on_current_stream(_device_of(operands)):
        results = _repeated(op, "forward", key, operands)
        if results is not None:
            return results
        if _meta(operands):
            _prepare(op, operands, prefix)
            return _fake_results(op, _detached(operands), prefix)
        prepared = _prepare(op, operands, prefix)
        return _launch.forward(prepared, _into(buffers, _empty), _zeros, repeat_key=key)


def _vjp(op: Op, operands, cotangents, needed, prefix: int = 0):
    arrays = [*operands, *cotangents]
    key = _repeat_key(arrays, prefix, tuple(needed))
    with _on_current_stream(_device_of(operands)):
        grads = _repeated(op, "vjp", key, arrays)
        if grads is not None:
            return grads
        if _meta(operands):
            _prepare(op, operands, prefix)
            return [x.new_empty(x.shape) if need else None for x, need in zip(operands, needed)]
        return _launch.vjp(
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
    with _on_current_stream(_device_of(operands)):
        return _launch.jvp(
            _prepare(op, operands, prefix), [_buffer(t) for t in tangents], _empty, _zeros
        )


class Products(NamedTuple):
    """How a Function reaches the kernels: `forward(op, operands, prefix, buffers)`,
    `vjp(op, operands, cotangents, needed, prefix)`, `jvp(op, operands, tangents, prefix)`,
    each returning a list of tensors."""

    forward: Callable
    vjp: Callable
    jvp: Callable


# Eager: the kernels launch directly on the tensors' memory.
LAUNCHED = Products(_forward, _vjp, _jvp)


def _unpack(results):
    return results[0] if len(results) == 1 else tuple(results)


def _to_front(args, in_dims):
    """Each mapped argument with its mapped dimension first; unmapped ones get a size-1
    dimension there, so that they broadcast against the map."""
    return [
        x if x is None else x.movedim(d, 0) if d is not None else x.unsqueeze(0)
        for x, d in zip(args, in_dims)
    ]


def _expanded_to_front(args, in_dims, size: int):
    """Like `_to_front`, but unmapped arguments are expanded (not copied) to the map size."""
    return [
        x if x is None or d is not None else x.expand(size, *x.shape[1:])
        for x, d in zip(_to_front(args, in_dims), in_dims)
    ]


class _Derivative(torch.autograd.Function):
    """A first derivative (VJP or JVP) as a Function, so that vmap can fold it into one
    launch, and so that it can be differentiated again: its backward and forward-mode
    rule are those of the op's product made an op of its own (`xform._products`), whose
    own derivatives are the op's exact second derivatives. Where xform cannot give them
    (an op without closed forms, a third derivative), they raise HigherDerivativeError."""

    op: Op

    @staticmethod
    def setup_context(ctx, inputs, output):
        tensors = [x if isinstance(x, torch.Tensor) else None for x in inputs]
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)
        ctx.set_materialize_grads(False)
        ctx.flags = inputs[-1]  # a VJP's `needed`

    @classmethod
    def jvp(cls, ctx, *tangents):
        raise RuntimeError(
            f"xform.{cls.op.name}: forward mode over a derivative (torch.func.jvp or jacfwd "
            "of a gradient or tangent, hessian) is not supported; the first derivative is exact"
        )


# --- autograd.Functions, generated from the op table ---------------------------------------


@functools.cache
def vjp_function(
    op: Op, prefix: int = 0, products: Products = LAUNCHED
) -> type[torch.autograd.Function]:
    """Operands, then one cotangent per result, then the `needed` flags -> one gradient
    per operand (an empty tensor where not needed). A Function so that it can be vmapped."""
    n, r = len(op.operands), len(op.results)

    class Vjp(_Derivative):
        @staticmethod
        def forward(*args):
            operands, cotangents, needed = args[:n], args[n : n + r], args[n + r]
            grads = products.vjp(op, operands, cotangents, needed, prefix)
            return tuple(g if g is not None else operands[0].new_empty(0) for g in grads)

        @staticmethod
        def vmap(info, in_dims, *args):
            # Every input gets the mapped dimension spelled out: an unmapped operand still
            # has one gradient per map element, so the adjoint must not sum over the map.
            front = _expanded_to_front(args[: n + r], in_dims[: n + r], info.batch_size)
            grads = vjp_function(op, prefix + 1, products).apply(*front, args[n + r])
            return grads, tuple(0 if need else None for need in args[n + r])

        @staticmethod
        def backward(ctx, *grads):
            return _vjp_of_vjp(op, prefix, products, ctx, grads)

        @staticmethod
        def jvp(ctx, *tangents):
            return _tangent_of_vjp(op, prefix, products, ctx, tangents)

    Vjp.__name__ = Vjp.__qualname__ = f"{op.name}_vjp"
    Vjp.op = op
    return _with_cached_signature(Vjp)


@functools.cache
def jvp_function(
    op: Op, prefix: int = 0, products: Products = LAUNCHED
) -> type[torch.autograd.Function]:
    """Operands, then one tangent per operand (None for zero) -> the results' tangents."""
    n = len(op.operands)

    class Jvp(_Derivative):
        @staticmethod
        def forward(*args):
            return _unpack(products.jvp(op, args[:n], args[n:], prefix))

        @staticmethod
        def vmap(info, in_dims, *args):
            # Tangents must have their operand's shape, so every input gets the map's size.
            front = _expanded_to_front(args, in_dims, info.batch_size)
            out = jvp_function(op, prefix + 1, products).apply(*front)
            return out, 0 if len(op.results) == 1 else (0,) * len(op.results)

        @staticmethod
        def backward(ctx, *grads):
            return _vjp_of_tangent(op, prefix, products, ctx, grads)

        @staticmethod
        def jvp(ctx, *tangents):
            return _tangent_of_tangent(op, prefix, products, ctx, tangents)

    Jvp.__name__ = Jvp.__qualname__ = f"{op.name}_jvp"
    Jvp.op = op
    return _with_cached_signature(Jvp)


# --- second derivatives: the first derivatives' own, through the products as ops ------------


def _vjp_of_vjp(op: Op, prefix: int, products: Products, ctx, grads):
    """Backward of a VJP Function (operands, cotangents, needed -> gradients): the VJP of
    the op's VJP op at the gradients' cotangents `grads`."""
    n, r = len(op.operands), len(op.results)
    product = _products.product_op(op, Product.VJP)
    saved, needed = ctx.saved_tensors, ctx.flags
    # The VJP op's results are the differentiable operands' gradients, in order.
    cotangents = [grads[k] if needed[k] else None for k in op.scattered("vjp")]
    wanted = _needed(product, ctx.needs_input_grad[: n + r])
    if not any(wanted):
        return (None,) * (n + r + 1)
    out = vjp_function(product, prefix, products).apply(*saved[: n + r], *cotangents, wanted)
    return (*[g if want else None for g, want in zip(out, wanted)], None)


def _tangent_of_vjp(op: Op, prefix: int, products: Products, ctx, tangents):
    """Forward-mode rule of a VJP Function: the tangent of the op's VJP op."""
    n, r = len(op.operands), len(op.results)
    product = _products.product_op(op, Product.VJP)
    saved, needed = ctx.saved_tensors, ctx.flags
    out = jvp_function(product, prefix, products).apply(*saved[: n + r], *tangents[: n + r])
    by_operand = dict(zip(op.scattered("vjp"), out if isinstance(out, tuple) else (out,)))
    return tuple(by_operand[k] if needed[k] else saved[0].new_empty(0) for k in range(n))


def _operands_and_tangents(op: Op, saved):
    """A JVP Function's saved operands and tangents, zeros for the tangents given as None."""
    n = len(op.operands)
    tangents = [x.new_zeros(x.shape) if t is None else t for x, t in zip(saved[:n], saved[n:])]
    return [*saved[:n], *tangents]


def _vjp_of_tangent(op: Op, prefix: int, products: Products, ctx, grads):
    """Backward of a JVP Function (operands, tangents -> the results' tangents): the VJP
    of the op's tangent op."""
    product = _products.product_op(op, Product.TANGENT)
    wanted = _needed(product, ctx.needs_input_grad)
    if not any(wanted):
        return (None,) * len(wanted)
    inputs = _operands_and_tangents(op, ctx.saved_tensors)
    out = vjp_function(product, prefix, products).apply(*inputs, *grads, wanted)
    return tuple(g if want else None for g, want in zip(out, wanted))


def _tangent_of_tangent(op: Op, prefix: int, products: Products, ctx, tangents):
    """Forward-mode rule of a JVP Function: the tangent of the op's tangent op."""
    product = _products.product_op(op, Product.TANGENT)
    inputs = _operands_and_tangents(op, ctx.saved_tensors)
    return jvp_function(product, prefix, products).apply(*inputs, *tangents)


_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)


def _plain_backward() -> bool:
    """Whether a backward runs outside every `torch.func` transform and records no graph
    (no `create_graph`): then nothing can map or differentiate the VJP, which is launched
    directly, without the Function around it (~30 µs of a small backward)."""
    return _functorch_active is not None and not torch.is_grad_enabled() and not _functorch_active()


def _with_cached_signature(function: type[torch.autograd.Function]):
    """`Function.apply` binds its arguments to `forward`'s signature on every call (when
    `setup_context` is defined), and `inspect.signature` rebuilds it each time unless the
    function carries one: ~10% of a small call."""
    function.forward.__signature__ = inspect.signature(function.forward)
    return function


@functools.cache
def op_function(
    op: Op, prefix: int = 0, products: Products = LAUNCHED
) -> type[torch.autograd.Function]:
    """The op as a Function: `apply(*operands, *result_buffers, *gradient_buffers)`, the
    buffers optional (None) and only at prefix 0 with the LAUNCHED products."""
    n, r = len(op.operands), len(op.results)
    result_names = op.result_buffers

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(*args):
            _refuse_tracing(op)
            operands = args[:n]
            if any(b is not None for b in args[n:]):  # only at prefix 0 (vmap refuses them)
                _check_buffers(op, operands, args[n:])  # before any launch
            return _unpack(products.forward(op, operands, prefix, _result_buffers(args)))

        @staticmethod
        def setup_context(ctx, inputs, output):
            operands = inputs[:n]
            ctx.save_for_backward(*operands)
            ctx.save_for_forward(*operands)
            dirty = [b for b in _result_buffers(inputs) if b is not None]
            if dirty:
                ctx.mark_dirty(*dirty)
            if not op.differentiable:
                ctx.mark_non_differentiable(*(output if isinstance(output, tuple) else (output,)))

        @staticmethod
        def backward(ctx, *grad_outputs):
            return _backward(op, prefix, products, ctx, grad_outputs)

        @staticmethod
        def jvp(ctx, *tangents):
            if not op.differentiable:
                return _unpack([None] * r)
            return jvp_function(op, prefix, products).apply(*ctx.saved_tensors, *tangents[:n])

        @staticmethod
        def vmap(info, in_dims, *args):
            if any(b is not None for b in args[n:]):
                raise ValueError(
                    f"{op.name}: preallocated buffers cannot be used under torch.func.vmap"
                )
            # Results like operands get one element per map element: those operands too.
            if op.scatters:
                front = _expanded_to_front(args[:n], in_dims[:n], info.batch_size)
            else:
                front = _to_front(args[:n], in_dims[:n])
            out = op_function(op, prefix + 1, products).apply(*front)
            return out, 0 if r == 1 else (0,) * r

    def _result_buffers(args):
        return [args[n + k] if n + k < len(args) else None for k in range(len(result_names))]

    Function.__name__ = Function.__qualname__ = op.name
    return _with_cached_signature(Function)


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


def _backward(op: Op, prefix: int, products: Products, ctx, grad_outputs) -> tuple:
    """The backward of a function whose first inputs are the op's operands, saved in
    `ctx` (the op's Function, or its forward custom op): one gradient per input, None
    for the inputs after the operands and those nobody asked for."""
    n = len(op.operands)
    needed = _needed(op, ctx.needs_input_grad[:n])
    if not op.differentiable or not any(needed):
        return (None,) * len(ctx.needs_input_grad)
    if _plain_backward():
        grads = products.vjp(op, ctx.saved_tensors, grad_outputs, needed, prefix)
    else:  # a Function: vmappable, and differentiable again
        vjp = vjp_function(op, prefix, products)
        grads = vjp.apply(*ctx.saved_tensors, *grad_outputs, needed)
    grads = [g if need else None for g, need in zip(grads, needed)]
    return (*grads, *[None] * (len(ctx.needs_input_grad) - n))


def _needed(op: Op, needs_input_grad) -> tuple[bool, ...]:
    """Which operands' gradients to compute: those autograd asks for, of the operands the
    op is differentiable in (the others' are None: no gradient flows)."""
    return tuple(bool(g) and o.differentiable for g, o in zip(needs_input_grad, op.operands))


# --- torch.compile: the same Functions, reaching the kernels through custom ops ------------


def _fake_results(op: Op, operands, prefix: int = 0) -> list[torch.Tensor]:
    _launch.check_dtypes(op, [str(x.dtype).removeprefix("torch.") for x in operands])
    shapes = result_shapes(op, [tuple(x.shape) for x in operands], prefix)
    return [operands[0].new_empty(shape) for shape in shapes]


class CustomOps(NamedTuple):
    """An op's three products as functional `torch.library` custom ops, the mapped prefix
    an argument: `xform::<key>`, and for a differentiable op `xform_jvp::<key>` (operands,
    tangents) and `xform_vjp::<key>` (operands, cotangents, needed flags). A namespace per
    product, so that no op's key can meet another's derivative."""

    forward: Callable
    jvp: Callable | None
    vjp: Callable | None


def _register_custom_ops(op: Op) -> CustomOps:
    """The custom ops of `op`, with fake (shape-only) implementations for tracing. While
    compiling, the Function around them differentiates and maps; the forward's own
    autograd serves an exported program, which holds the custom op alone."""
    n, r = len(op.operands), len(op.results)
    # Positional names: an op's own operand names could clash with `prefix` or `needed`.
    operands = ", ".join(f"Tensor operand{k}" for k in range(n))
    tangents = ", ".join(f"Tensor? tangent{k}" for k in range(n))
    cotangents = ", ".join(f"Tensor? cotangent{k}" for k in range(r))
    results = "Tensor" if r == 1 else "(" + ", ".join(["Tensor"] * r) + ")"

    def define(namespace: str, arguments: str, returns: str, kernel, fake):
        custom = torch.library.custom_op(
            f"{namespace}::{op.key}",
            kernel,
            mutates_args=(),
            schema=f"({arguments}, int prefix) -> {returns}",
        )
        custom.register_fake(fake)
        return custom

    forward = define(
        "xform",
        operands,
        results,
        lambda *args: _unpack(_forward(op, args[:n], args[n])),
        lambda *args: _unpack(_fake_results(op, args[:n], args[n])),
    )
    if not op.differentiable:
        return CustomOps(forward, None, None)
    jvp = define(
        "xform_jvp",
        f"{operands}, {tangents}",
        results,
        lambda *args: _unpack(_jvp(op, args[:n], args[n : 2 * n], args[2 * n])),
        lambda *args: _unpack(_fake_results(op, args[:n], args[2 * n])),
    )

    def vjp(*args):
        operands, cotangents, needed, prefix = args[:n], args[n : n + r], args[-2], args[-1]
        grads = _vjp(op, operands, cotangents, needed, prefix)
        return [g if g is not None else operands[0].new_empty(0) for g in grads]

    def fake_vjp(*args):
        operands, needed = args[:n], args[-2]
        return [x.new_empty(x.shape if need else (0,)) for x, need in zip(operands, needed)]

    vjp = define("xform_vjp", f"{operands}, {cotangents}, bool[] needed", "Tensor[]", vjp, fake_vjp)

    # A graph that holds the forward custom op without the Function around it (a program
    # from torch.export) differentiates it through the same VJP Function, over the
    # custom ops, so that its backward is differentiable again too.
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:n])
        ctx.prefix = inputs[n]

    def backward(ctx, *grads):
        return _backward(op, ctx.prefix, DISPATCHED, ctx, grads)

    forward.register_autograd(backward, setup_context=setup_context)
    return CustomOps(forward, jvp, vjp)


# Every op's custom ops, registered as soon as the op exists (registering inside a
# region that torch.compile traces would break the trace).
CUSTOM_OPS: dict[Op, CustomOps] = {}


def _as_list(results) -> list[torch.Tensor]:
    return list(results) if isinstance(results, (tuple, list)) else [results]


def _dispatched_forward(op: Op, operands, prefix: int = 0, buffers=()) -> list[torch.Tensor]:
    return _as_list(CUSTOM_OPS[op].forward(*operands, prefix))


def _dispatched_vjp(op: Op, operands, cotangents, needed, prefix: int = 0):
    return CUSTOM_OPS[op].vjp(*operands, *cotangents, list(needed), prefix)


def _dispatched_jvp(op: Op, operands, tangents, prefix: int = 0) -> list[torch.Tensor]:
    return _as_list(CUSTOM_OPS[op].jvp(*operands, *tangents, prefix))


# Traced (torch.compile): the kernels as custom ops, which the trace records as nodes.
DISPATCHED = Products(_dispatched_forward, _dispatched_vjp, _dispatched_jvp)


def _traced_call(op: Op):
    """What a call of `op` is while torch.compile traces: the op's Function with the
    DISPATCHED products, in a function marked `allow_in_graph`. Dynamo records that call as
    one node instead of inlining the Function (it refuses a Function with a `jvp`, and
    outside its own autograd support it would drop the jvp and vmap rules); AOTAutograd
    then runs the Function under whichever transforms the trace holds (backward,
    `torch.func.grad`, `jvp`, `vmap`, forward AD), so every rule applies as in eager mode,
    and records the custom ops that the Function calls."""
    function = op_function(op, 0, DISPATCHED)

    def call(*operands):
        return function.apply(*operands)

    call.__name__ = call.__qualname__ = op.name
    return _allow_in_graph(call)


# Marking a function `allow_in_graph` imports torch._dynamo, which would double the
# import time of this module (~0.9 s of CPU) for programs that never compile. So the
# marks wait for Dynamo's first import (torch.compile makes it), and are made as soon as
# that import is done, before anything can be traced.
_DYNAMO = "torch._dynamo"
_UNMARKED: list[Callable] = []


def _allow_in_graph(call: Callable) -> Callable:
    if _DYNAMO in sys.modules:
        return torch.compiler.allow_in_graph(call)
    _UNMARKED.append(call)
    return call


class _MarkWhenDynamoLoads(importlib.abc.MetaPathFinder):
    """An import hook that lets torch._dynamo load as usual, then marks the waiting
    functions; it removes itself at that import."""

    def find_spec(self, name, path, target=None):
        if name != _DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            try:
                run(module)
            except BaseException:
                sys.meta_path.insert(0, self)  # a later import tries again
                raise
            while _UNMARKED:
                torch.compiler.allow_in_graph(_UNMARKED.pop())

        spec.loader.exec_module = exec_module
        return spec


if _DYNAMO not in sys.modules:
    sys.meta_path.insert(0, _MarkWhenDynamoLoads())


# --- the functional API: cuRobo's signatures --------------------------------------------


def _make_functional(op: Op):
    result_names, grad_names = op.result_buffers, op.gradient_buffers
    n = len(op.operands)
    params = [
        inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for o in op.operands
    ]
    params += [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
        for name in (*result_names, *grad_names)
    ]
    signature = inspect.Signature(params)
    function_class = op_function(op)
    traced = _traced_call(op)

    n_buffers = len(result_names) + len(grad_names)

    def functional(*args, **kwargs):
        _refuse_tracing(op)
        if kwargs or len(args) != n:  # the common positional call skips binding
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.arguments.values())
        operands, buffers = numbers_as_arrays(op, args[:n]), args[n:] or (None,) * n_buffers
        _check_operand_types(op, operands)
        if torch.compiler.is_compiling():
            return _compiled_call(traced, operands, buffers[: len(result_names)])
        if any(b is not None for b in buffers):
            _check_buffers(op, operands, buffers)
            # A result buffer reused call after call carries no autograd history into the
            # next call (the result has this call's history; its memory is the buffer's).
            buffers = tuple(b.detach() if isinstance(b, torch.Tensor) else b for b in buffers)
        if _untracked(operands):
            return function_class.forward(*operands, *buffers)
        return function_class.apply(*operands, *buffers)

    functional.__name__ = functional.__qualname__ = op.name
    functional.__signature__ = signature
    functional.__doc__ = op.docstring(
        "none (marked non-differentiable)",
        f"Optional cuRobo buffers: results {', '.join(result_names)} (written and returned); "
        f"gradient buffers {', '.join(grad_names) or 'none'} (checked, never written)."
        if result_names
        else "",
    )
    return functional


def _refuse_tracing(op: Op) -> None:
    """TorchScript is not supported (PyTorch has deprecated it): `torch.jit.script` fails
    on the functions' variable arguments, and `torch.jit.trace` would record the empty
    results but not the kernel that fills them, a module that returns uninitialised memory.
    So tracing raises, pointing to `torch.export.export` and `torch.compile`."""
    if torch.jit.is_tracing():
        raise RuntimeError(
            f"xform.backends.torch.{op.name}: TorchScript (torch.jit.trace, torch.jit.script) "
            "is not supported, as PyTorch has deprecated it; export with "
            "torch.export.export, or compile with torch.compile"
        )


def _untracked(tensors) -> bool:
    """Whether no autograd, forward-mode AD or torch.func transform can see a call on
    these tensors (None allowed), so that it may skip `Function.apply`, about 100 µs of a
    small call. Both levels are private torch state: where they are missing, False."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return False
    forward_level = getattr(forward_ad, "_current_level", 0)
    functorch_level = getattr(torch._C._functorch, "maybe_current_level", lambda: 0)()
    return forward_level < 0 and functorch_level is None


ARRAYS = ArrayArguments(
    "xform.backends.torch", "a torch.Tensor", lambda x: isinstance(x, torch.Tensor)
)


def _check_operand_types(op: Op, operands) -> None:
    for operand, x in zip(op.operands, operands):
        ARRAYS.check(op.name, operand.name, x)


def _compiled_call(traced, operands, result_buffers):
    results = traced(*operands)
    if not any(b is not None for b in result_buffers):
        return results
    results = results if isinstance(results, tuple) else (results,)
    outs = [r if b is None else b.copy_(r) for r, b in zip(results, result_buffers)]
    return _unpack(outs)


def function(op: Op):
    """The PyTorch function of `op`, built-in or made by `xform.define_op` (made, and its
    custom ops registered, when the op is defined, or when this module is imported)."""
    return op.adapters["torch"]


def _adopt(op: Op) -> None:
    CUSTOM_OPS[op] = _register_custom_ops(op)
    op.adapters["torch"] = _make_functional(op)


on_define(_adopt)
FUNCTIONS = {name: function(op) for name, op in OPS.items()}
FUNCTIONS |= {
    name: family_function(family, lambda op, *arrays: function(op)(*arrays), ARRAYS)
    for name, family in COMPOSITES.items()
}

globals().update(FUNCTIONS)  # every built-in op by name


def random_quaternion(
    shape, generator: torch.Generator | None = None, dtype=None, device=None
) -> torch.Tensor:
    """Unit quaternions [w, x, y, z], uniform over rotations (Haar), shape `shape + (4,)`:
    normalised standard normals drawn with `generator` (torch's global one if None; a
    generator seeded alike gives the same samples). `dtype` defaults to torch's default,
    `device` to the generator's (else the CPU)."""
    dims = sample_shape("backends.torch.random_quaternion", shape)
    if device is None and generator is not None:
        device = generator.device
    normals = torch.randn((*dims, 4), generator=generator, dtype=dtype, device=device)
    return FUNCTIONS["quaternion_normalize"](normals)


# --- cuRobo's Function classes --------------------------------------------------------------


class TransformPoint(op_function(OPS["transform_points"])):
    """One pose applied to a batch of points. `apply(position, quaternion, points,
    out_points, adj_position, adj_quaternion, adj_points)`; the buffers may be None."""


class BatchTransformPoint(op_function(OPS["batch_transform_points"])):
    """A batch of poses, each applied to its own points. Same arguments as TransformPoint."""


class TransformPose(op_function(OPS["pose_multiply"])):
    """Pose 1 (broadcast) times a batch of poses 2. `apply(position, quaternion,
    position2, quaternion2, out_position, out_quaternion, adj_position, adj_quaternion,
    adj_position2, adj_quaternion2)`; the buffers may be None."""


class BatchTransformPose(op_function(OPS["pose_multiply"])):
    """A batch of poses 1 times a batch of poses 2. Same arguments as TransformPose."""


class PoseInverse(op_function(OPS["pose_inverse"])):
    """`apply(position, quaternion, out_position, out_quaternion, adj_position,
    adj_quaternion)`; the buffers may be None."""


class QuatToMatrix(op_function(OPS["quaternion_to_matrix"])):
    """`apply(quaternion, out_mat, adj_quaternion)`; the buffers may be None."""


class MatrixToQuaternion(op_function(OPS["matrix_to_quaternion"])):
    """`apply(matrix, out_quat, adj_matrix)`; the buffers may be None."""


# --- the one piece of math here: SPEC-mandated pure-PyTorch formula ----------------------


def torch_quaternion_to_matrix(quaternion: torch.Tensor) -> torch.Tensor:
    """(..., 4) -> (..., 3, 3) in pure PyTorch, by the same formula as quaternion_to_matrix:
    the matrix of v -> q (0, v) q*, i.e. |q|^2 times the rotation matrix of q / |q|."""
    w, x, y, z = quaternion.unbind(-1)
    rows = (
        (w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z),
    )
    return torch.stack([torch.stack(row, -1) for row in rows], -2)
