"""`optim.solve`: checks, the choice between the CPU's sparse back end and the device's
block-sparse one, and the differentiable wrapper."""

from __future__ import annotations

from .. import _frameworks
from ..groups import LieGroup
from ._installed import MODULES, installed
from ._loop import Settings
from ._problem import Problem, Variables, first_array, is_concrete

METHODS = ("lm", "gn")
HOST_SOLVERS = tuple(MODULES)
DEVICE_SOLVERS = ("cholesky", "cudss", "pcg")


def solve(
    problem: Problem,
    method: str = "lm",
    *,
    eliminate: Variables | None = None,
    max_iterations: int = 100,
    relative_decrease: float = 1e-10,
    step_norm: float = 1e-10,
    gradient_norm: float = 0.0,
    damping: float = 1e-4,
    solver: str | None = None,
    report=None,
    differentiable: bool | None = None,
):
    """Minimise the problem's cost from its initial values.

    - `method`: "lm" (Levenberg-Marquardt, from `damping` relative to diag(H)) or "gn"
      (Gauss-Newton).
    - `eliminate`: a variable set to eliminate first by a Schur complement (bundle
      adjustment's points); no cost may join two of its variables.
    - Stopping: an accepted step lowering the cost by less than `relative_decrease` of it
      (or a trial changing it by less, either way), a step shorter than `step_norm`, the
      largest gradient entry at most `gradient_norm`, a zero cost (all converged); or
      `max_iterations` accepted steps (not converged). `result.reason` says which. LM
      takes a step whose predicted and actual changes are both within the cost's rounding
      (a dozen ulps), so a tight `step_norm` reaches the minimum, not sqrt(eps) short of it.
    - `solver`: the linear solver. On the CPU: "pardiso", "cholmod" (scikit-sparse),
      "cholmod-supernodal" (CVXOPT), "cholespy", "superlu", "dense"; by default the dense
      Cholesky for small systems, else the fastest installed. On the device (CUDA inputs,
      `Problem(batch=...)`, JAX under `jit`/`vmap`/`grad`, or any input where SciPy is not
      installed), the normal equations are block-sparse, and the (reduced) system is
      solved by "cholesky" (dense: small systems), "cudss" (sparse direct on the GPU, where
      nvmath-python is installed) or "pcg" (conjugate gradients, block-Jacobi
      preconditioned); the default chooses by size and by what is installed, and every
      choice reaches the same cost at each iteration as a direct solve. Asking for a device
      solver runs the device's back end on any input.
    - `report`: a function called with one line per iteration (e.g. `print`).
    - `differentiable`: the solution differentiable in `data` and in fixed variables'
      values (implicit differentiation at the optimum); by default when an input requires
      grad (PyTorch) or is traced by a JAX transform (`jax.grad`, `jit`, ...).
    """
    if not isinstance(problem, Problem):
        raise TypeError(
            f"xform.optim.solve: expected an optim.Problem, got {type(problem).__name__}"
        )
    if method not in METHODS:
        raise ValueError(f"xform.optim.solve: method must be one of {METHODS}, got {method!r}")
    if eliminate is not None:
        if not isinstance(eliminate, Variables):
            raise TypeError(
                "xform.optim.solve: eliminate must be a variable set of the problem, got "
                f"{type(eliminate).__name__}"
            )
        if eliminate.problem_id != problem.id:
            raise ValueError(f"xform.optim.solve: {eliminate.name} belongs to another problem")
    for name, value in (
        ("max_iterations", max_iterations),
        ("relative_decrease", relative_decrease),
        ("step_norm", step_norm),
        ("gradient_norm", gradient_norm),
        ("damping", damping),
    ):
        if not value >= 0:
            raise ValueError(f"xform.optim.solve: {name} must be >= 0, got {value}")
    if solver is not None and solver not in HOST_SOLVERS + DEVICE_SOLVERS:
        raise ValueError(
            f"xform.optim.solve: solver must be one of {HOST_SOLVERS + DEVICE_SOLVERS}, got "
            f"{solver!r}"
        )
    if not problem.variable_sets:
        raise ValueError("xform.optim.solve: the problem has no variables")
    if not problem.costs:
        raise ValueError("xform.optim.solve: the problem has no costs")
    settings = Settings(
        method, int(max_iterations), relative_decrease, step_norm, gradient_norm, damping,
        solver, report,
    )  # fmt: skip
    if not _frameworks.FRAMEWORKS[problem.framework].differentiates and any(
        c.jacobian_fn is None for c in problem.costs
    ):
        raise TypeError(
            "xform.optim.solve: the variables hold NumPy arrays, whose residual functions "
            "cannot be differentiated: give each cost a jacobian_fn, or hold the values in "
            "PyTorch or JAX"
        )
    from ._implicit import differentiable_solve, wants_gradients

    if differentiable is None:
        differentiable = wants_gradients(problem)
    if differentiable:
        return differentiable_solve(problem, settings, eliminate, _run, on_device)
    return _run(problem, settings, eliminate)


def on_device(problem: Problem, settings: Settings) -> bool:
    """Whether to solve on the device's back end: a batch of problems, values on another
    device than the CPU or traced (under a JAX transform), a device solver asked for, or
    no SciPy for the CPU's."""
    if problem.batch is not None or settings.solver in DEVICE_SOLVERS:
        return True
    if not installed("scipy"):
        return True
    for s in problem.variable_sets:
        array = first_array(s.initial)
        if not is_concrete(s.initial) or _frameworks.of(array).device(array) not in (None, "cpu"):
            return True
    return any(
        (isinstance(item, LieGroup) or hasattr(item, "shape")) and not is_concrete(item)
        for cost in problem.costs
        for item in cost.data
    )



def _run(problem: Problem, settings: Settings, eliminate):
    if on_device(problem, settings):
        if settings.solver in HOST_SOLVERS:
            raise ValueError(
                f"xform.optim.solve: solver {settings.solver!r} runs on the CPU's NumPy "
                "arrays; this problem is solved in its framework (batched, on CUDA, or under "
                f"a JAX transform): use one of {DEVICE_SOLVERS}"
            )
        from ._device import solve_on_device

        return solve_on_device(problem, settings, eliminate)
    from ._host import solve_on_host

    return solve_on_host(problem, settings, eliminate)
