"""The CPU back end: residuals and Jacobians in the framework (`_linearise.py`, jitted in
JAX), the sparse normal equations assembled in NumPy into a pattern worked out once
(`_sparse.py`), a sparse Cholesky, and optionally a Schur complement that eliminates one
variable set first (`_host_schur.py`). The loop is `_loop.py`'s, over one problem: its
state is NumPy's (a batch of one), the variables stay in their framework.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np

from .. import _frameworks
from .._interop import to_numpy
from ..groups import LieGroup
from . import _loop
from ._host_schur import Schur
from ._kept import Kept, structure_digest
from ._layout import Layout
from ._linearise import lineariser, normal_blocks, plan
from ._loop import Clock, Settings
from ._problem import Problem, Variables, arrays_of, first_array, initial_values
from ._result import Result, Timings
from ._sparse import cost_pattern, make_solver, slot_blocks


class HostSystem:
    """One problem's sparse normal equations on the CPU, and its steps."""

    framework = _frameworks.NUMPY
    xp = _loop.OneProblem  # the loop's state: this problem's numbers

    def __init__(self, problem: Problem, settings: Settings, eliminate, timings: Timings):
        self.clock = Clock(timings)
        self.values_framework = _frameworks.FRAMEWORKS[problem.framework]
        self.sets = sets = problem.variable_sets
        self.costs = problem.costs
        self.free = free = [~s.fixed for s in sets]
        self.plans = plans = tuple(plan(c, free) for c in problem.costs)
        self.structure = _STRUCTURES.take(problem, plans, eliminate, settings.solver)
        self.layout = self.structure.layout
        self.size = self.layout.size
        self.pattern = self.structure.pattern
        self.slots, self.gradient_slots = self.structure.slots, self.structure.gradient_slots
        self.linear = self.structure.linear
        framework = self.values_framework
        # eager, the costs without a loss are summed here from the residuals, in NumPy
        self.run = lineariser(plans, framework.name, False, costs=framework.traces)
        # JAX: the per-instance products inside the jitted function (XLA batches them
        # better than NumPy's matmul of small matrices)
        self.normal_blocks = normal_blocks(plans, framework) if framework.traces else None
        self.products: dict = {}  # each cost's J^T and J^T J, written in place: fresh pages
        # cost ~0.4 ms a MB here
        self.retract_sets = _retraction(framework.name, tuple(s.group for s in sets))
        self.moving = [bool(f.any()) for f in free]
        self.checked = False

    def prepare(self, values) -> tuple:
        """The framework's arrays the loop reads, made once from the initial `values`:
        index arrays, masks of the free variables, bounds; returns the bounds."""
        framework = self.values_framework
        like = first_array(values[0])
        # index arrays and masks in the framework: made once per structure and device
        self.indices, self.moving_rows = self.structure.arrays_in(
            framework, like, self.costs, self.free, values
        )
        self.rounding = 16.0 * float(np.finfo(_frameworks.float_name(like.dtype)).eps)
        return tuple(
            [None if b is None else b if framework.owns(b)
             else framework.constant(np.asarray(b, np.float64), like) for b in side]
            for side in ([s.lower for s in self.sets], [s.upper for s in self.sets])
        )  # fmt: skip

    def zeros(self, shape, kind: str):
        return 0.0 if kind == "float" else 0

    def select(self, accept, new, old):
        return new if accept else old

    def linearise(self, values, data):
        with self.clock("residuals"):
            if self.normal_blocks is not None:
                blocks = [
                    (float(c), to_numpy(r), None if j is None else to_numpy(j), jr)
                    for c, r, j, jr in self.normal_blocks(values, self.indices, data)
                ]
            else:
                blocks = []
                for c, r, j in self.run(values, self.indices, data):
                    r = to_numpy(r)
                    blocks.append((_cost(c, r), r, None if j is None else to_numpy(j), None))
        if not self.checked:
            _check_initial(self.costs, [b[1] for b in blocks])
            self.checked = True
        with self.clock("assembly"):
            cost = math.fsum(b[0] for b in blocks)
            jacobians, gradients = [], []
            for index, (_, r, j, jr) in enumerate(blocks):
                if j is None:
                    continue
                jacobians.append((index, j, jr is not None))
                # r^T J: both operands as they are, where J^T r would take J's transposed
                # view (or a copy of it)
                gradients.append((to_numpy(jr) if jr is not None
                                  else np.matmul(r[..., None, :], j)).ravel())  # fmt: skip
            if gradients:
                g = np.bincount(self.gradient_slots, _joined(gradients),
                                minlength=self.size + 1)[: self.size]  # fmt: skip
            else:
                g = np.zeros(self.size)
        return cost, Normal(jacobians), g

    def hessian(self, normal: Normal) -> np.ndarray:
        """H's values (the pattern's nnz) of a linearisation, assembled the first time a
        step is solved from it: the loop's last trial, and a rejected one, never are."""
        if normal.values is None:
            with self.clock("assembly"):
                contributions = [
                    (j if product_given else self._product(index, j)).ravel()
                    for index, j, product_given in normal.jacobians
                ]
                normal.values = (self.pattern.assemble(self.slots, _joined(contributions))
                                 if contributions else np.zeros(self.pattern.nnz))  # fmt: skip
                normal.jacobians = None
        return normal.values

    def _product(self, index: int, j: np.ndarray) -> np.ndarray:
        """J^T J of one cost, J^T copied first: NumPy's matmul of small matrices runs ~1.5x
        faster on a contiguous operand than on the transposed view (NOTES 40)."""
        key = (index, j.shape, j.dtype)
        if key not in self.products:
            transposed = j.shape[:-2] + j.shape[-1:] + j.shape[-2:-1]
            self.products[key] = (np.empty(transposed, j.dtype),
                                  np.empty(transposed[:-1] + j.shape[-1:], j.dtype))  # fmt: skip
        jt, product = self.products[key]
        np.copyto(jt, np.swapaxes(j, -1, -2))
        return np.matmul(jt, j, out=product)

    def solve(self, normal, g, damping):
        h = self.hessian(normal)
        with self.clock("solve"):
            diagonal = h[self.pattern.diagonal]
            scale = np.maximum(diagonal, 1e-12 * max(diagonal.max(initial=0.0), 1e-300))
            damped = h.copy()
            damped[self.pattern.diagonal] = diagonal + damping * scale
            try:
                step = self.linear(damped, g)
            except ArithmeticError:
                step = None
            finite = step is not None and bool(np.all(np.isfinite(step)))
            if not finite:
                step = np.zeros(self.size)
            return step, finite, scale

    def retract(self, values, step, bounds):
        with self.clock("other"):
            framework = self.values_framework
            # A compiled retraction (JAX's) takes the steps as NumPy, moved in its call's
            # dispatch (~10 us), where an eager transfer costs ~120 us.
            delta = _as_numpy_like if framework.traces else framework.constant
            deltas = [
                delta(self.layout.split(step, s), first_array(v)) if m else None
                for s, v, m in zip(self.sets, values, self.moving)
            ]
            return list(self.retract_sets(values, deltas, self.moving_rows, *bounds))


class Normal:
    """A linearisation's normal matrix: its Jacobians (each cost's index, J, and whether
    J is J^T J already, as JAX gives it) until `HostSystem.hessian` assembles its values."""

    __slots__ = ("jacobians", "values")

    def __init__(self, jacobians: list):
        self.jacobians, self.values = jacobians, None


def _as_numpy_like(values: np.ndarray, like) -> np.ndarray:
    """`values` in `like`'s dtype, left in NumPy: a compiled function's argument."""
    return np.asarray(values, dtype=like.dtype)


class Structure:
    """What a problem's structure fixes, worked out once: the unknowns' layout, the pattern
    of H, each cost's slots in it and in the gradient, the linear solve (a Schur
    complement's tables, a sparse solver's analysis), and the index arrays and masks the
    loop reads, in each framework and device it has been solved in."""

    def __init__(self, problem: Problem, plans, eliminate, solver):
        self.layout = layout = Layout(problem.variable_sets, eliminate)
        columns = [
            [layout.columns(sel.variables, indices)
             for sel, indices, slot in zip(cost.selections, cost.instance_indices, p.slots)
             if slot.differentiate]
            for cost, p in zip(problem.costs, plans)
        ]  # fmt: skip
        blocks = [slot_blocks(cols, len(cols[0]) if cols else 0) for cols in columns]
        self.pattern, slots = cost_pattern(layout.size, blocks)
        self.slots = _joined(slots) if slots else np.zeros(0, np.int64)
        joined = [np.concatenate(c, axis=1) for c in columns if c]
        self.gradient_slots = (
            _joined([np.where(c >= 0, c, layout.size).ravel() for c in joined])
            if joined else np.zeros(0, np.int64)
        )  # fmt: skip
        if eliminate is not None and layout.size > layout.reduced:
            block = functools.reduce(
                math.gcd, [d for k, d in enumerate(layout.tangent_dims) if k != eliminate.index],
                eliminate.tangent_dim,
            )
            self.linear = Schur(self.pattern, layout.reduced, eliminate.tangent_dim, block,
                                eliminate.name, solver)  # fmt: skip
        else:  # the whole system's solver, made only where no complement replaces it
            factor = make_solver(self.pattern, solver) if layout.size else None
            self.linear = lambda values, g: factor(values, -g)
        self.arrays: dict = {}

    def arrays_in(self, framework, like, costs, free, values) -> tuple:
        """Each cost's index arrays, and per set the mask of its free variables against
        each of its arrays (None where none is fixed), in `like`'s framework and device."""
        key = (framework.name, framework.placement(like))
        if key not in self.arrays:
            indices = [[framework.indices(np.asarray(i), like) for i in c.instance_indices]
                       for c in costs]  # fmt: skip
            masks = [None if f.all() else _row_masks(framework.constant(f, like) > 0.5, v)
                     for f, v in zip(free, values)]  # fmt: skip
            self.arrays[key] = indices, masks
        return self.arrays[key]


class Structures:
    """The structures of recent solves, by a digest of everything they are made from: a
    sliding window or a training loop solves one structure thousands of times, and its
    set-up costs as much as a few iterations of a small problem. A solve takes a
    structure out and puts it back when done, so two threads never share a solver's
    state. Only `size` of them are kept, and none larger than `largest` entries of H (a
    sparse solver's analysis holds memory: ~170 MB for 18,000 unknowns; a large
    problem's set-up is a small part of its solve)."""

    def __init__(self, size: int = 4, largest: int = 1 << 21):
        self.kept = Kept(size, largest)

    def take(self, problem: Problem, plans, eliminate, solver) -> Structure:
        # the masks' shapes are the sets' arrays' ranks
        ranks = [[a.ndim for a in arrays_of(s.initial)] for s in problem.variable_sets]
        key = structure_digest(problem, eliminate, solver, ranks)
        structure = self.kept.take(key)
        if structure is None:
            structure = Structure(problem, plans, eliminate, solver)
        structure.key = key
        return structure

    def give_back(self, structure: Structure) -> None:
        if self.kept.keeps(structure.pattern.nnz):
            self.kept.put(structure.key, structure)


_STRUCTURES = Structures()


def retract(xp, value, delta, free, lower, upper):
    """`value @ G.exp(delta)` (normalised back onto the group, since rounding drifts a
    quaternion's norm) or `value + delta` projected onto the bounds, on the rows where
    `free` (a mask per array of `value`, or None for all rows); the others as they were."""
    if delta is None:
        return value
    if isinstance(value, LieGroup):
        moved = value.multiply(type(value).exp(delta)).normalize()
    else:
        moved = value + delta
        if lower is not None:
            moved = xp.where(moved > lower, moved, lower)
        if upper is not None:
            moved = xp.where(moved < upper, moved, upper)
    if free is None:
        return moved
    pairs = zip(free, arrays_of(moved), arrays_of(value))
    arrays = [xp.where(f, new, old) for f, new, old in pairs]
    return type(value)._trusted(*arrays) if isinstance(value, LieGroup) else arrays[0]


def _row_masks(rows, value) -> tuple:
    """A mask of a set's variables `rows` (n,) against each of its arrays (n, ...)."""
    return tuple(rows.reshape((-1,) + (1,) * (a.ndim - 1)) for a in arrays_of(value))


@functools.lru_cache(maxsize=32)
def _retraction(framework: str, groups: tuple):
    """Every set's retraction, compiled once per framework and groups where it compiles."""

    xp = _frameworks.FRAMEWORKS[framework].namespace()

    def run(values, deltas, frees, lowers, uppers):
        return [retract(xp, *args) for args in zip(values, deltas, frees, lowers, uppers)]

    return _frameworks.FRAMEWORKS[framework].jit(run)


def solve_on_host(problem: Problem, settings: Settings, eliminate: Variables | None) -> Result:
    timings = Timings()
    start = time.perf_counter()
    system = HostSystem(problem, settings, eliminate, timings)
    values = list(initial_values(problem.variable_sets))
    bounds = system.prepare(values)
    data = [c.data for c in problem.costs]
    timings.other += time.perf_counter() - start
    outcome = _loop.minimise(system, settings, values, data, bounds)
    _STRUCTURES.give_back(system.structure)
    return Result(
        problem_id=problem.id,
        solution=outcome.values,
        cost=float(outcome.cost),
        iterations=int(outcome.iterations),
        converged=bool(_loop.converged(outcome.status)),
        reason=_loop.reason(settings, outcome.status),
        history=[float(h) for h in outcome.history],
        timings=timings,
        solves=int(outcome.solves),
    )


def _check_initial(costs, residuals) -> None:
    """The SPEC's bad input: a residual of the wrong shape or not finite names the cost."""
    for c, r in zip(costs, residuals):
        if r.ndim != 2 or r.shape[0] != c.count:
            raise ValueError(
                f"xform.optim.solve: cost {c.name!r} returned residuals of shape {r.shape}; "
                f"expected ({c.count}, r): one row per instance"
            )
        finite = np.isfinite(r).all(axis=-1)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            raise c.non_finite_residual(bad, r[bad])


def _cost(cost, residuals: np.ndarray) -> float:
    """A cost's value: its framework's, or half its residuals' squared norm."""
    if cost is None:
        flat = residuals.ravel()
        return 0.5 * float(np.dot(flat, flat))
    return float(cost)


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
