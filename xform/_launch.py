"""The launch layer: validate operands, then run an op's forward, VJP or tangent kernel.

Operands arrive as `Buffer`s: a pointer to contiguous memory with its shape, dtype and
device, and the object that owns the memory. `as_buffer` makes one from a NumPy array, a
Warp array or any DLPack-capable array (non-contiguous ones are copied once, on their
own device); the adapters make them straight from their tensors, which is cheaper.
Everything is checked before any kernel runs.

The hot path is short: the launch plan is cached per (op, shapes), and each kernel is
launched through a recorded Warp `Launch` (one per thread and launch shape) whose array
parameters are set from raw pointers. Large CPU launches are split over a thread pool
(Warp's CPU launches are serial but release the GIL). Warp's CPU atomics are plain adds,
so a parallel VJP gives every chunk its own partial gradient for each operand that all
chunks read, and sums the partials afterwards.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import functools
import math
import os
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import warp as wp

from . import _codegen, _indexing
from ._layout import LaunchPlan, plan_launch
from ._program import argument_struct

if TYPE_CHECKING:
    from ._op import Op

FLOAT_TYPES = {"float32": wp.float32, "float64": wp.float64}

# allocate(shape, scalar_type, device) -> (the caller's array, pointer to its memory)
Allocator = Callable[[tuple[int, ...], type, str], tuple[Any, int]]

# CPU launches of at least this many elements are split over the thread pool.
PARALLEL_MIN_ELEMENTS = 1 << 15
# Launch indices per thread for kernels that loop over runs: a CPU thread's run, and a GPU
# thread's when a VJP sums a shared gradient (see `_run_shape`).
CPU_RUN = 256
GPU_RUN = 16


def available_cpus(cgroup: str = "/sys/fs/cgroup") -> int:
    """The CPUs this process may run on: its affinity mask, and a cgroup's CPU quota
    (a container's limit) where one is set; os.cpu_count() counts the machine's."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        count = os.cpu_count() or 1
    quota = _cgroup_cpus(cgroup)
    return max(1, count if quota is None else min(count, quota))


def _cgroup_cpus(root: str) -> int | None:
    """The CPUs a cgroup's quota allows, rounded up (v2's cpu.max, v1's cfs files); None
    where there is no quota or no cgroup file to read."""

    def read(name: str) -> str | None:
        try:
            with open(os.path.join(root, name)) as file:
                return file.read().strip()
        except OSError:
            return None

    v2 = read("cpu.max")
    fields = (
        v2.split()
        if v2 is not None
        else [read("cpu/cpu.cfs_quota_us"), read("cpu/cpu.cfs_period_us")]
    )
    try:
        quota, period = int(fields[0]), int(fields[1])
    except (TypeError, ValueError, IndexError):  # "max": no limit
        return None
    return -(-quota // period) if quota > 0 and period > 0 else None


THREADS = available_cpus()


@dataclass(frozen=True)
class Buffer:
    """An operand's memory: `ptr` to contiguous elements, kept alive by `owner`. A
    non-contiguous operand comes with `contiguous`, which makes the copy; it is called
    only once the operand has passed every check (a huge broadcast view is refused before
    anything is copied)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: str
    device: str
    owner: Any
    contiguous: Callable[[], tuple[int, Any]] | None = None

    def materialised(self) -> Buffer:
        if self.contiguous is None:
            return self
        ptr, owner = self.contiguous()
        return Buffer(ptr, self.shape, self.dtype, self.device, owner)


@dataclass(frozen=True)
class Operands:
    """An op's operands, validated: contiguous buffers on one device with one float
    dtype, and the launch plan for their shapes."""

    op: Op
    buffers: tuple[Buffer, ...]
    scalar: type
    device: str
    plan: LaunchPlan

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(b.shape for b in self.buffers)

    def result_shape(self, index: int) -> tuple[int, ...]:
        like = self.op.like[index]
        if like is not None:
            return self.shapes[like]
        return self.plan.batch_shape + self.op.results[index].element


# --- buffers ---------------------------------------------------------------------------


def _warp_buffer(a: wp.array, shape: tuple[int, ...] | None = None) -> Buffer:
    """A Buffer of a Warp array (copied once, later, if not contiguous). A Warp array of
    vec3 with shape (N,) has shape (N, 3)."""
    dtype = getattr(a.dtype, "_wp_scalar_type_", a.dtype)
    if shape is None:
        shape = tuple(a.shape) + tuple(getattr(a.dtype, "_shape_", ()))
    if a.is_contiguous:
        return Buffer(a.ptr or 0, shape, dtype.__name__, str(a.device), a)

    def copy():
        c = a.contiguous()
        return c.ptr or 0, c

    return Buffer(0, shape, dtype.__name__, str(a.device), a, copy)


def is_number(x: Any) -> bool:
    """A Python or NumPy number (not a bool)."""
    return isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))


def as_buffer(op: Op, name: str, x: Any) -> Buffer:
    """A Buffer of a NumPy, Warp or DLPack-capable array, read in place if contiguous."""
    if isinstance(x, Buffer):
        return x
    if is_number(x):
        x = np.asarray(x)  # a number: a 0-d array of its own dtype (a Python float: float64)
    if isinstance(x, np.ndarray):
        if x.flags.c_contiguous and x.dtype.isnative:
            return Buffer(x.ctypes.data, x.shape, x.dtype.name, "cpu", x)

        def copy():  # non-contiguous or of non-native byte order: read once, natively
            c = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
            return c.ctypes.data, c

        return Buffer(0, x.shape, x.dtype.name, "cpu", x, copy)
    if isinstance(x, wp.array):
        if wp.types.type_is_quaternion(x.dtype):
            raise TypeError(
                f"{op.name}: argument '{name}' is a Warp array of {x.dtype.__name__}, which "
                "Warp stores as [x, y, z, w]; xform's quaternions are [w, x, y, z]. Pass an "
                "array of vec4 (or of floats with a last axis of 4) in xform's order"
            )
        return _warp_buffer(x)
    if hasattr(x, "__dlpack__"):
        try:
            view = wp.from_dlpack(x)
        except Exception as exc:  # an unsupported dtype is the usual cause
            raise TypeError(
                f"{op.name}: argument '{name}' ({type(x).__name__}) could not be viewed "
                f"through DLPack: {exc}"
            ) from exc
        # Keep the caller's shape: a 0-d array stays 0-d, which Warp cannot express.
        return _warp_buffer(view, tuple(x.shape) if hasattr(x, "shape") else None)
    raise TypeError(
        f"{op.name}: argument '{name}' must be an array (NumPy, Warp, or DLPack-capable), "
        f"got {type(x).__name__}"
    )


def check_dtypes(op: Op, dtypes: Sequence[str]) -> str:
    """The one float dtype ("float32" or "float64") of all operands, given their names;
    TypeError naming the first operand that breaks the rule."""
    for operand, dtype in zip(op.operands, dtypes):
        if dtype not in FLOAT_TYPES:
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


@functools.lru_cache(maxsize=1024)
def _cached_plan(op: Op, shapes: tuple[tuple[int, ...], ...], prefix: int) -> LaunchPlan:
    return plan_launch(op, list(shapes), prefix)


def prepare(op: Op, args: Sequence[Any], prefix: int = 0) -> Operands:
    """Validate `args` against `op` (dtype, shape, device) and make them contiguous.
    `prefix` leading dimensions of every argument come from a vectorising transform."""
    if len(args) != len(op.operands):
        raise TypeError(f"{op.name}: takes {len(op.operands)} arrays, got {len(args)}")
    buffers = tuple(as_buffer(op, o.name, x) for o, x in zip(op.operands, args))
    dtype = check_dtypes(op, [b.dtype for b in buffers])
    plan = _cached_plan(op, tuple(b.shape for b in buffers), prefix)
    device = buffers[0].device
    for operand, b in zip(op.operands, buffers):
        if b.device != device:
            raise ValueError(
                f"{op.name}: argument '{operand.name}' is on {b.device} but "
                f"'{op.operands[0].name}' is on {device}; all arguments must be on one device"
            )
    buffers = tuple(b.materialised() for b in buffers)
    return Operands(op, buffers, FLOAT_TYPES[dtype], device, plan)


# --- kernels --------------------------------------------------------------------------------

# Once, at import: DLPack views need the runtime, and no call should pay for starting it.
wp.init()


# --- tiles: what one launch covers ----------------------------------------------------------


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
    # A launch of some of a sum's chunks (see `_summing_tiles`): the first, and how many.
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
def _tiles(plan: LaunchPlan, parts: int) -> tuple[Tile, ...]:
    """Launches covering `plan.grid`. Grids deeper than MAX_GRID_DIMS (rare interleaved
    broadcasts) loop over their outer dimensions; `parts` > 1 also splits the outermost
    launched dimension into that many ranges, for the thread pool. (A split of an op that
    sums over groups falls between result elements, or all indices sum into one.)"""
    depth = _indexing.MAX_GRID_DIMS
    outer_ndim = max(0, len(plan.grid) - depth)
    inner = list(plan.grid[outer_ndim:])
    tiles = []
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
            tiles.append(
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
    return tuple(tiles)


@functools.lru_cache(maxsize=1024)
def _summing_tiles(plan: LaunchPlan, parts: int) -> tuple[Tile, ...]:
    """The launches of a kernel that sums over groups: its chunks (each result element's,
    in a row) in `parts` ranges, each writing its own range of the partial sums."""
    if not plan.size:
        return ()
    (whole,) = _tiles(plan, 1)  # a sum's grid fits one launch (see _layout)
    chunks = plan.results * _chunks(plan.reduce)
    bounds = np.linspace(0, chunks, min(parts, chunks) + 1).astype(int).tolist()
    return tuple(
        dataclasses.replace(whole, result_offset=first, first_chunk=first, chunks=last - first)
        for first, last in zip(bounds[:-1], bounds[1:])
    )


def _parts(operands: Operands) -> int:
    """Threads for a CPU launch: all of them from `PARALLEL_MIN_ELEMENTS` elements,
    weighted by `Op.work` (one on the GPU's route)."""
    if (
        operands.device == "cpu"
        and operands.plan.size * operands.op.work >= PARALLEL_MIN_ELEMENTS
        and not _on_gpu_route()
    ):
        return THREADS
    return 1


def _summing(op: Op, kind: str) -> bool:
    """Whether `kind`'s kernel of `op` sums launch indices into each result element."""
    return bool(op.reduced) and kind != "vjp"


def _chunk(reduce: int) -> int:
    """Summands per thread of an op that sums over groups: about the square root of each
    sum's, so that neither the chunks' loops nor the partial sums per element grow long."""
    return max(32, math.isqrt(max(reduce - 1, 0)) + 1)


def _chunks(reduce: int) -> int:
    return -(-reduce // _chunk(reduce))


def scratch_shapes(op: Op, kind: str, shapes, prefix: int = 0) -> list[tuple[int, ...]]:
    """The partial sums that `kind` of an op that sums over groups allocates, after its
    results and through the same allocator (an FFI caller provides them as outputs)."""
    if not _summing(op, kind):
        return []
    return _partial_shapes(op, _cached_plan(op, tuple(map(tuple, shapes)), prefix))


def _partial_shapes(op: Op, plan: LaunchPlan) -> list[tuple[int, ...]]:
    """One partial sum per chunk and result element; none where each sum is one chunk
    (its chunk's sum is the result). Always one array per result, for the FFI's sake."""
    chunks = _chunks(plan.reduce)
    return [(plan.results * chunks if chunks > 1 else 0, *r.element) for r in op.results]


# --- recorded launches, fed raw pointers --------------------------------------------------

_local = threading.local()
_record_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _thread_pool() -> ThreadPoolExecutor:
    global _pool
    with _record_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="xform")
    return _pool


def _after_fork_in_child() -> None:
    """A forked child inherits the pool object but none of its threads (it would wait on
    them forever), and maybe a lock that a thread of the parent held: start afresh."""
    global _pool, _record_lock
    _pool = None
    _record_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def recording(recorder):
    """Record this thread's launches, zero-fills and partial sums into `recorder` (see
    `_program.py`) instead of running them: for native executors."""
    _local.recorder = recorder
    try:
        yield recorder
    finally:
        _local.recorder = None


def _recorder():
    """The recorder this thread's launches go to, or None: they run."""
    return getattr(_local, "recorder", None)


_gpu_route = [False]


@contextlib.contextmanager
def gpu_route():
    """Inside the block, CPU launches run as CUDA launches do, for tests on a machine
    with no GPU (in every thread: XLA's run JAX's calls): each one whole (no split over
    threads, no per-thread partial sums), through Warp's own launch call, and a VJP that
    adds into a broadcast operand's gradient with the GPU's strided runs (`_run_shape`),
    its adds then Warp's CPU atomics. Not for concurrent use."""
    previous = _gpu_route[0]
    _gpu_route[0] = True
    try:
        yield
    finally:
        _gpu_route[0] = previous


def _on_gpu_route() -> bool:
    return _gpu_route[0]


class Reusable:
    """A recorded Warp launch whose array parameters are rewritten in place on every call.

    Each array parameter is one ctypes struct made once and handed to Warp once; a call
    rewrites its pointer and length (~0.3 µs, where making a struct costs ~2 µs). On CPU
    the kernel's entry point is called with an argument struct kept from call to call, as
    `Launch.launch` would call it after rebuilding that struct field by field (~5 µs):
    the array structs are views into it. Small calls spent a third of their time on
    these (benchmarks/NOTES.md, 27)."""

    def __init__(self, launch: wp.Launch):
        self.launch = launch
        self.arrays: dict[int, Any] = {}
        self.args = None
        if (
            launch.device.is_cpu
            and not _on_gpu_route()
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
            size = _element_bytes(element, scalar)
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


def _execute(launch: Reusable | wp.Launch, stream) -> None:
    recorder = _recorder()
    if recorder is not None:
        recorder.launch(launch.launch if isinstance(launch, Reusable) else launch)
    elif isinstance(launch, Reusable):
        launch.run(stream)
    else:
        launch.launch(stream)


def _vec4(values, fill: int) -> wp.vec4i:
    return wp.vec4i(*(list(values) + [fill] * (_indexing.MAX_GRID_DIMS - len(values))))


def _recorded(op: Op, kind: str, scalar: type, device: str, tile: Tile) -> Reusable:
    """A recorded launch of `op`'s kernel for one tile, with its grid and strides set;
    one per thread, as the caller sets its array parameters."""
    cache = getattr(_local, "launches", None)
    if cache is None:
        cache = _local.launches = collections.OrderedDict()
    key = (op, kind, scalar, device, tile.grid, tile.strides, tile.count, tile.dense,
           tile.reduce, tile.first_chunk, tile.chunks, _on_gpu_route())  # fmt: skip
    launch = cache.get(key)
    if launch is not None:
        cache.move_to_end(key)
        return launch
    with _record_lock:  # Warp's launch recording (module loading) is not thread-safe
        launch = cache[key] = Reusable(record(op, kind, scalar, device, tile))
    if len(cache) > 256:
        cache.popitem(last=False)
    return launch


def _run_shape(op: Op, kind: str, device: str, tile: Tile) -> tuple[int, int]:
    """(run, step) of the grid (see `_indexing.Grid`) for ops whose kernels loop over runs:
    on CPU, runs of CPU_RUN consecutive indices; on a GPU, a kernel that adds into an
    array shaped like a broadcast operand (a VJP's gradient, `Op.scattered`) takes every
    step-th index in a run of GPU_RUN, summing in
    registers before one add per run and element, and everything else one index."""
    if not op.loops_over_runs(kind):
        return 1, 1
    if device == "cpu" and not _on_gpu_route():
        return CPU_RUN, 1
    shared = sum(1 << k for k in op.scattered(kind)) & ~tile.dense
    if shared:
        return GPU_RUN, -(-tile.count // GPU_RUN)
    return 1, 1


def record(op: Op, kind: str, scalar: type, device: str, tile: Tile) -> wp.Launch:
    """A new recorded launch for one tile, with its grid and strides set and its arrays
    null: of `op`'s forward, tangent or VJP kernel (`kind`)."""
    flat = len(tile.grid) <= 1
    if flat:
        grid = _indexing.FlatGrid()
    else:
        grid = _indexing.Grid()
        grid.ndim = len(tile.grid)
        grid.shape = _vec4(tile.grid, 1)
    grid.size = tile.count
    grid.run, grid.step = _run_shape(op, kind, device, tile)
    grid.dense = tile.dense
    grid.reduce = max(tile.reduce, 1)
    dim = -(-tile.count // grid.run) if grid.step == 1 else grid.step
    if _summing(op, kind):  # a thread per chunk of each result element's summands
        grid.run = _chunk(tile.reduce)
        grid.chunks = _chunks(tile.reduce)
        grid.first_chunk = tile.first_chunk
        dim = tile.chunks
    inputs: list[Any] = [grid]
    for strides in tile.strides:
        inputs += [None, _vec4(strides, 0)]
    # Array parameters after the operands: results (forward), or operands' tangents and
    # results' (tangent), or results' cotangents and operands' gradients (VJP).
    inputs += [None] * (len(op.results) + (0 if kind == "forward" else len(op.operands)))
    try:
        return wp.launch(
            _codegen.kernel(op, kind, scalar, flat),
            dim=dim,
            inputs=inputs,
            device=device,
            record_cmd=True,
        )
    except Exception as exc:  # Warp generating or compiling the kernel (first use only)
        operands = ", ".join(f"{o.name} {o.value_element}" for o in op.operands)
        results = ", ".join(f"{r.name} {r.element}" for r in op.results)
        raise TypeError(
            f"xform.{op.name}: Warp could not build the op's {kind} kernel for "
            f"{scalar.__name__} on {device}. Its element function '{op.function.key}' must "
            f"take ({operands}) and return ({results}) as declared, as must any closed-form "
            f"tangent or VJP; Warp said: {exc}"
        ) from exc


# The ctypes struct a Warp kernel takes for an array, read off a public object.
ARRAY_T = type(wp.zeros(1, dtype=wp.float32, device="cpu").__ctype__())


@functools.cache
def _element_bytes(element: tuple[int, ...], scalar: type) -> int:
    return wp.types.type_size_in_bytes(_codegen.value_type(element, scalar))


def _array_param(ptr: int, element, scalar: type, offset: int, total: int):
    """A 1-D Warp array of elements starting `offset` elements into the memory at `ptr`."""
    if not ptr:
        return ARRAY_T()
    size = _element_bytes(element, scalar)
    return ARRAY_T(
        data=ptr + offset * size, grad=0, ndim=1, shape=(total - offset,), strides=(size,)
    )


def _run(operands: Operands, kind: str, arrays: list[tuple], parts: int = 1) -> None:
    """Launch `kind` ("forward", "tangent" or "vjp") over every tile. `arrays` lists
    (parameter index, pointer, element shape, element count, operand) for every array
    parameter: its pointer moves with that operand's tile offset, or with the tile's
    result offset where the operand is None."""
    op = operands.op
    stream = None if operands.device == "cpu" else wp.get_stream(operands.device)

    if _summing(op, kind):  # (a sum over no summands launches only `sum_partials`)
        tiles = _summing_tiles(operands.plan, parts)
    else:
        tiles = _tiles(operands.plan, parts)

    def launch_tile(k: int):
        tile = tiles[k]
        launch = _recorded(op, kind, operands.scalar, operands.device, tile)
        for index, ptr, element, total, operand in arrays:
            if callable(ptr):  # a per-tile buffer
                ptr = ptr(k)
            offset = tile.offsets[operand] if operand is not None else tile.result_offset
            launch.set_array(index, ptr, element, operands.scalar, offset, total)
        _execute(launch, stream)

    recorder = _recorder()
    if recorder is not None:  # the tiles as one step whose launches may run concurrently
        with recorder.group(parallel=len(tiles) > 1 and parts > 1):
            for k in range(len(tiles)):
                launch_tile(k)
    elif len(tiles) > 1 and parts > 1:
        # The calling thread takes the first tile: one hand-off fewer.
        pending = [_thread_pool().submit(launch_tile, k) for k in range(1, len(tiles))]
        raised = None
        try:
            launch_tile(0)
        except BaseException as exc:  # re-raised once every tile is done
            raised = exc
        _wait_for_all(pending, raised)
    else:
        for k in range(len(tiles)):
            launch_tile(k)


def _sum_partials(operands: Operands, kind: str, partials, results, stream=None) -> None:
    """Add each result element's partial sums, in order, into the results (all of them:
    with no summands, zeros)."""
    op = operands.op
    key = (op, kind, operands.scalar, operands.device)
    cache = getattr(_local, "sums", None)
    if cache is None:
        cache = _local.sums = {}
    launch = cache.get(key)
    if launch is None:
        kernel = _codegen.kernels(op, kind, operands.scalar)["sum_partials"]
        with _record_lock:
            launch = cache[key] = wp.launch(
                kernel, dim=1, inputs=[_indexing.FlatGrid()] + [None] * (2 * len(op.results)),
                device=operands.device, record_cmd=True,
            )  # fmt: skip
    count, chunks = operands.plan.results, _chunks(operands.plan.reduce)
    grid = _indexing.FlatGrid()
    grid.size, grid.chunks = count, chunks
    launch.set_dim(count)
    launch.set_param_at_index(0, grid)
    r = len(op.results)
    for j, ptr in enumerate([*partials, *results]):
        total = count * chunks if j < r else count
        launch.set_param_at_index_from_ctype(
            1 + j, _array_param(ptr, op.results[j % r].element, operands.scalar, 0, total)
        )
    _execute(launch, stream)


def _wait_for_all(futures, raised: BaseException | None = None) -> None:
    """Wait until every tile has finished, through Ctrl-C too: no launch may outlive the
    memory it writes, which the caller frees as soon as an exception reaches it. Then
    raise the first exception, a KeyboardInterrupt included."""
    for future in futures:
        while True:
            try:
                future.result()
                break
            except BaseException as exc:  # an interrupt while waiting, or the tile's own
                raised = raised or exc
                if future.done():
                    break
    if raised is not None:
        raise raised


def _elements(shape: tuple[int, ...], element: tuple[int, ...]) -> int:
    return math.prod(shape[: len(shape) - len(element)])


def _operand_params(operands: Operands, first: int = 1, step: int = 2, buffers=None):
    """Array parameters for one Buffer per operand. None sets the parameter to a null
    array, explicitly: a recorded launch keeps its parameters from the last call."""
    buffers = operands.buffers if buffers is None else buffers
    return [
        (first + step * k, 0, o.element, 0, k)
        if b is None
        else (first + step * k, b.ptr, o.element, _elements(b.shape, o.element), k)
        for k, (o, b) in enumerate(zip(operands.op.operands, buffers))
    ]


def _result_params(operands: Operands, first: int, pointers, total: int | None = None):
    """Array parameters for one array per result (the results, their tangents or their
    cotangents): over the launch's result elements, or `total` of them (partial sums), or,
    for a result like operand k, over operand k's elements, moving with its tile offset."""
    total = operands.plan.results if total is None else total
    op = operands.op
    return [
        (first + j, ptr, r.element, total, None)
        if k is None
        else (first + j, ptr, r.element, _elements(operands.shapes[k], r.element), k)
        for j, (r, ptr, k) in enumerate(zip(op.results, pointers, op.like))
    ]


# --- the three products -------------------------------------------------------------------


def forward(
    operands: Operands,
    allocate: Allocator,
    allocate_zeros: Allocator | None = None,
    repeat_key: Hashable | None = None,
) -> list[Any]:
    """Run the op; return its results as the arrays that `allocate` made (those of an op
    whose results are `like` operands and add into them: `allocate_zeros`, where added).
    Given `repeat_key`, later calls with that key may go through `repeat`."""
    op = operands.op
    params = _operand_params(operands)
    if op.scatters:
        first = 1 + 2 * len(op.operands)
        return _scattering(operands, "forward", params, first, allocate, allocate_zeros)
    shapes = [operands.result_shape(k) for k in range(len(op.results))]
    results = [allocate(shape, operands.scalar, operands.device) for shape in shapes]
    if operands.plan.results:
        pointers = [ptr for _, ptr in results]
        first = 1 + 2 * len(op.operands)
        launched = _launch_product(operands, "forward", params, first, pointers, allocate)
        if repeat_key is not None:
            made = [(shape, False) for shape in shapes]
            _remember(operands, "forward", repeat_key, launched, made)
    return [native for native, _ in results]


# --- repeated calls: a checked call's launch, remembered ------------------------------------


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


# Per thread, as the recorded launches are; bounded: one per distinct call signature.
REPEATS_PER_THREAD = 512


def _remember(operands: Operands, kind: str, key: Hashable, params, made) -> None:
    """Keep a checked call's launch under `key`, if it is a plain one. `params` are its
    array parameters (`_run`'s), the caller's first and then the `made` arrays'."""
    op, plan = operands.op, operands.plan
    if op.scatters or _summing(op, kind) or _parts(operands) > 1 or _recorder() is not None:
        return
    tiles = _tiles(plan, 1)
    if len(tiles) != 1 or not plan.size:
        return
    (tile,) = tiles
    slots = tuple(
        (index, element, tile.offsets[operand] if operand is not None else tile.result_offset,
         total)
        for index, _, element, total, operand in params
    )  # fmt: skip
    repeats = getattr(_local, "repeats", None)
    if repeats is None:
        repeats = _local.repeats = {}
    if len(repeats) >= REPEATS_PER_THREAD:
        repeats.clear()
    inputs = len(slots) - len(made)
    launch = _recorded(op, kind, operands.scalar, operands.device, tile)
    repeat = Repeat(
        launch, operands.scalar, operands.device, slots[:inputs], slots[inputs:], tuple(made)
    )
    repeats[op, kind, key, _on_gpu_route()] = repeat


def repeat(
    op: Op,
    kind: str,
    key: Hashable,
    pointers: Sequence[int],
    allocate: Allocator,
    allocate_zeros: Allocator,
) -> list[Any] | None:
    """`kind`'s product ("forward" or "vjp") of the contiguous arrays at `pointers` (the
    operands, then a VJP's cotangents), given a `key` that an earlier checked call on this
    thread passed to `forward` or `vjp` with arrays that passed every check: the key must
    determine every array's shape, dtype and device (and a VJP's `needed`). Returns what
    that product returns, or None where no such call left a launch to repeat (the caller
    then takes the checked path, with the key)."""
    repeats = getattr(_local, "repeats", None)
    remembered = repeats.get((op, kind, key, _on_gpu_route())) if repeats else None
    if remembered is None or _recorder() is not None:
        return None
    scalar, device, launch = remembered.scalar, remembered.device, remembered.launch
    for (index, element, offset, total), ptr in zip(remembered.inputs, pointers):
        launch.set_array(index, ptr, element, scalar, offset, total)
    arrays = []
    for (index, element, offset, total), made in zip(remembered.outputs, remembered.made):
        if made is None:
            launch.set_array(index, 0, element, scalar, offset, total)
            arrays.append(None)
            continue
        native, ptr = (allocate_zeros if made[1] else allocate)(made[0], scalar, device)
        launch.set_array(index, ptr, element, scalar, offset, total)
        arrays.append(native)
    launch.run(None if device == "cpu" else wp.get_stream(device))
    return arrays


def _scattering(
    operands: Operands,
    kind: str,
    params,
    first: int,
    allocate: Allocator,
    allocate_zeros: Allocator | None,
) -> list[Any]:
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
        _run_scattered(operands, kind, params, outputs)
    return [native for native, _ in results]


def _run_scattered(operands: Operands, kind: str, params, outputs) -> list[tuple]:
    """Launch `kind` given every array parameter but `outputs`: (parameter index, Buffer,
    operand k) for each array the kernel adds into in operand k's shape (`Op.scattered`;
    a null Buffer pointer where not needed). On CPU, split over the thread pool, with
    partial sums per thread for the arrays that every thread adds into. Returns the array
    parameters launched."""
    # Deep grids loop over overlapping outer tiles: they stay on one thread.
    deep = len(operands.plan.grid) > _indexing.MAX_GRID_DIMS
    parts = 1 if deep else _parts(operands)
    by_operand: list[Buffer | None] = [None] * len(operands.op.operands)
    for _, buffer, k in outputs:
        by_operand[k] = buffer if buffer.ptr else None
    partials = _partial_sums(operands, by_operand, parts)
    element = [o.element for o in operands.op.operands]
    params = params + [
        (
            index,
            partials[k].pointer if k in partials else buffer.ptr,
            element[k],
            _elements(buffer.shape, element[k]) if buffer.ptr else 0,
            k,
        )
        for index, buffer, k in outputs
    ]
    _run(operands, kind, params, parts)
    for partial in partials.values():
        partial.add_into_total()
    return params


def _launch_product(
    operands: Operands, kind: str, params, first_result: int, pointers, allocate
) -> list[tuple]:
    """Launch the forward or tangent, given every array parameter but the results'. An op
    that sums over groups writes partial sums (allocated here) and then adds them up.
    Returns the array parameters of the (first) launch."""
    # (Where each sum is one chunk, that chunk's sum is the result: straight in.)
    if not _summing(operands.op, kind) or _chunks(operands.plan.reduce) == 1:
        params = params + _result_params(operands, first_result, pointers)
        _run(operands, kind, params, _parts(operands))
        return params
    shapes = _partial_shapes(operands.op, operands.plan)
    partials = [allocate(shape, operands.scalar, operands.device) for shape in shapes]
    partial_pointers = [ptr for _, ptr in partials]
    total = shapes[0][0]
    params = params + _result_params(operands, first_result, partial_pointers, total)
    _run(operands, kind, params, _parts(operands))
    stream = None if operands.device == "cpu" else wp.get_stream(operands.device)
    _sum_partials(operands, kind, partial_pointers, pointers, stream)
    return params


def forward_params(operands: Operands, result_pointers) -> list[tuple]:
    """The forward launch's array parameters: the operands, then the results."""
    first_result = 1 + 2 * len(operands.op.operands)
    return _operand_params(operands) + _result_params(operands, first_result, result_pointers)


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
    go through `repeat`.

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
        _cotangent(operands, k, g, allocate_zeros) for k, g in enumerate(cotangents)
    ]
    if operands.plan.size and any(needed):
        n = len(op.operands)
        cotangent_pointers = [c.ptr for c in cotangent_buffers]
        params = _operand_params(operands)
        params += _result_params(operands, 1 + 2 * n, cotangent_pointers)
        first = 1 + 2 * n + len(op.results)
        outputs = [
            (first + k, Buffer(0, shape, "", operands.device, None), k)
            if g is None
            else (first + k, Buffer(g[1], shape, "", operands.device, g[0]), k)
            for k, (g, shape) in enumerate(zip(grads, operands.shapes))
        ]
        launched = _run_scattered(operands, "vjp", params, outputs)
        if repeat_key is not None and all(g is not None for g in cotangents):
            _remember(operands, "vjp", repeat_key, launched, made)
    return [None if grad is None else grad[0] for grad in grads]


def backward_params(operands: Operands, cotangent_pointers, grad_buffers):
    """The VJP launch's array parameters: those of the operands and cotangents, and
    those of the gradients."""
    n = len(operands.op.operands)
    cotangents = _result_params(operands, 1 + 2 * n, cotangent_pointers)
    grads = _operand_params(operands, 1 + 2 * n + len(operands.op.results), 1, grad_buffers)
    return _operand_params(operands) + cotangents, grads


class _PartialSums:
    """One zeroed gradient buffer per tile for an operand that every tile reads (it is
    broadcast along the split dimension), summed into the gradient after the launches: no
    two threads add into one address, and the sum is deterministic."""

    # Partials a cache line apart at least: threads adding into one line (a small shared
    # pose's gradient) would otherwise fight over it on every point.
    LINE = 128

    def __init__(self, grad: Buffer, scalar: type, tiles: int):
        self.grad = grad
        self.dtype = np.dtype(wp.dtype_to_numpy(scalar))
        self.count = math.prod(grad.shape)
        stride = -(-(self.count * self.dtype.itemsize + self.LINE) // self.LINE) * self.LINE
        self.stride, self.tiles = stride, tiles
        self.recorder = _recorder()
        if self.recorder is not None:
            self.base = self.recorder.allocate_scratch(tiles * stride)
        else:
            self.parts = np.zeros((tiles, stride // self.dtype.itemsize), self.dtype)
            self.base = self.parts.ctypes.data

    def pointer(self, tile: int) -> int:
        return self.base + tile * self.stride

    def add_into_total(self) -> None:
        if self.recorder is not None:
            self.recorder.sum_parts(
                self.grad.ptr, self.base, self.tiles, self.stride // self.dtype.itemsize,
                self.count, self.dtype.itemsize,
            )  # fmt: skip
            return
        buffer = (ctypes.c_byte * (self.count * self.dtype.itemsize)).from_address(self.grad.ptr)
        total = np.frombuffer(buffer, self.dtype, self.count)
        # Tile after tile, in order (`sum(0)` sums one column pairwise): the native executor
        # adds them the same way, bit for bit.
        np.copyto(total, self.parts[0, : self.count])
        for part in self.parts[1:, : self.count]:
            total += part


def _partial_sums(operands: Operands, grads: list[Buffer | None], parts: int) -> dict:
    """Operand index -> _PartialSums, for the CPU VJP split over `parts` threads: the
    operands with stride 0 along the split (outermost launched) dimension."""
    tiles = _tiles(operands.plan, parts)
    if parts == 1 or len(tiles) == 1:
        return {}
    return {
        k: _PartialSums(grad, operands.scalar, len(tiles))
        for k, (grad, strides) in enumerate(zip(grads, operands.plan.strides))
        if grad is not None and strides[0] == 0
    }


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
    # An operand the op is not differentiable in moves nothing: its tangent counts as zero.
    tangents = [t if o.differentiable else None for t, o in zip(tangents, op.operands)]
    scratch = allocate_scratch or allocate_zeros
    tangent_buffers = [_tangent(operands, k, t, scratch) for k, t in enumerate(tangents)]
    if op.scatters:
        params = _operand_params(operands)
        params += _operand_params(operands, 1 + 2 * n, 1, tangent_buffers)
        return _scattering(operands, "tangent", params, 1 + 3 * n, allocate, allocate_zeros)
    results = [
        allocate(operands.result_shape(k), operands.scalar, operands.device)
        for k in range(len(op.results))
    ]
    if operands.plan.results:
        params = _operand_params(operands)
        params += _operand_params(operands, 1 + 2 * n, 1, tangent_buffers)
        pointers = [p for _, p in results]
        _launch_product(operands, "tangent", params, 1 + 3 * n, pointers, allocate)
    return [native for native, _ in results]


def _tangent(operands: Operands, index: int, t: Any | None, allocate_zeros: Allocator) -> Buffer:
    operand = operands.op.operands[index]
    return _checked_like(
        operands, f"tangent of '{operand.name}'", t, operands.shapes[index], allocate_zeros
    )


def _cotangent(operands: Operands, index: int, g: Any | None, allocate_zeros: Allocator) -> Buffer:
    """One result's cotangent as a contiguous buffer, checked against the result."""
    result = operands.op.results[index]
    return _checked_like(
        operands, f"cotangent of '{result.name}'", g, operands.result_shape(index), allocate_zeros
    )


def _checked_like(operands: Operands, what: str, x: Any | None, expected, allocate_zeros) -> Buffer:
    """`x` as a contiguous buffer of the operands' dtype and device and of shape
    `expected` (zeros when `x` is None)."""
    op = operands.op
    if x is None:
        native, ptr = allocate_zeros(expected, operands.scalar, operands.device)
        return Buffer(ptr, tuple(expected), operands.scalar.__name__, operands.device, native)
    b = as_buffer(op, what, x)
    if b.dtype != operands.scalar.__name__:
        raise TypeError(
            f"{op.name}: {what} has dtype {b.dtype}; expected {operands.scalar.__name__}"
        )
    if isinstance(x, wp.array) and _ones_dropped(b.shape) == _ones_dropped(expected):
        # Warp has no 0-d arrays: where a 0-d array (or a scalar operand's batch) would
        # have been, a Warp array has a leading 1 (as xform's own Warp results do).
        b = dataclasses.replace(b, shape=tuple(expected))
    if b.shape != tuple(expected):
        raise ValueError(f"{op.name}: {what} has shape {b.shape}; expected {tuple(expected)}")
    if b.device != operands.device:
        raise ValueError(f"{op.name}: {what} is on {b.device}; expected {operands.device}")
    return b.materialised()


def _ones_dropped(shape) -> tuple[int, ...]:
    """`shape` without its leading ones."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape
