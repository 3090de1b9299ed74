"""Levenberg-Marquardt on a pose graph: residuals and Jacobians of all edges in the chosen
framework (on xform's group objects, one batched call per op), the normal equations
assembled into one sparse matrix in NumPy (batched 6 x 6 products are several times
faster in NumPy than in PyTorch), and one sparse Cholesky solve per trial step.

chi2 = sum r^T Omega r. The step solves (H + lambda diag(H)) delta = -g (Marquardt's
scaling, so that nothing depends on the units of a file), with lambda updated from the
gain ratio as Nielsen's rule (Madsen, Nielsen and Tingleff, "Methods for non-linear least
squares problems", 2004, sec. 3.2). Vertex 0 stays fixed (the gauge). It stops when an
accepted step lowers chi2 by less than 1e-10 of it, or a step is shorter than 1e-10, or a
trial changes chi2 by less than 1e-10 of it either way (chi2 is flat to rounding there).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from xform import SE2, SE3, manifold

from .problem import Problem
from .sparse import BlockPattern, make_solver

RELATIVE_DECREASE = 1e-10
STEP_NORM = 1e-10
MAX_SOLVES = 1000  # a guard against a loop that never ends, not a stopping rule
INITIAL_DAMPING = 1e-10  # relative to diag(H); see optimise()


@dataclass
class Timings:
    """Seconds spent, summed over the run, per part of an iteration."""

    residuals: float = 0.0  # residuals and Jacobians (xform's ops, in the framework)
    assembly: float = 0.0  # normal equations: blocks, H and g
    solve: float = 0.0  # the sparse factorisation and solve
    other: float = 0.0  # retraction and bookkeeping


@dataclass
class Result:
    poses: SE3 | SE2  # over NumPy
    chi2: float
    iterations: int  # linearisations (accepted steps, plus the last)
    solves: int  # trial steps (a rejected step costs a solve but no iteration)
    converged: bool
    history: list[float] = field(default_factory=list)  # chi2 after each iteration
    timings: Timings = field(default_factory=Timings)


def edge_residuals_and_jacobians(poses, i, j, measurements_inverse):
    """For every edge (i, j) with measurement Z: the residual r = log(Z^-1 T_i^-1 T_j) and
    its Jacobians in right perturbations of T_i and T_j,

        dr/d(delta_j) = J_r^-1(r),   dr/d(delta_i) = -J_r^-1(r) Ad(T_j^-1 T_i),

    since (T_i exp(delta))^-1 T_j = T_i^-1 T_j exp(-Ad(T_j^-1 T_i) delta): both move the
    error E = Z^-1 T_i^-1 T_j on its right, and log(E exp(e)) = r + J_r^-1(r) e + O(e^2).
    `poses`: a batch of group objects, `i, j`: index arrays of its framework,
    `measurements_inverse`: the Z^-1, a batch over the edges. One batched call per op for
    all edges. Returns r (m, d), J_i (m, d, d), J_j (m, d, d)."""
    relative = poses[i].inverse() @ poses[j]
    error = measurements_inverse @ relative
    jacobian_j = error.jlog()
    return error.log(), -(jacobian_j @ relative.inverse().adjoint()), jacobian_j


def retract(poses, delta):
    """T exp(delta) for every pose (delta (n, d) in the framework of the poses), put back on
    the group (rounding drifts a quaternion's norm over many steps)."""
    return manifold.rplus(poses, delta).normalize()


@functools.cache
def _framework_functions(fw):
    """The per-iteration functions in the framework `fw`: jitted in JAX, where they take and
    return group objects (pytrees), cached so that a second run on a graph of the same sizes
    compiles nothing."""
    return fw.jit(edge_residuals_and_jacobians), fw.jit(retract)


def normal_blocks(residual, jacobian_i, jacobian_j, information):
    """chi2 and each edge's blocks of H = J^T Omega J and g = J^T Omega r (NumPy)."""
    weighted_residual = information @ residual[..., None]
    weighted_j = information @ jacobian_j
    jacobian_i_t = np.swapaxes(jacobian_i, 1, 2)
    return (
        float(residual.ravel() @ weighted_residual.ravel()),
        jacobian_i_t @ (information @ jacobian_i),
        jacobian_i_t @ weighted_j,
        np.swapaxes(jacobian_j, 1, 2) @ weighted_j,
        (jacobian_i_t @ weighted_residual)[..., 0],
        (np.swapaxes(jacobian_j, 1, 2) @ weighted_residual)[..., 0],
    )


def optimise(
    problem: Problem,
    initial,
    fw,
    *,
    solver: str | None = None,
    report: Callable[[str], None] | None = print,
) -> Result:
    """Levenberg-Marquardt from `initial` (group objects over NumPy), in the framework
    `fw`."""
    d = problem.group.tangent_dim
    timings = Timings()
    start = time.perf_counter()
    residuals, retraction = _framework_functions(fw)
    i, j = fw.index(problem.i), fw.index(problem.j)
    measurements_inverse = fw.group(problem.measurements).inverse()
    pattern = BlockPattern(problem.vertices, d, problem.i, problem.j)
    solve = make_solver(pattern, solver)
    timings.other += time.perf_counter() - start

    def linearise(poses):
        tick = time.perf_counter()
        terms = tuple(map(fw.numpy, residuals(poses, i, j, measurements_inverse)))
        tock = time.perf_counter()
        chi2, h_ii, h_ij, h_jj, g_i, g_j = normal_blocks(*terms, problem.information)
        values = pattern.assemble(h_ii, h_ij, h_jj)
        gradient = pattern.gradient(g_i, g_j)
        timings.residuals += tock - tick
        timings.assembly += time.perf_counter() - tock
        return chi2, values, gradient

    poses = fw.group(initial)
    chi2, values, gradient = linearise(poses)
    history = [chi2]
    if report:
        report(f"iteration 0 chi2={chi2:.10g}")
    damping, growth = INITIAL_DAMPING, 2.0
    iterations, solves, converged = 0, 0, False
    while not converged and solves < MAX_SOLVES:
        tick = time.perf_counter()
        diagonal = np.maximum(values[pattern.diagonal], 1e-12 * values[pattern.diagonal].max())
        damped = values.copy()
        damped[pattern.diagonal] = diagonal * (1.0 + damping)
        timings.other += time.perf_counter() - tick
        tick = time.perf_counter()
        try:
            step = solve(damped, -gradient)
        except ArithmeticError:  # not positive definite to rounding: damp more
            step = np.full_like(gradient, np.nan)
        solves += 1
        timings.solve += time.perf_counter() - tick
        step_norm = float(np.linalg.norm(step))
        if not np.isfinite(step_norm):
            damping, growth = damping * growth, growth * 2.0
            continue

        tick = time.perf_counter()
        full_step = np.concatenate([np.zeros(d), step]).reshape(-1, d)  # vertex 0 stays
        trial = fw.ready(retraction(poses, fw.array(full_step)))
        timings.other += time.perf_counter() - tick
        trial_chi2, trial_values, trial_gradient = linearise(trial)
        tick = time.perf_counter()
        # The decrease the damped quadratic model predicts, -2 g.s - s.H s, which is
        # s.(lambda D s - g) since (H + lambda D) s = -g.
        predicted = float(step @ (damping * diagonal * step - gradient))
        actual = chi2 - trial_chi2
        converged = abs(actual) < RELATIVE_DECREASE * chi2 or step_norm < STEP_NORM
        if actual > 0:
            poses, chi2, values, gradient = trial, trial_chi2, trial_values, trial_gradient
            ratio = actual / predicted if predicted > 0 else 1.0
            damping *= max(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3)
            growth = 2.0
            iterations += 1
            history.append(chi2)
            if report:
                report(
                    f"iteration {iterations} chi2={chi2:.10g} decrease={actual / history[-2]:.3g} "
                    f"step={step_norm:.3g} lambda={damping:.3g} solves={solves}"
                )
        else:
            damping, growth = damping * growth, growth * 2.0
        timings.other += time.perf_counter() - tick
    if not converged and report:
        report(f"stopped after {MAX_SOLVES} trial steps without converging")
    return Result(
        poses=poses.to_numpy(),
        chi2=chi2,
        iterations=iterations,
        solves=solves,
        converged=converged,
        history=history,
        timings=timings,
    )
