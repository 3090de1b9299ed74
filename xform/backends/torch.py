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
again, through the op's products made ops of their own (`xform._second_order`); where an op
has no closed-form derivatives, and for third derivatives, they raise
`xform.HigherDerivativeError` (never a silently wrong second derivative).

Tensors are read and written in place through DLPack; only non-contiguous inputs are
copied. On CUDA every launch goes to `torch.cuda.current_stream()`, with no host
synchronisation, so calls with preallocated buffers can be captured in a CUDA graph.
"""

from __future__ import annotations

import inspect

import torch

from xform import _frameworks
from xform._dispatch import ArrayArguments, numbers_as_arrays
from xform._functions import family_function
from xform._op import Op
from xform._random import haar_quaternions, sample_shape
from xform._registry import on_define
from xform.ops import COMPOSITES, OPS

from ._torch_autograd import _unpack, op_function
from ._torch_compile import _traced_call, register_custom_ops
from ._torch_kernels import _check_buffers

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

    def functional(*args, **kwargs):  # the Function's forward refuses torch.jit.trace
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


def _untracked(tensors) -> bool:
    """Whether no autograd, forward-mode AD or torch.func transform can see a call on
    these tensors (None allowed), so that it may skip `Function.apply`, about 100 µs of a
    small call (`untraced_now` reads the forward-mode and torch.func levels)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return False
    return _frameworks.TORCH.untraced_now()


ARRAYS = ArrayArguments(
    "xform.backends.torch", "a torch.Tensor", _frameworks.TORCH.owns
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
    """The PyTorch function of `op`, built-in or made by `xform.define_op` (made when the
    op is defined, or when this module is imported; its custom ops when Dynamo loads)."""
    return op.adapters["torch"]


def _adopt(op: Op) -> None:
    register_custom_ops(op)
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
    like = None if device is None else torch.empty(0, device=device)
    dtype = None if dtype is None else _frameworks.float_name(dtype)
    return haar_quaternions(_frameworks.TORCH, dims, dtype, generator, like)


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
