"""Shape validation and broadcasting, in pure Python (no arrays touched).

`plan_launch` checks every operand's shape against its op-table entry, broadcasts the
leading dimensions, and describes the launch as a small grid of dimensions with one
stride per operand and dimension: stride 0 reads the same element again, so broadcast
operands are never materialised. Adjacent dimensions that every operand walks
contiguously are merged, so the common cases collapse to one or two dimensions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._op import VARIADIC, Op, Operand, Product

# Warp indexes launches and arrays with 32-bit integers.
MAX_ELEMENTS = 2**31 - 1
# An op that sums over groups launches its grid in one piece: as deep as a kernel indexes.
SUMMED_GRID_DIMS = 4


@dataclass(frozen=True)
class LaunchPlan:
    """How one call of an op maps onto kernel launches.

    `grid` lists the launch dimensions, outermost first; `strides[k]` gives operand k's
    element stride along each of them. Results are contiguous over `grid`, but for an op
    that sums over groups (`Op.reduced`): their dimensions are the grid's innermost, of
    `reduce` launch indices in all, and each result element sums that many neighbours.
    """

    batch_shape: tuple[int, ...]
    grid: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    reduce: int = 1

    @property
    def size(self) -> int:
        """Launch indices: result elements times the summands of each."""
        return math.prod(self.batch_shape) * self.reduce

    @property
    def results(self) -> int:
        """Elements of each result."""
        return math.prod(self.batch_shape)


def loops_over_runs(op: Op, product: Product) -> bool:
    """Whether the kernels of `product` loop over runs of launch indices: where the op
    asks, and for the VJP of an op that sums over groups (a group's summands read one
    cotangent, and the gradients of its per-group operands are sums over the group)."""
    return op.runs or (product == Product.VJP and bool(op.reduced))


def sums(op: Op, product: Product) -> bool:
    """Whether `product`'s kernel sums launch indices into each result element (an op
    that sums over groups, but for its VJP, which scatters)."""
    return bool(op.reduced) and product != Product.VJP


def scattered(op: Op, product: Product) -> tuple[int, ...]:
    """The operands whose shape the arrays that `product`'s kernels add into have: the
    differentiable operands for a VJP (their gradients), the operands the results are
    `like` for the forward and the tangent of an op that scatters; else none."""
    if product == Product.VJP:
        return tuple(k for k, o in enumerate(op.operands) if o.differentiable)
    if op.scatters:
        return tuple(k for k in op.like if k is not None)
    return ()


def _shape_error(op: Op, operand: Operand, shape: tuple[int, ...], why: str = "") -> ValueError:
    detail = f" ({why})" if why else ""
    return ValueError(
        f"{op.name}: argument '{operand.name}' has shape {shape}; "
        f"expected {operand.expected_shape()}{detail}"
    )


def leading_shape(op: Op, operand: Operand, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The leading (batch) dimensions of one operand, after checking its element shape."""
    n_element = len(operand.element)
    if len(shape) < n_element or tuple(shape[len(shape) - n_element :]) != operand.element:
        raise _shape_error(op, operand, shape)
    leading = tuple(shape[: len(shape) - n_element])
    if operand.single:
        if leading not in ((), (1,)):
            raise _shape_error(op, operand, shape, "a single pose")
        return ()
    if VARIADIC not in operand.batch and len(leading) != len(operand.batch):
        raise _shape_error(op, operand, shape, f"{len(operand.batch)} leading dimension(s)")
    return leading


def _prefix_groups(prefix: int) -> tuple[str, ...]:
    """Names of the leading dimensions that a transform (vmap) adds to every operand."""
    return tuple(f"<mapped {i}>" for i in range(prefix))


def _operand_layout(operand: Operand, prefix: int) -> tuple[str, ...]:
    return _prefix_groups(prefix) + (() if operand.single else operand.batch)


def _split_groups(layout: tuple[str, ...], dims: tuple[int, ...]):
    """Triples (group, its dimensions, their element strides) for one operand's batch:
    each named group takes one dimension and "..." takes the rest."""
    strides = _contiguous_strides(dims)
    variadic = len(dims) - sum(group != VARIADIC for group in layout)
    triples, start = [], 0
    for group in layout:
        stop = start + (variadic if group == VARIADIC else 1)
        triples.append((group, dims[start:stop], strides[start:stop]))
        start = stop
    return triples


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _broadcast_groups(
    op: Op, shapes: list[tuple[int, ...]], layouts: list, leading: list[tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """The broadcast shape of every leading-dimension group, naming the first misfit."""
    groups: dict[str, tuple[int, ...]] = {}
    owner: dict[str, int] = {}
    for k, (operand, layout, dims) in enumerate(zip(op.operands, layouts, leading)):
        for group, part, _ in _split_groups(layout, dims):
            seen = groups.get(group, ())
            ndim = max(len(seen), len(part))
            a = (1,) * (ndim - len(seen)) + seen
            b = (1,) * (ndim - len(part)) + part
            if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
                other = op.operands[owner[group]].name
                raise ValueError(
                    f"{op.name}: argument '{operand.name}' has shape {shapes[k]}, whose batch "
                    f"{dims} does not broadcast with the batch {seen} so far (from '{other}', "
                    f"shape {shapes[owner[group]]}); expected {operand.expected_shape()} "
                    "with broadcastable leading dimensions"
                )
            groups[group] = tuple(y if x == 1 else x for x, y in zip(a, b))
            owner.setdefault(group, k)
    return groups


def _operand_strides(
    layout: tuple[str, ...], dims: tuple[int, ...], result_batch: tuple[str, ...], groups: dict
) -> list[int]:
    """Element strides of one operand along every dimension of the result's batch:
    0 where the operand is broadcast or lacks the dimension."""
    own = {group: (part, strides) for group, part, strides in _split_groups(layout, dims)}
    strides: list[int] = []
    for group in result_batch:
        full = groups.get(group, ())
        part, part_strides = own.get(group, ((), ()))
        pad = len(full) - len(part)
        strides += [0] * pad
        strides += [s if n == m else 0 for n, m, s in zip(part, full[pad:], part_strides)]
    return strides


def _coalesce(
    shape: tuple[int, ...], strides: list[list[int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 dimensions and merge neighbours that every operand (and result: give
    its strides too) walks contiguously."""
    keep = [d for d, size in enumerate(shape) if size != 1]
    grid = [shape[d] for d in keep]
    per_operand = [[s[d] for d in keep] for s in strides]
    d = len(grid) - 1
    while d > 0:
        if all(s[d - 1] == s[d] * grid[d] for s in per_operand):
            grid[d - 1] *= grid[d]
            for s in per_operand:
                s[d - 1] = s[d]
                del s[d]
            del grid[d]
        d -= 1
    return tuple(grid), tuple(tuple(s) for s in per_operand)


def plan_launch(op: Op, shapes: list[tuple[int, ...]], prefix: int = 0) -> LaunchPlan:
    """Validate `shapes` (one per operand) against `op` and plan the launch.

    `prefix` leading dimensions, added by a vectorising transform (vmap), come first on
    every operand; they broadcast by size 1 and lead the result's batch.
    """
    for operand, shape in zip(op.operands, shapes):
        if len(shape) < prefix:
            raise _shape_error(op, operand, shape, f"after {prefix} mapped dimension(s)")
    leading = [
        tuple(shape[:prefix]) + leading_shape(op, operand, tuple(shape[prefix:]))
        for operand, shape in zip(op.operands, shapes)
    ]
    layouts = [_operand_layout(operand, prefix) for operand in op.operands]
    groups = _broadcast_groups(op, shapes, layouts, leading)
    result_batch = _prefix_groups(prefix) + op.results[0].batch
    launch_batch = _prefix_groups(prefix) + op.launch_batch
    batch_shape = tuple(size for group in result_batch for size in groups.get(group, ()))
    launch_shape = tuple(size for group in launch_batch for size in groups.get(group, ()))
    if math.prod(launch_shape) > MAX_ELEMENTS:
        shapes_given = ", ".join(f"'{o.name}' {tuple(s)}" for o, s in zip(op.operands, shapes))
        raise ValueError(
            f"{op.name}: arguments {shapes_given} broadcast to the batch {launch_shape}, more "
            f"than {MAX_ELEMENTS} elements (Warp indexes with 32-bit integers); split the call"
        )
    strides = [
        _operand_strides(layout, dims, launch_batch, groups)
        for layout, dims in zip(layouts, leading)
    ]
    # The results walk their own dimensions contiguously and stand still over the summed
    # ones, which keeps the two apart when neighbours merge.
    result_strides = list(_contiguous_strides(batch_shape)) + [0] * (
        len(launch_shape) - len(batch_shape)
    )
    grid, coalesced = _coalesce(launch_shape, [*strides, result_strides])
    if op.reduced and len(grid) > SUMMED_GRID_DIMS:
        shapes_given = ", ".join(f"'{o.name}' {tuple(s)}" for o, s in zip(op.operands, shapes))
        raise ValueError(
            f"{op.name}: arguments {shapes_given} interleave broadcast and full dimensions "
            f"into a {len(grid)}-dimensional launch; a sum takes at most {SUMMED_GRID_DIMS} "
            "(broadcast the arguments to one shape first)"
        )
    reduce = math.prod(launch_shape[len(batch_shape) :])
    return LaunchPlan(batch_shape, grid, coalesced[:-1], reduce)


def result_shapes(op: Op, shapes: list[tuple[int, ...]], prefix: int = 0):
    """The full shape of every result, for operands of these shapes (a result `like` an
    operand has its shape)."""
    batch = plan_launch(op, shapes, prefix).batch_shape
    return [
        batch + result.element if k is None else tuple(shapes[k])
        for result, k in zip(op.results, op.like)
    ]
