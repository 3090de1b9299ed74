"""Warp's private ABI, in one room: what xform reads and writes of Warp's recorded launches
beyond Warp's public API, to set a launch's arrays from raw pointers (`Reusable`), to
call a CPU kernel's entry point with an argument struct built here, and to read a launch
as bytes for a native executor (`launch/program.py`).

All of it leans on Warp internals (the `_cpu_forward` entry point's ABI, `Launch.params`
and `hooks`, `array_t`), hence the version gate: on a warp-lang that was not tested here,
`argument_struct` returns None and Warp's own launch runs, and the native paths stand
aside (`warp_tested`).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import warp as wp

from . import source

# warp-lang versions (major.minor) whose internals the native paths were tested against:
# the CPU entry points called with a struct built here, the recorded programs, the JAX
# handler. On any other version those paths stand aside for Warp's own.
TESTED_WARP = ("1.19",)

# The ctypes struct a Warp kernel takes for an array, read off a public object.
ARRAY_T = type(wp.zeros(1, dtype=wp.float32, device="cpu").__ctype__())


def warp_tested() -> bool:
    """Whether the running warp-lang is a version the native paths were tested with."""
    return ".".join(wp.config.version.split(".")[:2]) in TESTED_WARP


@functools.cache
def element_bytes(element: tuple[int, ...], scalar: type) -> int:
    return wp.types.type_size_in_bytes(source.value_type(element, scalar))


def array_param(ptr: int, element, scalar: type, offset: int, total: int):
    """A 1-D Warp array of elements starting `offset` elements into the memory at `ptr`."""
    if not ptr:
        return ARRAY_T()
    size = element_bytes(element, scalar)
    return ARRAY_T(
        data=ptr + offset * size, grad=0, ndim=1, shape=(total - offset,), strides=(size,)
    )


def argument_struct(launch) -> ctypes.Structure | None:
    """The struct of arguments that Warp's CPU `invoke` passes a launch's entry point,
    filled from the launch's parameters as they stand: a field per kernel argument, named
    by its label. None where the parameters do not match the kernel's arguments, or
    where this warp-lang is not a tested version (then Warp's own launch runs)."""
    if not warp_tested():
        return None
    params = launch.params
    fields = [(arg.label, type(p)) for arg, p in zip(launch.kernel.adj.args, params[1:])]
    if len(fields) != len(params) - 1:
        return None
    return type("Args", (ctypes.Structure,), {"_fields_": fields})(*params[1:])


def is_array(kind: type) -> bool:
    """Warp's `array_t` (its data pointer first), as a kernel argument's ctypes type."""
    names = [name for name, *_ in getattr(kind, "_fields_", ())]
    return names[:1] == ["data"] and "shape" in names and "strides" in names


def array_data(array) -> int:
    """The data pointer of an `array_t` parameter (0 for a null array)."""
    return ctypes.c_uint64.from_buffer_copy(bytes(array)[:8]).value


class Reusable:
    """A recorded Warp launch whose array parameters are rewritten in place on every call.

    Each array parameter is one ctypes struct made once and handed to Warp once; a call
    rewrites its pointer and length (~0.3 µs, where making a struct costs ~2 µs). On CPU
    the kernel's entry point is called with an argument struct kept from call to call, as
    `Launch.launch` would call it after rebuilding that struct field by field (~5 µs):
    the array structs are views into it. Small calls spent a third of their time on
    these (benchmarks/NOTES.md, 27). Without `entry_point`, Warp's own launch call runs
    (as on a GPU)."""

    def __init__(self, launch: wp.Launch, entry_point: bool = True):
        self.launch = launch
        self.arrays: dict[int, Any] = {}
        self.args = None
        if (
            entry_point
            and launch.device.is_cpu
            and not launch.adjoint
            and launch.block_dim <= 1
            and getattr(launch.hooks, "forward", None)
        ):
            self.args = argument_struct(launch)
        if self.args is not None:
            self.entry, self.bounds = launch.hooks.forward, ctypes.byref(launch.params[0])
            self.args_ref = ctypes.byref(self.args)

    def set_array(self, index: int, ptr: int, element, scalar: type, offset: int, total: int):
        """Array parameter `index`: the `total - offset` elements from element `offset` of
        the memory at `ptr` (a null array where `ptr` is 0)."""
        array = self.arrays.get(index)
        if array is None:
            size = element_bytes(element, scalar)
            if self.args is None:
                struct = ARRAY_T(grad=0, ndim=1, strides=(size,))
            else:  # a view into the argument struct: rewriting it rewrites the argument
                struct = getattr(self.args, self.args._fields_[index][0])
                struct.grad, struct.ndim, struct.strides[0] = 0, 1, size
            self.launch.set_param_at_index_from_ctype(index, struct)
            array = self.arrays[index] = struct, struct.shape, size
        struct, shape, size = array
        if ptr:
            struct.data, shape[0] = ptr + offset * size, total - offset
        else:
            struct.data, shape[0] = 0, 0

    def run(self, stream) -> None:
        if self.args is not None:
            self.entry(self.bounds, self.args_ref)
        else:
            self.launch.launch(stream)


def cpu_launch_bytes(launch) -> tuple[int, bytes, ctypes.Structure]:
    """A plain CPU launch as its entry point, its launch bounds' bytes and its argument
    struct; raises ValueError where it is not one this module can read."""
    if not launch.device.is_cpu or launch.adjoint or launch.block_dim > 1:
        raise ValueError("only plain forward CPU launches are recorded")
    entry = ctypes.cast(launch.hooks.forward, ctypes.c_void_p).value
    if not entry:
        raise ValueError("the kernel has no CPU entry point")
    args = argument_struct(launch)
    if args is None:
        raise ValueError("the launch's parameters do not match its kernel's arguments")
    return entry, bytes(launch.params[0]), args


def cuda_launch_fields(launch) -> tuple[int, list[int], list]:
    """A CUDA launch's function and the numbers Warp's launcher takes (context, size, max
    blocks, block dim, grid stride, cluster dim, shared bytes), and its parameters."""
    if launch.adjoint:
        raise ValueError("only forward CUDA launches are recorded")
    function = launch.hooks.forward
    function = getattr(function, "value", function)
    if not function:
        raise ValueError("the kernel has no CUDA function")
    numbers = [
        int(launch.device.context or 0), int(function), int(launch.bounds.size),
        int(launch.max_blocks), int(launch.block_dim), int(launch.grid_stride),
        int(launch.cluster_dim), int(launch.hooks.forward_smem_bytes),
    ]  # fmt: skip
    return int(function), numbers, list(launch.params)
