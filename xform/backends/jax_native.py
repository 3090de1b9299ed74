"""JAX on CPU at jnp's cost: xform's native XLA FFI handler (`jax_native.cpp`).

Under `jax.jit` on CPU each product of an op runs as one FFI call of the target
`xform_native`, whose attribute `program` names the product's launches, recorded once per
launch plan at trace time (`xform/_launch/program.py`) and registered with the handler
under a key made from what they compute (`program_key`: the op, the product, the shapes,
dtype and device), the same in every process; so an executable that JAX's persistent
compilation cache kept runs in a later process, on the programs that process recorded
when it traced the call. Per call the C handler patches XLA's buffers into the recorded
Warp launches and calls the kernels' compiled entry points, spreading the Python path's
thread tiles over XLA's CPU thread pool: no Python runs.

The handler is compiled at first use by Warp's bundled clang (no system compiler) and
cached under Warp's kernel cache, keyed by its source and the jaxlib and warp versions.
It leans on Warp internals, so it is used only where it is known to work:

- warp-lang's minor version is one tested here (`TESTED_WARP`);
- a self-test at first use runs programs of several ops and products (forward, tangent,
  VJP with split partial gradients, a sum over points) through the compiled executor
  and compares them bit for bit with the Python path;
- on any failure (no header, no compile, a mismatch) it warns once and the ops keep
  the Python FFI callback.

On CUDA the same programs launch the kernels' CUfunctions on XLA's stream, with no Python
per call (not yet declared safe for XLA's command buffers: XLA runs it between them). It is
the default there, self-tested against the Python path on device 0 at first use (programs
are recorded for cuda:0; other devices get an XLA error naming the switch);
`XFORM_JAX_CUDA=callback` keeps the Python function behind the guard (below) instead.

Where no program runs a product, a Python function does, called through the same
library's guard (`xform_python`, `xform_python_cuda`): XLA calls C, which calls Python and
turns whatever escapes it (a Ctrl-C at its first instruction included) into an XLA error.
Only where the library cannot be had at all do the ops run through `warp.jax_callable`.

`XFORM_JAX_CPU=native` or `=callback` forces either path (`native` raises where the
handler cannot be had); `=warp` (also `XFORM_JAX_CUDA=warp`) forces `warp.jax_callable`,
the fallback. `XFORM_JAX_NATIVE_SELF_TEST=fail` makes the self-test fail, to test the
fallback; `XFORM_NATIVE_CACHE` names another directory for the object file.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import hashlib
import math
import os
import secrets
import tempfile
import threading
import warnings
from pathlib import Path

import jax
import numpy as np
import warp as wp

from xform import _launch
from xform._launch import program as _program
from xform._launch import warp_abi
from xform._launch.layout import result_shapes
from xform._launch.runner import run_product
from xform._op import Product

TARGET = "xform_native"
TARGET_CUDA = "xform_native_cuda"
# The Python callback behind the library's guard, per platform.
TARGET_PYTHON = {"cpu": "xform_python", "CUDA": "xform_python_cuda"}
TESTED_WARP = warp_abi.TESTED_WARP
SOURCE = Path(__file__).with_name("jax_native.cpp")
GUARD = SOURCE.with_name("jax_native_guard.h")  # the Python route's handlers, included
# Warp's clang ships no C headers: the two that XLA's c_api.h includes.
_STANDIN_HEADERS = {
    "stddef.h": "typedef unsigned long size_t;\ntypedef long ptrdiff_t;\n"
    "#define offsetof(type, member) __builtin_offsetof(type, member)\n",
    "stdint.h": "typedef signed char int8_t;\ntypedef unsigned char uint8_t;\n"
    "typedef short int16_t;\ntypedef unsigned short uint16_t;\ntypedef int int32_t;\n"
    "typedef unsigned int uint32_t;\ntypedef long int64_t;\ntypedef unsigned long uint64_t;\n"
    "typedef unsigned long uintptr_t;\n",
}


class NativeUnavailable(RuntimeError):
    """The native handler cannot be used here; the message says why."""


PATHS = ("native", "callback", "warp")


def mode(variable: str = "XFORM_JAX_CPU", default: str = "auto") -> str:
    """'native', 'callback', 'warp' or 'auto', from XFORM_JAX_CPU (or XFORM_JAX_CUDA)."""
    value = os.environ.get(variable, default).strip().lower() or default
    if value not in (*PATHS, "auto"):
        raise ValueError(f"{variable}={value!r}: expected 'native', 'callback', 'warp' or 'auto'")
    return value


class _Library:
    """The compiled handler, loaded into this process."""

    def __init__(self, path: Path):
        from warp._src.context import runtime

        handle = f"xform_native_{os.getpid()}_{id(self)}".encode()
        if runtime.llvm.wp_load_obj(str(path).encode(), handle, wp.config.legacy_cpu_linker):
            raise NativeUnavailable(f"Warp could not load {path}")

        def lookup(name: str) -> int:
            address = runtime.llvm.wp_lookup(handle, name.encode())
            if not address:
                raise NativeUnavailable(f"{path} has no symbol {name}")
            return address

        self.execute = lookup("xform_native_execute")
        self.execute_cuda = lookup("xform_native_execute_cuda")
        self.python = {"cpu": lookup("xform_python_execute"),
                       "CUDA": lookup("xform_python_execute_cuda")}  # fmt: skip
        self.run_cuda = ctypes.CFUNCTYPE(
            ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p
        )(lookup("xform_native_run_cuda"))
        self.run = ctypes.CFUNCTYPE(
            ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
            ctypes.c_void_p, ctypes.c_void_p,
        )(lookup("xform_native_run"))  # fmt: skip
        self.token = secrets.randbits(62) + 1
        ctypes.CFUNCTYPE(None, ctypes.c_int64)(lookup("xform_native_set_token"))(self.token)
        self.register = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_int64, ctypes.c_void_p)(
            lookup("xform_native_register")
        )


def _compiled(include: str | os.PathLike | None = None) -> Path:
    """The handler's object file, compiled by Warp's clang once per source and versions,
    against the XLA FFI headers under `include` (by default the installed jaxlib's)."""
    from warp._src import build

    include = Path(include or jax.ffi.include_dir())
    header = include / "xla" / "ffi" / "api" / "c_api.h"
    if not header.is_file():
        raise NativeUnavailable(f"jaxlib ships no XLA FFI header at {header}")
    source, guard = SOURCE.read_bytes(), GUARD.read_bytes()
    key = hashlib.sha256(
        source + guard + header.read_bytes() + jax.__version__.encode() + wp.config.version.encode()
    ).hexdigest()[:16]
    cache = os.environ.get("XFORM_NATIVE_CACHE") or Path(
        wp.config.kernel_cache_dir or tempfile.gettempdir(), "xform_native"
    )
    cache = Path(cache)
    target = cache / f"jax_native_{key}.o"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        for name, text in _STANDIN_HEADERS.items():
            Path(scratch, name).write_text(text)
        unit = Path(scratch, "jax_native.cpp")
        unit.write_bytes(source)
        Path(scratch, GUARD.name).write_bytes(guard)
        built = Path(scratch, "jax_native.o")
        try:
            build.build_cpu(
                str(built), str(unit), mode="release",
                extra_include_dirs=(scratch, str(include)),
            )  # fmt: skip
        except Exception as exc:
            raise NativeUnavailable(f"Warp's clang could not compile {SOURCE.name}: {exc}") from exc
        os.replace(built, target)  # atomic: a concurrent process sees all of it or none
    return target


_lock = threading.Lock()
_state: dict = {}
# The path `forced` asks for, in this thread or task only (None: XFORM_JAX_CPU's).
_forced: contextvars.ContextVar[str | None] = contextvars.ContextVar("forced", default=None)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def forced(path: str):
    """Trace xform's ops with the path `path` ("native", "callback" or "warp") inside the
    block, whatever XFORM_JAX_CPU (or XFORM_JAX_CUDA) says: for comparing them in one
    process. It holds in this thread (and task) only. A function already traced keeps its
    path (JAX caches it); trace a new one."""
    if path not in PATHS:
        raise ValueError(f"path {path!r}: expected 'native', 'callback' or 'warp'")
    token = _forced.set(path)
    try:
        yield
    finally:
        _forced.reset(token)


def library() -> _Library | None:
    """The handler, registered with XLA as `TARGET` and self-tested, or None where it
    is not to be used (XFORM_JAX_CPU=callback, or `forced("callback")`) or cannot be
    (with one warning; where XFORM_JAX_CPU=native or `forced("native")` asks for it,
    `NativeUnavailable` instead)."""
    wanted = _forced.get() or mode()
    if wanted in ("callback", "warp"):
        return None
    if "library" not in _state:
        with _lock:
            if "library" not in _state:
                try:
                    _state["library"], _state["why"] = _load(), ""
                except Exception as exc:
                    _state["library"], _state["why"] = None, str(exc)
                    if wanted != "native":
                        warnings.warn(
                            f"xform: the native JAX CPU path is unavailable ({exc}); xform's "
                            "ops run through the Python FFI callback (slower per call). "
                            "XFORM_JAX_CPU=callback silences this.",
                            RuntimeWarning,
                            stacklevel=2,
                        )
    if _state["library"] is None and wanted == "native":
        raise NativeUnavailable(f"XFORM_JAX_CPU=native, but {_state['why']}")
    return _state["library"]


def _check_warp_version() -> None:
    if not warp_abi.warp_tested():
        raise NativeUnavailable(
            f"warp-lang {wp.config.version} is not a version it was tested with ({TESTED_WARP})"
        )


def _loaded() -> _Library:
    """The compiled handler, loaded once (no version gate, no self-test: its Python
    callback's guard relies on no Warp internals); raises where it cannot be had."""
    if "loaded" not in _state:
        try:
            _state["loaded"], _state["load_error"] = _Library(_compiled()), None
        except Exception as exc:
            _state["loaded"], _state["load_error"] = None, exc
    if _state["loaded"] is None:
        raise _state["load_error"]
    return _state["loaded"]


def _load() -> _Library:
    _check_warp_version()
    library = _loaded()
    _self_test(library)
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.execute), platform="cpu")
    return library


# --- programs ------------------------------------------------------------------------------


def program(
    op, product, prefix, needed, input_shapes, output_shapes, dtype, device="cpu"
) -> tuple[np.ndarray, int] | None:
    """The program of one product for these shapes and its key (`program_key`), by which a
    call names it; or None where the launches cannot be recorded (then the Python callback
    runs them). Kept for the process's life, registered with the handler. One per thread
    count too: the launches split over `_launch.threads.THREADS` tiles."""
    return _program_for(
        op,
        product,
        prefix,
        needed,
        input_shapes,
        output_shapes,
        dtype,
        device,
        _launch.threads.THREADS,
    )


@functools.cache
def _program_for(
    op, product, prefix, needed, input_shapes, output_shapes, dtype, device, threads
) -> np.ndarray | None:
    size = np.dtype(dtype).itemsize
    if len(_kept) >= MAX_PROGRAMS:  # each holds its launches' code loaded: the callback
        return None
    launcher, memset = _cuda_entry_points() if device != "cpu" else (0, (0, 0, 0))
    recorder = _program.Recorder(
        [math.prod(s) * size for s in input_shapes],
        [math.prod(s) * size for s in output_shapes],
        launcher,
        memset,
        int(wp.get_device(device).context or 0) if device != "cpu" else 0,
    )
    inputs = [
        _launch.buffers.Buffer(recorder.pointer(k), tuple(s), str(np.dtype(dtype)), device, None)
        for k, s in enumerate(input_shapes)
    ]
    outputs = []
    for k, nbytes in enumerate(recorder.outputs):
        address = recorder.pointer(len(input_shapes) + k)
        outputs.append((address, functools.partial(recorder.zero, address, nbytes)))
    try:
        with _launch.steps.recording(recorder):
            run_product(op, product, prefix, needed)(inputs, outputs)
        words = recorder.program()
    except _program.CaptureError:
        return None
    except Exception as exc:  # Warp's internals not as recorded here: keep the Python path
        warnings.warn(
            f"xform: the native path could not record {op.name} ({product}): {exc!r}; it "
            "runs through the Python FFI callback.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    # The handler's registry holds the program's address, and the program the launches'
    # code: both live as long as the process (even past `program.cache_clear()`).
    _kept.append((words, recorder.keep))
    key = program_key(op, product, prefix, needed, input_shapes, output_shapes, dtype, device,
                      threads)  # fmt: skip
    if not _loaded().register(key, words.ctypes.data):
        return None
    return words, key


def program_key(op, product, prefix, needed, input_shapes, output_shapes, dtype, device,
                threads) -> int:  # fmt: skip
    """The key a call names its program by: what the program computes (the op's key, the
    product, the shapes, dtype, device and tiles), the same in every process, so that an
    executable of JAX's persistent compilation cache finds the program this process
    recorded for it when it traced the call. Nonzero, 63 bits."""
    text = repr((
        op.key, product, prefix, tuple(needed), tuple(map(tuple, input_shapes)),
        tuple(map(tuple, output_shapes)), str(np.dtype(dtype)), device, threads,
    ))  # fmt: skip
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return (digest >> 1) or 1



_kept: list = []
# Programs per process, past which new shapes take the Python callback: each keeps its
# launches' modules loaded for the life of the process.
MAX_PROGRAMS = 4096


# --- CUDA ------------------------------------------------------------------------------------


@functools.cache
def _cuda_entry_points() -> tuple[int, tuple[int, int, int]]:
    """Warp's `wp_cuda_launch_kernel`, and the driver's `cuMemsetD8Async`,
    `cuCtxPushCurrent_v2` and `cuCtxPopCurrent_v2`."""
    from warp._src.context import runtime

    launcher = ctypes.cast(runtime.core.wp_cuda_launch_kernel, ctypes.c_void_p).value
    driver = ctypes.CDLL("libcuda.so.1")
    names = ("cuMemsetD8Async", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2")
    return launcher, tuple(ctypes.cast(getattr(driver, n), ctypes.c_void_p).value for n in names)


def cuda_library() -> _Library | None:
    """The handler for CUDA, registered and self-tested on cuda:0; None where
    XFORM_JAX_CUDA (or `forced`) asks for the callback or `warp.jax_callable`, or where
    the handler cannot be had or fails its self-test (then with one warning)."""
    wanted = _forced.get() or mode("XFORM_JAX_CUDA")
    if wanted in ("callback", "warp"):
        return None
    if "cuda" in _state:
        return _state["cuda"]
    with _lock:
        if "cuda" not in _state:
            try:
                _check_warp_version()
                library = _loaded()
                _self_test(library, "cuda:0")
                capsule = jax.ffi.pycapsule(library.execute_cuda)
                jax.ffi.register_ffi_target(TARGET_CUDA, capsule, platform="CUDA")
            except Exception as exc:
                warnings.warn(
                    f"xform: the native JAX CUDA path is unavailable ({exc}); xform's ops "
                    "run through the Python FFI callback (slower per call). "
                    "XFORM_JAX_CUDA=callback silences this.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                library = None
            _state["cuda"] = library
    return _state["cuda"]


# --- the Python callback's guard ---------------------------------------------------------------


def python_target(platform: str = "cpu") -> tuple[str, int] | None:
    """(FFI target, token) through which XLA calls a Python callback on `platform` ("cpu"
    or "CUDA") behind the library's guard, registered at first use; None where
    `warp.jax_callable` is to run it instead: where XFORM_JAX_CPU (XFORM_JAX_CUDA) or
    `forced` ask for "warp", or the library cannot be had (then with one warning)."""
    cpu = platform == "cpu"
    wanted = _forced.get() or mode(*(() if cpu else ("XFORM_JAX_CUDA",)))
    if wanted == "warp":
        return None
    key = f"python_{platform}"
    if key not in _state:
        with _lock:
            if key not in _state:
                try:
                    library = _loaded()
                    capsule = jax.ffi.pycapsule(library.python[platform])
                    jax.ffi.register_ffi_target(TARGET_PYTHON[platform], capsule, platform=platform)
                    _state[key] = (TARGET_PYTHON[platform], library.token)
                except Exception as exc:
                    _state[key] = None
                    warnings.warn(
                        f"xform: its FFI handler is unavailable ({exc}); xform's ops run "
                        "through warp.jax_callable, slower per call, and a Ctrl-C at the "
                        "wrong moment may go unnoticed. XFORM_JAX_CPU=warp silences this.",
                        RuntimeWarning,
                        stacklevel=2,
                    )
    return _state[key]


# --- the self-test ---------------------------------------------------------------------------


def _self_test(library: _Library, device: str = "cpu") -> None:
    """Programs of a few ops and products, through the compiled executor, against the
    Python path on the same inputs, bit for bit. Raises on any difference."""
    from xform.ops import OPS
    from xform.ops.registration import REGISTRATION_SUMS

    if os.environ.get("XFORM_JAX_NATIVE_SELF_TEST", "") == "fail":
        raise NativeUnavailable("its self-test failed (forced by XFORM_JAX_NATIVE_SELF_TEST)")
    rng = np.random.default_rng(0)
    big = max(_launch.tiling.PARALLEL_MIN_ELEMENTS, 1)  # split over threads, partial gradients
    cases = [
        ("transform_points", Product.FORWARD, [(3,), (4,), (5, 3)]),
        ("transform_points", Product.VJP, [(3,), (4,), (big, 3)]),
        ("pose_multiply", Product.TANGENT, [(7, 3), (7, 4), (1, 3), (7, 4)]),
        ("quaternion_to_matrix", Product.VJP, [(2, 3, 4)]),
        ("quaternion_slerp", Product.VJP, [(big, 4), (big, 4), ()]),  # a one-element partial sum
    ]
    for name, product, shapes in cases:
        for dtype in (np.float32, np.float64):
            _check_case(library, OPS[name], product, shapes, dtype, rng, device)
    # A sum over points of many chunks: partial sums, then their sum.
    sums = REGISTRATION_SUMS[False]
    _check_case(
        library, sums, Product.FORWARD, [(3, 5000, 3), (3, 5000, 3)], np.float64, rng, device
    )


def agree(want: np.ndarray, got: np.ndarray, device: str) -> bool:
    """The self-test's comparison: bit for bit on CPU, where every sum runs in a fixed
    order; to rounding on a GPU, where a broadcast operand's gradient is summed with
    atomics in an order that varies from run to run (NaN, an unwritten output, never
    agrees)."""
    if device == "cpu":
        return want.tobytes() == got.tobytes()
    tolerance = 1e-4 if want.dtype == np.float32 else 1e-10
    scale = tolerance * max(1.0, float(np.abs(want).max(initial=0.0)))
    return bool(np.allclose(got, want, rtol=tolerance, atol=scale))


def _address(x) -> int:
    return x.ctypes.data if isinstance(x, np.ndarray) else x.ptr


def _fill_zero(x) -> None:
    if isinstance(x, np.ndarray):
        x.fill(0)
    else:
        x.zero_()


def _check_case(library, op, product, shapes, dtype, rng, device="cpu") -> None:
    needed = tuple(o.differentiable for o in op.operands) if product == Product.VJP else ()
    inputs = [rng.normal(size=s).astype(dtype) for s in shapes]
    results = [tuple(s) for s in result_shapes(op, shapes)]
    if product == Product.TANGENT:
        inputs += [rng.normal(size=s).astype(dtype) for s in shapes]
    if product == Product.VJP:
        inputs += [rng.normal(size=s).astype(dtype) for s in results]
        out_shapes = [tuple(s) for s, need in zip(shapes, needed) if need]
    else:
        out_shapes = list(results)
    scratch = _launch.tiling.scratch_shapes(op, product, shapes, 0, needed, device)
    out_shapes += [tuple(s) for s in scratch]
    shapes_in = tuple(tuple(x.shape) for x in inputs)
    compiled = program(
        op, product, 0, needed, shapes_in, tuple(out_shapes), np.dtype(dtype), device
    )
    if compiled is None:
        raise NativeUnavailable(f"{op.name} {product} could not be recorded")
    words = compiled[0]  # the program, kept alive by the closures below
    inputs = [wp.array(x, device=device) for x in inputs] if device != "cpu" else inputs

    def run(executor):
        outputs = [np.full(s, np.nan, dtype) for s in out_shapes]  # unwritten shows
        if device != "cpu":
            outputs = [wp.array(o, device=device) for o in outputs]
        executor(outputs)
        return [o.numpy() if device != "cpu" else o for o in outputs]

    def python(outputs):
        buffers = [
            _launch.buffers.Buffer(_address(x), tuple(x.shape), str(np.dtype(dtype)), device, x)
            for x in inputs
        ]
        pairs = [(_address(o), functools.partial(_fill_zero, o)) for o in outputs]
        run_product(op, product, 0, needed)(buffers, pairs)

    def native(outputs):
        buffers = [*inputs, *outputs]
        bases = (ctypes.c_void_p * len(buffers))(*map(_address, buffers))
        if device == "cpu":
            failure = library.run(words.ctypes.data, bases, len(buffers), None, None)
        else:
            stream = wp.get_stream(device).cuda_stream
            failure = library.run_cuda(words.ctypes.data, bases, len(buffers), stream)
            wp.synchronize_device(device)
        if failure is not None:
            raise NativeUnavailable(failure.decode())

    want = run(python)
    got = run(native)
    for w, g in zip(want, got):
        if not agree(w, g, device):
            raise NativeUnavailable(
                f"its self-test failed: {op.name} {product} ({np.dtype(dtype)}) differs from "
                "the Python path"
            )
