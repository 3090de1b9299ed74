"""LieTorch (princeton-vl/lietorch) as a local peer: its CPU kernels built here, never
committed, for the side-by-side benchmark and tests.

LieTorch ships only a CUDA build (`setup.py` compiles `lietorch_gpu.cu` with nvcc). Its
CPU kernels (`lietorch_cpu.cpp`) and its Python layer need no CUDA, so this builds
`lietorch_backends` from `lietorch.cpp` and `lietorch_cpu.cpp` alone, with
`torch.utils.cpp_extension.load` (g++, the installed torch's headers):

- the CUDA sources are left out; the `*_gpu` functions that `lietorch.cpp` calls are
  stubs that raise (generated from the declarations in `lietorch_gpu.h`);
- `<cuda.h>` and `<cuda_runtime.h>`, which its headers include but do not use on the
  CPU, are empty files;
- Eigen comes from `peers/lietorch/eigen` if that submodule was fetched, else Debian's
  `libeigen3-dev` (`/usr/include/eigen3`).

Where LieTorch is: `$XFORM_LIETORCH`, else `peers/lietorch` at the repository root
(git-ignored; `git clone https://github.com/princeton-vl/lietorch peers/lietorch`). The
build lands in `peers/build/lietorch_cpu`. `load()` returns the imported `lietorch`
package, or None with the reason in `REASON` where it is not there or does not build.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REASON = ""
_loaded = None


def location() -> Path:
    return Path(os.environ.get("XFORM_LIETORCH", ROOT / "peers" / "lietorch"))


def _eigen(source: Path) -> Path | None:
    for candidate in (source / "eigen", Path("/usr/include/eigen3")):
        if (candidate / "Eigen" / "Dense").exists():
            return candidate
    return None


def _gpu_stubs(header: Path) -> str:
    """Definitions that raise, for every `*_gpu` function `lietorch_gpu.h` declares."""
    lines = ["#include <torch/extension.h>", "#include <vector>", ""]
    declaration = re.compile(
        r"^\s*((?:std::vector<torch::Tensor>)|(?:torch::Tensor))\s+(\w+_gpu)\((.*)\);"
    )
    for line in header.read_text().splitlines():
        match = declaration.match(line)
        if not match:
            continue
        result, name, arguments = match.groups()
        parameters = ", ".join(
            f"{kind.strip()} a{k}" for k, kind in enumerate(arguments.split(",")) if kind.strip()
        )
        lines.append(
            f"{result} {name}({parameters}) {{\n"
            f'    TORCH_CHECK(false, "{name}: this LieTorch was built for the CPU only");\n'
            "    return {};\n}\n"
        )
    return "\n".join(lines)


def build(verbose: bool = False):
    """Build (or load the cached build of) `lietorch_backends`; returns the module."""
    from torch.utils import cpp_extension

    source = location()
    eigen = _eigen(source)
    if eigen is None:
        raise RuntimeError(
            "no Eigen: fetch LieTorch's eigen submodule or `apt-get install libeigen3-dev`"
        )
    out = ROOT / "peers" / "build" / "lietorch_cpu"
    stubs = out / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    # written only where they differ: a new mtime would make ninja rebuild everything
    files = {
        "cuda.h": "/* empty: LieTorch's CPU kernels use no CUDA */\n",
        "cuda_runtime.h": "/* empty: LieTorch's CPU kernels use no CUDA */\n",
        "lietorch_gpu_stubs.cpp": _gpu_stubs(source / "lietorch" / "include" / "lietorch_gpu.h"),
    }
    for name, text in files.items():
        path = stubs / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    gpu = stubs / "lietorch_gpu_stubs.cpp"
    return cpp_extension.load(
        name="lietorch_backends",
        sources=[
            str(source / "lietorch" / "src" / "lietorch.cpp"),
            str(source / "lietorch" / "src" / "lietorch_cpu.cpp"),
            str(gpu),
        ],
        extra_include_paths=[str(source / "lietorch" / "include"), str(stubs), str(eigen)],
        extra_cflags=["-O2"],  # as LieTorch's setup.py
        build_directory=str(out),
        verbose=verbose,
    )


def load():
    """LieTorch's Python package on its CPU build, or None (see `REASON`)."""
    global _loaded, REASON
    if _loaded is not None:
        return _loaded
    source = location()
    if not (source / "lietorch" / "src" / "lietorch_cpu.cpp").exists():
        REASON = f"LieTorch is not at {source} (set XFORM_LIETORCH or clone it to peers/lietorch)"
        return None
    try:
        sys.modules["lietorch_backends"] = build()
    except Exception as error:  # noqa: BLE001 - the reason is reported, not hidden
        REASON = f"LieTorch's CPU build failed: {type(error).__name__}: {error}"
        return None
    sys.path.insert(0, str(source))
    try:
        _loaded = importlib.import_module("lietorch")
    finally:
        sys.path.remove(str(source))
    return _loaded


if __name__ == "__main__":
    module = build(verbose=True)
    print("built", module.__file__)
