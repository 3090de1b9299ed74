"""The op record: what an op is, as plain data. The bottom of the core.

An op is a Warp function over elements (scalars, vectors, matrices) plus a description
of its operands and results. Everything else is generated from that: the forward, VJP
and tangent kernels (`_launch/codegen.py`), shape checks and broadcasting and the
launches (`_launch/`), and each framework's function with its autodiff (`backends/`).
`define_op` (`_define.py`) checks a definition and makes the record; `_registry.py` keeps
every op made.

Leading-dimension layouts (`batch`) are tuples of group names:

- ``"..."``: any number of dimensions, broadcast by NumPy rules (right-aligned) among
  all operands that carry ``"..."``;
- any other name (``"B"``, ``"N"``): exactly one dimension, broadcast by size 1 among
  the operands that carry the same name.

A result's layout lists the groups that make up its leading shape, in order. A result
`like` an operand has that operand's shape instead (see `Result`).

This file imports nothing of xform's: calling an op reaches the dispatch through a hook
that the dispatch installs (`install_dispatch`).
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import warp as wp

__all__ = [
    "VARIADIC",
    "Composite",
    "Op",
    "Operand",
    "Product",
    "Result",
    "install_dispatch",
]

VARIADIC = "..."


class Product(str, enum.Enum):
    """What a kernel of an op computes: the op itself, its tangent (forward mode) or its
    VJP (reverse mode)."""

    FORWARD = "forward"
    TANGENT = "tangent"
    VJP = "vjp"

    # Spelt as its value in messages, module names and cache keys.
    __str__ = str.__str__
    __format__ = str.__format__


@dataclass(frozen=True)
class Operand:
    """An array operand of an op: its element shape (`()` a scalar, `(n,)` a vector,
    `(n, m)` a matrix) and how its leading dimensions broadcast.

    - `batch`: the leading-dimension layout (see the module docstring).
    - `single`: cuRobo's single pose; leading dims must be `()` or `(1,)`, and do not
      reach the result.
    - `prepare`: a one-operand, one-result op whose element function maps this operand's
      element to the value the op's function receives (a quaternion to its rotation
      matrix, say). Kernels that loop over runs compute it once per distinct element;
      its derivatives come from the preparing op (closed forms where it has them).

    `define_op` fills in `name` and `differentiable`.
    """

    element: tuple[int, ...]
    batch: tuple[str, ...] = (VARIADIC,)
    single: bool = False
    prepare: Op | None = None
    name: str = ""
    differentiable: bool = True

    def expected_shape(self) -> str:
        """The shape this operand takes, as messages and the op reference spell it:
        `(..., 4)`, or cuRobo's single pose `(3,) or (1, 3)`."""
        if self.single:
            return f"{self.element} or {(1, *self.element)}"
        return "(" + ", ".join([*self.batch, *map(str, self.element)]) + ")"

    @property
    def value_element(self) -> tuple[int, ...]:
        """The element shape the op's function receives (after `prepare`)."""
        return self.element if self.prepare is None else self.prepare.results[0].element


@dataclass(frozen=True)
class Result:
    """An array result of an op: its element shape and leading-dimension layout.

    `like` names an operand: the result then has that operand's shape (leading dims
    included), and each launch index adds its value into the element of the result that
    it reads of the operand, so that the result sums over the dimensions along which the
    operand is broadcast. That is the shape of a VJP's gradients: an op's VJP is an op
    whose results are `like` its operands (see `_second_order.py`). Either every result of an
    op is `like` an operand (each its own, of that operand's element shape) or none is;
    the results' `batch` then lists every operand group (the launch's).
    """

    element: tuple[int, ...]
    batch: tuple[str, ...] = (VARIADIC,)
    name: str = ""
    like: str = ""


def _not_installed(op: Op, args: Sequence[Any]):
    raise RuntimeError("xform's dispatch is not installed: import xform")


_dispatch: Callable[[Op, Sequence[Any]], Any] = _not_installed


def install_dispatch(dispatch: Callable[[Op, Sequence[Any]], Any]) -> None:
    """Make `dispatch(op, args)` what calling an op runs (`_dispatch.apply` installs itself)."""
    global _dispatch
    _dispatch = dispatch


@dataclass(frozen=True, eq=False)
class Op:
    """An op: an element function and its operands and results, callable on NumPy, Warp,
    PyTorch and JAX arrays (returning the same kind), differentiable in every framework.

    Made by `define_op`; `xform.OPS` holds the built-ins. Ops compare by identity.
    """

    name: str
    """The op's name: its function's in `xform` and the backends, and its key in `OPS`."""
    function: wp.Function
    """The Warp element function: the op's maths, over one element of each operand."""
    operands: tuple[Operand, ...]
    """The array operands, in the function's order."""
    results: tuple[Result, ...]
    """The array results, in order."""
    formula: str
    """The maths in words (`define_op`'s `doc`), which opens the op's docstring."""
    tangent: wp.Function | None = None
    """The closed-form tangent element function, or None (Warp's adjoint then serves)."""
    vjp: wp.Function | None = None
    """The closed-form VJP element function, or None (Warp's adjoint then serves)."""
    family: str = ""
    """The section of the op reference that lists it ("" for none)."""
    runs: bool = False
    """Kernels loop over runs of launch indices: a CPU thread's run, and a GPU thread's in
    a VJP that adds into a shared gradient (see _launch/codegen.py and launch/tiles.py)."""
    work: float = 1.0
    """An element's weight relative to a small rotation's: CPU launches split over the
    threads from `PARALLEL_MIN_ELEMENTS / work` elements."""
    max_unroll: int | None = None
    """Loops of a fixed bound are unrolled up to this many iterations in the kernels that
    run the closed forms without differentiating them (Warp's default, 16, where None);
    kernels that run Warp's adjoint unroll more (`_launch/codegen.py`)."""
    result_buffers: tuple[str, ...] = ()
    """cuRobo's optional preallocated result buffers, in its order (the PyTorch adapter's
    functional API takes them)."""
    gradient_buffers: tuple[str, ...] = ()
    """cuRobo's optional preallocated gradient buffers, after the result buffers."""
    key: str = ""
    """Unique among all ops defined in this process: names Warp modules and custom ops."""
    adapters: dict[str, Callable] = field(default_factory=dict, repr=False)
    """Each framework adapter's function of this op, by framework, made once: a plain
    attribute, so that torch.compile traces a call through it without re-making it."""
    product_of: tuple[Op, Product] | None = field(default=None, repr=False)
    """For a product of another op (`_second_order.py`): that op and the product. A product's
    own derivatives are second derivatives of that op; a product is never differentiated
    twice."""
    not_differentiable: str = field(default="", repr=False)
    """Where not empty, why the op has no derivatives (and what to do instead): its
    results are not constants, and differentiating them raises HigherDerivativeError."""

    @property
    def differentiable(self) -> bool:
        """Whether any operand is differentiable (else the results are constants)."""
        return any(o.differentiable for o in self.operands)

    @functools.cached_property
    def reduced(self) -> tuple[str, ...]:
        """The batch groups the results sum over: the operands' groups the results lack."""
        kept = set(self.results[0].batch)
        groups = dict.fromkeys(g for o in self.operands if not o.single for g in o.batch)
        return tuple(g for g in groups if g not in kept)

    @functools.cached_property
    def launch_batch(self) -> tuple[str, ...]:
        """The groups a launch covers: the results', then those summed over (innermost)."""
        return self.results[0].batch + self.reduced

    @functools.cached_property
    def like(self) -> tuple[int | None, ...]:
        """For each result, the index of the operand it is `like` (None: a plain result)."""
        names = [o.name for o in self.operands]
        return tuple(names.index(r.like) if r.like else None for r in self.results)

    @property
    def scatters(self) -> bool:
        """Whether the results are `like` operands (added into, where those are broadcast)."""
        return self.like[0] is not None

    @property
    def differentiable_operands(self) -> tuple[str, ...]:
        """The names of the operands the op is differentiable in, in order."""
        return tuple(o.name for o in self.operands if o.differentiable)

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The op's Python signature: its operands, in order (`help(op)` shows it)."""
        return inspect.Signature(
            [
                inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                for o in self.operands
            ]
        )

    def docstring(self, no_operands: str, notes: str = "") -> str:
        """The docstring every framework's function of this op carries (`no_operands`: what
        it says of gradients where no operand is differentiable)."""
        if self.not_differentiable:
            why = self.not_differentiable
            grads = f"none (differentiating raises xform.HigherDerivativeError: {why})"
        else:
            grads = ", ".join(self.differentiable_operands) or no_operands
        arguments = "\n".join(f"    {o.name}: {o.expected_shape()}" for o in self.operands)
        results = "\n".join(
            f"    {r.name}: ({', '.join([*r.batch, *map(str, r.element)])})" for r in self.results
        )
        return (
            f"{self.formula}\n\nArguments:\n{arguments}\nReturns:\n{results}\n"
            f"Differentiable with respect to: {grads}.\n"
            "Leading dimensions broadcast; float32 or float64; results have the input dtype."
            + (f"\n{notes}" if notes else "")
        )

    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != len(self.operands):
            args = self.signature.bind(*args, **kwargs).args
        return _dispatch(self, args)

    def __repr__(self) -> str:
        operands = ", ".join(f"{o.name}{o.expected_shape()}" for o in self.operands)
        return f"xform.Op({self.name}: {operands})"


class _OpDoc:
    """`Op.__doc__`: the class's docstring on the class, and on an op its own (its formula,
    arguments and results), which `help(op)` shows."""

    def __get__(self, op: Op | None, cls: type) -> str:
        if op is None:
            return cls._class_doc
        return op.docstring("none (not differentiable)")


Op._class_doc = Op.__doc__
Op.__doc__ = _OpDoc()  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class Composite:
    """A function over ops: it chooses among them by static arguments (a convention
    string, an optional operand, a flag), or chains several (a sum over points, then a
    solve per batch element). Each op has its own kernels (never a Python loop per
    element, nor a branch on a traced value) and is made up front, so that a compiled
    region never meets a new one. `run(call, *args, **kwargs)` computes the function
    through `call(op, *arrays)`, which `xform`, `xform.backends.torch` and
    `xform.backends.jax` each give in their own way: one definition for every framework,
    whose autodiff chains the ops' own.

    `arrays` names the parameters that take arrays (one whose default is None may be
    None): each front end checks their types before `run` reads them, as it checks an
    op's operands (`xform._dispatch.ArrayArguments`).
    """

    name: str
    run: Callable[..., Any]
    signature: inspect.Signature
    doc: str
    members: tuple[Op, ...] = ()
    arrays: tuple[str, ...] = field(kw_only=True)

    def __post_init__(self) -> None:
        unknown = [a for a in self.arrays if a not in self.signature.parameters]
        if isinstance(self.arrays, str) or unknown:
            raise ValueError(
                f"Composite '{self.name}': arrays {self.arrays!r} must name parameters of "
                f"{self.signature}"
            )
