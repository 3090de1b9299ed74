"""LieTorch's autograd functions (its `group_ops.py`), each one forward op and one backward
op of `_ops.py`: no maths here, only which kernel runs and how gradients of broadcast
arguments sum back to their shapes.

The gradient with respect to a group element's data is LieTorch's: the left-perturbation
tangent gradient, padded with zeros to the data's width. Like LieTorch's, these functions
differentiate once: a second derivative raises (`once_differentiable` would return a
silent zero here, as the saved inputs it does not look at are what the second derivative
needs). For second derivatives and forward mode, use `xform.SO3` ... `xform.Sim3`, whose
every method is differentiable twice.
"""

from __future__ import annotations

import functools

import torch

from ..backends import torch as adapter
from ._ops import OPERATIONS


def run(group: str, operation: str, *tensors):
    """The op `operation` of `group` on tensors (any leading shapes that broadcast)."""
    return adapter.function(OPERATIONS[group][operation])(*tensors)


def once_differentiable(backward):
    """A backward pass that runs without a graph and, where a graph is being built
    (`create_graph=True`), returns gradients whose own derivative raises."""

    @functools.wraps(backward)
    def wrapped(ctx, *grads):
        with torch.no_grad():
            results = backward(ctx, *grads)
        if not torch.is_grad_enabled():
            return results
        tensors = [r for r in results if isinstance(r, torch.Tensor)]
        error = torch._C._functions.DelayedError(
            b"xform.lietorch differentiates once, as LieTorch: for second derivatives use "
            b"xform.SO3 / SE3 / Sim3",
            len(tensors),
        )
        flagged = error(*[t.detach().requires_grad_(True) for t in tensors])
        flagged = iter(flagged if isinstance(flagged, tuple) else (flagged,))
        out = [next(flagged) if isinstance(r, torch.Tensor) else r for r in results]
        return tuple(out)

    return wrapped


def _summed(gradient: torch.Tensor | None, like: torch.Tensor):
    """A gradient of the broadcast shape, summed to the shape of the argument `like`."""
    if gradient is None or gradient.shape == like.shape:
        return gradient
    return gradient.sum_to_size(like.shape)


class Unary(torch.autograd.Function):
    """exp, log and inv: one argument."""

    @staticmethod
    def forward(ctx, group: str, operation: str, x: torch.Tensor):
        ctx.group, ctx.operation = group, operation
        ctx.save_for_backward(x)
        return run(group, operation, x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return None, None, run(ctx.group, f"{ctx.operation}_backward", x, grad)


class Binary(torch.autograd.Function):
    """mul, adj, adjT, act and act4: a group element and a second argument."""

    @staticmethod
    def forward(ctx, group: str, operation: str, x: torch.Tensor, y: torch.Tensor):
        ctx.group, ctx.operation = group, operation
        ctx.save_for_backward(x, y)
        return run(group, operation, x, y)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        if ctx.operation == "mul":  # dX = dZ, dY = dZ Ad(X): y is not read
            dx, dy = run(ctx.group, "mul_backward", x, grad)
        else:
            dx, dy = run(ctx.group, f"{ctx.operation}_backward", x, y, grad)
        return None, None, _summed(dx, x), _summed(dy, y)


class Jinv(torch.autograd.Function):
    """J_l^-1(log X) a; differentiable in a (LieTorch's is in neither argument)."""

    @staticmethod
    def forward(ctx, group: str, x: torch.Tensor, a: torch.Tensor):
        ctx.group = group
        ctx.save_for_backward(x, a)
        return run(group, "jinv", x, a)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, a = ctx.saved_tensors
        if ctx.needs_input_grad[1]:
            raise NotImplementedError(
                "xform.lietorch: Jinv is differentiable in its tangent argument only, not "
                "in the group element (LieTorch's Jinv has no backward at all)"
            )
        padded = run(ctx.group, "log_backward", x, grad)  # J^-T g, padded to the data
        return None, None, _summed(padded[..., : a.shape[-1]], a)


def _relabelling(name: str, backward_op: str, doc: str) -> type[torch.autograd.Function]:
    """An identity on the data whose backward pass is `backward_op`: the data's gradient
    read as another kind of gradient."""

    class Relabelling(torch.autograd.Function):
        @staticmethod
        def forward(ctx, group: str, x: torch.Tensor):
            ctx.group = group
            ctx.save_for_backward(x)
            return x.view_as(x)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return None, run(ctx.group, backward_op, x, grad)

    Relabelling.__name__ = Relabelling.__qualname__ = name
    Relabelling.__doc__ = doc
    return Relabelling


ToVec = _relabelling(
    "ToVec",
    "to_vec_backward",
    "The data as a vector: its gradient becomes the element's tangent gradient.",
)
FromVec = _relabelling(
    "FromVec",
    "from_vec_backward",
    "A vector as an element's data: a tangent gradient becomes a data gradient.",
)
