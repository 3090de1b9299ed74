"""xform's FFI boundary with XLA, on every jaxlib: the native handler compiles against the
installed jaxlib's headers and against jaxlib 0.11's (whose frame types 0.10's code
named and 0.11 renamed), and no call ever returns outputs that were not written: a
KeyboardInterrupt (or any exception) inside the Python function that runs a product, or
escaping it from its first instruction (where a Ctrl-C that arrived while XLA ran lands,
from jaxlib 0.11 on), fails the call. Needs no PyTorch: CI's second job runs it on the
newest JAX. Crashes and hangs are tested in child processes."""

import os
from pathlib import Path

import pytest
from interrupts import INTERRUPT, run_script

jax = pytest.importorskip("jax")
pytest.importorskip("xform.backends.jax")
from xform.backends import jax_native  # noqa: E402

# jaxlib 0.11.2's FFI headers, in the project's shared folder beside the checkout (CI lays
# it there); XFORM_FFI_HEADERS_0_11 names another place.
HEADERS_0_11 = Path(
    os.environ.get("XFORM_FFI_HEADERS_0_11")
    or Path(__file__).resolve().parents[2] / "shared/reference/jaxlib-0.11.2-ffi-include"
)


def compiled_against(include, cache: Path) -> Path:
    os.environ["XFORM_NATIVE_CACHE"] = str(cache)
    try:
        return jax_native._compiled(include)
    finally:
        del os.environ["XFORM_NATIVE_CACHE"]


def test_the_handler_compiles_and_loads_against_the_installed_jaxlib(tmp_path):
    """Not a skip where it fails: users of this jaxlib would silently get the slower
    Python path (as users of jaxlib 0.11 did), and CI must say so."""
    obj = compiled_against(None, tmp_path)
    assert obj.is_file() and obj.parent == tmp_path
    library = jax_native._Library(obj)
    assert library.execute and library.python["cpu"] and library.python["CUDA"]


@pytest.mark.skipif(not HEADERS_0_11.is_dir(), reason=f"no jaxlib 0.11 headers at {HEADERS_0_11}")
def test_the_handler_compiles_against_jaxlib_0_11_headers(tmp_path):
    header = HEADERS_0_11 / "xla/ffi/api/c_api.h"
    assert "XLA_FFI_InternalExtension* extension_start" in header.read_text()
    assert compiled_against(HEADERS_0_11, tmp_path).is_file()


def test_a_header_that_does_not_compile_is_named(tmp_path):
    """The check above can fail: a header with a syntax error."""
    api = tmp_path / "include/xla/ffi/api"
    api.mkdir(parents=True)
    (api / "c_api.h").write_text("this is not C\n")
    with pytest.raises(jax_native.NativeUnavailable, match="could not compile jax_native.cpp"):
        compiled_against(tmp_path / "include", tmp_path / "cache")


@pytest.mark.parametrize("path", ["callback", "native"])
def test_ctrl_c_during_a_large_jitted_jax_call(tmp_path, path):
    """Through the Python function the interrupt stops the call (as an XLA error: from
    jaxlib 0.11 on it lands at the function's entry, past any try, and the guard fails the
    call); the native handler runs no Python, so the interrupt lands once the call is
    done, as it does after any XLA computation. Either way, a result is right, and memory
    intact. (warp.jax_callable, the fallback where xform's library cannot be had, has no
    such guard: there, jaxlib 0.12 aborts the process.)"""
    out = run_script(
        tmp_path,
        INTERRUPT
        + """
import jax, xform
import xform.backends.jax as xj
rng = np.random.default_rng(0)
t, q = rng.normal(size=3).astype(np.float32), rng.normal(size=4).astype(np.float32)
p = rng.normal(size=(12_000_000, 3)).astype(np.float32)
f = jax.jit(xj.transform_points)
call = lambda: jax.block_until_ready(f(t, q, p))
want = xform.transform_points(t, q, p)
duration = timed(call)
outcomes = [interrupt_during(call, x, duration, want) for x in (0.1, 0.5, 0.9)]
memory_is_intact(p.size, xla=True)
surely = interrupt_by_a_worker(call, want)
memory_is_intact(p.size, xla=True)
np.testing.assert_allclose(np.asarray(call()), want, rtol=1e-5, atol=1e-5)
from xform.backends import jax_native
native = jax_native.library() is not None
# the callback runs on XLA's thread: the main thread, waiting, may take the interrupt itself
assert surely == "finished" if native else surely.startswith("interrupted"), surely
assert set(outcomes) <= OUTCOMES, outcomes
print("alive", outcomes, surely)
""",
        env={"XFORM_JAX_CPU": path},
    )
    assert "alive" in out


# Each: the first call fails (and must not return), then the same call is right.
INJECTED = """
import ctypes, jax, numpy as np, xform
import xform.backends.jax as xj
from xform import _launch
t, q, p = np.zeros(3, np.float32), np.array([1.0, 0, 0, 0], np.float32), np.ones((9, 3), np.float32)

def must_fail(expected):
    try:
        out = np.asarray(jax.block_until_ready(jax.jit(xj.transform_points)(t, q, p)))
    except KeyboardInterrupt:
        raise SystemExit("the interrupt unwound through XLA")
    except Exception as exc:
        assert expected in str(exc), str(exc)
        jax.clear_caches()
        return
    raise SystemExit(f"the call returned {out.ravel()[:6]}")

class Unprintable(Exception):
    # its report raises: a second Ctrl-C while the first is being reported
    def __repr__(self):
        raise KeyboardInterrupt
    __str__ = __repr__

def raising(exception):
    def run(*args, **kwargs):
        raise exception
    return run

real = _launch.products.forward
_launch.products.forward = raising(KeyboardInterrupt)
must_fail("KeyboardInterrupt")
_launch.products.forward = raising(Unprintable())
must_fail("Unprintable")
_launch.products.forward = real
np.testing.assert_array_equal(np.asarray(jax.jit(xj.transform_points)(t, q, p)), p)
print("error ok")
"""

ESCAPING = """
# What escapes the Python function from its very first instruction, as a Ctrl-C that
# arrived while XLA ran does: a function that raises at once, in place of xform's.
def escaping(*args):
    raise KeyboardInterrupt

from xform.backends import _jax_ffi
function = _jax_ffi._GUARDED(escaping)
jax.clear_caches()
_jax_ffi._guarded = lambda *args: ctypes.cast(function, ctypes.c_void_p).value
must_fail("did not finish")
"""


@pytest.mark.parametrize("path", ["callback", "warp"])
def test_an_exception_inside_the_python_function_fails_the_call(tmp_path, path):
    """A KeyboardInterrupt inside the run, or an exception whose report raises one, is
    caught there and becomes an XLA error: the call raises and returns nothing. Through
    warp.jax_callable too (the fallback), whose wrapper catches Exceptions only."""
    out = run_script(tmp_path, INJECTED, env={"XFORM_JAX_CPU": path})
    assert "error ok" in out


def test_an_exception_escaping_the_python_function_fails_the_call(tmp_path):
    """The guard: whatever escapes the Python function, from wherever, fails the call
    with CANCELLED (ctypes reports the exception as ignored) and nothing is returned."""
    script = INJECTED.replace('print("error ok")', ESCAPING + 'print("escape ok")')
    out = run_script(tmp_path, script, env={"XFORM_JAX_CPU": "callback"})
    assert "escape ok" in out
