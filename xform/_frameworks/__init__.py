"""What xform asks of an array framework, in one place per framework: NumPy, Warp, PyTorch
and JAX, each one `Framework` object.

The core's dispatch, the groups, the manifold tools, the kinematics and the random draws
reach a framework only through its object: whether an array is its, zeros and constants
on an array's device (and, under a JAX trace, in the trace), broadcasting, random normals
from its source of randomness, the functions of the ops in it, the gradient, pytree
registration and the zero-copy conversions. A new framework is one class here and its
adapter in `backends/`. The registry and the interface are in `base.py`, one file per
framework beside it.

A framework's module is imported only when an array of it is passed in (`sys.modules`
says whether it is): `import xform` loads neither PyTorch nor JAX.
"""

from .base import FLOATS, FRAMEWORKS, Framework, concrete, float_name, imported, kind, of, register
from .jax_framework import Jax
from .numpy_framework import NumPy
from .torch_framework import Torch
from .warp_framework import Warp

# In the order `of` asks them: the commonest arrays first.
NUMPY, WARP, TORCH, JAX = (register(f()) for f in (NumPy, Warp, Torch, Jax))

__all__ = [
    "FLOATS", "FRAMEWORKS", "Framework", "NUMPY", "WARP", "TORCH", "JAX",
    "concrete", "float_name", "imported", "kind", "of",
]  # fmt: skip
