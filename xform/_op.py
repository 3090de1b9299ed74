"""Ops from element functions: `define_op` and the `Op` it returns.

An op is a Warp function over elements (scalars, vectors, matrices) plus a description
of its operands and results. Everything else is generated from that: the forward, VJP
and tangent kernels (`_codegen.py`), shape checks and broadcasting (`_layout.py`), the
launches (`_launch.py`), and each framework's function with its autodiff (`backends/`).
The built-in ops are made here too (`xform/ops/`).

Leading-dimension layouts (`batch`) are tuples of group names:

- ``"..."``: any number of dimensions, broadcast by NumPy rules (right-aligned) among
  all operands that carry ``"..."``;
- any other name (``"B"``, ``"N"``): exactly one dimension, broadcast by size 1 among
  the operands that carry the same name.

A result's layout lists the groups that make up its leading shape, in order. A result
`like` an operand has that operand's shape instead (see `Result`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import keyword
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import warp as wp

from . import _api
from ._spec import VARIADIC, Operand, Result

__all__ = ["VARIADIC", "Op", "OpFamily", "Operand", "Result", "define_op", "on_define"]


@dataclass(frozen=True, eq=False)
class Op:
    """An op: an element function and its operands and results, callable on NumPy, Warp,
    PyTorch and JAX arrays (returning the same kind), differentiable in every framework.

    Made by `define_op`; `xform.OPS` holds the built-ins. Ops compare by identity.
    """

    name: str
    function: wp.Function
    operands: tuple[Operand, ...]
    results: tuple[Result, ...]
    formula: str
    tangent: wp.Function | None = None
    vjp: wp.Function | None = None
    # Kernels loop over runs of launch indices: a CPU thread's run, and a GPU thread's in a
    # VJP that adds into a shared gradient (see _codegen.py and _launch._run_shape).
    runs: bool = False
    # An element's weight relative to a small rotation's: CPU launches split over the
    # threads from `PARALLEL_MIN_ELEMENTS / work` elements.
    work: float = 1.0
    # cuRobo's optional preallocated buffers, in its order: result buffers, then
    # gradient buffers (the PyTorch adapter's functional API takes them).
    result_buffers: tuple[str, ...] = ()
    gradient_buffers: tuple[str, ...] = ()
    # Unique among all ops defined in this process: names Warp modules and custom ops.
    key: str = ""
    # Each framework adapter's function of this op, by framework, made once: a plain
    # attribute, so that torch.compile traces a call through it without re-making it.
    adapters: dict[str, Callable] = field(default_factory=dict, repr=False)
    # For a product of another op (`_products.py`): that op and the product ("vjp" or
    # "tangent"). A product's own derivatives are second derivatives of that op; a
    # product is never differentiated twice.
    product_of: tuple[Op, str] | None = field(default=None, repr=False)

    @property
    def differentiable(self) -> bool:
        return any(o.differentiable for o in self.operands)

    @functools.cached_property
    def reduced(self) -> tuple[str, ...]:
        """The batch groups the results sum over: the operands' groups the results lack."""
        kept = set(self.results[0].batch)
        groups = dict.fromkeys(g for o in self.operands if not o.single for g in o.batch)
        return tuple(g for g in groups if g not in kept)

    def loops_over_runs(self, product: str) -> bool:
        """Whether the kernels of `product` loop over runs of launch indices: where the op
        asks, and for the VJP of an op that sums over groups (a group's summands read one
        cotangent, and the gradients of its per-group operands are sums over the group)."""
        return self.runs or (product == "vjp" and bool(self.reduced))

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

    def scattered(self, product: str) -> tuple[int, ...]:
        """The operands whose shape the arrays that `product`'s kernels add into have: the
        differentiable operands for a VJP (their gradients), the operands the results are
        `like` for the forward and the tangent of an op that scatters; else none."""
        if product == "vjp":
            return tuple(k for k, o in enumerate(self.operands) if o.differentiable)
        if self.scatters:
            return tuple(k for k in self.like if k is not None)
        return ()

    @property
    def differentiable_operands(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.operands if o.differentiable)

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.Signature(
            [
                inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                for o in self.operands
            ]
        )

    def docstring(self, not_differentiable: str, notes: str = "") -> str:
        """The docstring every framework's function of this op carries."""
        grads = ", ".join(self.differentiable_operands) or not_differentiable
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
        return _api.apply(self, args)

    def __repr__(self) -> str:
        operands = ", ".join(f"{o.name}{o.expected_shape()}" for o in self.operands)
        return f"xform.Op({self.name}: {operands})"


class _OpDoc:
    """`Op.__doc__`: the class's docstring on the class, and on an op its own (its formula,
    arguments and results), which `help(op)` shows."""

    def __get__(self, op: Op | None, cls: type) -> str:
        if op is None:
            return cls.class_doc
        return op.docstring("none (not differentiable)")


Op.class_doc = Op.__doc__
Op.__doc__ = _OpDoc()  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class OpFamily:
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
    op's operands (`xform._api.ArrayArguments`).
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
                f"OpFamily '{self.name}': arrays {self.arrays!r} must name parameters of "
                f"{self.signature}"
            )


# Every op defined in this process, and who wants to hear of new ones (the torch adapter
# registers a custom op for each, before any compiled region could need it).
DEFINED: list[Op] = []
_listeners: list[Callable[[Op], None]] = []
_counter = itertools.count(1)
_lock = threading.RLock()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # a thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork_in_child)


def on_define(listener: Callable[[Op], None]) -> None:
    """Call `listener` for every op defined so far and every op defined later."""
    with _lock:
        for op in list(DEFINED):
            listener(op)
        _listeners.append(listener)


def _error(name: str, message: str) -> ValueError:
    return ValueError(f"xform.define_op('{name}'): {message}")


def _element_shape(name: str, what: str, shape) -> tuple[int, ...]:
    if (
        not isinstance(shape, tuple)
        or len(shape) > 2
        or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)
    ):
        raise _error(
            name,
            f"{what} has element shape {shape!r}; expected () for a scalar, (n,) for a "
            "vector or (n, m) for a matrix, with positive ints",
        )
    return shape


def _specs(name: str, kind: str, specs: Mapping[str, Any], cls) -> list:
    if not isinstance(specs, Mapping) or not specs:
        raise _error(name, f"{kind} must be a non-empty mapping of names to element shapes")
    out = []
    for key, spec in specs.items():
        if not _is_name(key):
            raise _error(name, f"{kind} name {key!r} is not a Python identifier")
        what = f"{cls.__name__.lower()} '{key}'"
        if not isinstance(spec, cls):
            spec = cls(_element_shape(name, what, spec))
        else:
            _element_shape(name, what, spec.element)
        out.append(dataclasses.replace(spec, name=key))
    return out


def _parameter_count(function: wp.Function) -> int:
    return len(inspect.signature(function.func).parameters)


def _check_function(name: str, what: str, function, parameters: int) -> None:
    if not isinstance(function, wp.Function):
        raise TypeError(
            f"xform.define_op('{name}'): {what} must be a @wp.func, got {type(function).__name__}"
        )
    if _parameter_count(function) != parameters:
        raise _error(
            name,
            f"{what} '{function.key}' takes {_parameter_count(function)} arguments; "
            f"expected {parameters}",
        )


def define_op(
    name: str,
    function: wp.Function,
    operands: Mapping[str, tuple[int, ...] | Operand],
    results: Mapping[str, tuple[int, ...] | Result],
    tangent: wp.Function | None = None,
    vjp: wp.Function | None = None,
    differentiable: Sequence[str] | None = None,
    doc: str | None = None,
    *,
    runs: bool = False,
    work: float = 1.0,
    result_buffers: Sequence[str] = (),
    gradient_buffers: Sequence[str] = (),
) -> Op:
    """Make an op from an element function.

    `function` is a `@wp.func` over elements, generic in the scalar type (annotate its
    arguments `typing.Any`), taking one argument per operand, in order, and returning
    one value per result (a tuple for several). `operands` and `results` map names to
    element shapes: `()` a scalar, `(n,)` a `wp.vector`, `(n, m)` a `wp.matrix`; leading
    dimensions of all operands broadcast by NumPy rules, and results take the broadcast
    shape. An `Operand` or `Result` in place of a shape sets more (batch layouts, cuRobo's
    single pose, a prepared operand, results shaped like the operands as a VJP's are).

    Sums: results whose batch layout leaves out a named group of the operands' (operands
    `("...", "N")`, results `("...",)`) are sums of `function`'s values over that group,
    which must come last in each operand that has it. Each sum is deterministic: chunks of
    summands added in order, then the chunks' partial sums in order, on every device.

    Derivatives are exact and need nothing more: the VJP is Warp's adjoint of `function`
    (`wp.grad`), the JVP one reverse sweep per result component (see `_codegen.py`).
    Closed forms, used where given, over the same values `function` receives (a prepared
    operand's prepared value) and covering every operand:

    - `tangent(x_1, ..., x_n, dx_1, ..., dx_n)` returns each result's tangent;
    - `vjp(x_1, ..., x_n, g_1, ..., g_r)` returns each operand's cotangent.

    `differentiable` names the operands to differentiate (default: those whose `Operand`
    says so, all for plain shapes; `()`: none, the results are marked non-differentiable);
    the others have zero derivatives. `doc` states the formula; it opens every framework's
    docstring. `runs` makes kernels loop over runs of launch indices (worth it where
    operands are broadcast or prepared); `work` is an element's weight relative to a
    small rotation's or pose product's (1): a CPU launch splits over the threads from
    `PARALLEL_MIN_ELEMENTS / work` elements, so a heavy element (a whole kinematic tree)
    splits at fewer; `result_buffers` and `gradient_buffers` name cuRobo's optional
    preallocated buffers (PyTorch only).

    Returns an `xform.Op`, callable on NumPy, Warp, PyTorch and JAX arrays and accepted
    by `xform.vjp` and `xform.jvp`. With closed-form `tangent` and `vjp` (written without
    `wp.grad`), it is differentiable twice in every framework (`_products.py`).
    """
    return _define_op(
        name, function, operands, results, tangent, vjp, differentiable, doc,
        runs=runs, work=work, result_buffers=result_buffers, gradient_buffers=gradient_buffers,
    )  # fmt: skip


def _define_op(
    name: str,
    function: wp.Function,
    operands: Mapping[str, tuple[int, ...] | Operand],
    results: Mapping[str, tuple[int, ...] | Result],
    tangent: wp.Function | None = None,
    vjp: wp.Function | None = None,
    differentiable: Sequence[str] | None = None,
    doc: str | None = None,
    *,
    runs: bool = False,
    work: float = 1.0,
    result_buffers: Sequence[str] = (),
    gradient_buffers: Sequence[str] = (),
    product_of: tuple[Op, str] | None = None,
) -> Op:
    """`define_op`, and for `_products.py` the op it makes a product `product_of`."""
    if not _is_name(name):
        raise ValueError(f"xform.define_op: name {name!r} must be a Python identifier")
    operand_specs = _specs(name, "operands", operands, Operand)
    result_specs = _specs(name, "results", results, Result)
    n, r = len(operand_specs), len(result_specs)
    _check_function(name, "function", function, n)
    if tangent is not None:
        _check_function(name, "tangent", tangent, 2 * n)
    if vjp is not None:
        _check_function(name, "vjp", vjp, n + r)
    names = [o.name for o in operand_specs]
    if differentiable is None:
        differentiable = [o.name for o in operand_specs if o.differentiable]
    elif isinstance(differentiable, str):
        raise _error(name, "differentiable must be a sequence of operand names, not a string")
    unknown = [d for d in differentiable if d not in names]
    if unknown:
        raise _error(name, f"differentiable names {unknown}, which are not operands {names}")
    if len({*names, *(x.name for x in result_specs)}) != n + r:
        raise _error(name, "operand and result names must be distinct")
    _check_layouts(name, operand_specs, result_specs, runs)
    _check_like(name, operand_specs, result_specs)
    for o in operand_specs:
        _check_prepare(name, o, o.name in differentiable)
    operand_specs = [
        dataclasses.replace(o, differentiable=o.name in differentiable) for o in operand_specs
    ]
    if len(result_buffers) not in (0, r) or len(gradient_buffers) not in (0, n):
        raise _error(
            name, "result_buffers names one buffer per result; gradient_buffers one per operand"
        )
    if isinstance(work, bool) or not isinstance(work, (int, float)) or not work >= 1:
        raise _error(name, f"work must be a number of at least 1, got {work!r}")
    bad = [b for b in (*result_buffers, *gradient_buffers) if not _is_name(b)]
    if bad:
        raise _error(name, f"buffer names {bad} are not Python identifiers")
    definition = (
        name,
        _fingerprint(function),
        _fingerprint(tangent),
        _fingerprint(vjp),
        tuple(_spec_fingerprint(o) for o in operand_specs),
        tuple(_spec_fingerprint(x) for x in result_specs),
        doc,
        runs,
        float(work),
        tuple(result_buffers),
        tuple(gradient_buffers),
        product_of,
    )
    with _lock:
        # The same definition again (a notebook cell run twice) is the same op: no new
        # kernels, modules or custom ops. A different one under a taken name is a new op,
        # and both stay usable.
        same = _definitions.get(definition)
        if same is not None:
            return same
        taken = {op.key for op in DEFINED}
        key = name
        while key in taken:
            key = f"{name}_{next(_counter)}"
        op = Op(
            name=name,
            function=function,
            operands=tuple(operand_specs),
            results=tuple(result_specs),
            formula=doc or f"{name}: the element function {function.key}.",
            tangent=tangent,
            vjp=vjp,
            runs=runs,
            work=float(work),
            result_buffers=tuple(result_buffers),
            gradient_buffers=tuple(gradient_buffers),
            key=key,
            product_of=product_of,
        )
        for listener in list(_listeners):  # a listener's failure leaves no half-made op
            listener(op)
        DEFINED.append(op)
        _definitions[definition] = op
    return op


_definitions: dict[tuple, Op] = {}


def _fingerprint(function: wp.Function | None, seen: frozenset = frozenset()) -> tuple:
    """What a Warp function computes: its key and compiled code (bytecode and constants,
    not line numbers or comments), and the fingerprints of the Warp functions and the
    values it names (a helper edited and run again changes the fingerprint of the
    functions that call it). Two functions made from the same source (a cell run twice)
    have one fingerprint. Cheap: no source is read."""
    if function is None:
        return ()
    python = getattr(function, "func", None)
    if python is None or function.key in seen:
        return (function.key, id(function) if python is None else "recursive")
    seen = seen | {function.key}

    def value_print(value):
        if isinstance(value, wp.Function):
            return _fingerprint(value, seen)
        if isinstance(value, (bool, int, float, str)):
            return repr(value)
        return id(value)

    named = [
        (name, value_print(value))
        for name in sorted(_names(python.__code__))
        if (value := python.__globals__.get(name)) is not None
        and not inspect.ismodule(value)
        and (isinstance(value, wp.Function) or not callable(value))
    ]
    # What a function made in a loop or a factory captures (a robot's constants, say).
    captured = tuple(value_print(cell.cell_contents) for cell in python.__closure__ or ())
    defaults = tuple(value_print(v) for v in python.__defaults__ or ())
    return (function.key, _code(python.__code__), tuple(named), captured, defaults)


def _code(code) -> tuple:
    """A code object's instructions and constants (nested code objects in turn)."""
    constants = tuple(_code(c) if inspect.iscode(c) else repr(c) for c in code.co_consts)
    return (code.co_code, constants, code.co_names, code.co_varnames)


def _names(code) -> set[str]:
    """The global names a function's code (nested code included) reads."""
    names = set(code.co_names)
    for c in code.co_consts:
        if inspect.iscode(c):
            names |= _names(c)
    return names


def _spec_fingerprint(spec: Operand | Result) -> tuple:
    fields = (
        dataclasses.astuple(dataclasses.replace(spec, prepare=None))
        if isinstance(spec, Operand)
        else dataclasses.astuple(spec)
    )
    prepare = getattr(spec, "prepare", None)
    return (type(spec).__name__, fields, None if prepare is None else id(prepare))


def _is_name(name) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def _check_layouts(name: str, operands: list[Operand], results: list[Result], runs: bool) -> None:
    """Each batch layout names a group once. The results' layout lists the groups of the
    (non-single) operands, each once, but for reduced groups: named groups that the
    results leave out, summed over, which must be the last group of every operand that
    has them (so that a result's summands are neighbours in the launch)."""
    for spec in (*operands, *results):
        if len(set(spec.batch)) != len(spec.batch):
            raise _error(name, f"'{spec.name}' has the batch layout {spec.batch}, a group twice")
    groups = {g for o in operands if not o.single for g in o.batch}
    layout = set(results[0].batch)
    reduced = groups - layout
    if not layout <= groups or VARIADIC in reduced:
        raise _error(
            name,
            f"the results' batch layout {results[0].batch} must list the operands' groups "
            f"{sorted(groups)}, each once (but for named groups to sum over)",
        )
    for o in operands:
        summed = [g for g in o.batch if g in reduced]
        if summed and tuple(o.batch[len(o.batch) - len(summed) :]) != tuple(summed):
            raise _error(
                name,
                f"operand '{o.name}' has the batch layout {o.batch}: the groups summed over, "
                f"{sorted(reduced)}, must come last",
            )
    if reduced and runs:
        raise _error(name, "an op that sums over a group does not loop over runs")


def _check_like(name: str, operands: list[Operand], results: list[Result]) -> None:
    """Results `like` operands: all of them or none, each like its own operand, of that
    operand's element shape; no prepared operand; no sum over a group."""
    like = [r for r in results if r.like]
    if not like:
        return
    names = {o.name: o for o in operands}
    if len(like) != len(results):
        raise _error(name, "either every result is `like` an operand or none is")
    for r in results:
        operand = names.get(r.like)
        if operand is None:
            raise _error(name, f"result '{r.name}' is like '{r.like}', which is not an operand")
        if operand.element != r.element:
            raise _error(
                name,
                f"result '{r.name}' has element shape {r.element} but is like '{r.like}', "
                f"of element shape {operand.element}",
            )
    if len({r.like for r in results}) != len(results):
        raise _error(name, "two results are like one operand")
    if any(o.prepare is not None for o in operands):
        raise _error(name, "an op whose results are like its operands takes no prepared operand")
    groups = {g for o in operands if not o.single for g in o.batch}
    if set(results[0].batch) != groups:
        raise _error(
            name,
            f"the results are like operands, so their batch layout {results[0].batch} must "
            f"list every operand group {sorted(groups)}",
        )


def _check_prepare(name: str, operand: Operand, differentiable: bool) -> None:
    prepare = operand.prepare
    if prepare is None:
        return
    if (
        not isinstance(prepare, Op)
        or len(prepare.operands) != 1
        or len(prepare.results) != 1
        or prepare.operands[0].element != operand.element
        or prepare.operands[0].prepare is not None
        or (differentiable and not prepare.differentiable)
    ):
        raise _error(
            name,
            f"operand '{operand.name}' is prepared by {prepare!r}; expected a differentiable "
            f"op of one unprepared operand of element shape {operand.element} and one result",
        )


def derived(op: Op) -> Op:
    """The same op without its closed-form derivatives (nor its prepared operands'):
    both modes then come from the element functions' adjoints. For tests and benchmarks."""
    with _lock:
        return _derived_locked(op)


def _derived_locked(op: Op) -> Op:
    cached = _derived.get(op)
    if cached is None:
        operands = {
            o.name: dataclasses.replace(
                o, prepare=None if o.prepare is None else derived(o.prepare), name=""
            )
            for o in op.operands
        }
        cached = _derived[op] = define_op(
            f"{op.name}_derived",
            op.function,
            operands,
            {r.name: dataclasses.replace(r, name="") for r in op.results},
            differentiable=op.differentiable_operands,
            doc=op.formula,
            runs=op.runs,
        )
    return cached


_derived: dict[Op, Op] = {}
