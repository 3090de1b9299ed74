"""A product's launches as a list of steps, either run here or recorded for a native
executor (`program.py`): the one place where the two part.

- `Launch`: one kernel over tiles (concurrent ones: a CPU thread's each), each array
  parameter a pointer, or a tile's own partial gradient;
- `AddParts`: partial gradients added into the gradient, tile after tile;
- `SumChunks`: each result element's partial sums added, in order, into the result (an op
  that sums over groups).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from dataclasses import dataclass

import numpy as np
import warp as wp

from .._op import Op, Product
from . import indexing, kernels, threads
from .tiling import Tile
from .warp_abi import Reusable, array_param


class PartialSums:
    """Zeroed memory, one gradient-shaped part per tile, for a gradient that every tile
    adds into (a broadcast operand's, when a CPU launch is split over threads): no two
    threads add into one address, and the sum after the launches is deterministic. The
    executor provides the memory: here a NumPy array, in a program a scratch buffer."""

    # Parts a cache line apart at least: threads adding into one line (a small shared
    # pose's gradient) would otherwise fight over it on every point.
    LINE = 128

    def __init__(self, gradient: int, shape: tuple[int, ...], scalar: type, tiles: int):
        self.gradient = gradient
        self.dtype = np.dtype(wp.dtype_to_numpy(scalar))
        self.count = math.prod(shape)
        self.stride = -(-(self.count * self.dtype.itemsize + self.LINE) // self.LINE) * self.LINE
        self.tiles = tiles

    @property
    def nbytes(self) -> int:
        return self.tiles * self.stride


@dataclass(frozen=True)
class Array:
    """Array parameter `index` of a launch: `total` elements of shape `element` at
    `pointer` (0: a null array; `PartialSums`: each tile's own part), from the element
    where the tile starts: operand `operand`'s offset, or the results' (None)."""

    index: int
    pointer: int | PartialSums
    element: tuple[int, ...]
    total: int
    operand: int | None


@dataclass(frozen=True)
class Launch:
    op: Op
    product: Product
    scalar: type
    device: str
    tiles: tuple[Tile, ...]
    arrays: tuple[Array, ...]
    parallel: bool  # one tile per thread


@dataclass(frozen=True)
class AddParts:
    parts: PartialSums


@dataclass(frozen=True)
class SumChunks:
    op: Op
    product: Product
    scalar: type
    device: str
    count: int  # result elements
    chunks: int  # partial sums per result element
    partials: tuple[int, ...]
    results: tuple[int, ...]
    owners: tuple = ()  # the partial sums' arrays: alive as long as the steps are


Step = Launch | AddParts | SumChunks


def set_arrays(launch, step: Launch, k: int, bases: dict) -> None:
    """Point tile k's array parameters of `launch` (a `Reusable`) at their memory; `bases`
    holds each `PartialSums`'s base address."""
    tile = step.tiles[k]
    for a in step.arrays:
        pointer = a.pointer
        if isinstance(pointer, PartialSums):
            pointer = bases[pointer] + k * pointer.stride
        offset = tile.offsets[a.operand] if a.operand is not None else tile.result_offset
        launch.set_array(a.index, pointer, a.element, step.scalar, offset, a.total)


def set_sum_arrays(launch, step: SumChunks) -> None:
    """Point a `sum_chunks` launch at a SumChunks step's partial sums and results (a VJP's:
    a block per element, an array per operand)."""
    grid = indexing.FlatGrid()
    grid.size, grid.chunks = step.count, step.chunks
    vjp = step.product == Product.VJP
    launch.set_dim((step.count, launch.block_dim) if vjp else step.count)
    launch.set_param_at_index(0, grid)
    elements = (
        [o.element for o in step.op.operands] if vjp else [r.element for r in step.op.results]
    )
    r = len(elements)
    for j, ptr in enumerate([*step.partials, *step.results]):
        total = step.count * step.chunks if j < r else step.count
        launch.set_param_at_index_from_ctype(
            1 + j, array_param(ptr, elements[j % r], step.scalar, 0, total)
        )


def run(steps: list[Step]) -> None:
    """Run the steps here: tiles of a parallel launch on the thread pool."""
    parts = {
        a.pointer: np.zeros(a.pointer.nbytes, np.uint8)
        for s in steps
        if isinstance(s, Launch)
        for a in s.arrays
        if isinstance(a.pointer, PartialSums)
    }
    bases = {p: memory.ctypes.data for p, memory in parts.items()}
    for step in steps:
        if isinstance(step, Launch):
            stream = None if step.device == "cpu" else wp.get_stream(step.device)

            def launch_tile(k: int, step=step, stream=stream):
                launch = kernels.reusable(step.op, step.product, step.scalar, step.device,
                                          step.tiles[k])  # fmt: skip
                set_arrays(launch, step, k, bases)
                run_launch(launch, stream)

            if step.parallel and len(step.tiles) > 1:
                threads.run_all([lambda k=k: launch_tile(k) for k in range(len(step.tiles))])
            else:
                for k in range(len(step.tiles)):
                    launch_tile(k)
        elif isinstance(step, AddParts):
            _add_parts(step.parts, parts[step.parts])
        else:
            launch = kernels.sum_chunks(step.op, step.product, step.scalar, step.device)
            set_sum_arrays(launch, step)
            run_launch(launch, None if step.device == "cpu" else wp.get_stream(step.device))


def run_launch(launch: Reusable | wp.Launch, stream) -> None:
    """Run one recorded launch whose parameters are set (a tile's, or a sum's)."""
    if isinstance(launch, Reusable):
        launch.run(stream)
    else:
        launch.launch(stream)


def _add_parts(parts: PartialSums, memory: np.ndarray) -> None:
    """The gradient as the sum of its parts, tile after tile, in order (`sum(0)` would sum
    one column pairwise): the native executor adds them the same way, bit for bit."""
    nbytes = parts.count * parts.dtype.itemsize
    total = np.frombuffer((ctypes.c_byte * nbytes).from_address(parts.gradient), parts.dtype)
    rows = memory.view(parts.dtype).reshape(parts.tiles, -1)[:, : parts.count]
    np.copyto(total, rows[0])
    for row in rows[1:]:
        total += row


_local = threading.local()


@contextlib.contextmanager
def recording(recorder):
    """Record this thread's steps into `recorder` (`program.Recorder`) instead of running
    them: for native executors."""
    _local.recorder = recorder
    try:
        yield recorder
    finally:
        _local.recorder = None


def execute(steps: list[Step]) -> None:
    """Run the steps, or record them where this thread is recording."""
    recorder = getattr(_local, "recorder", None)
    if recorder is None:
        run(steps)
    else:
        recorder.record(steps)
