"""xform: differentiable rigid-body transforms, each op's maths written once as a Warp
element function, for NumPy, Warp, PyTorch and JAX.

Quaternions are [w, x, y, z]; positions (..., 3); rotation matrices (..., 3, 3) act
on column vectors; a pose (position, quaternion) maps p to R(q) p + t.

The functions here take NumPy, Warp, PyTorch or JAX arrays and return the same type;
PyTorch tensors and JAX arrays go through the adapters in `xform.backends.torch` and
`xform.backends.jax`, with their framework's autodiff. `define_op` makes new ops from
Warp functions, with the same reach. Importing `xform` imports neither framework.
"""

from . import kinematics, manifold  # written on the ops and the groups
from ._define import define_op
from ._functions import FUNCTIONS as _FUNCTIONS
from ._functions import jvp, vjp
from ._interop import to_jax, to_numpy, to_torch, to_warp
from ._op import Op, Operand, Result
from ._random import random_quaternion
from ._second_order import HigherDerivativeError
from .groups import SE2, SE3, SO2, SO3, Sim3
from .ops import OPS

__version__ = "0.5.0"

# Every op as a function of this module (the list is generated: `docs/api.md` has it).
globals().update(_FUNCTIONS)


def jax_to_torch(fn):
    """A function of PyTorch tensors that runs the JAX function `fn` (see
    `xform.backends.bridges.jax_to_torch`)."""
    from .backends.bridges import jax_to_torch as bridge

    return bridge(fn)


def torch_to_jax(fn):
    """A function of JAX arrays that runs the PyTorch function `fn` (see
    `xform.backends.bridges.torch_to_jax`)."""
    from .backends.bridges import torch_to_jax as bridge

    return bridge(fn)


__all__ = [
    "OPS",
    "SO2",
    "SE2",
    "SO3",
    "SE3",
    "Sim3",
    "manifold",
    "Op",
    "Operand",
    "Result",
    "define_op",
    "kinematics",
    "HigherDerivativeError",
    "random_quaternion",
    "jvp",
    "vjp",
    "to_numpy",
    "to_torch",
    "to_jax",
    "to_warp",
    "jax_to_torch",
    "torch_to_jax",
    *_FUNCTIONS,
]
