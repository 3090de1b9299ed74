"""Repeated calls: a checked call's launch, remembered per thread, so that the next call
with the same operands' shapes, dtypes and devices goes straight to it (allocate the
results, set the pointers, call the kernel: nothing else)."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import warp as wp

from .._op import Op, Product
from . import kernels
from .steps import Launch, Step
from .tiling import on_gpu_route
from .warp_abi import Reusable

# Per thread, as the recorded launches are; bounded: one per distinct call signature.
REPEATS_PER_THREAD = 512

_local = threading.local()


@dataclass(frozen=True)
class Repeat:
    """What a plain launch (one tile, one thread, no scatter, no sum) of a product needs
    again on the next call with the same operands' shapes, dtypes and devices: this
    thread's recorded launch; the slots (parameter index, element shape, element offset,
    element count) of the caller's arrays (the operands, then a VJP's cotangents) and of
    the arrays the call makes; and those arrays: (shape, zero-filled) each, or None for a
    null parameter (a gradient nobody asked for)."""

    launch: Reusable
    scalar: type
    device: str
    inputs: tuple[tuple[int, tuple[int, ...], int, int], ...]
    outputs: tuple[tuple[int, tuple[int, ...], int, int], ...]
    made: tuple[tuple[tuple[int, ...], bool] | None, ...]


def remember(op: Op, product: Product, key: Hashable, steps: list[Step], made) -> None:
    """Keep a checked call's launch under `key`, if its steps are one plain launch of one
    tile (the caller's arrays first, then the `made` arrays)."""
    if len(steps) != 1 or not isinstance(steps[0], Launch) or op.scatters:
        return
    (launch,) = steps
    if launch.parallel or len(launch.tiles) != 1 or not launch.tiles[0].count:
        return
    (tile,) = launch.tiles
    slots = tuple(
        (a.index, a.element,
         tile.offsets[a.operand] if a.operand is not None else tile.result_offset, a.total)
        for a in launch.arrays
    )  # fmt: skip
    remembered = getattr(_local, "repeats", None)
    if remembered is None:
        remembered = _local.repeats = {}
    if len(remembered) >= REPEATS_PER_THREAD:
        remembered.clear()
    inputs = len(slots) - len(made)
    recorded = kernels.reusable(op, product, launch.scalar, launch.device, tile)
    remembered[op, product, key, on_gpu_route()] = Repeat(
        recorded, launch.scalar, launch.device, slots[:inputs], slots[inputs:], tuple(made)
    )


def repeat(
    op: Op,
    product: Product,
    key: Hashable,
    pointers: Sequence[int],
    allocate,
    allocate_zeros,
) -> list[Any] | None:
    """`product` ("forward" or "vjp") of the contiguous arrays at `pointers` (the
    operands, then a VJP's cotangents), given a `key` that an earlier checked call on this
    thread passed to `forward` or `vjp` with arrays that passed every check: the key must
    determine every array's shape, dtype and device (and a VJP's `needed`). Returns what
    that product returns, or None where no such call left a launch to repeat (the caller
    then takes the checked path, with the key)."""
    remembered = getattr(_local, "repeats", None)
    entry = remembered.get((op, product, key, on_gpu_route())) if remembered else None
    if entry is None:
        return None
    scalar, device, launch = entry.scalar, entry.device, entry.launch
    for (index, element, offset, total), ptr in zip(entry.inputs, pointers):
        launch.set_array(index, ptr, element, scalar, offset, total)
    arrays = []
    for (index, element, offset, total), made in zip(entry.outputs, entry.made):
        if made is None:
            launch.set_array(index, 0, element, scalar, offset, total)
            arrays.append(None)
            continue
        native, ptr = (allocate_zeros if made[1] else allocate)(made[0], scalar, device)
        launch.set_array(index, ptr, element, scalar, offset, total)
        arrays.append(native)
    launch.run(None if device == "cpu" else wp.get_stream(device))
    return arrays
