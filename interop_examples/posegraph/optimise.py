"""Levenberg-Marquardt on a pose graph, through `xform.optim`: one variable set (the poses,
a batch of `xform.SE3` or `xform.SE2`), vertex 0 fixed (the gauge), and one cost for all
edges, `r = U log(Z^-1 T_i^-1 T_j)` whitened by the information's Cholesky factor
(`U^T U = Omega`), so that chi2 = |r|^2 = 2 * the solver's cost.

The edges' Jacobians are given in closed form (`edge_residuals_and_jacobians`, with the
groups' methods), which is cheaper than forward mode here (one batched call per op, against
one per op and tangent direction); the solver gets them whitened from one kernel for all
edges (`edges.py`). `xform.optim` checks closed forms like these against its forward mode
in tests/test_optim.py, and tests/test_pose_graph.py checks both here.
Damping starts at 1e-10 of diag(H): the graphs have soft directions (the low modes of long
chains with one end fixed) that a larger Marquardt damping holds back (docs/pose_graph.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from xform import SE2, SE3, optim, to_numpy
from xform.optim._device import DENSE_UP_TO  # where the device back end factorises dense
from xform.optim._solve import DEVICE_SOLVERS

from .edges import whitened_edges
from .framework import array_in, element_in
from .problem import Problem

# GTSAM's default: the convergence is quadratic, so the step that lowers chi2 by less than
# this leaves it within ~1e-8 of the optimum on every graph of the data folder, inside the
# 1e-6 asked; ten times stricter cost smallGrid3D an iteration and moved nothing else
# (docs/pose_graph.md, benchmarks/NOTES.md 53).
RELATIVE_DECREASE = 1e-5
STEP_NORM = 1e-10
MAX_ITERATIONS = 1000  # a guard against a loop that never ends, not a stopping rule
INITIAL_DAMPING = 1e-10  # relative to diag(H)


@dataclass
class Result:
    poses: SE3 | SE2  # over NumPy
    chi2: float
    iterations: int  # accepted steps
    solves: int  # trial steps (a rejected step costs a solve but no iteration)
    converged: bool
    reason: str = ""
    history: list[float] = field(default_factory=list)  # chi2 after each iteration
    timings: optim.Timings = field(default_factory=optim.Timings)
    seconds: float = 0.0  # the solve's: from the start moved into `fw` to the poses read back


def edge_residuals_and_jacobians(poses_i, poses_j, measurements_inverse):
    """For every edge (i, j) with measurement Z: the residual r = log(Z^-1 T_i^-1 T_j)
    and its Jacobians in right perturbations of T_i and T_j,

        dr/d(delta_j) = J_r^-1(r),   dr/d(delta_i) = -J_r^-1(r) Ad(T_j^-1 T_i),

    since (T_i exp(delta))^-1 T_j = T_i^-1 T_j exp(-Ad(T_j^-1 T_i) delta): both move the
    error E = Z^-1 T_i^-1 T_j on its right, and log(E exp(e)) = r + J_r^-1(r) e + O(e^2).
    One batched call per op for all edges. Returns r (m, d), J_i (m, d, d),
    J_j (m, d, d)."""
    relative = poses_i.inverse() @ poses_j
    error = measurements_inverse @ relative
    jacobian_j = error.jlog()
    return error.log(), -(jacobian_j @ relative.inverse().adjoint()), jacobian_j


def edge_residual(poses_i, poses_j, measurements_inverse, whitening):
    """The whitened residual `U log(Z^-1 T_i^-1 T_j)` of every edge."""
    residual = (measurements_inverse @ (poses_i.inverse() @ poses_j)).log()
    return (whitening @ residual[..., None])[..., 0]


def edge_jacobians(poses_i, poses_j, measurements_inverse, whitening):
    """The whitened residuals and Jacobians of `edge_residual`, as
    `edge_residuals_and_jacobians` gives them: one kernel for all
    edges (`edges.py`), where the groups' methods take eight op
    calls and three batched 6 x 6 products."""
    residual, jacobian_i, jacobian_j = whitened_edges(
        poses_i, poses_j, measurements_inverse, whitening
    )
    return residual, [jacobian_i, jacobian_j]


def least_squares(problem: Problem, poses, measurements_inverse, information):
    """The pose graph as an `optim.Problem` over `poses` (group elements of the solver's
    framework): vertex 0 fixed, one cost for every edge. Returns it and its poses."""
    graph = optim.Problem()
    variables = graph.variables(poses, name="poses")
    graph.fix(variables[0])
    whitening = optim.sqrt_information(information, name="information")
    graph.add(
        edge_residual,
        variables[problem.i],
        variables[problem.j],
        data=(measurements_inverse, whitening),
        jacobian_fn=edge_jacobians,
        name="edges",
    )
    return graph, variables


SETTINGS = {
    "damping": INITIAL_DAMPING,
    "relative_decrease": RELATIVE_DECREASE,
    "step_norm": STEP_NORM,
    "max_iterations": MAX_ITERATIONS,
}


def compiled_solve(problem: Problem, fw):
    """The whole Levenberg-Marquardt solve as one compiled JAX function of the initial
    poses, the inverted measurements and the information: `(poses, chi2, iterations)`.
    Traced, the solver runs its device back end (block-sparse normal equations, a dense
    Cholesky for a small system) inside one `jax.jit`: no Python between iterations, which
    pays where a graph is small (a sliding window's many solves); the first call compiles.
    """
    if not fw.traces:
        raise ValueError(
            f"compiled_solve: {fw.name} runs eagerly; it takes a framework that compiles a "
            "traced function (JAX)"
        )

    def solve(poses, measurements_inverse, information):
        graph, variables = least_squares(problem, poses, measurements_inverse, information)
        result = optim.solve(graph, **SETTINGS)
        return result.values(variables), 2.0 * result.cost, result.iterations

    return fw.jit(solve)


def compiled_run(problem: Problem, fw, solver: str | None = None):
    """The chordal start and the Levenberg-Marquardt solve as one compiled JAX function
    (`initial.chordal_dense`, then the solve as in `compiled_solve`) of the anchor's and
    the measurements' fields and the information: the start's and the solution's fields,
    then chi2, iterations, solves and whether it converged, in one flat array
    (`_unpacked` reads it). One call runs the whole of `run`'s work after reading
    the file, with no Python in between: what a graph as small as tinyGrid3D needs to be
    solved faster than GTSAM solves it (benchmarks/NOTES.md 62). Depends on the problem's
    structure alone (its group, vertices and edges), not on its values, and holds no more
    of it."""
    from .initial import chordal_dense

    solver = _compiled_solver(problem, fw, solver, "compiled_run")
    problem = dataclasses.replace(  # the structure: the closure keeps it
        problem, graph=None, measurements=None, information=None, anchor=None, file_poses=None
    )

    group, xp = problem.group, fw.namespace()

    def run(anchor, measurements, information):
        anchor, measurements = group(*anchor), group(*measurements)
        start = chordal_dense(problem, fw, anchor, measurements, information)
        graph, variables = least_squares(problem, start, measurements.inverse(), information)
        result = optim.solve(graph, **SETTINGS, solver=solver)
        poses = result.values(variables)
        numbers = [2.0 * result.cost, result.iterations, result.solves, result.converged]
        # one array out: each output read on the host costs a transfer (~50 us here)
        return xp.concatenate(
            [xp.ravel(getattr(element, name)) for element in (start, poses)
             for name, _ in group.fields]
            + [xp.stack([xp.asarray(x, dtype=information.dtype) for x in numbers])]
        )  # fmt: skip

    return fw.jit(run)


# Unknowns up to which `chordal_and_optimise` compiles the start with the solve: above it a
# compiled dense solve loses to the eager sparse one (smallGrid3D's 744: NOTES 56)
START_COMPILED_UP_TO = 600
# and the start's dense incidence matrices grow with the edges too: edges times unknowns up
# to this (600 unknowns and 1,200 edges; their largest ~9 MB in 3D)
START_COMPILED_ENTRIES_UP_TO = 720_000


def start_compiles(problem: Problem) -> bool:
    """Whether `chordal_and_optimise` takes `problem`: its unknowns, and its edges times
    unknowns, within the limits above."""
    return (
        problem.unknowns <= START_COMPILED_UP_TO
        and problem.edges * problem.unknowns <= START_COMPILED_ENTRIES_UP_TO
    )


# compiled_run's functions by structure, the most recently used last: a sliding window (or
# a benchmark) makes a new problem of the same structure at every solve; a few are kept
_RUNS: dict = {}
_RUNS_LOCK = threading.Lock()
KEPT_RUNS = 8


def chordal_and_optimise(
    problem: Problem, fw, *, device: str = "cpu", solver: str | None = None
) -> tuple:
    """The chordal start and the solve by `compiled_run`, kept per structure (its first
    call traces and compiles, or loads the compilation from JAX's cache on disk), for a
    graph that `start_compiles`: the start (over NumPy) and a `Result` as `optimise` gives
    it, its `seconds` the whole call's (the start included)."""
    start_time = time.perf_counter()
    solver = _compiled_solver(problem, fw, solver, "chordal_and_optimise")
    if not start_compiles(problem):
        raise ValueError(
            f"chordal_and_optimise: {problem.unknowns} unknowns and {problem.edges} edges; "
            f"the start compiles dense up to {START_COMPILED_UP_TO} unknowns and "
            f"{START_COMPILED_ENTRIES_UP_TO:,} edges times unknowns (a larger graph: "
            "chordal, then optimise(compiled=True))"
        )
    # (jax.jit keeps a compilation per device itself)
    key = (fw.name, solver, problem.group, problem.vertices, problem.i.tobytes(),
           problem.j.tobytes())  # fmt: skip
    with _RUNS_LOCK:
        run = _RUNS.pop(key, None) or compiled_run(problem, fw, solver)  # traced at its call
        _RUNS[key] = run
        while len(_RUNS) > KEPT_RUNS:
            del _RUNS[next(iter(_RUNS))]
    if device == "cpu":
        # NumPy as it is, run on the CPU: the compiled call moves its NumPy arguments in its
        # own dispatch, where an eager transfer costs ~0.5 ms for the five (NOTES 56); JAX
        # runs uncommitted arguments on its default device, a GPU where one is installed
        place, where = (lambda a: a), _on_jax_cpu()
    else:
        place, where = (lambda a: array_in(fw, a, device=device)), contextlib.nullcontext()
    fields = [name for name, _ in problem.group.fields]
    with where:
        flat = to_numpy(run([place(getattr(problem.anchor, name)) for name in fields],
                            [place(getattr(problem.measurements, name)) for name in fields],
                            place(problem.information)))  # fmt: skip
    start, poses, (chi2, iterations, solves, converged) = _unpacked(problem, flat)
    result = Result(
        poses=poses,
        chi2=float(chi2),
        iterations=int(iterations),
        solves=int(solves),
        converged=bool(converged),
        # the compiled loop's stopping rule is the eager one's; which test stopped it is
        # not read back
        reason="compiled: converged" if converged else "compiled: an iteration or trial limit",
        seconds=time.perf_counter() - start_time,
    )
    return start, result


def _on_jax_cpu():
    import jax  # the compiled call is JAX's

    return jax.default_device(jax.devices("cpu")[0])


def _unpacked(problem: Problem, flat: np.ndarray) -> tuple:
    """`compiled_run`'s array as the start and the solution (over NumPy) and the four
    numbers after them."""
    group, n, parts = problem.group, problem.vertices, []
    for _ in range(2):
        fields = []
        for _, size in group.fields:
            fields.append(flat[: n * size].reshape(n, size))
            flat = flat[n * size :]
        parts.append(group(*fields))
    return (*parts, flat)


def _compiled_solver(problem: Problem, fw, solver: str | None, caller: str) -> str:
    """The device back end's solver for a compiled solve (by default a dense factorisation,
    which is N^2 memory: PCG above `DENSE_UP_TO` unknowns); ValueError where `fw` does not
    compile or `solver` is the CPU's."""
    if not fw.traces:
        raise ValueError(f"{caller}: {fw.name} runs eagerly; compiled=True takes JAX")
    if solver not in (None, *DEVICE_SOLVERS):
        raise ValueError(
            f"{caller}: compiled=True solves on the device back end ({', '.join(DEVICE_SOLVERS)}"
            f"); solver {solver!r} is the CPU's"
        )
    return solver or ("cholesky" if problem.unknowns <= DENSE_UP_TO else "pcg")


def optimise(
    problem: Problem,
    initial,
    fw,
    *,
    device: str = "cpu",
    solver: str | None = None,
    compiled: bool = False,
    report: Callable[[str], None] | None = print,
) -> Result:
    """Levenberg-Marquardt from `initial` (group objects over NumPy), in the framework
    `fw` on `device`. `compiled` (JAX): the solve as one loop, compiled once per
    structure and kept by the solver (its device back end, a dense Cholesky for a small
    system; no line per iteration), which pays where one structure is solved many times:
    tinyGrid3D's solve ~5 ms against ~11 ms iterated in Python, but its first call in a
    process traces the loop (~0.5 s, its compilation then loaded from JAX's cache on disk)
    where the eager solve's first takes ~0.3 s (benchmarks/NOTES.md 56)."""
    if compiled:
        solver = _compiled_solver(problem, fw, solver, "optimise")
    start = time.perf_counter()
    graph, poses = least_squares(
        problem,
        element_in(fw, initial, device),
        element_in(fw, problem.measurements, device).inverse(),
        array_in(fw, problem.information, device=device),
    )

    def relabelled(line: str) -> None:  # the solver's cost is chi2 / 2
        report(line.replace("cost=", "half chi2="))

    result = optim.solve(graph, **SETTINGS, solver=solver, report=relabelled if report else None)
    poses = result.values(poses).to_numpy()
    seconds = time.perf_counter() - start
    if report and not result.history:
        report(f"compiled: {int(result.iterations)} iterations in one call, no line for each")
    return Result(
        poses=poses,
        chi2=2.0 * float(result.cost),
        iterations=int(result.iterations),
        solves=int(result.solves),
        converged=bool(result.converged),
        reason=result.reason,
        history=[2.0 * float(c) for c in result.history],
        timings=result.timings,
        seconds=seconds,
    )
