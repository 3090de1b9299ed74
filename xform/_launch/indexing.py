"""What every generated kernel shares: the launch grid, and how a launch index finds the
element each operand contributes to it.

A launch covers the coalesced broadcast batch (see `_launch/layout.py`). Each array operand
arrives with a `wp.vec4i` of element strides, zero along the dimensions it is broadcast
over, so broadcast operands are read in place, never materialised; results are written
contiguously at the launch index.
"""

from typing import Any

import warp as wp

# Leading dimensions that the launch grid can index directly; see `_launch/layout.py`.
MAX_GRID_DIMS = 4


@wp.struct
class Grid:
    """The coalesced broadcast batch that one launch covers, innermost dimension first:
    `size` launch indices in all. Kernels that loop over a run take `run` consecutive
    indices per thread when `step` is 1 (a CPU thread's run), or every `step`-th index
    from their own (a GPU thread's, so that neighbouring threads still read neighbouring
    elements); other kernels take one index per thread. Bit k of `dense` is set when
    operand k has one element per launch index of the whole batch (it is not broadcast):
    a VJP kernel then stores that operand's gradient instead of adding into it."""

    ndim: wp.int32
    shape: wp.vec4i
    size: wp.int32
    run: wp.int32
    step: wp.int32
    dense: wp.int32
    # For an op that sums over groups: launch indices summed per result element (the
    # innermost `reduce`), the chunks of `run` each sum is split into, and the first
    # chunk of this launch (the chunks of all result elements in a row).
    reduce: wp.int32
    chunks: wp.int32
    first_chunk: wp.int32


@wp.struct
class FlatGrid:
    """A one-dimensional batch (the common case once dimensions are coalesced): its own
    type, so that the kernels generated for it index operands without any division or
    branch (a third of the per-point time on CPU)."""

    size: wp.int32
    run: wp.int32
    step: wp.int32
    dense: wp.int32
    reduce: wp.int32
    chunks: wp.int32
    first_chunk: wp.int32


@wp.func
def run_bounds(grid: Any, thread: wp.int32):
    """`range(first, last, step)`: the launch indices one thread of a run-looping kernel
    covers."""
    if grid.step == 1:
        first = thread * grid.run
        return first, wp.min(first + grid.run, grid.size), wp.int32(1)
    return thread, grid.size, grid.step


@wp.func
def chunk_bounds(grid: Any, thread: wp.int32):
    """For an op that sums over groups: the result element of a thread's chunk, and the
    launch indices [first, last) of that chunk of the element's summands."""
    chunk = grid.first_chunk + thread
    element = chunk / grid.chunks
    first = element * grid.reduce + (chunk - element * grid.chunks) * grid.run
    return element, first, wp.min(first + grid.run, (element + 1) * grid.reduce)


@wp.func
def unravel(grid: FlatGrid, launch_index: wp.int32):
    return wp.vec4i(launch_index, 0, 0, 0)


@wp.func
def unravel(grid: Grid, launch_index: wp.int32):  # noqa: F811 -- a Warp overload
    """The launch index as grid coordinates, innermost first. The outermost coordinate needs
    no division (the index is in range), so a 1-D grid costs nothing."""
    i0 = launch_index
    i1 = wp.int32(0)
    i2 = wp.int32(0)
    i3 = wp.int32(0)
    if grid.ndim > 1:
        i1 = i0 / grid.shape[0]
        i0 = i0 - i1 * grid.shape[0]
        if grid.ndim > 2:
            i2 = i1 / grid.shape[1]
            i1 = i1 - i2 * grid.shape[1]
            if grid.ndim > 3:
                i3 = i2 / grid.shape[2]
                i2 = i2 - i3 * grid.shape[2]
    return wp.vec4i(i0, i1, i2, i3)


@wp.func
def advance(grid: FlatGrid, coordinates: wp.vec4i):
    """The coordinates of the next launch index."""
    return wp.vec4i(coordinates[0] + 1, 0, 0, 0)


@wp.func
def advance(grid: Grid, coordinates: wp.vec4i):  # noqa: F811 -- a Warp overload
    """The coordinates of the next launch index, as an odometer: no division. (Dimensions
    past `ndim` have extent 1, so they only turn over past the last index.)"""
    i0 = coordinates[0] + 1
    i1 = coordinates[1]
    i2 = coordinates[2]
    i3 = coordinates[3]
    if i0 == grid.shape[0]:
        i0 = 0
        i1 = i1 + 1
        if i1 == grid.shape[1]:
            i1 = 0
            i2 = i2 + 1
            if i2 == grid.shape[2]:
                i2 = 0
                i3 = i3 + 1
    return wp.vec4i(i0, i1, i2, i3)


@wp.func
def carries(grid: FlatGrid, coordinates: wp.vec4i):
    """Whether the next launch index leaves the innermost dimension: never, in a flat grid."""
    return False


@wp.func
def carries(grid: Grid, coordinates: wp.vec4i):  # noqa: F811 -- a Warp overload
    return coordinates[0] + 1 == grid.shape[0]


@wp.func
def element_index(coordinates: wp.vec4i, strides: wp.vec4i):
    """Index of the element an operand with these strides contributes at these coordinates."""
    return (
        coordinates[0] * strides[0]
        + coordinates[1] * strides[1]
        + coordinates[2] * strides[2]
        + coordinates[3] * strides[3]
    )


@wp.func
def one_element(strides: wp.vec4i):
    """Whether an operand with these strides is one element for the whole launch."""
    return strides[0] == 0 and strides[1] == 0 and strides[2] == 0 and strides[3] == 0


@wp.func
def dense(grid: Any, operand: wp.int32):
    return (grid.dense >> operand) & 1 != 0


# A gradient several launch indices add into (a broadcast operand's): on a GPU, the lanes
# of a warp that hold the same element first sum their values with shuffles, and one lane
# adds the sum (so a pose shared by a million points takes thousands of atomic adds, not
# a million into one address); on a CPU, a plain add (each thread adds into partial sums
# of its own, see _launch.py). Specialised per element type by codegen.py.
SHARED_ADD = """
#if defined(__CUDA_ARCH__)
    {scalar}* destination = reinterpret_cast<{scalar}*>(&wp::index(gradient, index));
    {scalar}* components = reinterpret_cast<{scalar}*>(&value);
    const unsigned int peers = __match_any_sync(__activemask(), index);
    const bool leader = static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1;
    for (int c = 0; c < static_cast<int>(sizeof(value) / sizeof({scalar})); ++c) {{
        {scalar} total = {scalar}(0);
        for (unsigned int rest = peers; rest; rest &= rest - 1)
            total += __shfl_sync(peers, components[c], __ffs(rest) - 1);
        if (leader)
            atomicAdd(destination + c, total);
    }}
#else
    wp::atomic_add(gradient, index, value);
#endif
"""

# Bytes of shared memory per warp that STORE stages results through (a warp's 32 3x3
# float32 matrices fit, with room for the odd pitch below): 10 KB per block of 256.
STORE_WARP_BYTES = 1280

# A result (or a gradient) stored at its launch index. A thread's element is N scalars,
# so 32 lanes storing scalar c of their elements write 32 addresses N scalars apart: N
# store instructions per warp that each touch up to 32 lines of memory, every 32-byte
# sector written 4 bytes at a time (benchmarks/NOTES.md, 44). On a GPU, where the 32 lanes
# of a warp store consecutive elements of a contiguous array, they stage them through
# shared memory instead (a pitch of N | 1 scalars per lane, so that the lanes' writes fall
# in distinct banks; in passes of as many lanes as STORE_WARP_BYTES holds) and store the
# warp's contiguous run of 32 N scalars 32 consecutive scalars per instruction: one or two
# lines each, every sector written whole. Elsewhere (a partial warp, indices that are not
# consecutive, a CPU) a plain store. Specialised per element type by codegen.py.
STORE = """
#if defined(__CUDA_ARCH__)
    constexpr int N = static_cast<int>(sizeof(value) / sizeof({scalar}));
    constexpr int PITCH = N | 1;
    constexpr int FIT = static_cast<int>({warp_bytes} / (PITCH * sizeof({scalar})));
    constexpr int LANES = FIT < 1 ? 1 : (FIT > 32 ? 32 : FIT);
    __shared__ {scalar} stage[(WP_TILE_BLOCK_DIM / 32) * LANES * PITCH];
    if (__activemask() == 0xffffffffu && (threadIdx.x | 31) < WP_TILE_BLOCK_DIM) {{
        const int lane = static_cast<int>(threadIdx.x & 31);
        const int first = __shfl_sync(0xffffffffu, index, 0);
        const bool contiguous = array.strides[0] == static_cast<int>(sizeof(value));
        if (__all_sync(0xffffffffu, index == first + lane && contiguous)) {{
            {scalar}* buffer = stage + (threadIdx.x >> 5) * LANES * PITCH;
            {scalar}* out = reinterpret_cast<{scalar}*>(array.data) + size_t(first) * N;
            const {scalar}* mine = reinterpret_cast<const {scalar}*>(&value);
#pragma unroll 1
            for (int group = 0; group < 32; group += LANES) {{
                const int slot = lane - group;
                if (slot >= 0 && slot < LANES) {{
#pragma unroll
                    for (int c = 0; c < N; ++c)
                        buffer[slot * PITCH + c] = mine[c];
                }}
                __syncwarp();
                const int count = (32 - group < LANES ? 32 - group : LANES) * N;
                for (int p = lane; p < count; p += 32) {{
                    const int e = p / N;
                    out[group * N + p] = buffer[e * PITCH + (p - e * N)];
                }}
                __syncwarp();
            }}
            return;
        }}
    }}
#endif
    wp::array_store(array, index, value);
"""
