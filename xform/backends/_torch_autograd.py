"""Every op as `torch.autograd.Function`s: the op's own (backward through the VJP kernel,
forward mode through the tangent kernel, a `vmap` rule that adds a leading dimension to
one launch), and its first derivatives', differentiable again through the op's products
made ops of their own (`xform._second_order`). See `backends/torch.py` for the whole design."""

from __future__ import annotations

import functools
import inspect

import torch

from xform import _second_order
from xform._launch.layout import scattered
from xform._op import Op, Product

from ._torch_kernels import LAUNCHED, KernelRoute, _check_buffers


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
    rule are those of the op's product made an op of its own (`xform._second_order`), whose
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
    op: Op, prefix: int = 0, route: KernelRoute = LAUNCHED
) -> type[torch.autograd.Function]:
    """Operands, then one cotangent per result, then the `needed` flags -> one gradient
    per operand (an empty tensor where not needed). A Function so that it can be vmapped."""
    n, r = len(op.operands), len(op.results)

    class Vjp(_Derivative):
        @staticmethod
        def forward(*args):
            operands, cotangents, needed = args[:n], args[n : n + r], args[n + r]
            grads = route.vjp(op, operands, cotangents, needed, prefix)
            return tuple(g if g is not None else operands[0].new_empty(0) for g in grads)

        @staticmethod
        def vmap(info, in_dims, *args):
            # Every input gets the mapped dimension spelled out: an unmapped operand still
            # has one gradient per map element, so the adjoint must not sum over the map.
            front = _expanded_to_front(args[: n + r], in_dims[: n + r], info.batch_size)
            grads = vjp_function(op, prefix + 1, route).apply(*front, args[n + r])
            return grads, tuple(0 if need else None for need in args[n + r])

        @staticmethod
        def backward(ctx, *grads):
            return _vjp_of_vjp(op, prefix, route, ctx, grads)

        @staticmethod
        def jvp(ctx, *tangents):
            return _tangent_of_vjp(op, prefix, route, ctx, tangents)

    Vjp.__name__ = Vjp.__qualname__ = f"{op.name}_vjp"
    Vjp.op = op
    return _with_cached_signature(Vjp)


@functools.cache
def jvp_function(
    op: Op, prefix: int = 0, route: KernelRoute = LAUNCHED
) -> type[torch.autograd.Function]:
    """Operands, then one tangent per operand (None for zero) -> the results' tangents."""
    n = len(op.operands)

    class Jvp(_Derivative):
        @staticmethod
        def forward(*args):
            return _unpack(route.jvp(op, args[:n], args[n:], prefix))

        @staticmethod
        def vmap(info, in_dims, *args):
            # Tangents must have their operand's shape, so every input gets the map's size.
            front = _expanded_to_front(args, in_dims, info.batch_size)
            out = jvp_function(op, prefix + 1, route).apply(*front)
            return out, 0 if len(op.results) == 1 else (0,) * len(op.results)

        @staticmethod
        def backward(ctx, *grads):
            return _vjp_of_tangent(op, prefix, route, ctx, grads)

        @staticmethod
        def jvp(ctx, *tangents):
            return _tangent_of_tangent(op, prefix, route, ctx, tangents)

    Jvp.__name__ = Jvp.__qualname__ = f"{op.name}_jvp"
    Jvp.op = op
    return _with_cached_signature(Jvp)


# --- second derivatives: the first derivatives' own, through the products as ops ------------


def _vjp_of_vjp(op: Op, prefix: int, route: KernelRoute, ctx, grads):
    """Backward of a VJP Function (operands, cotangents, needed -> gradients): the VJP of
    the op's VJP op at the gradients' cotangents `grads`."""
    n, r = len(op.operands), len(op.results)
    product = _second_order.product_op(op, Product.VJP)
    saved, needed = ctx.saved_tensors, ctx.flags
    # The VJP op's results are the differentiable operands' gradients, in order.
    cotangents = [grads[k] if needed[k] else None for k in scattered(op, Product.VJP)]
    wanted = _needed(product, ctx.needs_input_grad[: n + r])
    if not any(wanted):
        return (None,) * (n + r + 1)
    out = vjp_function(product, prefix, route).apply(*saved[: n + r], *cotangents, wanted)
    return (*[g if want else None for g, want in zip(out, wanted)], None)


def _tangent_of_vjp(op: Op, prefix: int, route: KernelRoute, ctx, tangents):
    """Forward-mode rule of a VJP Function: the tangent of the op's VJP op."""
    n, r = len(op.operands), len(op.results)
    product = _second_order.product_op(op, Product.VJP)
    saved, needed = ctx.saved_tensors, ctx.flags
    out = jvp_function(product, prefix, route).apply(*saved[: n + r], *tangents[: n + r])
    by_operand = dict(zip(scattered(op, Product.VJP), out if isinstance(out, tuple) else (out,)))
    return tuple(by_operand[k] if needed[k] else saved[0].new_empty(0) for k in range(n))


def _operands_and_tangents(op: Op, saved):
    """A JVP Function's saved operands and tangents, zeros for the tangents given as None."""
    n = len(op.operands)
    tangents = [x.new_zeros(x.shape) if t is None else t for x, t in zip(saved[:n], saved[n:])]
    return [*saved[:n], *tangents]


def _vjp_of_tangent(op: Op, prefix: int, route: KernelRoute, ctx, grads):
    """Backward of a JVP Function (operands, tangents -> the results' tangents): the VJP
    of the op's tangent op."""
    product = _second_order.product_op(op, Product.TANGENT)
    wanted = _needed(product, ctx.needs_input_grad)
    if not any(wanted):
        return (None,) * len(wanted)
    inputs = _operands_and_tangents(op, ctx.saved_tensors)
    out = vjp_function(product, prefix, route).apply(*inputs, *grads, wanted)
    return tuple(g if want else None for g, want in zip(out, wanted))


def _tangent_of_tangent(op: Op, prefix: int, route: KernelRoute, ctx, tangents):
    """Forward-mode rule of a JVP Function: the tangent of the op's tangent op."""
    product = _second_order.product_op(op, Product.TANGENT)
    inputs = _operands_and_tangents(op, ctx.saved_tensors)
    return jvp_function(product, prefix, route).apply(*inputs, *tangents)


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
    op: Op, prefix: int = 0, route: KernelRoute = LAUNCHED
) -> type[torch.autograd.Function]:
    """The op as a Function: `apply(*operands, *result_buffers, *gradient_buffers)`, the
    buffers optional (None) and only at prefix 0 with the LAUNCHED route."""
    n, r = len(op.operands), len(op.results)
    result_names = op.result_buffers

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(*args):
            _refuse_tracing(op)
            operands = args[:n]
            if any(b is not None for b in args[n:]):  # only at prefix 0 (vmap refuses them)
                _check_buffers(op, operands, args[n:])  # before any launch
            return _unpack(route.forward(op, operands, prefix, _result_buffers(args)))

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
            return _backward(op, prefix, route, ctx, grad_outputs)

        @staticmethod
        def jvp(ctx, *tangents):
            _second_order.refuse_if_not_differentiable(op)
            if not op.differentiable:
                return _unpack([None] * r)
            return jvp_function(op, prefix, route).apply(*ctx.saved_tensors, *tangents[:n])

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
            out = op_function(op, prefix + 1, route).apply(*front)
            return out, 0 if r == 1 else (0,) * r

    def _result_buffers(args):
        return [args[n + k] if n + k < len(args) else None for k in range(len(result_names))]

    Function.__name__ = Function.__qualname__ = op.name
    return _with_cached_signature(Function)


def _backward(op: Op, prefix: int, route: KernelRoute, ctx, grad_outputs) -> tuple:
    """The backward of a function whose first inputs are the op's operands, saved in
    `ctx` (the op's Function, or its forward custom op): one gradient per input, None
    for the inputs after the operands and those nobody asked for."""
    n = len(op.operands)
    needed = _needed(op, ctx.needs_input_grad[:n])
    if any(needed):
        _second_order.refuse_if_not_differentiable(op)
    if not op.differentiable or not any(needed):
        return (None,) * len(ctx.needs_input_grad)
    if _plain_backward():
        grads = route.vjp(op, ctx.saved_tensors, grad_outputs, needed, prefix)
    else:  # a Function: vmappable, and differentiable again
        vjp = vjp_function(op, prefix, route)
        grads = vjp.apply(*ctx.saved_tensors, *grad_outputs, needed)
    grads = [g if need else None for g, need in zip(grads, needed)]
    return (*grads, *[None] * (len(ctx.needs_input_grad) - n))


def _needed(op: Op, needs_input_grad) -> tuple[bool, ...]:
    """Which operands' gradients to compute: those autograd asks for, of the operands the
    op is differentiable in (the others' are None: no gradient flows)."""
    return tuple(bool(g) and o.differentiable for g, o in zip(needs_input_grad, op.operands))


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
