"""What one launch covers: the tiles of a launch plan (a thread's share of the grid on a
CPU, or the grid in pieces no deeper than a kernel indexes), and how an op that sums over
groups splits each sum into chunks."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from .._op import Op, Product
from . import indexing, threads
from .buffers import Operands, cached_plan
from .layout import LaunchPlan, loops_over_runs, scattered, sums

# CPU launches of at least this many elements (weighted by `Op.work`) are split over the
# thread pool.
PARALLEL_MIN_ELEMENTS = 1 << 15
# Launch indices per thread for kernels that loop over runs: a CPU thread's run, and a GPU
# thread's when a VJP sums a shared gradient (see `run_shape`).
CPU_RUN = 256
GPU_RUN = 16


@dataclass(frozen=True)
class Tile:
    """One launch: its grid (innermost first), per-operand strides, the element offset of
    each operand and of the results, its size (launch indices), which operands are dense
    (bit k: operand k has one element per launch index of the whole plan), and for an op
    that sums over groups, the launch indices each result element sums."""

    grid: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    result_offset: int
    count: int
    dense: int = 0
    reduce: int = 1
    # A launch of some of a sum's chunks (see `summing_tiles`): the first, and how many.
    first_chunk: int = 0
    chunks: int = 0


@functools.lru_cache(maxsize=1024)
def dense_operands(plan: LaunchPlan) -> int:
    """Bit mask of the operands that no two launch indices share: no zero stride along a
    dimension of extent > 1, over the whole plan (tiles may split it)."""
    return sum(
        1 << k
        for k, strides in enumerate(plan.strides)
        if all(s != 0 or extent == 1 for s, extent in zip(strides, plan.grid))
    )


@functools.lru_cache(maxsize=1024)
def tiles(plan: LaunchPlan, parts: int) -> tuple[Tile, ...]:
    """Launches covering `plan.grid`. Grids deeper than MAX_GRID_DIMS (rare interleaved
    broadcasts) loop over their outer dimensions; `parts` > 1 also splits the outermost
    launched dimension into that many ranges, for the thread pool. (A split of an op that
    sums over groups falls between result elements, or all indices sum into one.)"""
    depth = indexing.MAX_GRID_DIMS
    outer_ndim = max(0, len(plan.grid) - depth)
    inner = list(plan.grid[outer_ndim:])
    made = []
    for flat, index in enumerate(np.ndindex(*plan.grid[:outer_ndim])):
        base = [sum(i * s for i, s in zip(index, strides)) for strides in plan.strides]
        inner_count = math.prod(inner)
        splits = (
            [int(x) for x in np.linspace(0, inner[0], min(parts, inner[0]) + 1)]
            if inner
            else [0, 1]
        )
        for start, stop in zip(splits[:-1], splits[1:]):
            grid = [stop - start, *inner[1:]] if inner else []
            made.append(
                Tile(
                    tuple(reversed(grid)),
                    tuple(tuple(reversed(s[outer_ndim:])) for s in plan.strides),
                    tuple(
                        b + start * (s[outer_ndim] if inner else 0)
                        for b, s in zip(base, plan.strides)
                    ),
                    (flat * inner_count + start * math.prod(inner[1:])) // max(plan.reduce, 1),
                    math.prod(grid),
                    dense_operands(plan),
                    plan.reduce,
                )
            )
    return tuple(made)


@functools.lru_cache(maxsize=1024)
def summing_tiles(plan: LaunchPlan, parts: int) -> tuple[Tile, ...]:
    """The launches of a kernel that sums over groups: its chunks (each result element's,
    in a row) in `parts` ranges, each writing its own range of the partial sums."""
    if not plan.size:
        return ()
    (whole,) = tiles(plan, 1)  # a sum's grid fits one launch (see layout.py)
    count = plan.results * chunks(plan.reduce)
    bounds = np.linspace(0, count, min(parts, count) + 1).astype(int).tolist()
    return tuple(
        dataclasses.replace(whole, result_offset=first, first_chunk=first, chunks=last - first)
        for first, last in zip(bounds[:-1], bounds[1:])
    )


def product_tiles(operands: Operands, product: Product, parts: int) -> tuple[Tile, ...]:
    """The tiles of `product`'s launch (a sum over no summands launches none)."""
    if sums(operands.op, product):
        return summing_tiles(operands.plan, parts)
    return tiles(operands.plan, parts)


_gpu_route = [False]


@contextlib.contextmanager
def gpu_route():
    """Inside the block, CPU launches run as CUDA launches do, for tests on a machine
    with no GPU (in every thread: XLA's run JAX's calls): each one whole (no split over
    threads, no per-thread partial sums), through Warp's own launch call, and a VJP that
    adds into a broadcast operand's gradient with the GPU's strided runs (`run_shape`),
    its adds then Warp's CPU atomics. Not for concurrent use."""
    previous = _gpu_route[0]
    _gpu_route[0] = True
    try:
        yield
    finally:
        _gpu_route[0] = previous


def on_gpu_route() -> bool:
    return _gpu_route[0]


def launches_as_cpu(device: str) -> bool:
    """Whether launches on `device` take the CPU's route (not on the GPU's route)."""
    return device == "cpu" and not _gpu_route[0]


def parts(operands: Operands) -> int:
    """Threads for a CPU launch: all of them from `PARALLEL_MIN_ELEMENTS` elements,
    weighted by `Op.work` (one on the GPU's route)."""
    if (
        launches_as_cpu(operands.device)
        and operands.plan.size * operands.op.work >= PARALLEL_MIN_ELEMENTS
    ):
        return threads.THREADS
    return 1


def chunk(reduce: int) -> int:
    """Summands per thread of an op that sums over groups: about the square root of each
    sum's, so that neither the chunks' loops nor the partial sums per element grow long."""
    return max(32, math.isqrt(max(reduce - 1, 0)) + 1)


def chunks(reduce: int) -> int:
    return -(-reduce // chunk(reduce))


def scratch_shapes(op: Op, product: Product, shapes, prefix: int = 0) -> list[tuple[int, ...]]:
    """The partial sums that `product` of an op that sums over groups allocates, after its
    results and through the same allocator (an FFI caller provides them as outputs)."""
    if not sums(op, product):
        return []
    return partial_shapes(op, cached_plan(op, tuple(map(tuple, shapes)), prefix))


def partial_shapes(op: Op, plan: LaunchPlan) -> list[tuple[int, ...]]:
    """One partial sum per chunk and result element; none where each sum is one chunk
    (its chunk's sum is the result). Always one array per result, for the FFI's sake."""
    count = chunks(plan.reduce)
    return [(plan.results * count if count > 1 else 0, *r.element) for r in op.results]


def run_shape(op: Op, product: Product, device: str, tile: Tile) -> tuple[int, int]:
    """(run, step) of the grid (see `indexing.Grid`) for ops whose kernels loop over runs:
    on CPU, runs of CPU_RUN consecutive indices; on a GPU, a kernel that adds into an
    array shaped like a broadcast operand (a VJP's gradient, `Op.scattered`) takes every
    step-th index in a run of GPU_RUN, summing in registers before one add per run and
    element, and everything else one index."""
    if not loops_over_runs(op, product):
        return 1, 1
    if launches_as_cpu(device):
        return CPU_RUN, 1
    shared = sum(1 << k for k in scattered(op, product)) & ~tile.dense
    if shared:
        return GPU_RUN, -(-tile.count // GPU_RUN)
    return 1, 1
