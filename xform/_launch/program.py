"""A product's launches recorded once as a *program*: what a native executor needs to run
them again on other buffers of the same shapes, with no Python per call.

The core's Python path is run once with a `Recorder` active (`steps.recording`), on
buffers whose addresses are sentinels: buffer k starts at SENTINELS + k * SPACING, beyond
2^48, where no process maps memory (x86-64 and AArch64 user space ends below 2^47 and
2^48). The recorder keeps, for each kernel launch, the entry point of
Warp's compiled CPU kernel, its launch bounds and its argument struct as bytes, and where
in the struct each array's data pointer lies and which buffer (and offset) it points into;
zero-fills and the sums of per-thread partial gradients become steps of their own.
Everything is checked: a pointer into no known buffer, or an argument layout the
executor does not take, raises `CaptureError`, and the caller keeps the Python path.

The program is an int64 array (`backends/jax_native.cpp` reads it):
- header: MAGIC, inputs, outputs, scratch buffers, steps, total words;
- each input's and output's size in bytes (the executor checks the call's buffers);
- each scratch buffer's size in bytes (zeroed per call);
- steps, each [kind, words, ...]:
  ZERO [buffer, byte offset, bytes];
  SUM [total, byte offset, parts, byte offset, tiles, stride, count, itemsize];
  LAUNCHES [count, parallel, bound words, argument words, each launch's first word...],
  then each launch [entry, patches, bounds..., arguments..., (offset, buffer, delta)...];
  on CUDA, CUDA_ZERO [memset, push, pop, context, buffer, byte offset, bytes] (the
  driver's memset, inside the recording context pushed current) and CUDA_LAUNCH [launcher,
  context, function, size, max blocks, block dim, grid stride, cluster dim, shared bytes,
  params, blob words, patches, param offsets..., blob..., (offset, buffer, delta)...].
Launches of one LAUNCHES step may run concurrently (the Python path's thread tiles).

This relies on Warp internals (`warp_abi.py`), hence the version gate and the self-test
of the code that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import kernels, warp_abi
from .steps import AddParts, Launch, PartialSums, Step, set_arrays, set_sum_arrays

MAGIC = 0x786630726D0001
ZERO, LAUNCHES, SUM, FAIL, CUDA_LAUNCH, CUDA_ZERO = 1, 2, 3, 4, 5, 6
HEADER_WORDS = 6
SPACING = 1 << 40  # each sentinel buffer's address range
SENTINELS = 1 << 48
MAX_ARG_WORDS = 1024  # keep in step with jax_native.cpp
MAX_BOUND_WORDS = 8
MAX_BUFFERS = 256


class CaptureError(Exception):
    """The launches could not be recorded as a program: keep the Python path."""


def _words(raw: bytes) -> list[int]:
    padded = raw + bytes(-len(raw) % 8)
    return np.frombuffer(padded, np.int64).tolist()


@dataclass
class Recorder:
    """Records the core's launches on sentinel buffers of the given sizes in bytes
    (inputs, then outputs). `pointer(k)` is buffer k's sentinel address."""

    inputs: list[int]
    outputs: list[int]
    # On CUDA: the addresses of Warp's `wp_cuda_launch_kernel` and of the driver's
    # `cuMemsetD8Async`, `cuCtxPushCurrent_v2` and `cuCtxPopCurrent_v2`, which the executor
    # calls on XLA's stream, and the recording device's context.
    cuda_launcher: int = 0
    cuda_memset: tuple[int, int, int] = (0, 0, 0)
    cuda_context: int = 0
    scratch: list[int] = field(default_factory=list)
    steps: list[list[int]] = field(default_factory=list)
    keep: list = field(default_factory=list)  # the launches, whose code must stay loaded

    @property
    def sizes(self) -> list[int]:
        return [*self.inputs, *self.outputs, *self.scratch]

    def pointer(self, k: int) -> int:
        return SENTINELS + k * SPACING

    def locate(self, address: int, nbytes: int = 0) -> tuple[int, int]:
        """(buffer, byte offset) of a sentinel address, checking the range lies inside."""
        k, offset = divmod(address - SENTINELS, SPACING)
        if not 0 <= k < len(self.sizes) or offset + nbytes > max(self.sizes[k], 0):
            raise CaptureError(f"address {address:#x} is in no buffer of the call")
        return k, offset

    # --- what the core hands over while recording ----------------------------------------

    def allocate_scratch(self, nbytes: int) -> int:
        """A zeroed scratch buffer, per call; its sentinel address."""
        if self.cuda_launcher:
            raise CaptureError("CUDA programs take no scratch of their own")
        self.scratch.append(int(nbytes))
        return self.pointer(len(self.sizes) - 1)

    def zero(self, address: int, nbytes: int) -> None:
        """Zero-fill an output (the caller's allocator asks, as a launch will add into it)."""
        k, offset = self.locate(address, nbytes)
        if self.cuda_launcher:
            step = [CUDA_ZERO, 9, *self.cuda_memset, self.cuda_context, k, offset, int(nbytes)]
            self.steps.append(step)
        else:
            self.steps.append([ZERO, 5, k, offset, int(nbytes)])

    def record(self, steps: list[Step]) -> None:
        """The launch steps of one product (`steps.py`), as program steps."""
        bases = {}
        for step in steps:
            for a in step.arrays if isinstance(step, Launch) else ():
                if isinstance(a.pointer, PartialSums) and a.pointer not in bases:
                    bases[a.pointer] = self.allocate_scratch(a.pointer.nbytes)
        for step in steps:
            if isinstance(step, Launch):
                recorded = []
                for k, tile in enumerate(step.tiles):
                    launch = kernels.reusable(step.op, step.product, step.scalar, step.device,
                                              tile)  # fmt: skip
                    set_arrays(launch, step, k, bases)
                    recorded += self._launch(launch.launch)
                if recorded:
                    self._launches(recorded, step.parallel and len(recorded) > 1)
            elif isinstance(step, AddParts):
                self._add_parts(step.parts, bases[step.parts])
            else:
                launch = kernels.sum_chunks(step.op, step.product, step.scalar, step.device)
                set_sum_arrays(launch, step)
                recorded = self._launch(launch)
                if recorded:
                    self._launches(recorded, False)

    def _add_parts(self, parts: PartialSums, base: int) -> None:
        """gradient[i] = sum over t of parts[t * stride + i], tile after tile, as
        `steps.run` adds them."""
        itemsize = parts.dtype.itemsize
        t, t_offset = self.locate(parts.gradient, parts.count * itemsize)
        p, p_offset = self.locate(base, parts.nbytes)
        self.steps.append([SUM, 10, t, t_offset, p, p_offset, parts.tiles,
                           parts.stride // itemsize, parts.count, itemsize])  # fmt: skip

    def _launch(self, launch) -> list[tuple]:
        """A `wp.Launch` as it stands (its parameters set): on CPU, to join a LAUNCHES
        step; on CUDA, a step of its own."""
        self.keep.append(launch)
        if not launch.device.is_cpu:
            self._record_cuda(launch)
            return []
        return [self._record(launch)]

    # --- the program ---------------------------------------------------------------------

    def program(self) -> np.ndarray:
        buffers = len(self.sizes)
        if buffers > MAX_BUFFERS:
            raise CaptureError(f"{buffers} buffers; the executor takes {MAX_BUFFERS}")
        words = [MAGIC, len(self.inputs), len(self.outputs), len(self.scratch), len(self.steps)]
        words += [0, *self.sizes]
        for step in self.steps:
            words += step
        words[5] = len(words)
        program = np.array(words, np.int64)
        # The launch offsets are relative to their step: make them absolute.
        start = HEADER_WORDS + buffers
        for step in self.steps:
            if step[0] == LAUNCHES:
                program[start + 6 : start + 6 + step[2]] += start
            start += step[1]
        return program

    def _launches(self, launches: list[tuple], parallel: bool) -> None:
        bound_words, arg_words = len(launches[0][1]), len(launches[0][2])
        if any(len(b) != bound_words or len(a) != arg_words for _, b, a, _ in launches):
            raise CaptureError("launches of one step differ in their argument layout")
        step = [LAUNCHES, 0, len(launches), int(parallel), bound_words, arg_words]
        offsets_at = len(step)
        step += [0] * len(launches)
        for k, (entry, bounds, args, patches) in enumerate(launches):
            step[offsets_at + k] = len(step)
            step += [entry, len(patches), *bounds, *args]
            for patch in patches:
                step += patch
        step[1] = len(step)
        self.steps.append(step)

    def _record(self, launch) -> tuple:
        try:
            entry, bounds, args = warp_abi.cpu_launch_bytes(launch)
        except ValueError as exc:
            raise CaptureError(str(exc)) from None
        patches = []
        for (name, kind), param in zip(args._fields_, launch.params[1:]):
            if warp_abi.is_array(kind):
                patches += self._array_patch(param, getattr(type(args), name).offset)
        bounds, arguments = _words(bounds), _words(bytes(args))
        if len(bounds) > MAX_BOUND_WORDS or len(arguments) > MAX_ARG_WORDS:
            raise CaptureError("the launch's arguments exceed the executor's limits")
        return entry, bounds, arguments, patches

    def _record_cuda(self, launch) -> None:
        """A CUDA launch as its own step: Warp's launcher takes the address of each
        parameter, so the parameters are pieces of one blob (16-byte aligned)."""
        if not self.cuda_launcher:
            raise CaptureError("a CUDA launch needs the CUDA launcher's address")
        try:
            _, numbers, params = warp_abi.cuda_launch_fields(launch)
        except ValueError as exc:
            raise CaptureError(str(exc)) from None
        blob, offsets, patches = b"", [], []
        for index, param in enumerate(params):
            blob += bytes(-len(blob) % 16)
            offsets.append(len(blob))
            if index > 0 and warp_abi.is_array(type(param)):
                patches += self._array_patch(param, len(blob))
            blob += bytes(param)
        words = _words(blob)
        if len(words) > MAX_ARG_WORDS or len(offsets) > 64:
            raise CaptureError("the launch's arguments exceed the executor's limits")
        step = [CUDA_LAUNCH, 0, self.cuda_launcher, *numbers, len(offsets), len(words),
                len(patches), *offsets, *words]  # fmt: skip
        for patch in patches:
            step += patch
        step[1] = len(step)
        self.steps.append(step)

    def _array_patch(self, array, at: int) -> list[tuple[int, int, int]]:
        """The patch (byte `at` in the arguments, buffer, byte offset) that points an
        array argument (`array_t`, its data pointer first) into its buffer; none for a
        null array."""
        data = warp_abi.array_data(array)
        return [(at, *self.locate(data))] if data else []


def failing_program(inputs: list[int], outputs: list[int]) -> np.ndarray:
    """A program whose one step fails: the executor's error path, for tests."""
    recorder = Recorder(list(inputs), list(outputs))
    recorder.steps.append([FAIL, 2])
    return recorder.program()
