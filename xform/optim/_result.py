"""What `optim.solve` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._problem import Variables


@dataclass
class Timings:
    """Seconds spent, summed over the run, per part of an iteration."""

    residuals: float = 0.0
    """Residuals and Jacobians (xform's ops, in the framework)."""
    assembly: float = 0.0
    """The normal equations: `J^T J`, `J^T r`, and their scatter into the pattern."""
    solve: float = 0.0
    """The linear solves (the Schur complement included)."""
    other: float = 0.0
    """Setup, retraction, damping and bookkeeping."""

    def per(self, count: int) -> dict[str, float]:
        """Each part's seconds divided by `count` (say, the number of linearisations)."""
        return {k: v / max(count, 1) for k, v in vars(self).items()}


@dataclass
class Result:
    """The solution of a problem.

    `values(variables)`: the optimised values of a variable set, in the framework of its
    initial values (a group batch or an array). `cost`: `1/2 sum rho(|r|^2)` at them
    (with `Problem(batch=B)` in PyTorch, an array `(B,)`). `iterations`: accepted steps;
    `solves`: linear solves (a rejected Levenberg-Marquardt step costs one);
    `converged` and `reason`: why it stopped (`converged` is False at the iteration limit).
    Inside a JAX trace (`jit`, `vmap`, `grad`), `cost`, `iterations`, `solves` and
    `converged` leave it as arrays.
    `history`: the cost after each iteration. `timings`: seconds per part (`Timings`).
    """

    problem_id: int
    solution: list[Any]
    cost: Any
    iterations: Any
    converged: Any
    reason: str
    history: list = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    solves: int = 0

    def values(self, variables: Variables):
        """The optimised values of a variable set (what `problem.variables` returned): a
        group batch `(n,)` or an array `(n, d)`, in the framework of its initial values."""
        if not isinstance(variables, Variables):
            raise TypeError(
                "xform.optim.Result.values: expected a variable set of the problem (what "
                f"problem.variables returned), got {type(variables).__name__}"
            )
        if variables.problem_id != self.problem_id:
            raise ValueError(
                f"xform.optim.Result.values: {variables.name} belongs to another problem"
            )
        return self.solution[variables.index]
