"""The launch layer: validate operands, then run an op's kernel (or its adjoint).

It takes any buffer that Warp can view without copying: NumPy arrays, Warp arrays,
and any DLPack-capable array (PyTorch, JAX, CuPy, ...). Everything is checked before
any kernel runs. Contiguous operands are read where they lie; non-contiguous ones are
copied once, on their own device. Results are written into buffers that the caller's
`allocate` provides, so each framework gets its own array type back.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import warp as wp

from . import _kernels
from ._layout import LaunchPlan, plan_launch
from ._optable import OPS, OpSpec

FLOAT_TYPES = (wp.float32, wp.float64)

# allocate(shape, scalar_type, device) -> (the caller's array, a Warp view of it)
Allocator = Callable[[tuple[int, ...], type, wp.Device], tuple[Any, wp.array]]


@dataclass(frozen=True)
class Operands:
    """An op's operands, validated: Warp arrays (contiguous, one device, one float type)
    and the launch plan for their shapes."""

    op: OpSpec
    arrays: tuple[wp.array, ...]
    shapes: tuple[tuple[int, ...], ...]
    scalar: type
    device: wp.Device
    plan: LaunchPlan

    def result_shape(self, index: int) -> tuple[int, ...]:
        return self.plan.batch_shape + self.op.results[index].element


def _scalar_name(scalar) -> str:
    return getattr(scalar, "__name__", str(scalar))


def as_warp_array(op: OpSpec, name: str, x: Any) -> wp.array:
    """A Warp array sharing `x`'s memory (NumPy, Warp or any DLPack-capable array)."""
    if isinstance(x, wp.array):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(
                f"{op.name}: argument '{name}' has dtype {x.dtype}; expected float32 or float64"
            )
        return wp.array(x, dtype=wp.dtype_from_numpy(x.dtype), copy=False, device="cpu")
    if hasattr(x, "__dlpack__"):
        try:
            return wp.from_dlpack(x)
        except Exception as exc:  # an unsupported dtype is the usual cause
            raise TypeError(
                f"{op.name}: argument '{name}' ({type(x).__name__}) could not be viewed "
                f"through DLPack: {exc}"
            ) from exc
    raise TypeError(
        f"{op.name}: argument '{name}' must be an array (NumPy, Warp, or DLPack-capable), "
        f"got {type(x).__name__}"
    )


def _logical_shape(x: Any, a: wp.array) -> tuple[int, ...]:
    """The shape xform sees: the caller's own (a 0-d array stays 0-d, which Warp cannot
    express), and for a Warp array of vec3 with shape (N,), (N, 3)."""
    if not isinstance(x, wp.array) and hasattr(x, "shape"):
        return tuple(x.shape)
    return tuple(a.shape) + tuple(getattr(a.dtype, "_shape_", ()))


def _scalar_type(a: wp.array):
    return getattr(a.dtype, "_wp_scalar_type_", a.dtype)


def check_dtypes(op: OpSpec, dtypes: Sequence[str]) -> str:
    """The one float dtype ("float32" or "float64") of all operands, given their names;
    TypeError naming the first operand that breaks the rule."""
    for operand, dtype in zip(op.operands, dtypes):
        if dtype not in ("float32", "float64"):
            raise TypeError(
                f"{op.name}: argument '{operand.name}' has dtype {dtype}; "
                "expected float32 or float64"
            )
        if dtype != dtypes[0]:
            raise TypeError(
                f"{op.name}: argument '{operand.name}' has dtype {dtype} but "
                f"'{op.operands[0].name}' has {dtypes[0]}; all arguments must share one float dtype"
            )
    return dtypes[0]


def prepare(op: OpSpec, args: Sequence[Any], prefix: int = 0) -> Operands:
    """Validate `args` against `op` (dtype, shape, device) and make them contiguous.
    `prefix` leading dimensions of every argument come from a vectorising transform."""
    if len(args) != len(op.operands):
        raise TypeError(f"{op.name}: takes {len(op.operands)} arrays, got {len(args)}")
    arrays = [as_warp_array(op, o.name, x) for o, x in zip(op.operands, args)]
    first = op.operands[0].name
    scalar = _scalar_type(arrays[0])
    device = arrays[0].device
    check_dtypes(op, [_scalar_name(_scalar_type(a)) for a in arrays])
    shapes = tuple(_logical_shape(x, a) for x, a in zip(args, arrays))
    plan = plan_launch(op, list(shapes), prefix)
    for operand, a in zip(op.operands, arrays):
        if a.device != device:
            raise ValueError(
                f"{op.name}: argument '{operand.name}' is on {a.device} but '{first}' is on "
                f"{device}; all arguments must be on one device"
            )
    arrays = [a if a.is_contiguous else a.contiguous() for a in arrays]
    return Operands(op, tuple(arrays), shapes, scalar, device, plan)


# --- Warp views and kernel overloads ----------------------------------------------------


@functools.cache
def element_type(element: tuple[int, ...], scalar: type):
    if len(element) == 1:
        return wp.types.vector(element[0], scalar)
    return wp.types.matrix(element, scalar)


def _array(element: tuple[int, ...], scalar: type):
    return wp.array(dtype=element_type(element, scalar))


@functools.cache
def _overload(op: OpSpec, scalar: type, tangent: bool = False) -> wp.Kernel:
    """The kernel (or tangent kernel) of `op` for one scalar type. Parameters come in
    order: the Grid; each operand and its strides; each operand's tangent (tangent
    kernels only); each result."""
    types: list[Any] = [_kernels.Grid]
    for operand in op.operands:
        types += [_array(operand.element, scalar), wp.vec4i]
    if tangent:
        types += [_array(operand.element, scalar) for operand in op.operands]
    types += [_array(result.element, scalar) for result in op.results]
    kernel = op.tangent_kernel if tangent else op.kernel
    return wp.overload(kernel, {arg.label: t for arg, t in zip(kernel.adj.args, types)})


# Once, at import: DLPack views need the runtime, and no call should pay for starting it.
wp.init()

# Registering every overload up front fixes the kernel module's contents, so Warp compiles
# it once (and caches it) instead of recompiling each time a new op/dtype pair appears.
for _op in OPS.values():
    for _scalar in FLOAT_TYPES:
        _overload(_op, _scalar)
        if _op.tangent_kernel is not None:
            _overload(_op, _scalar, tangent=True)


def element_view(a: wp.array, element: tuple[int, ...], offset: int = 0) -> wp.array:
    """A 1-D view of a contiguous array as elements (vec3, quaternion as vec4, mat33...),
    starting `offset` elements in."""
    dtype = element_type(element, _scalar_type(a))
    count = a.size // math.prod(element) - offset
    return wp.array(
        ptr=a.ptr + offset * wp.types.type_size_in_bytes(dtype),
        dtype=dtype,
        shape=(count,),
        device=a.device,
        copy=False,
    )


def _launch_tiles(plan: LaunchPlan):
    """Launches covering `plan.grid`: (Grid, per-operand element offset, result offset,
    launch size, per-operand vec4i strides). Grids deeper than MAX_GRID_DIMS (rare
    interleaved broadcasts) loop over their outer dimensions on the host."""
    depth = _kernels.MAX_GRID_DIMS
    inner, outer = plan.grid[-depth:], plan.grid[: max(0, len(plan.grid) - depth)]
    grid = _kernels.Grid()
    grid.ndim = len(inner)
    grid.shape = wp.vec4i(*(list(reversed(inner)) + [1] * (depth - len(inner))))
    inner_strides = [
        wp.vec4i(*(list(reversed(s[len(outer) :])) + [0] * (depth - len(inner))))
        for s in plan.strides
    ]
    count = math.prod(inner)
    for flat, index in enumerate(itertools.product(*map(range, outer))):
        offsets = [sum(i * s for i, s in zip(index, strides)) for strides in plan.strides]
        yield grid, offsets, flat * count, count, inner_strides


def _kernel_inputs(operands: Operands, offsets, strides) -> list:
    inputs = []
    for operand, a, offset, s in zip(operands.op.operands, operands.arrays, offsets, strides):
        inputs += [element_view(a, operand.element, offset), s]
    return inputs


def forward(operands: Operands, allocate: Allocator) -> list[Any]:
    """Run the op; return its results as the arrays that `allocate` made."""
    op = operands.op
    results = [
        allocate(operands.result_shape(k), operands.scalar, operands.device)
        for k in range(len(op.results))
    ]
    if operands.plan.size == 0:
        return [native for native, _ in results]
    kernel = _overload(op, operands.scalar)
    for grid, offsets, result_offset, count, strides in _launch_tiles(operands.plan):
        outputs = [
            element_view(view, r.element, result_offset)
            for r, (_, view) in zip(op.results, results)
        ]
        wp.launch(
            kernel,
            dim=count,
            inputs=[grid, *_kernel_inputs(operands, offsets, strides)],
            outputs=outputs,
            device=operands.device,
        )
    return [native for native, _ in results]


def vjp(
    operands: Operands,
    cotangents: Sequence[Any | None],
    allocate_zeros: Allocator,
    needed: Sequence[bool] | None = None,
) -> list[Any | None]:
    """Reverse-mode product: for each operand, the sum over the broadcast batch of the
    cotangents pulled back through the op (None where not differentiable or not needed).

    `cotangents` has one entry per result (None means zero); `allocate_zeros` returns
    zero-filled arrays, into which the adjoint kernel accumulates.
    """
    op = operands.op
    if not op.differentiable:
        raise TypeError(f"{op.name} is not differentiable")
    if needed is None:
        needed = [o.differentiable for o in op.operands]
    needed = [n and o.differentiable for n, o in zip(needed, op.operands)]
    grads = [
        allocate_zeros(shape, operands.scalar, operands.device) if need else None
        for need, shape in zip(needed, operands.shapes)
    ]
    adjoint_results = [_cotangent(operands, k, g, allocate_zeros) for k, g in enumerate(cotangents)]
    if operands.plan.size and any(needed):
        kernel = _overload(op, operands.scalar)
        for grid, offsets, result_offset, count, strides in _launch_tiles(operands.plan):
            adj_inputs = [_kernels.Grid()]
            for operand, grad, offset in zip(op.operands, grads, offsets):
                adj_inputs += [
                    None if grad is None else element_view(grad[1], operand.element, offset),
                    wp.vec4i(),
                ]
            wp.launch(
                kernel,
                dim=count,
                inputs=[grid, *_kernel_inputs(operands, offsets, strides)],
                outputs=[None] * len(op.results),
                adj_inputs=adj_inputs,
                adj_outputs=[
                    element_view(g, r.element, result_offset)
                    for r, g in zip(op.results, adjoint_results)
                ],
                adjoint=True,
                device=operands.device,
            )
    return [None if grad is None else grad[0] for grad in grads]


def jvp(
    operands: Operands,
    tangents: Sequence[Any | None],
    allocate: Allocator,
    allocate_zeros: Allocator,
) -> list[Any]:
    """Forward-mode product: the results' tangents for one tangent per operand (None
    means zero), each tangent shaped like its operand."""
    op = operands.op
    if not op.differentiable or op.tangent_kernel is None:
        raise TypeError(f"{op.name} is not differentiable")
    tangents = [_tangent(operands, k, t, allocate_zeros) for k, t in enumerate(tangents)]
    results = [
        allocate(operands.result_shape(k), operands.scalar, operands.device)
        for k in range(len(op.results))
    ]
    if operands.plan.size:
        kernel = _overload(op, operands.scalar, tangent=True)
        for grid, offsets, result_offset, count, strides in _launch_tiles(operands.plan):
            wp.launch(
                kernel,
                dim=count,
                inputs=[
                    grid,
                    *_kernel_inputs(operands, offsets, strides),
                    *[
                        element_view(t, o.element, offset)
                        for o, t, offset in zip(op.operands, tangents, offsets)
                    ],
                ],
                outputs=[
                    element_view(view, r.element, result_offset)
                    for r, (_, view) in zip(op.results, results)
                ],
                device=operands.device,
            )
    return [native for native, _ in results]


def _tangent(operands: Operands, index: int, t: Any | None, allocate_zeros: Allocator):
    operand = operands.op.operands[index]
    return _checked_like(
        operands, f"tangent of '{operand.name}'", t, operands.shapes[index], allocate_zeros
    )


def _cotangent(operands: Operands, index: int, g: Any | None, allocate_zeros: Allocator):
    """One result's cotangent as a contiguous Warp array, checked against the result."""
    result = operands.op.results[index]
    return _checked_like(
        operands, f"cotangent of '{result.name}'", g, operands.result_shape(index), allocate_zeros
    )


def _checked_like(operands: Operands, what: str, x: Any | None, expected, allocate_zeros):
    """`x` as a contiguous Warp array of the operands' dtype and device and of shape
    `expected` (zeros when `x` is None)."""
    op = operands.op
    if x is None:
        return allocate_zeros(expected, operands.scalar, operands.device)[1]
    a = as_warp_array(op, what, x)
    if _scalar_type(a) is not operands.scalar:
        raise TypeError(
            f"{op.name}: {what} has dtype {_scalar_name(_scalar_type(a))}; "
            f"expected {_scalar_name(operands.scalar)}"
        )
    if _logical_shape(x, a) != expected:
        raise ValueError(f"{op.name}: {what} has shape {_logical_shape(x, a)}; expected {expected}")
    if a.device != operands.device:
        raise ValueError(f"{op.name}: {what} is on {a.device}; expected {operands.device}")
    return a if a.is_contiguous else a.contiguous()
