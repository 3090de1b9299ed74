"""Launches of an op's generated kernels (`codegen.py`), recorded once per thread and tile
(`Reusable`), whose arrays are then set from raw pointers on every call."""

from __future__ import annotations

import collections
import threading
from typing import Any

import warp as wp

from .._op import Op, Product
from . import blocks, codegen, indexing
from .layout import sums
from .tiling import SUM_BLOCK, Tile, chunk, chunks, launches_as_cpu, on_gpu_route, run_shape
from .warp_abi import Reusable

_local = threading.local()
# Warp's launch recording (module loading) is not thread-safe.
record_lock = threading.Lock()
# Recorded launches kept per thread, past which the least recently used goes.
LAUNCHES_PER_THREAD = 256


def _vec4(values, fill: int) -> wp.vec4i:
    return wp.vec4i(*(list(values) + [fill] * (indexing.MAX_GRID_DIMS - len(values))))


def record(op: Op, product: Product, scalar: type, device: str, tile: Tile) -> wp.Launch:
    """A new recorded launch of `product`'s kernel of `op` for one tile, with its grid and
    strides set and its arrays null."""
    flat = len(tile.grid) <= 1
    if flat:
        grid = indexing.FlatGrid()
    else:
        grid = indexing.Grid()
        grid.ndim = len(tile.grid)
        grid.shape = _vec4(tile.grid, 1)
    grid.size = tile.count
    grid.run, grid.step = run_shape(op, product, device, tile)
    grid.dense = tile.dense
    grid.reduce = max(tile.reduce, 1)
    dim = -(-tile.count // grid.run) if grid.step == 1 else grid.step
    block_dim = None
    if sums(op, product):  # a thread per chunk of each result element's summands
        grid.run = chunk(tile.reduce)
        grid.chunks = chunks(tile.reduce)
        grid.first_chunk = tile.first_chunk
        dim = tile.chunks
    if tile.blocks:  # a block per chunk of each broadcast element's summands (blocks.py)
        grid.reduce = tile.grid[0]
        grid.run, grid.chunks = tile.blocks
        block_dim = SUM_BLOCK
        dim = (tile.count // grid.reduce * grid.chunks, SUM_BLOCK)
    inputs: list[Any] = [grid]
    for strides in tile.strides:
        inputs += [None, _vec4(strides, 0)]
    # Array parameters after the operands: results (forward), or operands' tangents and
    # results' (tangent), or results' cotangents and operands' gradients (VJP).
    forward = product == Product.FORWARD
    inputs += [None] * (len(op.results) + (0 if forward else len(op.operands)))
    try:
        if tile.blocks:
            kernel = blocks.kernels(op, scalar)[flat]
        else:
            kernel = codegen.kernel(op, product, scalar, flat)
        with blocks.cpu_blocks(device, block_dim):
            return wp.launch(
                kernel, dim=dim, inputs=inputs, device=device, block_dim=block_dim,
                record_cmd=True,
            )  # fmt: skip
    except Exception as exc:  # Warp generating or compiling the kernel (first use only)
        operands = ", ".join(f"{o.name} {o.value_element}" for o in op.operands)
        results = ", ".join(f"{r.name} {r.element}" for r in op.results)
        raise TypeError(
            f"xform.{op.name}: Warp could not build the op's {product} kernel for "
            f"{scalar.__name__} on {device}. Its element function '{op.function.key}' must "
            f"take ({operands}) and return ({results}) as declared, as must any closed-form "
            f"tangent or VJP; Warp said: {exc}"
        ) from exc


def reusable(op: Op, product: Product, scalar: type, device: str, tile: Tile) -> Reusable:
    """This thread's recorded launch of `op`'s kernel for one tile, with its grid and
    strides set: one per thread, as the caller sets its array parameters."""
    cache = getattr(_local, "launches", None)
    if cache is None:
        cache = _local.launches = collections.OrderedDict()
    # Not the tile's offsets: its array parameters carry them (one launch serves every
    # tile of a deep grid's outer loop).
    key = (op, product, scalar, device, tile.grid, tile.strides, tile.count, tile.dense,
           tile.reduce, tile.first_chunk, tile.chunks, tile.blocks,
           on_gpu_route())  # fmt: skip
    launch = cache.get(key)
    if launch is not None:
        cache.move_to_end(key)
        return launch
    with record_lock:
        recorded = record(op, product, scalar, device, tile)
        launch = cache[key] = Reusable(recorded, entry_point=launches_as_cpu(device))
    if len(cache) > LAUNCHES_PER_THREAD:
        cache.popitem(last=False)
    return launch


def sum_chunks(op: Op, product: Product, scalar: type, device: str) -> wp.Launch:
    """This thread's recorded launch of the kernel that adds each element's partial sums,
    in order, its parameters unset: a result's (`codegen`'s `sum_partials`, a thread per
    element), or a VJP's broadcast gradient's (`blocks`', a block per element)."""
    cache = getattr(_local, "sums", None)
    if cache is None:
        cache = _local.sums = {}
    key = (op, product, scalar, device, on_gpu_route())
    launch = cache.get(key)
    if launch is None:
        if product == Product.VJP:
            kernel = blocks.kernels(op, scalar)["sum_partials"]
            dim, block_dim, arrays = (1, SUM_BLOCK), SUM_BLOCK, [None] * (2 * len(op.operands))
        else:
            kernel = codegen.kernels(op, product, scalar)["sum_partials"]
            dim, block_dim, arrays = 1, None, [None] * (2 * len(op.results))
        with record_lock, blocks.cpu_blocks(device, block_dim):
            launch = cache[key] = wp.launch(
                kernel, dim=dim, inputs=[indexing.FlatGrid(), *arrays], device=device,
                block_dim=block_dim, record_cmd=True,
            )  # fmt: skip
    return launch
