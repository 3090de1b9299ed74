"""An op's three products on checked operands: the forward, the VJP and the tangent (JVP).
Each allocates its results through the caller's allocator, builds the list of steps that
computes them (`steps.py`) and has it run or recorded.

Large CPU launches are split over the thread pool. Warp's CPU atomics are plain adds, so
a split VJP gives every tile its own partial gradient for each operand that all tiles
read, and sums the partials afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from .._op import Product
from . import indexing, repeats
from .buffers import Buffer, Operands, checked_like
from .layout import sums
from .steps import AddParts, Array, Launch, PartialSums, Step, SumChunks, execute
from .tiling import (
    block_partials,
    chunks,
    dense_operands,
    partial_shapes,
    parts,
    product_tiles,
    tiles,
)

# allocate(shape, scalar_type, device) -> (the caller's array, pointer to its memory)
Allocator = Callable[[tuple[int, ...], type, str], tuple[Any, int]]


def _elements(shape: tuple[int, ...], element: tuple[int, ...]) -> int:
    return math.prod(shape[: len(shape) - len(element)])


def _operand_arrays(operands: Operands, first: int = 1, step: int = 2, buffers=None):
    """Array parameters for one Buffer per operand. None sets the parameter to a null
    array, explicitly: a recorded launch keeps its parameters from the last call."""
    buffers = operands.buffers if buffers is None else buffers
    return [
        Array(first + step * k, 0, o.element, 0, k)
        if b is None
        else Array(first + step * k, b.ptr, o.element, _elements(b.shape, o.element), k)
        for k, (o, b) in enumerate(zip(operands.op.operands, buffers))
    ]


def _result_arrays(operands: Operands, first: int, pointers, total: int | None = None):
    """Array parameters for one array per result (the results, their tangents or their
    cotangents): over the launch's result elements, or `total` of them (partial sums), or,
    for a result like operand k, over operand k's elements, moving with its tile offset."""
    total = operands.plan.results if total is None else total
    op = operands.op
    return [
        Array(first + j, ptr, r.element, total, None)
        if k is None
        else Array(first + j, ptr, r.element, _elements(operands.shapes[k], r.element), k)
        for j, (r, ptr, k) in enumerate(zip(op.results, pointers, op.like))
    ]


def _launch(operands: Operands, product: Product, arrays, split: int) -> Launch:
    tiled = product_tiles(operands, product, split)
    return Launch(operands.op, product, operands.scalar, operands.device, tiled,
                  tuple(arrays), split > 1)  # fmt: skip


def _product_steps(
    operands: Operands, product: Product, arrays, first_result: int, pointers, allocate
) -> list[Step]:
    """The forward's or the tangent's steps, given every array parameter but the results'.
    An op that sums over groups writes partial sums (allocated here), then adds them up."""
    split = parts(operands)
    # (Where each sum is one chunk, that chunk's sum is the result: straight in.)
    if not sums(operands.op, product) or chunks(operands.plan.reduce) == 1:
        arrays = arrays + _result_arrays(operands, first_result, pointers)
        return [_launch(operands, product, arrays, split)]
    shapes = partial_shapes(operands.op, operands.plan)
    partials = [allocate(s, operands.scalar, operands.device) for s in shapes]
    pointers_of_partials = tuple(ptr for _, ptr in partials)
    arrays = arrays + _result_arrays(operands, first_result, pointers_of_partials, shapes[0][0])
    adding = SumChunks(operands.op, product, operands.scalar, operands.device,
                       operands.plan.results, chunks(operands.plan.reduce), pointers_of_partials,
                       tuple(pointers), owners=tuple(native for native, _ in partials))  # fmt: skip
    return [_launch(operands, product, arrays, split), adding]


def _scattered_steps(
    operands: Operands, product: Product, arrays, outputs, allocate: Allocator | None = None
) -> list[Step]:
    """The steps of `product`, given every array parameter but `outputs`: (parameter index,
    Buffer, operand k) for each array the kernel adds into in operand k's shape
    (`Op.scattered`; a null Buffer pointer where not needed). On CPU, split over the
    thread pool, with partial sums per tile for the arrays that every tile adds into; a GPU
    VJP summed in blocks over several chunks per element (`tiling.summed_in_blocks`) writes
    partial sums (arrays from `allocate`) that a last step adds into the gradients."""
    # Deep grids loop over overlapping outer tiles: they stay on one thread.
    deep = len(operands.plan.grid) > indexing.MAX_GRID_DIMS
    split = 1 if deep else parts(operands)
    tiled = product_tiles(operands, product, split)
    partials, count = {}, len(tiles(operands.plan, split))
    if split > 1 and count > 1:
        partials = {
            k: PartialSums(buffer.ptr, buffer.shape, operands.scalar, count)
            for _, buffer, k in outputs
            if buffer.ptr and operands.plan.strides[k][0] == 0
        }
    element = [o.element for o in operands.op.operands]
    chunked, adding = _chunk_sums(operands, tiled, outputs, allocate)
    arrays = arrays + [
        Array(index, partials.get(k, buffer.ptr), element[k],
              _elements(buffer.shape, element[k]) if buffer.ptr else 0, k)
        if k not in chunked
        else Array(index, chunked[k][0], element[k], chunked[k][1], None)
        for index, buffer, k in outputs
    ]  # fmt: skip
    launch = Launch(operands.op, product, operands.scalar, operands.device, tiled,
                    tuple(arrays), split > 1)  # fmt: skip
    return [launch, *map(AddParts, partials.values()), *adding]


def _chunk_sums(operands: Operands, tiled, outputs, allocate):
    """For a GPU VJP summed in blocks whose broadcast gradients add up partial sums
    (`tiling.block_partials`): each such gradient's partial sums (allocated here), by
    operand, as (pointer, count), and the steps that add them into the gradients, one per
    layout of partial sums; ({}, []) otherwise."""
    needed = {k: bool(buffer.ptr) for _, buffer, k in outputs}
    if len(tiled) != 1 or not needed:
        return {}, []
    op, n = operands.op, len(operands.op.operands)
    summing = block_partials(op, tiled[0], [needed.get(k, False) for k in range(n)])
    made = {
        k: allocate((count * per, *op.operands[k].element), operands.scalar, operands.device)
        for k, count, per in summing
    }
    gradients = {k: buffer.ptr for _, buffer, k in outputs}
    steps = []
    for count, per in dict.fromkeys((count, per) for _, count, per in summing):
        ks = [k for k, c, p in summing if (c, p) == (count, per)]
        steps.append(
            SumChunks(op, Product.VJP, operands.scalar, operands.device, count, per,
                      tuple(made[k][1] if k in ks else 0 for k in range(n)),
                      tuple(gradients[k] if k in ks else 0 for k in range(n)),
                      owners=tuple(made[k][0] for k in ks))
        )  # fmt: skip
    totals = {k: count * per for k, count, per in summing}
    return {k: (made[k][1], totals[k]) for k in made}, steps


def _scattering(operands: Operands, product: Product, arrays, first: int, allocate,
                allocate_zeros) -> list[Any]:  # fmt: skip
    """The forward or tangent of an op whose results are `like` operands, given every
    array parameter but the results (parameters `first`...): each result is stored where
    its operand is dense, else added into from zeros."""
    op = operands.op
    if allocate_zeros is None:
        raise TypeError(f"{op.name}: its results add into arrays; pass allocate_zeros")
    dense = dense_operands(operands.plan)
    results = [
        (allocate if dense >> k & 1 else allocate_zeros)(
            operands.shapes[k], operands.scalar, operands.device
        )
        for k in op.like
    ]
    if operands.plan.size:
        outputs = [
            (first + j, Buffer(ptr, operands.shapes[k], "", operands.device, native), k)
            for j, ((native, ptr), k) in enumerate(zip(results, op.like))
        ]
        execute(_scattered_steps(operands, product, arrays, outputs))
    return [native for native, _ in results]


def forward(
    operands: Operands,
    allocate: Allocator,
    allocate_zeros: Allocator | None = None,
    repeat_key: Hashable | None = None,
) -> list[Any]:
    """Run the op; return its results as the arrays that `allocate` made (those of an op
    whose results are `like` operands and add into them: `allocate_zeros`, where added).
    Given `repeat_key`, later calls with that key may go through `repeats.repeat`."""
    op = operands.op
    arrays = _operand_arrays(operands)
    first = 1 + 2 * len(op.operands)
    if op.scatters:
        return _scattering(operands, Product.FORWARD, arrays, first, allocate, allocate_zeros)
    shapes = [operands.result_shape(k) for k in range(len(op.results))]
    results = [allocate(shape, operands.scalar, operands.device) for shape in shapes]
    if operands.plan.results:
        pointers = [ptr for _, ptr in results]
        steps = _product_steps(operands, Product.FORWARD, arrays, first, pointers, allocate)
        execute(steps)
        if repeat_key is not None:
            repeats.remember(op, Product.FORWARD, repeat_key, steps,
                             [(shape, False) for shape in shapes])  # fmt: skip
    return [native for native, _ in results]


def vjp(
    operands: Operands,
    cotangents: Sequence[Any | None],
    allocate_zeros: Allocator,
    needed: Sequence[bool] | None = None,
    allocate: Allocator | None = None,
    repeat_key: Hashable | None = None,
) -> list[Any | None]:
    """Reverse-mode product: for each operand, the sum over the broadcast batch of the
    cotangents pulled back through the op (None where not differentiable or not needed).
    Given `repeat_key` (which must determine `needed` too), later calls with that key may
    go through `repeats.repeat`.

    `cotangents` has one entry per result (None means zero); `allocate_zeros` returns
    zero-filled arrays, into which the kernels accumulate. Given `allocate` (arrays left
    as they are), the gradient of a dense operand, which the kernel stores rather than
    adds, skips the zero-fill.
    """
    op = operands.op
    if not op.differentiable:
        raise TypeError(f"{op.name} is not differentiable")
    if needed is None:
        needed = [o.differentiable for o in op.operands]
    needed = [bool(n) and o.differentiable for n, o in zip(needed, op.operands)]
    dense = dense_operands(operands.plan) if allocate else 0
    made = [
        (shape, not dense >> k & 1) if need else None
        for k, (need, shape) in enumerate(zip(needed, operands.shapes))
    ]
    grads = [
        None
        if m is None
        else (allocate_zeros if m[1] else allocate)(m[0], operands.scalar, operands.device)
        for m in made
    ]
    cotangent_buffers = [
        checked_like(
            operands, f"cotangent of '{r.name}'", g, operands.result_shape(k), allocate_zeros
        )  # fmt: skip
        for k, (r, g) in enumerate(zip(op.results, cotangents))
    ]
    if operands.plan.size and any(needed):
        n = len(op.operands)
        arrays = _operand_arrays(operands)
        arrays += _result_arrays(operands, 1 + 2 * n, [c.ptr for c in cotangent_buffers])
        first = 1 + 2 * n + len(op.results)
        outputs = [
            (first + k, Buffer(0, shape, "", operands.device, None), k)
            if g is None
            else (first + k, Buffer(g[1], shape, "", operands.device, g[0]), k)
            for k, (g, shape) in enumerate(zip(grads, operands.shapes))
        ]
        steps = _scattered_steps(operands, Product.VJP, arrays, outputs, allocate or allocate_zeros)
        execute(steps)
        if repeat_key is not None and all(g is not None for g in cotangents):
            repeats.remember(op, Product.VJP, repeat_key, steps, made)
    return [None if grad is None else grad[0] for grad in grads]


def jvp(
    operands: Operands,
    tangents: Sequence[Any | None],
    allocate: Allocator,
    allocate_zeros: Allocator,
    allocate_scratch: Allocator | None = None,
) -> list[Any]:
    """Forward-mode product: the results' tangents for one tangent per operand (None
    means zero), each tangent shaped like its operand. (Results `like` operands are added
    into from `allocate_zeros`'s arrays; a zero tangent comes from `allocate_scratch`'s,
    by default `allocate_zeros`'s, for a caller whose zeroed arrays are its outputs.)"""
    op = operands.op
    if not op.differentiable:
        raise TypeError(f"{op.name} is not differentiable")
    n = len(op.operands)
    scratch = allocate_scratch or allocate_zeros
    # An operand the op is not differentiable in moves nothing: its tangent counts as zero.
    tangent_buffers = [
        checked_like(
            operands,
            f"tangent of '{o.name}'",
            t if o.differentiable else None,
            operands.shapes[k],
            scratch,
        )  # fmt: skip
        for k, (o, t) in enumerate(zip(op.operands, tangents))
    ]
    arrays = _operand_arrays(operands) + _operand_arrays(operands, 1 + 2 * n, 1, tangent_buffers)
    if op.scatters:
        return _scattering(operands, Product.TANGENT, arrays, 1 + 3 * n, allocate,
                           allocate_zeros)  # fmt: skip
    results = [
        allocate(operands.result_shape(k), operands.scalar, operands.device)
        for k in range(len(op.results))
    ]
    if operands.plan.results:
        pointers = [p for _, p in results]
        execute(_product_steps(operands, Product.TANGENT, arrays, 1 + 3 * n, pointers, allocate))
    return [native for native, _ in results]


def forward_arrays(operands: Operands, result_pointers) -> list[Array]:
    """The forward launch's array parameters: the operands, then the results."""
    first_result = 1 + 2 * len(operands.op.operands)
    return _operand_arrays(operands) + _result_arrays(operands, first_result, result_pointers)


def backward_arrays(operands: Operands, cotangent_pointers, grad_buffers):
    """The VJP launch's array parameters: those of the operands and cotangents, and
    those of the gradients."""
    n = len(operands.op.operands)
    cotangents = _result_arrays(operands, 1 + 2 * n, cotangent_pointers)
    grads = _operand_arrays(operands, 1 + 2 * n + len(operands.op.results), 1, grad_buffers)
    return _operand_arrays(operands) + cotangents, grads
