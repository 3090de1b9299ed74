"""Write `docs/api.md`, the op reference, from the op table: `python docs/generate.py`.

Every op of `xform.ops.FAMILIES` gets its formula (the `doc` it was defined with, which
also opens its docstring), the shapes of its arguments and results, and its derivatives;
every function over ops (`COMPOSITES`: the Euler conventions, rigid registration)
the same, from its docstring. The test suite regenerates the page and fails if the
committed file differs, so the reference cannot fall behind the ops.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import xform
from xform._op import Composite
from xform.ops import COMPOSITES, FAMILIES

OUT = Path(__file__).with_name("api.md")

INTRO = """\
# Op reference

Generated from the op table by `python docs/generate.py`; do not edit by hand.

Every op below is a function of the same name and argument order in three places:

- `xform` takes NumPy, Warp, PyTorch or JAX arrays and returns the same kind;
- `xform.backends.torch` is the PyTorch function (a `torch.autograd.Function`), with
  cuRobo's optional buffers where it has them;
- `xform.backends.jax` is the JAX function (primitives that `jit`, `grad`, `jvp` and
  `vmap` transform).

`xform.OPS[name]` is the op itself, an [`xform.Op`](reference.md#xform.Op). Quaternions are
`[w, x, y, z]`; `...` is any number of leading dimensions, broadcast by NumPy's rules;
`B` and `N` are single named dimensions that broadcast by size 1; float32 or float64,
and the results take the inputs' dtype. [Concepts and conventions](concepts.md) has
the rest.

**Derivatives.** Each op is differentiable in the operands its entry names, in both
modes: PyTorch's backward, `gradcheck`, forward mode, `torch.func`; JAX's `grad`, `vjp`,
`jvp`, `jacfwd`, `jacrev`, `linearize`; on NumPy and Warp arrays `xform.vjp(op, args,
cotangents)` and `xform.jvp(op, args, tangents)`, with an op or its name. "Closed form"
means a hand-derived tangent or VJP function; otherwise it is Warp's adjoint of the
element function: exact either way, never finite differences.

**Second derivatives.** An op with a closed-form tangent or VJP is differentiable twice,
exactly: PyTorch's double backward, `gradgradcheck`, `torch.func.hessian`; JAX's
`hessian`, `jacfwd(jacrev(f))`, `check_grads(order=2)`. Its first derivatives are ops of
their own, whose derivatives are generated like any op's. An op without closed forms, and
any third derivative, raises `xform.HigherDerivativeError`, which names the op and what to
supply: never a wrong or zero value. Every built-in op is differentiable twice.

The functions over ops at the end (Euler angles, rigid registration) choose among ops,
or chain them; PyTorch and JAX differentiate them through their ops, as do `xform.vjp`
and `xform.jvp` on NumPy and Warp arrays (static arguments get None).
"""


def _text(formula: str) -> str:
    """Plain-text maths as Markdown prose: `q*` is a conjugate, not emphasis."""
    return formula.replace("*", "\\*")


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _shape(batch, element) -> str:
    return "(" + ", ".join([*batch, *map(str, element)]) + ")"


def _derivative(op: xform.Op) -> str:
    if not op.differentiable:
        return "none: the results are marked non-differentiable (PyTorch: no grad; JAX: zero)"
    closed = [
        name for name, f in (("tangent", op.tangent), ("VJP", op.vjp)) if f is not None
    ]
    derived = [name for name in ("tangent", "VJP") if name not in closed]
    parts = []
    if closed:
        parts.append(" and ".join(closed) + " in closed form")
    if derived:
        parts.append(
            " and ".join(derived) + " from Warp's adjoint of the element function"
        )
    parts += [
        f"`{o.name}` prepared by `{o.prepare.name}` (its derivatives chain `{o.prepare.name}`'s)"
        for o in op.operands
        if o.prepare
    ]
    if closed:
        parts.append("differentiable twice, exactly")
    operands = ", ".join(f"`{n}`" for n in op.differentiable_operands)
    return f"with respect to {operands}; " + "; ".join(parts)


def _table(header: str, rows: list[tuple[str, str]]) -> list[str]:
    return [
        f"| {header} | shape |",
        "|---|---|",
        *(f"| `{n}` | `{s}` |" for n, s in rows),
    ]


def op_section(op: xform.Op) -> str:
    arguments = ", ".join(o.name for o in op.operands)
    lines = [
        f"### `{op.name}({arguments})` {{ #{op.name} }}",
        "",
        _text(op.formula),
        "",
    ]
    lines += _table("argument", [(o.name, o.expected_shape()) for o in op.operands])
    lines += [""]
    lines += _table(
        "result", [(r.name, _shape(r.batch, r.element)) for r in op.results]
    )
    lines += ["", f"Derivatives: {_derivative(op)}.", ""]
    if op.result_buffers or op.gradient_buffers:
        buffers = ", ".join(
            f"`{b}`" for b in (*op.result_buffers, *op.gradient_buffers)
        )
        lines += [f"cuRobo's optional buffers (PyTorch): {buffers}.", ""]
    return "\n".join(lines)


_DOC = re.compile(
    r"(?P<formula>.*?)\n\nArguments:\n(?P<arguments>.*?)\nReturns:\n(?P<results>.*?)\n"
    r"Differentiable with respect to: (?P<derivative>.*?)\n(?P<rest>.*)",
    re.S,
)


def _entries(block: str) -> list[tuple[str, str]]:
    """`    name: description` lines (a description may wrap onto indented lines)."""
    entries: list[tuple[str, str]] = []
    for line in block.splitlines():
        name, sep, text = line.strip().partition(": ")
        if line.startswith("    ") and not line.startswith("     ") and sep:
            entries.append((name, text))
        elif entries:
            entries[-1] = (entries[-1][0], f"{entries[-1][1]} {line.strip()}")
    return entries


def _code_shape(text: str) -> str:
    """`(..., N, 3)` set as code where a description starts with a shape."""
    match = re.match(r"\(.*?\)", text)
    if match is None:
        return _cell(text)
    return f"`{match[0]}`{_cell(text[match.end() :])}"


def family_section(family: Composite) -> str:
    """A function over ops (a static choice among them, or a chain), from its docstring."""
    heading = f"### `{family.name}{family.signature}` {{ #{family.name} }}"
    parts = _DOC.fullmatch(family.doc)
    if parts is None:  # a docstring of another layout: as it is
        return "\n".join([heading, "", "```text", family.doc, "```", ""])
    lines = [heading, "", _text(parts["formula"]), ""]
    lines += ["| argument | shape or values |", "|---|---|"]
    lines += [
        f"| `{n}` | {_code_shape(text)} |" for n, text in _entries(parts["arguments"])
    ]
    lines += ["", "| result | shape |", "|---|---|"]
    lines += [
        f"| `{n}` | {_code_shape(text)} |" for n, text in _entries(parts["results"])
    ]
    ops = len(family.members)
    lines += [
        "",
        f"Derivatives: with respect to {_text(parts['derivative'].rstrip('.'))}, through its "
        f"{ops} ops (each with its own kernels), in PyTorch and JAX.",
        "",
    ]
    return "\n".join(lines)


def render() -> str:
    parts = [INTRO]
    for family, ops in FAMILIES.items():
        parts += [f"## {family}", ""]
        parts += [op_section(op) for op in ops]
    parts += ["## Functions over ops", ""]
    parts += [
        "Each chooses among its ops by a static argument (an Euler convention: each is a "
        "kernel of its own, its axes constants in the code), or chains ops (registration: "
        "sums over the points, then a solve per point set).",
        "",
    ]
    parts += [family_section(family) for family in COMPOSITES.values()]
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
