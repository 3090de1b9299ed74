"""Bridges between PyTorch and JAX: run a function of one framework on the other's
arrays, differentiably. Both are zero-copy at the boundary (DLPack views, see
`xform._interop`) and take and return pytrees (tuples, lists, dicts) of arrays.

- `jax_to_torch(fn)`: PyTorch tensors in and out; `fn` runs eagerly on JAX views of the
  tensors (wrap it in `jax.jit` yourself for speed). PyTorch differentiates through it
  with JAX's own transforms: backward and `torch.func.grad` / `vjp` / `jacrev` with
  `jax.vjp` (a plain backward through the pullback its forward kept), `torch.func.jvp`,
  `jacfwd` and `torch.autograd.forward_ad` with `jax.jvp`, and `torch.func.vmap` (of any
  of these) with `jax.vmap`. Second derivatives (double backward, `hessian`) raise.
- `torch_to_jax(fn)`: JAX arrays in and out; works under `jax.jit`, where `fn` runs in an
  XLA FFI call on PyTorch views of XLA's buffers (its results are copied once into XLA's
  output buffers); `jax.grad` differentiates through it with `torch.autograd.grad`. Output
  shapes are found by running `fn` on meta tensors, once per input signature (so `fn`'s
  output shapes must depend only on its inputs' shapes and dtypes). Under `jax.vmap` it
  runs once per element. Inputs that are not floating point get zero gradients.
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax
import numpy as np
import torch
import warp as wp

from xform._interop import to_jax, to_torch

from ._jax_ffi import call_ffi, make_ffi_callable

__all__ = ["jax_to_torch", "torch_to_jax"]


# --- JAX inside PyTorch -------------------------------------------------------------------


class _JaxFunction:
    """A JAX function of arrays returning a list of arrays, as the Functions below take
    it (an object, not a pytree: torch.func rebuilds the containers among a Function's
    arguments), with its derivatives by JAX. `pullback` is where the forward leaves
    `jax.vjp`'s pullback when asked to (`keep_pullback`)."""

    def __init__(self, function, keep_pullback: bool = False):
        self.function, self.keep_pullback, self.pullback = function, keep_pullback, None

    def __call__(self, *arrays) -> list:
        return self.function(*arrays)

    def run(self, *arrays) -> list:
        """The results, keeping the pullback where asked to."""
        if self.keep_pullback:
            results, self.pullback = jax.vjp(self.function, *arrays)
            return results
        return self.function(*arrays)

    def tangents(self, n: int, *arrays) -> list:
        """The results' tangents (`jax.jvp`): n primals, then their tangents (None: zero)."""
        primals, tangents = arrays[:n], arrays[n:]
        tangents = jax.jvp(self.function, primals, tuple(map(_tangent, primals, tangents)))[1]
        return list(map(_no_float0, tangents))

    def gradients(self, pullback, n: int, *arrays) -> list:
        """The primals' gradients: n primals, then the results' cotangents; through
        `pullback`, or else a `jax.vjp` of its own."""
        if pullback is None:
            _, pullback = jax.vjp(self.function, *arrays[:n])
        return list(map(_no_float0, pullback(list(arrays[n:]))))

    def mapped(self, in_dims) -> _JaxFunction:
        """The function over a `torch.func.vmap` batch: `jax.vmap` of it, results mapped at 0."""
        return _JaxFunction(jax.vmap(self.function, in_axes=tuple(in_dims), out_axes=0))


def _tangent(primal, tangent):
    """JAX's tangent for a primal: zeros for a missing one (float0 for integers)."""
    if tangent is not None:
        return tangent
    if jax.numpy.issubdtype(primal.dtype, jax.numpy.inexact):
        return jax.numpy.zeros_like(primal)
    return np.zeros(primal.shape, jax.dtypes.float0)


def _no_float0(derivative):
    """An integer's derivative (JAX's float0, which no framework can hold) as an empty
    float array; the gradient of an integer tensor is None in PyTorch."""
    if derivative.dtype == jax.dtypes.float0:
        return jax.numpy.zeros((0,), jax.numpy.float32)
    return derivative


def _arrays(tensors) -> list:
    return [None if t is None else to_jax(t.detach()) for t in tensors]


def _tensors(arrays) -> tuple[torch.Tensor, ...]:
    return tuple(to_torch(x) for x in arrays)


# Dynamo can trace neither JAX nor the DLPack exchange: under torch.compile every crossing
# runs eagerly between the compiled graphs (also a backward or a tangent that the autograd
# engine runs from compiled code).
@torch.compiler.disable
def _through_jax(function, tensors) -> tuple[torch.Tensor, ...]:
    """`function` of JAX arrays on JAX views of `tensors`, its results as tensors."""
    return _tensors(function(*_arrays(tensors)))


# Whether a torch.func transform is active (private torch state: where it is missing,
# assume one is, which only costs a second forward in the backward).
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)

_SECOND_DERIVATIVE = (
    "jax_to_torch: {} over a derivative (double backward, hessian, jacfwd of jacrev) is not "
    "supported; the first derivative is exact"
)


class _JaxDerivative(torch.autograd.Function):
    """apply(derivative, *tensors): a first derivative by JAX (`_JaxFunction.tangents` or
    `.gradients`, bound), as a Function so that torch.func.vmap maps it (`jax.vmap`);
    differentiating it again raises."""

    @staticmethod
    def forward(derivative, *tensors):
        return _through_jax(derivative, tensors)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(_SECOND_DERIVATIVE.format("reverse mode"))

    @staticmethod
    def jvp(ctx, *tangents):
        raise RuntimeError(_SECOND_DERIVATIVE.format("forward mode"))

    @staticmethod
    def vmap(info, in_dims, derivative, *tensors):
        # Applied again, mapped: the transforms around this one still see it.
        mapped = jax.vmap(derivative, in_axes=tuple(in_dims[1:]), out_axes=0)
        results = _JaxDerivative.apply(mapped, *tensors)
        return results, (0,) * len(results)


class _JaxCall(torch.autograd.Function):
    """apply(function, *tensors) -> the results of a `_JaxFunction` on the tensors:
    reverse mode by `jax.vjp` (through the forward's pullback when it kept one, so that a
    plain backward runs no second forward), forward mode by `jax.jvp`, torch.func.vmap by
    `jax.vmap` (the mapped function applied again, so that the transforms around it still
    see it)."""

    @staticmethod
    def forward(function, *tensors):
        return _through_jax(function.run, tensors)

    @staticmethod
    def setup_context(ctx, inputs, output):
        function, *tensors = inputs
        ctx.function, ctx.pullback, function.pullback = function, function.pullback, None
        ctx.differentiable = [x.is_floating_point() for x in output]
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)

    @staticmethod
    def backward(ctx, *grads):
        tensors = ctx.saved_tensors
        gradients = functools.partial(ctx.function.gradients, ctx.pullback, len(tensors))
        if torch.is_grad_enabled() or _functorch_active():
            grads_in = _JaxDerivative.apply(gradients, *tensors, *grads)
        else:  # nothing can map or differentiate these gradients: no Function around them
            grads_in = _through_jax(gradients, (*tensors, *grads))
        grads_in = [g if x.is_floating_point() else None for g, x in zip(grads_in, tensors)]
        return (None, *grads_in)

    @staticmethod
    def jvp(ctx, function_tangent, *tangents):
        tensors = ctx.saved_tensors
        derivative = functools.partial(ctx.function.tangents, len(tensors))
        tangents_out = _JaxDerivative.apply(derivative, *tensors, *tangents)
        return tuple(t if d else None for t, d in zip(tangents_out, ctx.differentiable))

    @staticmethod
    def vmap(info, in_dims, function, *tensors):
        results = _JaxCall.apply(function.mapped(in_dims[1:]), *tensors)
        return results, (0,) * len(results)


def jax_to_torch(fn):
    """A function of PyTorch tensors (pytrees of them) that runs the JAX function `fn`.
    Under `torch.compile` it runs eagerly between the compiled graphs (a graph break), so
    that compiled code calling it, differentiated in either mode, gives eager mode's
    results."""

    @torch.compiler.disable
    @functools.wraps(fn)
    def wrapped(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        tensors = [leaves[i] for i in slots]
        out_tree = []

        def leaf_function(*arrays):
            values = list(leaves)
            for slot, x in zip(slots, arrays):
                values[slot] = x
            out_leaves, tree = jax.tree_util.tree_flatten(
                fn(*jax.tree_util.tree_unflatten(treedef, values))
            )
            out_tree[:] = [tree]
            return out_leaves

        # A plain backward uses the forward's pullback. Under torch.func the backward may
        # meet a mapped cotangent, or another level's tensors: it runs its own jax.vjp.
        keep_pullback = (
            torch.is_grad_enabled()
            and any(t.requires_grad for t in tensors)
            and not _functorch_active()
        )
        outputs = _JaxCall.apply(_JaxFunction(leaf_function, keep_pullback), *tensors)
        return jax.tree_util.tree_unflatten(out_tree[0], list(outputs))

    return wrapped


# --- PyTorch inside JAX -------------------------------------------------------------------


def _warp_scalar(dtype) -> type:
    return wp.dtype_from_numpy(np.dtype(dtype))


def _as_torch(array: wp.array, shape) -> torch.Tensor:
    """A tensor view of an FFI buffer, in its real shape."""
    return wp.to_torch(array).reshape(shape)


def _ffi_shape(shape) -> tuple[int, ...]:
    """Every value crosses the FFI flat, one dimension (a 0-d one as (1,)): Warp's arrays
    have at most four, the values any number."""
    return (math.prod(shape),)


def _on_ffi_stream(array: wp.array):
    """Run PyTorch work on the stream XLA gave the FFI call."""
    if not array.device.is_cuda:
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.ExternalStream(wp.get_stream(array.device).cuda_stream))


def _torch_runner(fn, treedef, in_shapes, out_shapes, backward: bool):
    """The FFI callback: inputs (and cotangents, for the backward), then outputs to fill."""
    n = len(in_shapes)

    def run(*arrays):
        try:
            compute(*arrays)
        except KeyboardInterrupt as exc:  # Warp's FFI wrapper turns Exceptions into XLA errors
            raise RuntimeError("torch_to_jax: interrupted") from exc

    def compute(*arrays):
        with _on_ffi_stream(arrays[0]):
            inputs = [_as_torch(a, s) for a, s in zip(arrays[:n], in_shapes)]
            if not backward:
                with torch.no_grad():
                    results = jax.tree_util.tree_leaves(
                        fn(*jax.tree_util.tree_unflatten(treedef, inputs))
                    )
                for out, result in zip(arrays[n:], results):
                    wp.to_torch(out).copy_(result.reshape(out.shape))
                return
            cotangents = [
                _as_torch(a, s) for a, s in zip(arrays[n : n + len(out_shapes)], out_shapes)
            ]
            grads_out = arrays[n + len(out_shapes) :]
            differentiable = [x.is_floating_point() for x in inputs]
            inputs = [x.detach().requires_grad_(d) for x, d in zip(inputs, differentiable)]
            with torch.enable_grad():
                results = jax.tree_util.tree_leaves(
                    fn(*jax.tree_util.tree_unflatten(treedef, inputs))
                )
                wrt = [x for x, d in zip(inputs, differentiable) if d]
                grads = iter(
                    torch.autograd.grad(results, wrt, cotangents, allow_unused=True) if wrt else []
                )
            for out, d in zip(grads_out, differentiable):
                grad = next(grads) if d else None
                if grad is None:
                    wp.to_torch(out).zero_()
                else:
                    wp.to_torch(out).copy_(grad.reshape(out.shape))

    return run


def torch_to_jax(fn):
    """A function of JAX arrays (pytrees of them) that runs the PyTorch function `fn`."""

    @functools.wraps(fn)
    def wrapped(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        in_specs = tuple((tuple(np.shape(x)), np.dtype(x.dtype)) for x in leaves)
        out_tree, out_specs = _output_specs(fn, treedef, in_specs)
        call = _differentiable_call(fn, treedef, in_specs, out_specs)
        return jax.tree_util.tree_unflatten(out_tree, call(*leaves))

    return wrapped


@functools.lru_cache(maxsize=256)
def _output_specs(fn, treedef, in_specs):
    """The output pytree and the (shape, dtype) of its leaves, from one run of `fn` on meta
    tensors per input signature."""
    metas = [torch.empty(s, dtype=_torch_dtype(d), device="meta") for s, d in in_specs]
    out_leaves, out_tree = jax.tree_util.tree_flatten(
        fn(*jax.tree_util.tree_unflatten(treedef, metas))
    )
    return out_tree, tuple((tuple(o.shape), _numpy_dtype(o.dtype)) for o in out_leaves)


def _torch_dtype(dtype) -> torch.dtype:
    return torch.from_numpy(np.empty((), dtype=np.dtype(dtype))).dtype


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


# Per user function and signature: bounded, as each entry holds the function (and what it
# captures) and two FFI targets.
@functools.lru_cache(maxsize=256)
def _differentiable_call(fn, treedef, in_specs, out_specs):
    """A `jax.custom_vjp` running `fn` forward, and its PyTorch VJP backward, via FFI."""
    in_shapes = [s for s, _ in in_specs]
    out_shapes = [s for s, _ in out_specs]
    name = f"xform_torch_{getattr(fn, '__name__', 'fn')}"

    def signature(specs):
        return tuple((_warp_scalar(dtype), len(_ffi_shape(shape))) for shape, dtype in specs)

    forward = make_ffi_callable(
        _torch_runner(fn, treedef, in_shapes, out_shapes, backward=False),
        name,
        signature(in_specs) + signature(out_specs),
        len(out_specs),
        vmap_method="sequential",
    )
    grad_specs = tuple(
        (s, d if np.issubdtype(d, np.floating) else np.dtype(np.float32)) for s, d in in_specs
    )
    backward = make_ffi_callable(
        _torch_runner(fn, treedef, in_shapes, out_shapes, backward=True),
        name + "_vjp",
        signature(in_specs) + signature(out_specs) + signature(grad_specs),
        len(in_specs),
        vmap_method="sequential",
    )

    def flat(xs):
        return [x.reshape(_ffi_shape(x.shape)) for x in xs]

    @jax.custom_vjp
    def call(*leaves):
        outs = call_ffi(forward, flat(leaves), [_ffi_shape(s) for s in out_shapes])
        return [o.reshape(s) for o, s in zip(outs, out_shapes)]

    def call_forward(*leaves):
        return call(*leaves), leaves

    def call_backward(leaves, cotangents):
        grads = call_ffi(
            backward, flat(leaves) + flat(cotangents), [_ffi_shape(s) for s, _ in in_specs]
        )
        return tuple(
            g.reshape(s) if np.issubdtype(d, np.floating) else np.zeros(s, jax.dtypes.float0)
            for g, (s, d) in zip(grads, in_specs)
        )

    call.defvjp(call_forward, call_backward)
    # Jitted: Warp gives every FFI call a new identity, so an eager call would compile anew.
    return jax.jit(call)
