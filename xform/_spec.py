"""What an op's operands and results are: element shapes and leading-dimension layouts.

The bottom of the core: `_layout.py` reads these, `_op.py` makes ops of them. (The layout
language, ``"..."`` and named groups, is described in `_op.py`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._op import Op

VARIADIC = "..."


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
    whose results are `like` its operands (see `_products.py`). Either every result of an
    op is `like` an operand (each its own, of that operand's element shape) or none is;
    the results' `batch` then lists every operand group (the launch's).
    """

    element: tuple[int, ...]
    batch: tuple[str, ...] = (VARIADIC,)
    name: str = ""
    like: str = ""
