"""Write `docs/api.md`, the API reference, from the op table: `python docs/generate.py`.

The test suite regenerates it and fails if the committed file differs, so the reference
cannot fall behind the ops."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import xform
from xform.ops import FAMILIES, FAMILY_FUNCTIONS

OUT = Path(__file__).with_name("api.md")


def _shape(batch, element) -> str:
    return "(" + ", ".join([*batch, *map(str, element)]) + ")"


def _derivative(op: xform.Op) -> str:
    if not op.differentiable:
        return "none: the results are marked non-differentiable"
    closed = [name for name, f in (("tangent", op.tangent), ("VJP", op.vjp)) if f is not None]
    derived = [name for name in ("tangent", "VJP") if name not in closed]
    parts = []
    if closed:
        parts.append(" and ".join(closed) + " in closed form")
    if derived:
        parts.append(" and ".join(derived) + " derived from the element function")
    parts += [f"`{o.name}` prepared by `{o.prepare.name}`" for o in op.operands if o.prepare]
    if closed:
        parts.append("differentiable twice, exactly")
    operands = ", ".join(f"`{n}`" for n in op.differentiable_operands)
    return f"with respect to {operands}; " + "; ".join(parts)


def op_section(op: xform.Op) -> str:
    arguments = ", ".join(o.name for o in op.operands)
    lines = [f"### `{op.name}({arguments})`", "", op.formula, ""]
    lines += ["| argument | shape |", "|---|---|"]
    lines += [f"| `{o.name}` | `{o.expected_shape()}` |" for o in op.operands]
    lines += ["", "| result | shape |", "|---|---|"]
    lines += [f"| `{r.name}` | `{_shape(r.batch, r.element)}` |" for r in op.results]
    lines += ["", f"Differentiable: {_derivative(op)}.", ""]
    if op.result_buffers or op.gradient_buffers:
        buffers = ", ".join(f"`{b}`" for b in (*op.result_buffers, *op.gradient_buffers))
        lines += [f"cuRobo's optional buffers (PyTorch): {buffers}.", ""]
    return "\n".join(lines)


def family_section(family) -> str:
    """A function over ops (a static choice among them, or a chain): its docstring."""
    members = [f"`{op.name}`" for op in family.members]
    listed = ", ".join(members) if len(members) <= 8 else f"{len(members)} ops, one per choice"
    lines = [f"### `{family.name}{family.signature}`", "", "```", family.doc, "```", ""]
    return "\n".join([*lines, f"Runs: {listed}.", ""])


def random_section() -> str:
    from xform._random import random_quaternion

    lines = ["## Random rotations", "", "| where | function |", "|---|---|"]
    lines += [
        f"| `xform` (NumPy) | `random_quaternion{inspect.signature(random_quaternion)}` |",
        "| `xform.backends.torch` | `random_quaternion(shape, generator=None, dtype=None, "
        "device=None)` |",
        "| `xform.backends.jax` | `random_quaternion(shape, key, dtype=None)` |",
    ]
    doc = inspect.getdoc(random_quaternion)
    return "\n".join([*lines, "", "```", doc, "```", ""])


def render() -> str:
    parts = [
        "# API reference",
        "",
        "Generated from the op table by `python docs/generate.py`; do not edit by hand.",
        "",
        "Every op has the same name and argument order in `xform` (NumPy, Warp, PyTorch and",
        "JAX arrays in, the same kind out), `xform.backends.torch` and `xform.backends.jax`.",
        "Quaternions are `[w, x, y, z]`; leading dimensions `...` broadcast by NumPy rules,",
        "`B` and `N` are single named dimensions that broadcast by size 1; float32 or float64.",
        "",
    ]
    for family, ops in FAMILIES.items():
        parts += [f"## {family}", ""]
        parts += [op_section(op) for op in ops]
    parts += ["## Functions over ops", ""]
    parts += [
        "Each chooses among ops by a static argument, or chains ops; in every framework, "
        "with its autodiff.",
        "",
    ]
    parts += [family_section(family) for family in FAMILY_FUNCTIONS.values()]
    parts.append(random_section())
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
