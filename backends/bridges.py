"""Bridges between PyTorch and JAX: run a function of one framework on the other's
arrays, differentiably. Both are zero-copy at the boundary (DLPack views, see
`xform._interop`) and take and return pytrees (tuples, lists, dicts) of arrays.

- `jax_to_torch(fn)`: PyTorch tensors in and out; `fn` runs eagerly on JAX views of the
  tensors (wrap it in `jax.jit` yourself for speed); PyTorch autograd differentiates
  through it with `jax.vjp`. Double backward is not supported.
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

from .jax import call_ffi, make_ffi_callable

__all__ = ["jax_to_torch", "torch_to_jax"]


# --- JAX inside PyTorch -------------------------------------------------------------------


class _JaxCall(torch.autograd.Function):
    """apply(fn, trees, *tensors): `trees["in"]` holds the argument pytree's leaves (the
    tensors among them replaced by `tensors`); the output pytree goes to `trees["out"]`."""

    @staticmethod
    def forward(ctx, fn, trees, *tensors):
        leaves, treedef, slots = trees["in"]

        def call(*arrays):
            values = list(leaves)
            for slot, x in zip(slots, arrays):
                values[slot] = x
            return fn(*jax.tree_util.tree_unflatten(treedef, values))

        arrays = [to_jax(t.detach()) for t in tensors]
        if any(ctx.needs_input_grad[2:]):
            out, ctx.pullback = jax.vjp(call, *arrays)
        else:
            out = call(*arrays)
        out_leaves, ctx.out_tree = jax.tree_util.tree_flatten(out)
        trees["out"] = ctx.out_tree
        return tuple(to_torch(x) for x in out_leaves)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        cotangents = [to_jax(g.contiguous()) for g in grads]
        grads_in = ctx.pullback(jax.tree_util.tree_unflatten(ctx.out_tree, cotangents))
        return (None, None, *[to_torch(g) for g in grads_in])


def jax_to_torch(fn):
    """A function of PyTorch tensors (pytrees of them) that runs the JAX function `fn`."""

    @functools.wraps(fn)
    def wrapped(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        trees = {"in": (leaves, treedef, slots)}
        outputs = _JaxCall.apply(fn, trees, *[leaves[i] for i in slots])
        return jax.tree_util.tree_unflatten(trees["out"], list(outputs))

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
