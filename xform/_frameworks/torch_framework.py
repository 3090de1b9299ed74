"""PyTorch, through the adapter `xform.backends.torch`, imported on first use."""

from __future__ import annotations

import sys

import numpy as np
import warp as wp

from .base import Framework, kind


class Torch(Framework):
    name, functions_module, described = "torch", "xform.backends.torch", "a torch.Tensor"

    def device(self, x) -> str:
        return str(x.device)

    def placement(self, x):
        return x.device

    def owns(self, x) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(x, torch.Tensor)

    def namespace(self):
        import torch

        return torch

    def concrete(self, x) -> bool:
        import torch

        return not (
            torch.compiler.is_compiling()
            or x.is_meta  # not `device.type`: ~0.9 us a call
            or torch._C._functorch.is_functorch_wrapped_tensor(x)
        )

    def untraced_now(self) -> bool:
        """Whether no forward-mode level and no torch.func transform is open, so that no
        tensor can carry a tangent or a transform's wrapping. Both levels are private torch
        state: where they are missing, False."""
        import torch

        forward_level = getattr(torch.autograd.forward_ad, "_current_level", 0)
        transform_level = getattr(torch._C._functorch, "maybe_current_level", lambda: 0)()
        return forward_level < 0 and transform_level is None

    def constant_now(self, x) -> bool:
        return self.untraced_now() and not x.requires_grad and self.concrete(x)

    def zeros(self, shape, dtype, like=None):
        import torch

        device = None if like is None else like.device
        return torch.zeros(shape, dtype=getattr(torch, dtype), device=device)

    def constant(self, value, like, dtype=None):
        import torch

        dtype = like.dtype if dtype is None else getattr(torch, dtype)
        if isinstance(value, np.ndarray):  # copied by NumPy: a third of torch.tensor's cost
            return torch.as_tensor(np.array(value, order="C"), dtype=dtype, device=like.device)
        return torch.tensor(value, dtype=dtype, device=like.device)

    def broadcast_to(self, x, shape):
        return x.expand(shape)

    def concatenate(self, arrays, axis=-1):
        import torch

        return torch.cat(arrays, axis)

    source_argument, source_described = "generator", "a torch.Generator"

    def is_source(self, x) -> bool:
        import torch

        return isinstance(x, torch.Generator)

    def seeded_source(self, seed, like=None):
        import torch

        if seed is None:
            return None  # the global generator
        generator = torch.Generator(device=like.device if like is not None else "cpu")
        return generator.manual_seed(seed)

    def _placement(self, dtype, source, like) -> dict:
        import torch

        device = like.device if like is not None else source.device if source is not None else None
        return {"dtype": None if dtype is None else getattr(torch, dtype), "device": device}

    def normal(self, shape, dtype, source, like=None):
        import torch

        return torch.randn(shape, generator=source, **self._placement(dtype, source, like))

    def uniform(self, shape, dtype, source, low, high, like=None):
        import torch

        unit = torch.rand(shape, generator=source, **self._placement(dtype, source, like))
        return unit * (high - low) + low

    def convert(self, x):
        import torch

        name = kind(x)
        if name == "numpy":
            return torch.from_numpy(x)
        if name == "warp":
            return wp.to_torch(x)
        if name == "jax":
            return torch.from_dlpack(x)
        return x

    differentiates = True

    def ready(self, x):
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return x

    def value_and_grad(self, f, has_aux):
        import torch

        def both(x):
            gradient, value = torch.func.grad_and_value(f, has_aux=has_aux)(x)
            return value, gradient

        return both

    def register_pytree(self, cls, flatten, unflatten):
        import torch.utils._pytree as pytree

        pytree.register_pytree_node(
            cls,
            lambda x: (flatten(x), None),
            lambda leaves, _: unflatten(leaves),
            serialized_type_name=f"xform.{cls.__name__}",
        )

    def pytree_children(self, x):
        import torch.utils._pytree as pytree

        if type(x) not in pytree.SUPPORTED_NODES:
            return None
        return pytree.tree_flatten(x, is_leaf=lambda y: y is not x)

    def indices(self, values, like=None):
        import torch

        tensor = torch.from_numpy(np.array(values, dtype=np.int64))  # a copy: writable
        return tensor if like is None else tensor.to(like.device, non_blocking=True)

    def segment_sum(self, values, segments, count):
        import torch

        # Along the first axis of a 2-d array: the same sums, ~3x faster on the CPU than
        # along the second of (B, K, ...) (benchmarks/NOTES.md 48); a view for B = 1.
        batch, k = values.shape[:2]
        flat = values.movedim(1, 0).reshape(k, -1)
        out = torch.zeros((count, flat.shape[1]), dtype=values.dtype, device=values.device)
        out.index_add_(0, segments, flat)
        return out.reshape(count, batch, *values.shape[2:]).movedim(0, 1)

    def cholesky_solve(self, a, b):
        import torch

        factor, info = torch.linalg.cholesky_ex(a)
        x = torch.cholesky_solve(b[..., None], factor)[..., 0]
        return torch.where((info == 0)[..., None], x, torch.full_like(x, float("nan")))

    def largest(self, x, axis=-1, keepdims=False):
        return x.amax(axis, keepdim=keepdims)

    def pushforward(self, f, primals, directions):
        import torch

        return torch.func.vmap(lambda *t: torch.func.jvp(f, primals, t)[1])(*directions)

    def rows_by_reverse_mode(self, f, primals):
        # Eager autograd: torch.func's vmap of jvp costs ~1.6 ms an op call here, a backward
        # pass a tenth of that (benchmarks/NOTES.md 59). Under a transform, torch.func's.
        import torch

        # inside a torch.func transform or torch.compile, autograd's own passes cannot run
        if not self.untraced_now() or torch.compiler.is_compiling():
            return None
        with torch.enable_grad():
            leaves = [p.detach().requires_grad_(True) for p in primals]
            value = f(*leaves)
            count = value.shape[-1]
            if count == 0 or not value.requires_grad:  # no components; no moving variable read
                width = sum(x.shape[-1] for x in leaves)
                return value.detach(), value.new_zeros((*value.shape, width))
            ones = torch.ones_like(value[..., 0])
            rows = []
            for k in range(count):
                grads = torch.autograd.grad(
                    value[..., k], leaves, ones, retain_graph=k + 1 < count, allow_unused=True
                )
                rows.append(torch.cat(
                    [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)], -1
                ))  # fmt: skip
        return value.detach(), torch.stack(rows, -2)

    def gradient(self, f, argnums):
        import torch

        return torch.func.grad(f, argnums=argnums)

    def pullback(self, f, primal, cotangent):
        import torch

        _, pull = torch.func.vjp(f, primal)
        return pull(cotangent)[0]

    def custom_vjp(self, forward, backward, differentiable):
        import torch

        class Implicit(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *leaves):
                with torch.no_grad():
                    outputs = tuple(o.detach() for o in forward(*(a.detach() for a in leaves)))
                ctx.mark_non_differentiable(*outputs[differentiable:])
                ctx.save_for_backward(*leaves, *outputs)
                ctx.count = len(leaves)
                return outputs

            @staticmethod
            def backward(ctx, *cotangents):
                saved = ctx.saved_tensors
                leaves, outputs = saved[: ctx.count], saved[ctx.count :]
                cotangents = [c if c is not None else torch.zeros_like(o)
                              for c, o in zip(cotangents, outputs)]  # fmt: skip
                with torch.enable_grad():
                    grads = backward([a.detach() for a in leaves], list(outputs),
                                     cotangents[:differentiable])  # fmt: skip
                return tuple(g if a.requires_grad else None for g, a in zip(grads, leaves))

        return Implicit.apply

    def to_device(self, x, device):
        return x.to(device)

    def put_rows(self, whole, rows, part):
        return whole.index_copy(0, rows, part)
