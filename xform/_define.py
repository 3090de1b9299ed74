"""`define_op`: an element function and its operands' and results' specs, checked and made
an `Op` (`_op.py`), registered once per definition (`_registry.py`)."""

from __future__ import annotations

import dataclasses
import inspect
import keyword
from collections.abc import Mapping, Sequence
from typing import Any

import warp as wp

from . import _registry
from ._fingerprint import function_print, spec_print
from ._op import VARIADIC, Op, Operand, Product, Result

__all__ = ["define_op", "derived"]


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
            raise _error(name, f"{kind} name {key!r} is not an ASCII Python identifier")
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
    family: str = "",
    runs: bool = False,
    work: float = 1.0,
    max_unroll: int | None = None,
    result_buffers: Sequence[str] = (),
    gradient_buffers: Sequence[str] = (),
    product_of: tuple[Op, Product] | None = None,
    not_differentiable: str = "",
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
    (`wp.grad`), the JVP one reverse sweep per result component (see `_launch/codegen.py`).
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
    splits at fewer; `max_unroll` caps the unrolling of fixed-bound loops in the kernels
    that do not differentiate the function (a whole kinematic tree compiles in a fraction
    of the time with `max_unroll=1`); `result_buffers` and `gradient_buffers` name cuRobo's optional
    preallocated buffers (PyTorch only); `family` names the section of the op reference
    that lists the op (xform's built-ins have one). `product_of` is for xform's own
    second-order ops (`_second_order.py`): the op and the product this op computes.
    `not_differentiable` (a sentence saying why and what to do instead) makes an op whose
    results are not constants but have no derivatives: differentiating them, in any
    framework, raises `xform.HigherDerivativeError` with that sentence (where
    `differentiable=()` would make them constants, their derivatives silently zero).

    Returns an `xform.Op`, callable on NumPy, Warp, PyTorch and JAX arrays and accepted
    by `xform.vjp` and `xform.jvp`. With closed-form `tangent` and `vjp` (written without
    `wp.grad`), it is differentiable twice in every framework (`_second_order.py`).
    """
    if not _is_name(name):
        raise ValueError(f"xform.define_op: name {name!r} must be an ASCII Python identifier")
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
    if max_unroll is not None and (
        isinstance(max_unroll, bool) or not isinstance(max_unroll, int) or max_unroll < 0
    ):
        raise _error(name, f"max_unroll must be None or an int >= 0, got {max_unroll!r}")
    if not isinstance(not_differentiable, str):
        raise _error(name, f"not_differentiable must be a str, got {not_differentiable!r}")
    if not_differentiable and (tangent is not None or vjp is not None):
        raise _error(name, "an op marked not_differentiable takes no tangent= or vjp=")
    if not_differentiable and not differentiable:
        raise _error(
            name, "not_differentiable needs differentiable operands: differentiable=() alone "
            "makes the results constants",
        )  # fmt: skip
    bad = [b for b in (*result_buffers, *gradient_buffers) if not _is_name(b)]
    if bad:
        raise _error(name, f"buffer names {bad} are not ASCII Python identifiers")
    definition = (
        name,
        function_print(function),
        function_print(tangent),
        function_print(vjp),
        tuple(spec_print(o) for o in operand_specs),
        tuple(spec_print(x) for x in result_specs),
        doc,
        family,
        runs,
        float(work),
        max_unroll,
        tuple(result_buffers),
        tuple(gradient_buffers),
        product_of,
        not_differentiable,
    )
    # The same definition again (a notebook cell run twice) is the same op.
    return _registry.register(
        Op(
            name=name,
            function=function,
            operands=tuple(operand_specs),
            results=tuple(result_specs),
            formula=doc or f"{name}: the element function {function.key}.",
            tangent=tangent,
            vjp=vjp,
            family=family,
            runs=runs,
            work=float(work),
            max_unroll=max_unroll,
            result_buffers=tuple(result_buffers),
            gradient_buffers=tuple(gradient_buffers),
            product_of=product_of,
            not_differentiable=not_differentiable,
        ),
        definition,
    )


def _is_name(name) -> bool:
    """A name the generated code can carry: an ASCII Python identifier (it becomes a C++
    symbol in Warp's kernels and a `torch.library` schema name)."""
    return (
        isinstance(name, str)
        and name.isascii()
        and name.isidentifier()
        and not keyword.iskeyword(name)
    )


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
    with _registry.lock:
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
