"""Kernels generated from an op's element function: forward, tangent (JVP) and VJP.

Every op is one element function plus its `Op` entry (`_op.py`). From them this module
writes the kernels' Python source, with concrete element types for float32 and float64
and a launch grid of either kind (`FlatGrid`, `Grid`), and lets Warp compile it. A kernel
reads each operand at the element its strides select (`indexing.py`), calls element
functions, and writes results at the launch index. Ops that ask for runs (`Op.runs`),
and the VJPs of ops that sum over groups, loop over a run of launch indices per thread:
a prepared operand is prepared once per distinct element, and a VJP sums each operand's
cotangent in registers until that operand's element changes.

**Reverse mode** calls an element VJP, `vjp(x_1..x_n, g_1..g_r) -> (x̄_1..x̄_n)`: the op's
closed form where given, else Warp's adjoint of `<function(x), g>`, through `wp.grad`
(the same code Warp's own backward pass runs for the function, called in a forward
kernel). So the launch layer, not Warp's kernel adjoint, decides how gradients land:
stored where no two launch indices share an element, added where an operand is
broadcast (into per-thread partial sums on CPU, see `products.py`; on a GPU summed in
blocks by the kernels of `blocks.py` where the broadcast allows, else added by warps).

**Forward mode** calls an element tangent, `tangent(x_1..x_n, dx_1..dx_n) -> (dy_1..dy_r)`:
the op's closed form where given, else derived from the element VJP. Warp has no forward
mode, and its reverse mode runs only inside this process's kernels, so the derivation is:
component c of J dx is `<e_c, J dx> = <J^T e_c, dx>`, one reverse sweep of the element
function per result component c, each seeded with the unit cotangent e_c. This is exact
to rounding (every sweep is Warp's adjoint, never a difference quotient), stays in
registers (one pass over memory, as the forward), and costs m sweeps for m result
components: cheap where memory bounds the kernel (a GPU), m-fold arithmetic where it
does not (a CPU), which is where a closed-form `tangent` pays. (Transposing the VJP
instead would need the Jacobian too; differentiating the VJP again needs second-order
adjoints, which Warp does not generate.)

Modules: the kernels of each (op, product, dtype) are a Warp module of their own, so the
first call of an op compiles only that op's forward kernels for that dtype, not the whole
library (the element functions generated alongside compile into the kernels that call
them).
"""

from __future__ import annotations

import functools
from typing import Any

import warp as wp

from .._op import Op, Product
from . import indexing
from .elements import element_tangent, element_vjp
from .layout import loops_over_runs, scattered, sums
from .source import (
    build,
    module_name,
    tuple_source,
    types,
    value_type,
    zero_source,
)


def signature(op: Op, product: str, grid: str) -> str:
    params = [f"grid: {grid}"]
    for k in range(len(op.operands)):
        params += [f"a{k}: wp.array(dtype=A{k})", f"s{k}: wp.vec4i"]
    if product == Product.FORWARD:
        params += [f"r{j}: wp.array(dtype=Y{j})" for j in range(len(op.results))]
    elif product == Product.TANGENT:
        params += [f"da{k}: wp.array(dtype=A{k})" for k in range(len(op.operands))]
        params += [f"dr{j}: wp.array(dtype=Y{j})" for j in range(len(op.results))]
    else:
        params += [f"gr{j}: wp.array(dtype=Y{j})" for j in range(len(op.results))]
        params += [f"ga{k}: wp.array(dtype=A{k})" for k in range(len(op.operands))]
    return ", ".join(params)


def _load(op: Op, k: int, product: str, index: str) -> list[str]:
    """Read operand k (and, for the tangent, its tangent) at `index`, preparing it."""
    if op.operands[k].prepare is None:
        lines = [f"x{k} = a{k}[{index}]"]
        if product == Product.TANGENT:
            lines.append(f"dx{k} = da{k}[{index}]")
        return lines
    if product == Product.FORWARD:
        return [f"x{k} = P{k}(a{k}[{index}])"]
    # The stored element stays at hand: the tangent and the VJP pull through `prepare`.
    lines = [f"q{k} = a{k}[{index}]", f"x{k} = P{k}(q{k})"]
    if product == Product.TANGENT:
        lines.append(f"dx{k} = PT{k}(q{k}, da{k}[{index}])")
    return lines


def _gradient(op: Op, k: int, value: str) -> str:
    """Operand k's cotangent from the cotangent `value` of what the function received."""
    return value if op.operands[k].prepare is None else f"PV{k}(q{k}, {value})"


def _targets(op: Op, product: str) -> dict[int, tuple[str, str, str, tuple[int, ...]]]:
    """The arrays a kernel adds into in an operand's shape, by that operand's index k:
    (array, the value added at each launch index, its type name, its element shape). A
    VJP's gradients (the cotangents of what the function received, pulled back through
    `prepare` when added); the results of the forward or tangent of an op whose results
    are `like` operands."""
    if product == Product.VJP:
        return {
            k: (f"ga{k}", f"b{k}", f"X{k}", op.operands[k].value_element)
            for k in scattered(op, product)
        }
    out, value = ("r", "y") if product == Product.FORWARD else ("dr", "dy")
    return {
        k: (f"{out}{j}", f"{value}{j}", f"Y{j}", op.results[j].element)
        for j, k in enumerate(op.like)
        if k is not None
    }


def _flush(op: Op, product: str, k: int, index: str, value: str) -> list[str]:
    """Give the array shaped like operand k (`_targets`) the value `value` at `index`:
    stored where operand k is dense (no other index shares the element; through STORE),
    else added (SHARED_ADD); nothing where the array is not needed (a null array, of
    length 0)."""
    array = _targets(op, product)[k][0]
    pulled = _gradient(op, k, value) if product == Product.VJP else value
    return [
        f"if {array}.shape[0] > 0:",
        f"    gradient{k} = {pulled}",
        f"    if dense(grid, {k}):",
        f"        {_store(f'SS{k}', array, index, f'gradient{k}', op.operands[k].element)}",
        "    else:",
        f"        SA{k}({array}, {index}, gradient{k})",
    ]


def _evaluate(op: Op, product: str) -> tuple[list[str], list[str]]:
    """Once every x<k> (and dx<k>) is loaded: the lines that call the element function (or
    its tangent), and the names of the values (y<j>, dy<j>) it gives."""
    n, r = len(op.operands), len(op.results)
    xs = [f"x{k}" for k in range(n)]
    if product == Product.FORWARD:
        ys = [f"y{j}" for j in range(r)]
        return [f"{tuple_source(ys)} = F({tuple_source(xs)})"], ys
    ys = [f"dy{j}" for j in range(r)]
    dxs = [f"dx{k}" for k in range(n)]
    return [f"{tuple_source(ys)} = TG({tuple_source(xs + dxs)})"], ys


def _compute(op: Op, product: str, group: str = "i / grid.reduce", index: str = "j") -> list[str]:
    """The per-index work once every x<k> (and dx<k>) is loaded: call the element
    function, write results (forward, tangent) or give the VJP's values as b<k>. The
    results of an op that scatters are left as values (y<j>, dy<j>) for the body to add;
    operand k's element index is `<index>k`."""
    n = len(op.operands)
    if product == Product.VJP:
        # An op that sums over groups reads each sum's cotangent at every summand: that of
        # the summand's `group`; a result like operand k has its cotangent where k is read.
        at = group if op.reduced else "i"
        reads = [f"gr{j}[{at if k is None else f'{index}{k}'}]" for j, k in enumerate(op.like)]
        xs = [f"x{k}" for k in range(n)] + reads
        return [f"{tuple_source([f'b{k}' for k in range(n)])} = V({tuple_source(xs)})"]
    lines, ys = _evaluate(op, product)
    if op.scatters:
        return lines
    out = "r" if product == Product.FORWARD else "dr"
    return lines + [
        _store(f"SR{j}", f"{out}{j}", "i", y, r.element)
        for j, (y, r) in enumerate(zip(ys, op.results))
    ]


def _reduce_body(op: Op, product: str) -> list[str]:
    """For an op that sums over groups, forward or tangent: a thread sums its chunk of one
    result element's summands, in order, into a partial sum of its own (where the results
    would be; a launch may cover some of the chunks, from `grid.first_chunk`);
    `sum_partials` then adds each element's partials, in order. Deterministic on every
    device: no atomics."""
    lines = [
        "thread = wp.tid()",
        "element, first, last = chunk_bounds(grid, thread)",
        "at = unravel(grid, first)",
    ]
    lines += [f"total{j} = {zero_source(f'Y{j}', res.element)}" for j, res in enumerate(op.results)]
    loop = []
    for k in range(len(op.operands)):
        loop += _load(op, k, product, f"element_index(at, s{k})")
    evaluate, ys = _evaluate(op, product)
    loop += evaluate + [f"total{j} = total{j} + {y}" for j, y in enumerate(ys)]
    loop.append("at = advance(grid, at)")
    lines.append("for i in range(first, last):")
    lines += ["    " + line for line in loop]
    out = "r" if product == Product.FORWARD else "dr"
    return lines + [f"{out}{j}[thread] = total{j}" for j in range(len(op.results))]


def _sum_partials_source(op: Op) -> str:
    """The kernel that adds each result element's `grid.chunks` partial sums, in order."""
    r = len(op.results)
    params = ["grid: FlatGrid"] + [f"p{j}: wp.array(dtype=Y{j})" for j in range(r)]
    params += [f"r{j}: wp.array(dtype=Y{j})" for j in range(r)]
    lines = ["element = wp.tid()"]
    lines += [f"t{j} = {zero_source(f'Y{j}', res.element)}" for j, res in enumerate(op.results)]
    lines.append("for c in range(grid.chunks):")
    lines += [f"    t{j} = t{j} + p{j}[element * grid.chunks + c]" for j in range(r)]
    lines += [f"r{j}[element] = t{j}" for j in range(r)]
    return (
        "\n\n@wp.kernel(enable_backward=False)\n"
        f"def sum_partials({tuple_source(params)}):\n" + "".join(f"    {line}\n" for line in lines)
    )


def _simple_body(op: Op, product: str) -> list[str]:
    """One launch index per thread."""
    lines = ["i = wp.tid()", "at = unravel(grid, i)"]
    for k in range(len(op.operands)):
        lines.append(f"j{k} = element_index(at, s{k})")
        lines += _load(op, k, product, f"j{k}")
    lines += _compute(op, product)
    for k, (_, value, _, _) in _targets(op, product).items():
        lines += _flush(op, product, k, f"j{k}", value)
    return lines


def _run_body(op: Op, product: str) -> list[str]:
    """A run of launch indices per thread: prepared operands are prepared when their
    element changes; a VJP sums each operand's cotangent until its element changes (and so
    does an op that scatters each result, see `_targets`). Each operand's element index
    `e<k>` steps by its innermost stride, and is recomputed from the coordinates only
    where they carry into an outer dimension."""
    vjp = product == Product.VJP
    targets = _targets(op, product)
    n = len(op.operands)
    cached = [k for k, o in enumerate(op.operands) if o.prepare is not None or k in targets]
    recompute = [f"e{k} = element_index(at, s{k})" for k in range(n)]
    # The VJP of an op that sums over groups counts its place in the summands' group
    # (`within`) rather than divide for the group at every index.
    counted = vjp and bool(op.reduced)

    def regroup(index: str) -> list[str]:
        return [f"group = {index} / grid.reduce", f"within = {index} - group * grid.reduce"]

    lines = ["first, last, step = run_bounds(grid, wp.tid())", "at = unravel(grid, first)"]
    lines += recompute
    if counted:
        lines += regroup("first")
    for k in cached:
        lines.append(f"i{k} = e{k}")
        if op.operands[k].prepare is not None:
            lines += _load(op, k, product, f"i{k}")
        if k in targets:
            lines.append(f"sum{k} = {zero_source(targets[k][2], targets[k][3])}")
    # Only a kernel that adds into arrays runs strided (a GPU thread's run, see
    # _launch/tiling.py's run_shape).
    strided = ["if step != 1:", "    at = unravel(grid, i)", *("    " + x for x in recompute)]
    if counted:
        strided += ["    " + line for line in regroup("i")]
    loop = strided if targets else []
    # Operands read afresh at every index come last, after the (rarely taken) branches,
    # last operand first: measured, the point transforms' forward runs 10% faster on CPU
    # reading the points before the position than after it.
    for k in [*cached, *(k for k in reversed(range(len(op.operands))) if k not in cached)]:
        o = op.operands[k]
        if k not in cached:
            loop += _load(op, k, product, f"e{k}")
            continue
        loop += [f"if e{k} != i{k}:"]
        change = []
        if k in targets:
            change += _flush(op, product, k, f"i{k}", f"sum{k}")
            change.append(f"sum{k} = {zero_source(targets[k][2], targets[k][3])}")
        change.append(f"i{k} = e{k}")
        if o.prepare is not None:
            change += _load(op, k, product, f"i{k}")
        loop += ["    " + line for line in change]
        if o.prepare is None:
            loop += _load(op, k, product, f"e{k}")
    loop += _compute(op, product, group="group", index="e")
    loop += [f"sum{k} = sum{k} + {targets[k][1]}" for k in cached if k in targets]
    if counted:
        loop += ["within = within + 1", "if within == grid.reduce:", "    within = 0"]
        loop += ["    group = group + 1"]
    loop += ["if carries(grid, at):", "    at = advance(grid, at)"]
    loop += ["    " + x for x in recompute]
    loop += ["else:", "    at = wp.vec4i(at[0] + 1, at[1], at[2], at[3])"]
    loop += [f"    e{k} = e{k} + s{k}[0]" for k in range(n)]
    lines.append(f"for i in range(first, last{', step' if targets else ''}):")
    lines += ["    " + line for line in loop]
    for k in cached:
        if k in targets:
            lines += _flush(op, product, k, f"i{k}", f"sum{k}")
    return lines


@functools.cache
def kernels(op: Op, product: str, scalar: type) -> dict:
    """The kernels of one product of `op` for one dtype, keyed by `flat` (FlatGrid or
    Grid), in a Warp module of their own (an op that sums over groups adds, for the
    forward and the tangent, "sum_partials": its main kernels write partial sums where
    the results would be, which that kernel adds up). The launch layer relies on their parameters:
    the grid, each operand with its strides, then for the forward the results; for the
    tangent the operands' tangents and the results' tangents; for the VJP the results'
    cotangents and the operands' gradients."""
    if product != Product.FORWARD and not op.differentiable:
        raise TypeError(f"{op.name} is not differentiable")
    summing = sums(op, product)
    if summing:
        body = _reduce_body(op, product)
    else:
        body = _run_body(op, product) if loops_over_runs(op, product) else _simple_body(op, product)
    source = _sum_partials_source(op) if summing else ""
    for grid in ("FlatGrid", "Grid"):
        source += kernel_source(f"{product}_{grid.lower()}", signature(op, product, grid), body)
    built = compile_module(op, product, scalar, product, source)
    kernels = {True: built[f"{product}_flatgrid"], False: built[f"{product}_grid"]}
    if summing:
        kernels["sum_partials"] = built["sum_partials"]
    return kernels


def kernel_source(name: str, params: str, body: list[str]) -> str:
    return f"\n\n@wp.kernel(enable_backward=False)\ndef {name}({params}):\n" + "".join(
        f"    {line}\n" for line in body
    )


def compile_module(op: Op, product: str, scalar: type, part: str, source: str) -> dict:
    """Build kernels' `source` of `product` of `op` as the Warp module of `part` (the
    names the kernels use bound, Warp's adjoint prepared where they run it)."""
    namespace: dict[str, Any] = {
        "F": op.function,
        **types(op, scalar),
        **{name: getattr(indexing, name) for name in _INDEXING},
    }
    if product == Product.TANGENT:
        namespace["TG"] = element_tangent(op, scalar)
    if product == Product.VJP:
        namespace["V"] = element_vjp(op, scalar)
    for k in _targets(op, product):  # each stored as operand k's element (a VJP's pulled back)
        namespace[f"SA{k}"] = _native("shared_add", op.operands[k].element, scalar)
        namespace[f"SS{k}"] = _native("store", op.operands[k].element, scalar)
    for j, r in enumerate(op.results):
        namespace[f"SR{j}"] = _native("store", r.element, scalar)
    for k, o in enumerate(op.operands):
        if o.prepare is not None:
            namespace[f"P{k}"] = o.prepare.function
            if product == Product.TANGENT:
                namespace[f"PT{k}"] = element_tangent(o.prepare, scalar)
            if product == Product.VJP:
                namespace[f"PV{k}"] = element_vjp(o.prepare, scalar)
    module = module_name(op, part, scalar)
    options = {"enable_backward": False}
    if op.max_unroll is not None:
        options["max_unroll"] = op.max_unroll
    wp.set_module_options(options, module=module)
    if product != Product.FORWARD and _adjoint_calls(op, product):
        _differentiates(module)
    return build(_adjoint_anchor(op, product) + source, module, namespace)


def _derives(op: Op, product: str) -> bool:
    """Whether `product` of `op` runs Warp's adjoint of the function (no closed form)."""
    return (op.vjp if product == Product.VJP else op.tangent) is None


# Loops with a bound fixed at compile time are unrolled up to this many iterations in a
# module that runs Warp's adjoint (see `_differentiates`).
ADJOINT_MAX_UNROLL = 256


def _differentiates(module: str) -> None:
    """Options for a module whose kernels run Warp's adjoint (`wp.grad`) of a function.
    Warp's adjoint of a vector or matrix component written more than once, or of a loop
    that is not unrolled and carries a value from one iteration to the next, is wrong (a
    closed form over a kinematic tree does both, and its second derivative differentiates
    it). So components are copied on write (`enable_vector_component_overwrites`, which
    Warp reads from its global config only, folded into each module's options: here it is
    folded into this module's alone), and loops are unrolled up to ADJOINT_MAX_UNROLL."""
    wp.set_module_options({"max_unroll": ADJOINT_MAX_UNROLL}, module=module)
    target = wp.get_module(module)
    resolve = target.resolve_options

    def resolve_options(config, block_dim=None):
        return resolve(config, block_dim) | {"enable_vector_component_overwrites": True}

    target.resolve_options = resolve_options


def _adjoint_calls(op: Op, product: str) -> list[tuple[str, list[str], list[str]]]:
    """The element functions whose adjoint `product` of `op` runs: (name in the kernels'
    namespace, input types, output types)."""
    calls = []
    if _derives(op, product):
        inputs = [f"X{k}" for k in range(len(op.operands))]
        calls.append(("F", inputs, [f"Y{j}" for j in range(len(op.results))]))
    for k, o in enumerate(op.operands):
        if o.prepare is not None and _derives(o.prepare, product):
            calls.append((f"P{k}", [f"A{k}"], [f"X{k}"]))
    return calls


def _adjoint_anchor(op: Op, product: str) -> str:
    """A kernel that is never launched, with Warp's backward pass enabled, calling the
    element functions that `wp.grad` differentiates here. Warp generates a function's
    adjoint only for backward-enabled kernels or `wp.grad`, and (in warp 1.19) a
    function that a forward-only kernel of the module reached first keeps its callees'
    adjoints empty even once `wp.grad` needs them; a backward-enabled caller makes Warp
    generate every adjoint in the call graph."""
    calls = _adjoint_calls(op, product)
    if product == Product.FORWARD or not calls:
        return ""
    params, lines = [], []
    for c, (function, inputs, outputs) in enumerate(calls):
        params += [f"in{c}_{i}: wp.array(dtype={t})" for i, t in enumerate(inputs)]
        params += [f"out{c}_{i}: wp.array(dtype={t})" for i, t in enumerate(outputs)]
        values = [f"v{c}_{i}" for i in range(len(outputs))]
        arguments = [f"in{c}_{i}[0]" for i in range(len(inputs))]
        lines.append(f"{tuple_source(values)} = {function}({tuple_source(arguments)})")
        lines += [f"out{c}_{i}[0] = {v}" for i, v in enumerate(values)]
    return (
        "\n\n@wp.kernel(enable_backward=True)\n"
        f"def adjoint_anchor({tuple_source(params)}):\n"
        + "".join(f"    {line}\n" for line in lines)
    )


_INDEXING = (
    "Grid", "FlatGrid", "run_bounds", "chunk_bounds", "unravel", "advance", "carries",
    "element_index", "dense", "one_element",
)  # fmt: skip


@functools.cache
def _native(kind: str, element: tuple[int, ...], scalar: type) -> wp.Function:
    """`kind(array, index, value)` for one element type: `indexing.SHARED_ADD` ("shared_add",
    adds into a gradient that lanes share) or `indexing.STORE` ("store")."""
    name = f"{kind}_{scalar.__name__}_{'x'.join(map(str, element)) or 'scalar'}"
    parameter = "gradient" if kind == "shared_add" else "array"
    source = (
        f"@wp.func_native(SNIPPET)\n"
        f"def {name}({parameter}: wp.array(dtype=T), index: wp.int32, value: T): ...\n"
    )
    snippet = getattr(indexing, kind.upper()).format(
        scalar=f"wp::{scalar.__name__}", warp_bytes=indexing.STORE_WARP_BYTES
    )
    namespace = {"SNIPPET": snippet, "T": value_type(element, scalar)}
    return build(source, f"xform_ops.{kind}.{name}", namespace)[name]


def _store(function: str, array: str, index: str, value: str, element: tuple[int, ...]) -> str:
    """The line that stores `value` at `index` of `array`: through `function` (STORE), or a
    plain assignment for a scalar element (32 lanes' scalars are one line already)."""
    return f"{function}({array}, {index}, {value})" if element else f"{array}[{index}] = {value}"


def kernel(op: Op, product: str, scalar: type, flat: bool) -> wp.Kernel:
    return kernels(op, product, scalar)[flat]
