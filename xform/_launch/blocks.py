"""The GPU's VJP where an operand is broadcast along the innermost launch dimension (one
pose for many points, each pose of a batch for its own points), or is one element for
the whole launch: its gradient is a sum over launch indices, taken by blocks, in an order
fixed by the launch, with no atomics.

Each block of `tiling.SUM_BLOCK` threads takes one chunk of one element's summands (the
launch indices `chunk_bounds` gives it; `tiling.summed_in_blocks` sizes the chunks).
Its threads stride through the chunk, so that neighbouring threads read neighbouring
elements of the operands that are not broadcast, store those operands' gradients (dense:
one element per index) and sum the broadcast operands' cotangents in registers; Warp's
`tile_sum` then adds the threads' sums (shuffles within each warp, then the warps' sums
in order), and one thread adds the block's sum into the gradient. Where a gradient's
element sums over several blocks (its summands span several chunks, or it is one element
for a launch of several), each block stores its sum as a partial sum instead, and
`sum_partials` adds them, in order, one block per element (`tiling.block_partials`).
The same bits on every run of the same launch: for these operands this replaces the
warp-level adds of `indexing.SHARED_ADD`, whose atomics land in whatever order the warps
reach them.

The kernels run on the CPU too, as the GPU runs them, in tests (`tiling.gpu_route`):
Warp's cooperative CPU blocks (`wp.config.enable_cpu_blocks`) give each block its threads.
"""

from __future__ import annotations

import contextlib
import functools

import warp as wp

from .._op import Op, Product
from .codegen import _gradient, _load, _targets, compile_module, kernel_source, signature
from .source import tuple_source, zero_source

VJP = Product.VJP


def _body(op: Op) -> list[str]:
    """One block per chunk: `chunk, lane = wp.tid()`."""
    n = len(op.operands)
    targets = _targets(op, VJP)
    lines = [
        "chunk, lane = wp.tid()",
        "element, first, last = chunk_bounds(grid, chunk)",
        "at = unravel(grid, first)",
    ]
    lines += [f"e{k} = element_index(at, s{k})" for k in range(n)]
    # Every operand read at the chunk's first index; those not broadcast along the
    # chunk (innermost stride not 0) again at each index.
    for k in range(n):
        lines += _load(op, k, VJP, f"e{k}")
    lines += [f"sum{k} = {zero_source(f'X{k}', op.operands[k].value_element)}" for k in targets]
    loop = ["i = first + j"]
    for k in reversed(range(n)):
        loop += [f"if s{k}[0] != 0:"] + [
            "    " + x for x in _load(op, k, VJP, f"e{k} + j * s{k}[0]")
        ]
    reads = [f"gr{j}[i]" for j in range(len(op.results))]
    xs = [f"x{k}" for k in range(n)] + reads
    loop.append(f"{tuple_source([f'b{k}' for k in range(n)])} = V({tuple_source(xs)})")
    for k in targets:
        loop += [
            f"if dense(grid, {k}):",
            f"    if ga{k}.shape[0] > 0:",
            f"        SS{k}(ga{k}, e{k} + j * s{k}[0], {_gradient(op, k, f'b{k}')})",
            "else:",
            f"    sum{k} = sum{k} + b{k}",
        ]
    lines.append("for j in range(lane, last - first, wp.block_dim()):")
    lines += ["    " + line for line in loop]
    for k in targets:  # a branch every thread of the block takes alike (tile_sum is collective)
        lines += [
            f"if not dense(grid, {k}) and ga{k}.shape[0] > 0:",
            f"    total{k} = wp.tile_sum(wp.tile(sum{k}, preserve_type=True))[0]",
            "    if lane == 0:",
            f"        gradient{k} = {_gradient(op, k, f'total{k}')}",
            f"        if grid.chunks == 1 and (grid.size == grid.reduce or not one_element(s{k})):",
            f"            ga{k}[e{k}] = ga{k}[e{k}] + gradient{k}",
            "        else:",
            f"            ga{k}[chunk] = gradient{k}",
        ]
    return lines


def _sum_partials_body(op: Op) -> list[str]:
    """One block per element: its `grid.chunks` partial sums added, in order within each
    thread, then across the block by `tile_sum`, into the gradient."""
    lines = ["element, lane = wp.tid()"]
    for k in _targets(op, VJP):
        zero = zero_source(f"A{k}", op.operands[k].element)
        lines += [
            f"if p{k}.shape[0] > 0:",
            f"    t{k} = {zero}",
            "    for c in range(lane, grid.chunks, wp.block_dim()):",
            f"        t{k} = t{k} + p{k}[element * grid.chunks + c]",
            f"    s{k} = wp.tile_sum(wp.tile(t{k}, preserve_type=True))[0]",
            "    if lane == 0:",
            f"        r{k}[element] = r{k}[element] + s{k}",
        ]
    return lines


@functools.cache
def kernels(op: Op, scalar: type) -> dict:
    """The VJP kernels of `op` that sum its broadcast operands' gradients in blocks, keyed
    as `codegen.kernels`' (FlatGrid or Grid), and "sum_partials" (parameters: a FlatGrid,
    then a partial-sums array per operand, then a gradient per operand), in a Warp module
    of their own (the CPU, which never launches them, never compiles them)."""
    n = len(op.operands)
    source = ""
    for grid in ("FlatGrid", "Grid"):
        source += kernel_source(f"vjp_blocks_{grid.lower()}", signature(op, VJP, grid), _body(op))
    params = ["grid: FlatGrid"] + [f"p{k}: wp.array(dtype=A{k})" for k in range(n)]
    params += [f"r{k}: wp.array(dtype=A{k})" for k in range(n)]
    source += kernel_source("sum_partials", tuple_source(params), _sum_partials_body(op))
    built = compile_module(op, VJP, scalar, "vjp_blocks", source)
    return {
        True: built["vjp_blocks_flatgrid"],
        False: built["vjp_blocks_grid"],
        "sum_partials": built["sum_partials"],
    }


@contextlib.contextmanager
def cpu_blocks(device: str, block_dim: int | None):
    """Around recording a launch of `block_dim` threads a block (None: not one of these
    kernels'): on the CPU (the GPU's route, in tests), blocks of that many threads, as
    Warp runs them with `enable_cpu_blocks` (read when a launch is recorded)."""
    if device != "cpu" or block_dim is None:
        yield
        return
    previous = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = True
    try:
        yield
    finally:
        wp.config.enable_cpu_blocks = previous
