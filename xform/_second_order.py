"""Every product of an op as an op of its own: the second-order mechanism.

An op's closed-form derivatives are plain `@wp.func`s, so each can be the element function
of an op, whose own derivatives `codegen.py` then generates as for any op:

- `product_op(op, Product.TANGENT)`: `(x_1..x_n, dx_1..dx_n) -> (dy_1..dy_r)`, the op's
  closed-form tangent (through `prepare`'s closed form for a prepared operand). Its
  results are the op's.
- `product_op(op, Product.VJP)`: `(x_1..x_n, g_1..g_r) -> (x̄_k for each differentiable
  x_k)`, the op's closed-form VJP. Its results are `like` the operands (see
  `_op.Result`): shaped like them, summed where they are broadcast, as the first
  derivative's launch sums them.

Their derivatives are the op's second derivatives, exact: Warp's adjoint (`wp.grad`) of a
closed form that itself calls no `wp.grad`. The VJP op's tangent takes one reverse sweep,
by the symmetry of the Hessian (`codegen._vjp_tangent`). The framework adapters route a
derivative of a first derivative here: PyTorch's double backward and forward-over-reverse,
JAX's JVP rules of the tangent and VJP primitives.

One closed form is enough: a missing VJP is the closed-form tangent transposed (one
tangent per operand component), a missing tangent the VJP transposed (one VJP per result
component), both without `wp.grad` (`closed_vjp`, `closed_tangent`); the first
derivatives keep their fast derived form. Where both are missing, the first derivatives
come from `wp.grad` of the element function, and Warp treats a `wp.grad` inside another
adjoint as a constant: a derivative of them would be silently wrong. So would a third
derivative (a product of a product calls `wp.grad`). Both raise `HigherDerivativeError`,
naming the op and what to supply.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import warp as wp

from . import _registry
from ._define import define_op
from ._launch.source import build, component, inner
from ._op import Op, Operand, Product, Result


class HigherDerivativeError(NotImplementedError):
    """A derivative that xform cannot give exactly: a second derivative of an op without
    closed-form `tangent=` and `vjp=`, a third derivative of any op, or any derivative of
    an op made with `define_op(..., not_differentiable=why)`."""


def refuse_if_not_differentiable(op: Op) -> None:
    """Raise HigherDerivativeError where `op` was made `not_differentiable`: the framework
    adapters call this where they would differentiate it."""
    if op.not_differentiable:
        raise HigherDerivativeError(f"xform.{op.name}: {op.not_differentiable}")


_made: dict[tuple[Op, Product], Op] = {}


def available(op: Op) -> None:
    """Raise HigherDerivativeError where `op`'s products cannot be made ops of their own
    (so that they could be differentiated)."""
    if op.product_of is not None:
        base, of = op.product_of
        raise HigherDerivativeError(
            f"xform.{base.name}: third derivatives are not available (this differentiates "
            f"a derivative of {base.name}'s {of} again); xform's ops are differentiable "
            "twice, exactly"
        )
    if op.tangent is None and op.vjp is None:
        raise HigherDerivativeError(
            f"xform.{op.name}: no second derivative, as the op has no closed-form "
            "derivatives. Pass closed-form tangent= and vjp= (@wp.funcs written without "
            f"wp.grad) to xform.define_op('{op.name}', ...): its first derivatives are then "
            "ops of their own, differentiable again. Without them, they come from Warp's "
            "adjoint (wp.grad), which cannot be differentiated again."
        )
    for o in op.operands:
        if o.prepare is not None and o.prepare.tangent is None and o.prepare.vjp is None:
            raise HigherDerivativeError(
                f"xform.{op.name}: no second derivative, as its operand '{o.name}' is "
                f"prepared by {o.prepare.name}, which has no closed-form derivatives. "
                f"Give {o.prepare.name} closed-form tangent= and vjp=."
            )


def product_op(op: Op, product: Product) -> Op:
    """The op of `op`'s closed-form `product`, made once: for the VJP
    `(x..., g...) -> x̄...`, for the tangent `(x..., dx...) -> dy...`."""
    refuse_if_not_differentiable(op)
    available(op)
    with _registry.lock:
        made = _made.get((op, product))
        if made is None:
            define = _define_vjp_op if product is Product.VJP else _define_tangent_op
            made = _made[(op, product)] = define(op)
    return made


def _unprepared(operand: Operand) -> Operand:
    return dataclasses.replace(operand, prepare=None, name="")


def _define_vjp_op(op: Op) -> Op:
    operands = {o.name: _unprepared(o) for o in op.operands}
    cotangents = [f"cotangent_{r.name}" for r in op.results]
    batch = op.results[0].batch
    operands |= {name: Operand(r.element, batch) for name, r in zip(cotangents, op.results)}
    results = {
        f"gradient_{o.name}": Result(o.element, op.launch_batch, like=o.name)
        for o in op.operands
        if o.differentiable
    }
    return define_op(
        f"{op.name}_vjp",
        _pullback(op),
        operands,
        results,
        differentiable=(*op.differentiable_operands, *cotangents),
        doc=f"The VJP of {op.name}: each differentiable operand's gradient, shaped like it.",
        # Its forward is the op's VJP kernel, which loops over runs where the op sums.
        runs=op.runs or bool(op.reduced),
        work=op.work,
        product_of=(op, Product.VJP),
    )


def _define_tangent_op(op: Op) -> Op:
    operands = {o.name: _unprepared(o) for o in op.operands}
    tangents = [f"tangent_{o.name}" for o in op.operands]
    operands |= {name: _unprepared(o) for name, o in zip(tangents, op.operands)}
    differentiable = [o.name for o in op.operands if o.differentiable]
    differentiable += [t for o, t in zip(op.operands, tangents) if o.differentiable]
    return define_op(
        f"{op.name}_tangent",
        _pushforward(op),
        operands,
        {r.name: dataclasses.replace(r, name="") for r in op.results},
        differentiable=differentiable,
        doc=f"The tangent of {op.name}: its results' tangents.",
        runs=op.runs,
        work=op.work,
        product_of=(op, Product.TANGENT),
    )


# --- closed forms, given or transposed -----------------------------------------------------


def _unit(element: tuple[int, ...], c: int, scalar: str) -> str:
    """Source of the element of shape `element` whose flat component c is 1, the others
    0 (c = -1: zero), built in one constructor call (Warp's adjoint needs that)."""
    values = [f"{scalar}({1.0 if i == c else 0.0})" for i in range(max(1, math.prod(element)))]
    return _assemble(values, element)


def _assemble(parts: list[str], element: tuple[int, ...]) -> str:
    """Source of one element from its components' sources, in one constructor call."""
    if not element:
        return parts[0]
    if len(element) == 1:
        return f"wp.vector({', '.join(parts)})"
    return f"wp.matrix({', '.join(parts)}, shape={element})"


def closed_tangent(op: Op) -> wp.Function | None:
    """The op's tangent over the values its function receives, without `wp.grad`: its
    closed form, else its closed-form VJP transposed (one VJP per result component:
    `dy_j[c] = <vjp(x, e_jc), dx>`); None where it has neither."""
    if op.tangent is not None or op.vjp is None:
        return op.tangent
    return _transposed(op, Product.VJP)


def closed_vjp(op: Op) -> wp.Function | None:
    """The op's VJP over the values its function receives, without `wp.grad`: its closed
    form, else its closed-form tangent transposed (one tangent per operand component:
    `x̄_k[c] = <g, tangent(x, e_kc)>`); None where it has neither."""
    if op.vjp is not None or op.tangent is None:
        return op.vjp
    return _transposed(op, Product.TANGENT)


@functools.cache
def _transposed(op: Op, given: Product) -> wp.Function:
    """The product that `given` (the tangent or the VJP) is not, from `given`'s closed form
    called on unit seeds: each component of the product is one inner product."""
    n = len(op.operands)
    operands = [o.value_element for o in op.operands]
    results = [res.element for res in op.results]
    xs = [f"x{k}" for k in range(n)]
    # The tangent's seeds run over the operands, pairing its results with the cotangents;
    # the VJP's run over the results, pairing its operands' cotangents with the tangents.
    seeded, paired = (operands, results) if given == Product.TANGENT else (results, operands)
    others = [f"o{i}" for i in range(len(paired))]
    scalar = f"type({component('x0', 0, operands[0])})"
    lines, outs = [], []
    for k, element in enumerate(seeded):
        parts = []
        for c in range(max(1, math.prod(element))):
            seeds = [_unit(e, c if i == k else -1, scalar) for i, e in enumerate(seeded)]
            values = [f"v{k}_{c}_{i}" for i in range(len(paired))]
            lines.append(f"    {', '.join(values)} = G({', '.join(xs + seeds)})")
            pairs = zip(values, others, paired)
            parts.append(" + ".join(inner(v, o, e) for v, o, e in pairs))
        outs.append(_assemble(parts, element))
    source = (
        f"({', '.join(f'{a}: Any' for a in xs + others)}):\n"
        + "\n".join(lines)
        + f"\n    return {', '.join(outs)}\n"
    )
    function = op.tangent if given == Product.TANGENT else op.vjp
    return _build(op, f"transposed_{given}", source, {"G": function})


def _build(op: Op, part: str, source: str, namespace: dict) -> wp.Function:
    name = f"{op.key}_xform_{part}"
    module = f"xform_ops.{op.key}.{part}"
    return build(f"@wp.func\ndef {name}{source}", module, namespace)[name]


def _pullback(op: Op) -> wp.Function:
    """`(x_1..x_n, g_1..g_r) -> x̄_k` for each differentiable x_k: the closed-form VJP, with
    each prepared operand prepared and its cotangent pulled back through `prepare`'s."""
    vjp = closed_vjp(op)
    if all(o.differentiable and o.prepare is None for o in op.operands):
        return vjp
    n, r = len(op.operands), len(op.results)
    xs, gs = [f"x{k}" for k in range(n)], [f"g{j}" for j in range(r)]
    values = [f"P{k}(x{k})" if o.prepare else f"x{k}" for k, o in enumerate(op.operands)]
    outs = [
        f"PV{k}(x{k}, b{k})" if o.prepare else f"b{k}"
        for k, o in enumerate(op.operands)
        if o.differentiable
    ]
    source = (
        f"({', '.join(f'{a}: Any' for a in xs + gs)}):\n"
        f"    {', '.join(f'b{k}' for k in range(n))} = V({', '.join(values + gs)})\n"
        f"    return {', '.join(outs)}\n"
    )
    namespace = {"V": vjp}
    for k, o in enumerate(op.operands):
        if o.prepare is not None:
            namespace |= {f"P{k}": o.prepare.function, f"PV{k}": closed_vjp(o.prepare)}
    return _build(op, "pullback", source, namespace)


def _pushforward(op: Op) -> wp.Function:
    """`(x_1..x_n, dx_1..dx_n) -> dy_1..dy_r`: the closed-form tangent, with each prepared
    operand and its tangent prepared by `prepare`'s function and closed-form tangent."""
    tangent = closed_tangent(op)
    if all(o.prepare is None for o in op.operands):
        return tangent
    n = len(op.operands)
    xs, dxs = [f"x{k}" for k in range(n)], [f"dx{k}" for k in range(n)]
    values = [f"P{k}(x{k})" if o.prepare else f"x{k}" for k, o in enumerate(op.operands)]
    tangents = [f"PT{k}(x{k}, dx{k})" if o.prepare else f"dx{k}" for k, o in enumerate(op.operands)]
    source = (
        f"({', '.join(f'{a}: Any' for a in xs + dxs)}):\n"
        f"    return T({', '.join(values + tangents)})\n"
    )
    namespace = {"T": tangent}
    for k, o in enumerate(op.operands):
        if o.prepare is not None:
            namespace |= {f"P{k}": o.prepare.function, f"PT{k}": closed_tangent(o.prepare)}
    return _build(op, "pushforward", source, namespace)
