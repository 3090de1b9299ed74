"""An op's element derivatives, `vjp(x, g)` and `tangent(x, dx)`: its closed forms where
given, else derived from its element function through Warp's adjoint (`wp.grad`), as
`codegen.py`'s module docstring describes."""

from __future__ import annotations

import functools
import math

import warp as wp

from .._op import Op, Product
from .source import build, component, inner, module_name, tuple_source, types


@functools.cache
def _cotangent_dot(op: Op, scalar: type) -> wp.Function:
    """`<function(x_1..x_n), (g_1..g_r)>`, the scalar whose gradient `wp.grad` takes."""
    n, r = len(op.operands), len(op.results)
    params = [f"x{k}: X{k}" for k in range(n)] + [f"g{j}: Y{j}" for j in range(r)]
    ys = [f"y{j}" for j in range(r)]
    pairing = " + ".join(inner(f"y{j}", f"g{j}", res.element) for j, res in enumerate(op.results))
    # Warp keys functions by name: each op's are named after it, so that two ops' element
    # functions can meet in one kernel (a prepared operand's and the op's own).
    source = f"""
@wp.func
def {op.key}_cotangent_dot({tuple_source(params)}):
    {tuple_source(ys)} = F({tuple_source([f"x{k}" for k in range(n)])})
    return {pairing}
"""
    module = module_name(op, "cotangent_dot", scalar)
    namespace = build(source, module, {"F": op.function, **types(op, scalar)})
    return namespace[f"{op.key}_cotangent_dot"]


def _gradient_call(op: Op, scalar: type, cotangents: list[str]) -> str:
    """`b0, ..., b<n-1>, _c0, ... = wp.grad(<cotangent_dot>)(x0, ..., cotangents...)`:
    the operands' cotangents, by Warp's adjoint of the function."""
    n = len(op.operands)
    outs = [f"b{k}" for k in range(n)] + [f"_c{j}" for j in range(len(op.results))]
    xs = [f"x{k}" for k in range(n)]
    return f"{tuple_source(outs)} = wp.grad(CD)({tuple_source(xs + cotangents)})"


@functools.cache
def element_vjp(op: Op, scalar: type) -> wp.Function:
    """`vjp(x_1..x_n, g_1..g_r) -> x̄_1..x̄_n` (one value for one operand): the op's closed
    form, or Warp's adjoint of `<function(x), g>`."""
    if op.vjp is not None:
        return op.vjp
    n, r = len(op.operands), len(op.results)
    params = [f"x{k}: X{k}" for k in range(n)] + [f"g{j}: Y{j}" for j in range(r)]
    source = (
        f"@wp.func\ndef {op.key}_vjp({tuple_source(params)}):\n"
        f"    {_gradient_call(op, scalar, [f'g{j}' for j in range(r)])}\n"
        f"    return {tuple_source([f'b{k}' for k in range(n)])}\n"
    )
    module = module_name(op, "element_vjp", scalar)
    namespace = build(source, module, {"CD": _cotangent_dot(op, scalar), **types(op, scalar)})
    return namespace[f"{op.key}_vjp"]


@functools.cache
def element_tangent(op: Op, scalar: type) -> wp.Function:
    """`tangent(x_1..x_n, dx_1..dx_n) -> dy_1..dy_r`: the op's closed form, or one reverse
    sweep of the element function per result component (see the module docstring).
    Each sweep calls `wp.grad` here, not through the element VJP: Warp emits functions
    that call `wp.grad` after all others, so one could not call another."""
    if op.tangent is not None:
        return op.tangent
    if op.product_of is not None and op.product_of[1] == Product.VJP:
        return _vjp_tangent(op, scalar)
    n, r = len(op.operands), len(op.results)
    params = [f"x{k}: X{k}" for k in range(n)] + [f"dx{k}: X{k}" for k in range(n)]
    lines = ["@wp.func", f"def {op.key}_tangent({tuple_source(params)}):"]
    directional = " + ".join(
        inner(f"b{k}", f"dx{k}", o.value_element) for k, o in enumerate(op.operands)
    )
    for j, res in enumerate(op.results):
        seeds = [f"Y{i}()" if op.results[i].element else "S(0.0)" for i in range(r)]
        if res.element == ():
            seeds[j] = "S(1.0)"
            lines += [f"    {_gradient_call(op, scalar, seeds)}", f"    out{j} = {directional}"]
            continue
        seeds[j] = f"e{j}"
        # A dynamic loop (its bound is not a literal): one sweep's code, not m copies.
        lines += [
            f"    out{j} = Y{j}()",
            f"    count{j} = wp.int32({math.prod(res.element)})",
            f"    for c in range(count{j}):",
            f"        e{j} = Y{j}()",
            f"        {component(f'e{j}', 'c', res.element)} = S(1.0)",
            f"        {_gradient_call(op, scalar, seeds)}",
            f"        {component(f'out{j}', 'c', res.element)} = {directional}",
        ]
    lines.append(f"    return {tuple_source([f'out{j}' for j in range(r)])}")
    namespace = build(
        "\n".join(lines) + "\n",
        module_name(op, "element_tangent", scalar),
        {"CD": _cotangent_dot(op, scalar), **types(op, scalar)},
    )
    return namespace[f"{op.key}_tangent"]


def _vjp_tangent(op: Op, scalar: type) -> wp.Function:
    """The tangent of an op's VJP (`_second_order.product_op`) in one reverse sweep, not one per
    result component. The VJP is `V(x, g) = J(x)^T g`, linear in g, and its derivative in
    x, `H = sum_j g_j d^2 F_j / dx^2`, is symmetric: so its tangent `H dx + V(x, dg)` takes
    `H dx` as the x-part of the gradient of `<V(x, g), dx>`, the VJP's own derived VJP at
    the cotangent dx. Operands: x_1..x_n, then g_1..g_r; the i-th result is the gradient of
    the i-th differentiable x."""
    base = op.product_of[0]
    n, m = len(base.operands), len(op.operands)
    params = [f"x{k}: X{k}" for k in range(m)] + [f"dx{k}: X{k}" for k in range(m)]
    gradients = [k for k, o in enumerate(base.operands) if o.differentiable]
    outs = [f"v{i}" for i in range(len(gradients))]
    at_dg = [f"x{k}" for k in range(n)] + [f"dx{k}" for k in range(n, m)]  # V(x, dg)
    lines = [
        "@wp.func",
        f"def {op.key}_tangent({tuple_source(params)}):",
        f"    {_gradient_call(op, scalar, [f'dx{k}' for k in gradients])}",
        f"    {tuple_source(outs)} = F({tuple_source(at_dg)})",
        f"    return {tuple_source([f'b{k} + v{i}' for i, k in enumerate(gradients)])}",
    ]
    namespace = build(
        "\n".join(lines) + "\n",
        module_name(op, "element_tangent", scalar),
        {"F": op.function, "CD": _cotangent_dot(op, scalar), **types(op, scalar)},
    )
    return namespace[f"{op.key}_tangent"]


# --- kernels ------------------------------------------------------------------------------
