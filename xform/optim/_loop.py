"""Gauss-Newton and Levenberg-Marquardt: one iteration, written once, over a linear
system that one of two back ends gives (`_host.py`: the CPU's sparse normal equations in
NumPy; `_device.py`: block-sparse ones in the framework's arrays, on any device).

Levenberg-Marquardt solves `(H + lambda D) delta = -g` with `D = diag(H)` (Marquardt's
scaling, clamped from below at 1e-12 of its largest entry, so that nothing depends on the
units), lambda updated from the gain ratio by Nielsen's rule (Madsen, Nielsen and Tingleff,
"Methods for non-linear least squares problems", 2004, sec. 3.2): a third at most after a
good step, 2, 4, 8, ... times after a rejected one. Gauss-Newton takes every step undamped.

Every array of the loop's state has a leading axis of problems (one, or `Problem(batch=B)`,
or a JAX `vmap`'s): each problem keeps its own damping, acceptance and stopping state, and
a finished problem is frozen while the others go on. The loop runs as its back end's
framework runs loops: in Python (NumPy, PyTorch), or traced once (`jax.lax.while_loop`).
"""

from __future__ import annotations

import math
import operator
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

# Each problem's status: running, or why it stopped.
RUNNING, DECREASE, STEP, GRADIENT, ZERO, LIMIT, SINGULAR, TRIALS, FIXED = range(9)


@dataclass
class Settings:
    method: str = "lm"
    max_iterations: int = 100
    relative_decrease: float = 1e-10
    step_norm: float = 1e-10
    gradient_norm: float = 0.0
    damping: float = 1e-4
    solver: str | None = None
    report: Any = None

    @property
    def max_solves(self) -> int:
        """The trial steps after which a problem that accepts none gives up."""
        return 10 * self.max_iterations + 50

    def reason(self, status: int) -> str:
        return _REASONS[status].format(self)


# Why a problem stopped, formatted with its settings (only the one asked for is formatted).
_REASONS = {
    RUNNING: "running",
    DECREASE: "relative decrease below {0.relative_decrease:g}",
    STEP: "step norm below {0.step_norm:g}",
    GRADIENT: "gradient norm below {0.gradient_norm:g}",
    ZERO: "the cost is zero",
    LIMIT: "iteration limit ({0.max_iterations}) reached",
    SINGULAR: "the normal equations are singular (try method='lm')",
    TRIALS: "{0.max_solves} trial steps without converging",
    FIXED: "every variable is fixed",
}

CONVERGED = (DECREASE, STEP, GRADIENT, ZERO, FIXED)


def step_rule(xp, settings: Settings, rounding: float, cost, trial_cost, step, finite, scale,
              damping, growth, g):  # fmt: skip
    """The LM bookkeeping per problem: (accept, new damping, new growth, status)."""
    lm = settings.method == "lm"
    # the decrease of the damped quadratic model, -g.s - s.H s / 2, which is
    # s.(lambda D s - g) / 2 since (H + lambda D) s = -g
    predicted = 0.5 * (damping * _inner(scale * step, step) - _inner(step, g))
    actual = cost - trial_cost
    trial_finite = xp.isfinite(trial_cost) & finite
    # A decrease within the cost's rounding cannot be measured: such a step is taken on the
    # model's word, or LM stalls some sqrt(eps) short of the minimum.
    unmeasurable = (predicted <= rounding * cost) & (xp.abs(actual) <= rounding * cost)
    accept = trial_finite & (((actual > 0) | unmeasurable) if lm else True)
    measured = (predicted > 0) & xp.logical_not(unmeasurable)
    ratio = xp.where(measured, actual / xp.where(measured, predicted, 1.0), 1.0)
    centred = 2.0 * ratio - 1.0
    # cubed by products: Python's power of a float raises on overflow, where NumPy's is inf
    factor = 1.0 - centred * centred * centred
    factor = xp.where(factor > 1.0 / 3.0, factor, 1.0 / 3.0)
    if lm:
        floor = xp.where(damping > 1e-12, damping, 1e-12)
        new_damping = xp.where(accept, damping * factor, floor * growth)
        new_growth = xp.where(accept, 2.0 + 0.0 * growth, growth * 2.0)
    else:
        new_damping, new_growth = damping, growth
    norm = xp.sqrt(_inner(step, step))
    status = xp.where(
        trial_finite & (xp.abs(actual) < settings.relative_decrease * cost),
        DECREASE,
        xp.where(finite & (norm < settings.step_norm), STEP, RUNNING),
    )
    if not lm:
        status = xp.where(finite, status, SINGULAR)
    return accept, new_damping, new_growth, status


def status_before_step(system, settings: Settings, cost, g, iterations, solves):
    """The rules checked before a step: a zero cost, a small gradient, the limits."""
    xp = system.xp
    status = xp.where(cost == 0, ZERO, RUNNING)
    if settings.gradient_norm > 0:
        largest = system.framework.largest(xp.abs(g), -1)
        status = xp.where((status == RUNNING) & (largest <= settings.gradient_norm),
                          GRADIENT, status)  # fmt: skip
    status = xp.where((status == RUNNING) & (iterations >= settings.max_iterations),
                      LIMIT, status)  # fmt: skip
    return xp.where((status == RUNNING) & (solves >= settings.max_solves), TRIALS, status)


@dataclass
class Outcome:
    values: list
    cost: Any
    iterations: Any
    status: Any
    solves: Any
    history: list


def minimise(system, settings: Settings, values, data, bounds) -> Outcome:
    """LM (or GN) from `values` to a stop, every problem of the batch its own.

    `system` (a back end) gives `framework` (whose loops and arrays the state is in),
    `xp` (its namespace, or `OneProblem`'s where the state is one problem's numbers: then
    each (B,) below is a number and each (B, N) a vector), `rounding` (a few rounding
    steps of the cost, relative), `linearise(values, data) -> (cost (B,), normal,
    g (B, N))`, `solve(normal, g, damping) -> (step (B, N), finite (B,), scale (B, N))`,
    `retract(values, step, bounds)`, `select(mask (B,), new, old)` of values and normal
    equations alike, and `zeros(shape, dtype_name)` on its device. With a `report`, each
    accepted step of a problem run alone prints a line, where the loop runs in Python."""
    xp, framework = system.xp, system.framework
    cost, normal, g = system.linearise(values, data)
    batch = _batch(cost)
    lm = settings.method == "lm"
    # every problem's state made from its cost, so that it lies where the cost does (a
    # `shard_map`'s device, its varying axes)
    damping = 0.0 * cost + (settings.damping if lm else 0.0)
    growth = 0.0 * cost + 2.0
    iterations = xp.where(cost == cost, 0, 0)
    status = iterations + (FIXED if system.size == 0 else RUNNING)
    history = [cost] if framework.concrete(cost) else []
    report = settings.report if batch == 1 and framework.concrete(cost) else None
    if report:
        report(f"iteration 0 cost={float(_first(cost)):.10g}")

    def cond(state):
        return xp.any(state[7] == RUNNING)

    def body(state):
        if compacting:  # once a quarter of the batch has stopped: a step of the others only
            running = np.asarray(framework_numpy(state[7])) == RUNNING
            if running.sum() < 0.75 * batch:
                rows = framework.indices(np.flatnonzero(running), state[1])
                part = advance(_take(state, rows, batch), _take(data, rows, batch))
                state = (*_put(framework, state[:-1], rows, part[:-1]), part[-1])
                if history and int(framework_numpy(part[6]).sum()) > 0:
                    history.append(state[1])
                return state
        before = state[6]
        state = advance(state, data)
        if history and bool(xp.any(state[6] != before)):
            history.append(state[1])
        return state

    def advance(state, data):
        values, cost, normal, g, damping, growth, iterations, status, solves = state
        running = status == RUNNING
        step, finite, scale = system.solve(normal, g, damping)
        step = xp.where(_rows(running), step, 0.0)
        trial = system.retract(values, step, bounds)
        trial_cost, trial_normal, trial_g = system.linearise(trial, data)
        accept, new_damping, new_growth, step_status = step_rule(
            xp, settings, system.rounding, cost, trial_cost, step, finite, scale, damping,
            growth, g,
        )  # fmt: skip
        accept = accept & running
        if report and bool(_first(accept)):
            before, after = float(_first(cost)), float(_first(trial_cost))
            norm = float(xp.sqrt((step * step).sum()))
            report(
                f"iteration {int(_first(iterations)) + 1} cost={after:.10g} "
                f"decrease={(before - after) / before:.3g} step={norm:.3g} "
                f"lambda={float(_first(new_damping)):.3g} solves={int(solves) + 1}"
            )
        values = system.select(accept, trial, values)
        cost = xp.where(accept, trial_cost, cost)
        normal = system.select(accept, trial_normal, normal)
        g = xp.where(_rows(accept), trial_g, g)
        damping = xp.where(running, new_damping, damping)
        growth = xp.where(running, new_growth, growth)
        iterations = iterations + xp.where(accept, 1, 0)
        status = xp.where(running & (step_status != RUNNING), step_status, status)
        solves = solves + 1
        status = xp.where(status == RUNNING,
                          status_before_step(system, settings, cost, g, iterations, solves),
                          status)  # fmt: skip
        return values, cost, normal, g, damping, growth, iterations, status, solves

    compacting = batch > 1 and not framework.traces
    solves = system.zeros((), "int")
    status = xp.where(status == RUNNING,
                      status_before_step(system, settings, cost, g, iterations, solves),
                      status)  # fmt: skip
    state = (values, cost, normal, g, damping, growth, iterations, status, solves)
    state = framework.while_loop(cond, body, state)
    values, cost, _, _, _, _, iterations, status, solves = state
    if report:
        report(f"stopped: {settings.reason(int(_first(status)))}")
    return Outcome(values, cost, iterations, status, solves, history)


class OneProblem:
    """The loop's namespace where its state is one problem's, as Python numbers (the CPU's
    back end): each per-problem value a number, each per-problem vector a 1-D array.
    NumPy's calls on arrays of one element cost ~7,000 instructions a `where`, most of a
    small problem's bookkeeping (benchmarks/NOTES.md 58)."""

    @staticmethod
    def where(condition, a, b):
        return a if condition else b

    isfinite, sqrt = staticmethod(math.isfinite), staticmethod(math.sqrt)
    abs, any, logical_not = staticmethod(abs), staticmethod(bool), staticmethod(operator.not_)


def _rows(x):
    """A per-problem value against per-problem vectors: a column, or the number itself."""
    return x[:, None] if getattr(x, "ndim", 0) else x


def _inner(a, b):
    """Per problem, the inner product of two vectors over the unknowns (a number where the
    state is one problem's: BLAS's dot, as `ndarray.dot`, ~0.5 us, where `@` goes through
    the generalised ufunc's iterator, ~1.1 us, and the product's sum costs two calls)."""
    return float(a.dot(b)) if a.ndim == 1 else (a * b).sum(-1)


def _first(x):
    """The first problem's value (a number's own)."""
    return x[0] if getattr(x, "ndim", 0) else x


def _batch(cost) -> int:
    return cost.shape[0] if getattr(cost, "ndim", 0) else 1


def framework_numpy(x):
    from .._frameworks import NUMPY

    return NUMPY.convert(x)


def _take(tree, rows, batch: int):
    """The rows of every array of `tree` whose first axis is the batch (group batches,
    lists, tuples and dicts alike); anything else whole."""
    from ..groups import LieGroup

    if isinstance(tree, (list, tuple)):
        return type(tree)(_take(t, rows, batch) for t in tree)
    if isinstance(tree, dict):
        return {k: _take(v, rows, batch) for k, v in tree.items()}
    if isinstance(tree, LieGroup):
        return type(tree)._trusted(*(_take(a, rows, batch) for a in tree._arrays))
    if getattr(tree, "ndim", 0) and tree.shape[0] == batch:
        return tree[rows]
    return tree


def _put(framework, whole, rows, part):
    """`whole` with its rows `rows` replaced by `part` (as `_take` took them)."""
    from ..groups import LieGroup

    if isinstance(whole, (list, tuple)):
        return type(whole)(_put(framework, w, rows, p) for w, p in zip(whole, part))
    if isinstance(whole, dict):
        return {k: _put(framework, whole[k], rows, part[k]) for k in whole}
    if isinstance(whole, LieGroup):
        return type(whole)._trusted(
            *(_put(framework, w, rows, p) for w, p in zip(whole._arrays, part._arrays))
        )
    return framework.put_rows(whole, rows, part)


def reason(settings: Settings, status) -> str:
    """Why the problems stopped, in words (counts of each reason for a batch)."""
    from .._frameworks import NUMPY, concrete

    if not concrete(status):
        return "traced: read result.converged"
    codes = np.asarray(NUMPY.convert(status)).ravel()
    if len(codes) == 1:
        return settings.reason(int(codes[0]))
    counts = {settings.reason(int(c)): int((codes == c).sum()) for c in np.unique(codes)}
    return "; ".join(f"{text}: {count}/{len(codes)}" for text, count in counts.items())


def converged(status):
    """Per problem: stopped by a convergence rule, not by a limit."""
    done = status == CONVERGED[0]
    for code in CONVERGED[1:]:
        done = done | (status == code)
    return done


class Clock:
    """Seconds per part of an iteration (`Result.timings`), where the loop runs in Python
    (a traced loop's parts are not timed apart)."""

    def __init__(self, timings):
        self.intervals = {part: _Interval(timings, part) for part in vars(timings)}

    def __call__(self, part: str):  # the parts do not nest: one interval each will do
        return self.intervals[part]


class _Interval:
    def __init__(self, timings, part: str):
        self.timings, self.part = timings, part

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *_):
        setattr(self.timings, self.part,
                getattr(self.timings, self.part) + time.perf_counter() - self.start)  # fmt: skip
