"""The `Framework` interface, and the registry of the frameworks that implement it."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import warp as wp

FLOATS = ("float32", "float64")


def float_name(dtype) -> str:
    """The name ('float32', ...) of a NumPy, PyTorch, JAX or Warp dtype, or of a name."""
    try:
        return _FLOAT_NAMES[dtype]
    except (KeyError, TypeError):  # (TypeError: not hashable)
        name = _float_name(dtype)
    with contextlib.suppress(TypeError):
        _FLOAT_NAMES[dtype] = name
    return name


# Each dtype's name, once asked: NumPy computes `dtype.name` in Python at every call (~5
# µs), and a call of an op asks for every argument's.
_FLOAT_NAMES: dict = {}


def _float_name(dtype) -> str:
    if type(dtype).__module__ == "torch":  # torch.float64 -> "float64"
        return str(dtype).removeprefix("torch.")
    scalar = getattr(dtype, "_wp_scalar_type_", dtype)
    if isinstance(scalar, type) and scalar in (wp.float32, wp.float64, wp.float16):
        return scalar.__name__
    try:
        return np.dtype(dtype).name
    except TypeError:
        return repr(dtype)


class Framework:
    """One array framework, as xform's core and layers use it."""

    name: str
    # Where its functions of the ops live (every op and function over ops by name, in
    # `FUNCTIONS`): imported by name, on first use, so the core depends on no adapter.
    functions_module: str
    described: str  # what its arrays are called in messages
    holds_groups = True  # whether xform's group elements (xform.SE3, ...) hold its arrays

    def owns(self, x) -> bool:
        raise NotImplementedError

    def namespace(self):
        """Its array functions, NumPy-like (`numpy`, `torch`, `jax.numpy`): for code written
        once for every framework, as the array API standard's `array_namespace`."""
        raise TypeError(f"xform: {self.name} has no NumPy-like namespace")

    def functions(self) -> dict[str, Callable]:
        """Every built-in op and function over ops by name, on this framework's arrays."""
        module = sys.modules.get(self.functions_module)  # which torch.compile traces
        if module is None:
            module = importlib.import_module(self.functions_module)
        return module.FUNCTIONS

    def function(self, op) -> Callable:
        """`op` (an `xform.Op`) as a function of this framework's arrays, with its autodiff."""
        made = op.adapters.get(self.name)  # a plain lookup, which torch.compile traces
        if made is None:
            made = importlib.import_module(self.functions_module).function(op)
        return made

    def concrete(self, x) -> bool:
        """Whether `x`'s values can be read now: not a placeholder that a transform or a
        compiler traces (a JAX tracer; a tensor under `torch.func` or `torch.compile`)."""
        return True

    def constant_now(self, x) -> bool:
        """Whether `x` is a plain value here: read now, and nothing differentiates through
        it (no autograd, forward mode or transform sees it), so that a value computed from
        it elsewhere (in NumPy) may stand in for one computed in this framework."""
        return self.concrete(x)

    def device(self, x) -> str | None:
        """Where `x` lies, as a key for arrays made alike (None: wherever it is used, as
        for NumPy, or JAX, which places a constant where the computation needs it)."""
        return None

    def placement(self, x):
        """Exactly where `x`'s memory lies, hashable: arrays made `like` x may be kept for
        another array of the same placement (a torch device, a JAX sharding; None for
        NumPy). Finer than `device`, which calls every CPU device of JAX's "cpu"."""
        return None

    def zeros(self, shape: tuple[int, ...], dtype: str, like=None):
        """Zeros of `shape` and dtype name `dtype`, on `like`'s device."""
        raise NotImplementedError

    def constant(self, value, like, dtype: str | None = None):
        """`value` (a NumPy array or a number) as a new array of `like`'s device and of
        `dtype` (by default `like`'s): how a layer passes constants of its own (a
        kinematic model, a number for a scalar operand) beside its caller's arrays."""
        raise NotImplementedError

    def broadcast_to(self, x, shape: tuple[int, ...]):
        raise NotImplementedError

    def concatenate(self, arrays, axis: int = -1):
        raise NotImplementedError

    # Its source of randomness: the argument that passes one ("seed" for NumPy's, which
    # takes a seed itself), and what such a source is called in messages.
    source_argument, source_described = "seed", "a seed"

    def is_source(self, x) -> bool:
        """Whether `x` is a source of this framework's randomness."""
        return False

    def seeded_source(self, seed: int | None, like=None):
        """A source of randomness seeded from `seed` (an int; None: the framework's own
        default), for arrays on `like`'s device."""
        raise NotImplementedError

    def split_source(self, source) -> tuple[Any, Any]:
        """(the source for one draw, the source for the draws after it): the same source
        twice where a source advances as it draws."""
        return source, source

    def normal(self, shape: tuple[int, ...], dtype: str | None, source, like=None):
        """Standard normals from `source`, this framework's randomness (a NumPy Generator,
        a torch Generator or None for torch's global one, a JAX key), on `like`'s device
        (else the source's); `dtype` None: the framework's default float."""
        raise NotImplementedError

    def uniform(self, shape: tuple[int, ...], dtype: str | None, source, low, high, like=None):
        """Uniform draws in [low, high), as `normal` draws normals."""
        raise NotImplementedError

    def convert(self, x):
        """`x` (an array of any framework) as an array of this one, sharing its memory
        where the devices allow."""
        raise NotImplementedError

    def to_device(self, x, device: str):
        """Array `x` of this framework on `device` ("cpu", "cuda", "cuda:1")."""
        if device != "cpu":
            raise ValueError(f"xform: {self.described} lives on the CPU, not on {device!r}")
        return x

    # --- what the solver asks: indices, segment sums, batched factorisations, loops -------

    def indices(self, values: np.ndarray, like=None):
        """Integer indices (a NumPy array) as an index array of this framework, on
        `like`'s device: what `x[:, indices]` and `segment_sum` take."""
        raise NotImplementedError

    def segment_sum(self, values, segments, count: int):
        """`out[:, s] = sum of values[:, k] over k with segments[k] == s`, for values
        `(B, K, ...)` and `segments` (K,) (from `indices`; each in [0, count)): `(B, count,
        ...)`. The solver's assembly: instances' blocks summed into the matrix's."""
        raise NotImplementedError

    def put_rows(self, whole, rows, part):
        """A copy of `whole` whose rows `rows` (along its first axis) are `part`."""
        out = whole.copy()
        out[rows] = part
        return out

    def cholesky_solve(self, a, b):
        """x with `a x = b` for each of a batch of symmetric positive definite `a (..., n,
        n)`, `b (..., n)`; NaN where an `a` is not positive definite."""
        raise NotImplementedError

    def largest(self, x, axis: int = -1, keepdims: bool = False):
        """The maximum along `axis` (NumPy's `max`; torch's `amax`)."""
        return x.max(axis, keepdims=keepdims)

    def while_loop(self, cond: Callable, body: Callable, state):
        """`while cond(state): state = body(state)`; traced once where this framework
        compiles loops (JAX's `lax.while_loop`)."""
        while bool(cond(state)):
            state = body(state)
        return state

    differentiates = False  # whether it has autodiff (`value_and_grad`)

    def enable_float64(self) -> None:
        """Let this framework's arrays be float64 (JAX computes in float32 unless told)."""

    traces = False  # whether `jit` compiles: its functions are traced once, then run compiled
    integer = "int64"  # the dtype of its counters

    def jit(self, f: Callable) -> Callable:
        """`f` compiled where this framework traces a function once and runs it compiled
        (JAX's `jit`); `f` itself where it runs eagerly."""
        return f

    def cache_compilations(self, folder: str) -> None:
        """Keep what `jit` compiles in `folder`, for later processes too (JAX's persistent
        compilation cache); nothing where nothing is compiled."""

    def ready(self, x):
        """`x`, once its values are computed (for timings: JAX and CUDA run asynchronously)."""
        return x

    def value_and_grad(self, f: Callable, has_aux: bool) -> Callable:
        """`f`'s value and gradient in its (only) argument, by this framework's autodiff."""
        raise TypeError(f"xform: gradients need JAX arrays or PyTorch tensors, not {self.name}")

    def pushforward(self, f: Callable, primals: tuple, directions: tuple):
        """`f`'s JVPs at `primals` along each of many directions at once: `directions`
        holds, per primal, a stack of tangents along a new leading axis; the result stacks
        the JVPs so (forward mode, vectorised: `vmap` of `jvp`)."""
        raise TypeError(f"xform: forward mode needs JAX arrays or PyTorch tensors, not {self.name}")

    def rows_by_reverse_mode(self, f: Callable, primals: tuple):
        """`(f(*primals), J)` with J `(..., r, sum of the primals' last sizes)` by one
        reverse pass per component of f's last axis, where this framework runs that cheaper
        than `pushforward`'s one JVP per column; None where it does not. Every row of the
        leading axes must depend on the same row of the primals alone (a cost's instances),
        as `pushforward`'s shared directions assume too."""
        return None

    def gradient(self, f: Callable, argnums: tuple[int, ...]) -> Callable:
        """The function of f's arguments returning f's gradient in those at `argnums`."""
        raise TypeError(f"xform: gradients need JAX arrays or PyTorch tensors, not {self.name}")

    def pullback(self, f: Callable, primal, cotangent):
        """The VJP of `f` (of one argument) at `primal` with `cotangent`."""
        raise TypeError(f"xform: gradients need JAX arrays or PyTorch tensors, not {self.name}")

    def custom_vjp(self, forward: Callable, backward: Callable, differentiable: int) -> Callable:
        """A function of arrays computing `forward(*leaves)` (a tuple of arrays, its first
        `differentiable` differentiable), differentiated by `backward(leaves, outputs,
        cotangents) -> the leaves' cotangents` (the framework's custom-derivative rule)."""
        raise TypeError(f"xform: gradients need JAX arrays or PyTorch tensors, not {self.name}")

    def differentiates_at(self, x) -> bool:
        """Whether `value_and_grad` takes `x` as a leaf of its argument."""
        return self.owns(x)

    def register_pytree(self, cls: type, flatten: Callable, unflatten: Callable) -> None:
        """Make `cls` a pytree node of this framework (nothing where it has none)."""

    def pytree_children(self, x) -> tuple[list, Any] | None:
        """`x` as a node of this framework's pytrees, one level deep: its children and a
        spec (equal for nodes of one structure; `spec.unflatten(children)` rebuilds it);
        None where `x` is no node of them."""
        return None


# The frameworks, by name, in the order `of` asks them (each module registers its own).
FRAMEWORKS: dict[str, Framework] = {}


# Every framework owns its arrays by type (an isinstance check), so the answer for a type
# is kept once asked: `of` runs for every argument of every op call.
_OWNERS: dict[type, Framework | None] = {}


def register(framework: Framework) -> Framework:
    FRAMEWORKS[framework.name] = framework
    _OWNERS.clear()
    return framework


def of(x: Any) -> Framework | None:
    """The framework of array `x` (tracers included), or None for anything else."""
    try:
        return _OWNERS[type(x)]
    except KeyError:
        owner = next((f for f in FRAMEWORKS.values() if f.owns(x)), None)
        _OWNERS[type(x)] = owner
        return owner


def concrete(x: Any) -> bool:
    """Whether the values of array `x` (of any framework) can be read now, not traced."""
    framework = of(x)
    return framework is None or framework.concrete(x)


def kind(x: Any) -> str | None:
    """'numpy', 'warp', 'torch' or 'jax': the name of `x`'s framework, or None."""
    framework = of(x)
    return None if framework is None else framework.name


def imported() -> list[Framework]:
    """The frameworks whose modules this process has imported (NumPy and Warp always)."""
    return [f for f in FRAMEWORKS.values() if f.name in ("numpy", "warp") or f.name in sys.modules]
