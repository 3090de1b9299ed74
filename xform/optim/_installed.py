"""Which of the CPU's sparse solvers are installed, asked without importing them: none is
a dependency, nor SciPy, so `from xform import optim` works on a base install (where the
CPU's sparse path is then not taken: `_solve.py`)."""

from __future__ import annotations

import functools
import importlib.util

# Each solver's library, fastest first (as measured: docs/optim.md).
MODULES = {
    "pardiso": "pypardiso",
    "cholmod": "sksparse",
    "cholmod-supernodal": "cvxopt",
    "cholespy": "cholespy",
    "superlu": "scipy",
    "dense": "scipy",
}
# Below this many unknowns the dense Cholesky is the faster (measured: docs/optim.md).
DENSE_BELOW = 600


def available_solvers() -> list[str]:
    """The sparse solvers whose library is installed, fastest first (as measured), then
    the dense one."""
    return [name for name, module in MODULES.items() if installed(module)]


@functools.cache
def installed(module: str) -> bool:  # once per process: find_spec walks sys.path each call
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a package that cannot be imported is not installed
        return False
