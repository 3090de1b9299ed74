"""xform's FFI boundary with XLA, on every jaxlib: the native handler compiles against the
installed jaxlib's headers and against jaxlib 0.11's (whose frame types 0.10's code
named and 0.11 renamed). Needs no PyTorch."""

import os
from pathlib import Path

import pytest

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
    assert library.execute and library.execute_cuda


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
