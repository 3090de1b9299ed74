"""What one launch covers: the tiles of a launch plan (a thread's share of the grid on a
CPU, or the grid in pieces no deeper than a kernel indexes), and how an op that sums over
groups splits each sum into chunks."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
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
# A GPU VJP whose broadcast operands' gradients are summed in blocks (`blocks.py`): the
# threads per block, the fewest launch indices a block sums, and about the most blocks a
# launch spreads its indices over (past that, each block sums more).
SUM_BLOCK = 256
SUM_MIN_CHUNK = 4 * SUM_BLOCK
SUM_BLOCKS = 2048
# False: those VJPs take strided runs and atomic adds, as before `blocks.py` (for the
# GPU benchmark's before and after, benchmarks/roofline.py).
SUM_IN_BLOCKS = True


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
    # A GPU VJP summed in blocks (`summed_in_blocks`): (launch indices per chunk, chunks
    # per element of the broadcast operands); () where it is not.
    blocks: tuple[int, int] | tuple[()] = ()


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
    """The tiles of `product`'s launch (a sum over no summands launches none); a GPU VJP's
    one tile marked where its broadcast gradients are summed in blocks."""
    if sums(operands.op, product):
        return summing_tiles(operands.plan, parts)
    return _in_blocks(operands.op, product, operands.device, tiles(operands.plan, parts))


def _in_blocks(op: Op, product: Product, device: str, made: tuple[Tile, ...]):
    if len(made) == 1:
        blocks = summed_in_blocks(op, product, device, made[0])
        if blocks:
            return (dataclasses.replace(made[0], blocks=blocks),)
    return made


def summed_in_blocks(op: Op, product: Product, device: str, tile: Tile) -> tuple:
    """(launch indices per chunk, chunks per element) where a GPU VJP sums its broadcast
    operands' gradients in blocks (`blocks.py`), else (): an op that neither sums over
    groups nor scatters, whose every broadcast differentiable operand is one element for
    the whole launch, or is broadcast along the innermost launch dimension only and walks
    the others contiguously (each of its elements sums one run of launch indices, its
    elements in launch order). The chunks: SUM_MIN_CHUNK indices at the least, more where
    the launch would otherwise take more than about SUM_BLOCKS blocks, and one per
    element where an element's summands (the innermost dimension) fit in one."""
    if product != Product.VJP or op.reduced or op.scatters or launches_as_cpu(device):
        return ()
    if not SUM_IN_BLOCKS:
        return ()
    shared = [k for k in scattered(op, product) if not tile.dense >> k & 1]
    if not shared or not tile.grid or not tile.count:
        return ()
    for k in shared:
        strides = tile.strides[k]
        outer = list(zip(tile.grid[1:], strides[1:]))
        contiguous = list(itertools.accumulate([1] + [extent for extent, _ in outer]))
        if any(strides) and (
            strides[0] != 0
            or any(e > 1 and s != c for (e, s), c in zip(outer, contiguous))
        ):  # fmt: skip
            return ()
    summands = tile.grid[0]
    chunk = max(SUM_MIN_CHUNK, -(-tile.count // (SUM_BLOCKS * SUM_BLOCK)) * SUM_BLOCK)
    if chunk >= summands:
        return (summands, 1)
    return (chunk, -(-summands // chunk))


def block_partials(op: Op, tile: Tile, needed=()) -> list[tuple[int, int, int]]:
    """(operand k, elements, partial sums per element) for each `needed` (all where not
    given) broadcast gradient that a VJP summed in blocks (`summed_in_blocks`) adds up
    from partial sums: one per chunk where an element's summands span several chunks,
    and one per block of the launch for an operand that is one element for a launch of
    several elements."""
    if not tile.blocks:
        return []
    elements, chunks_per_element = tile.count // tile.grid[0], tile.blocks[1]
    made = []
    for k in scattered(op, Product.VJP):
        if (needed and not needed[k]) or tile.dense >> k & 1:
            continue
        if elements > 1 and not any(tile.strides[k]):
            made.append((k, 1, elements * chunks_per_element))
        elif chunks_per_element > 1:
            made.append((k, elements, chunks_per_element))
    return made


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


def scratch_shapes(
    op: Op, product: Product, shapes, prefix: int = 0, needed=(), device: str = "cpu"
) -> list[tuple[int, ...]]:
    """The partial sums that `product` allocates after its results, through the same
    allocator (an FFI caller provides them as outputs): an op that sums over groups', one
    array per result; a GPU VJP's summed in blocks (`block_partials`), one array per
    `needed` broadcast operand that sums partial sums."""
    if sums(op, product):
        return partial_shapes(op, cached_plan(op, tuple(map(tuple, shapes)), prefix))
    if product != Product.VJP or launches_as_cpu(device):
        return []
    plan = cached_plan(op, tuple(map(tuple, shapes)), prefix)
    if not plan.size or len(plan.grid) > indexing.MAX_GRID_DIMS:
        return []
    (tile,) = _in_blocks(op, product, device, tiles(plan, 1))
    return [
        (elements * chunks_per_element, *op.operands[k].element)
        for k, elements, chunks_per_element in block_partials(op, tile, needed)
    ]


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
