"""The device back end: the normal equations block-sparse in the framework's own arrays
(`_normal.py`), never an N x N array but for a small system's dense factorisation, a
Schur complement that eliminates one set first (`_schur.py`), and the (reduced) system
solved on the device: a dense Cholesky where it is small, cuDSS where it is installed and
the arrays are on CUDA (`_cudss.py`), else block-Jacobi preconditioned conjugate gradients
(`_pcg.py`). It serves CUDA inputs, many problems of one structure (`Problem(batch=B)` in
PyTorch, `jax.vmap` of `optim.solve` in JAX), JAX transforms (the whole loop is one
`jax.lax.while_loop`, jitted once per structure), and any input whose solver is one of
these. Every array has a leading axis of problems (one, for a single problem).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .. import _frameworks, manifold
from ..groups import LieGroup
from . import _loop
from ._kept import Kept, structure_digest
from ._linearise import linearise_cost, plan
from ._loop import Clock, Settings
from ._normal import NormalStructure, SchurStructure
from ._pcg import pcg
from ._problem import Problem, first_array, initial_values
from ._result import Result, Timings
from ._schur import Schur

# Unknowns of the (reduced) system up to which a dense factorisation is the default: its
# memory grows as N^2 (128 MB of float64 at 4,096).
DENSE_UP_TO = 4096
DENSE_BYTES = 1 << 30  # and up to 1 GB of dense matrices for a whole batch


class SetSizes(NamedTuple):
    index: int
    count: int
    tangent_dim: int


class DeviceSystem:
    """One problem's (or a batch's) normal equations and steps, in its framework."""

    def __init__(self, problem: Problem, settings: Settings, eliminate, timings: Timings):
        self.framework = _frameworks.FRAMEWORKS[problem.framework]
        self.xp = self.framework.namespace()
        self.sets = problem.variable_sets
        self.costs = problem.costs
        self.arities = [len(c.instance_indices) for c in problem.costs]
        free = [~s.fixed for s in self.sets]
        self.plans = tuple(plan(c, free) for c in problem.costs)
        try:
            self.kept = _structure(problem, self.plans, eliminate)
        except ArithmeticError:
            raise ValueError(
                f"xform.optim.solve: cannot eliminate {eliminate.name}: a cost joins two of "
                "its variables (its block of the normal equations is not block diagonal)"
            ) from None
        self.structure = self.kept.normal
        complement = self.kept.complement
        self.schur = None if complement is None else Schur(complement, self.framework)
        self.size = self.structure.size
        solved = self.schur.structure.pattern.size if self.schur else self.size
        self.solver = settings.solver or _default_solver(solved, problem)
        self.batched = problem.batch is not None
        self.free = free
        self.clock = Clock(timings)
        self.rounding = 0.0
        self.like = None
        self.checked = False
        self.tables: dict = {}

    def index_tables(self) -> dict[str, np.ndarray]:
        """Every index array the iteration reads, by name: the assembly's, H's pattern's,
        the complement's, where each set's step lies; made once per structure, in NumPy,
        read-only."""
        dense = self.solver == "cholesky"
        tables = self.kept.tables.get(dense)
        if tables is None:
            tables = self.kept.tables[dense] = self._index_tables(dense)
        return tables

    def _index_tables(self, dense: bool) -> dict[str, np.ndarray]:
        tables = self.structure.tables(dense and self.schur is None)
        if self.schur is not None:
            tables.update(self.schur.structure.tables(dense))
        layout = self.structure.layout
        for k, s in enumerate(self.sets):
            positions = layout.columns(s, np.arange(s.count))  # (n_s, d), -1 fixed
            tables[f"step {k}"] = np.where(positions >= 0, positions, self.size).ravel()
        for c, cost in enumerate(self.costs):
            for a, indices in enumerate(cost.instance_indices):
                tables[f"instances {c} {a}"] = np.array(indices)
        for table in tables.values():
            table.flags.writeable = False
        return tables

    @property
    def indices(self) -> list:
        return [[self.tables[f"instances {c} {a}"] for a in range(arity)]
                for c, arity in enumerate(self.arities)]  # fmt: skip

    def shell(self) -> DeviceSystem:
        """This system for a compiled loop to keep: the sets by their sizes, no costs, and
        `like` (whose dtype and placement the loop's own arrays take) an empty array, so
        that it holds none of the problem's arrays (its data, its values)."""
        shell = copy.copy(self)
        shell.sets = [SetSizes(s.index, s.count, s.tangent_dim) for s in self.sets]
        # costs only name a non-finite initial residual, checked on concrete arrays: in
        # the compiled loop every residual is a tracer
        shell.costs = [None] * len(self.costs)
        shell.tables = {}
        shell.clock = Clock(Timings())  # a retrace's time is no later solve's
        like = self.like  # an empty array of its dtype and placement, not its values
        shell.like = (
            self.framework.zeros((0, *like.shape[1:]), _frameworks.float_name(like.dtype), like)
            if _frameworks.concrete(like)
            else np.zeros(0, like.dtype)  # a tracer of the caller's trace: not to be kept
        )
        return shell

    # --- arrays ---------------------------------------------------------------------------

    def zeros(self, shape, kind: str):
        if kind == "float":
            dtype = _frameworks.float_name(self.like.dtype)
        else:
            dtype = self.framework.integer
        return self.framework.zeros(shape, dtype, self.like)

    def select(self, mask, new, old):
        """Per problem (axis 0): `new` where mask, else `old`; group batches, lists and
        dicts of arrays alike."""
        if isinstance(new, dict):
            return {k: self.select(mask, new[k], old[k]) for k in new}
        if isinstance(new, (list, tuple)):
            return type(new)(self.select(mask, a, b) for a, b in zip(new, old))
        if isinstance(new, LieGroup):
            return type(new)._trusted(
                *(self.select(mask, a, b) for a, b in zip(new._arrays, old._arrays))
            )
        return self.xp.where(mask.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)

    # --- the back end's three operations -----------------------------------------------------

    def linearise(self, values, data):
        with self.clock("residuals"):
            parts = [
                linearise_cost(p, values, i, d, self.framework.name, True)
                for p, i, d in zip(self.plans, self.indices, data)
            ]
        if not self.checked:
            _check_residuals(self.costs, parts)
            self.checked = True
        with self.clock("assembly"):
            cost = sum(p[0] for p in parts)
            if all(p[2] is None for p in parts):  # every variable fixed
                return cost, {}, self.zeros((cost.shape[0], self.size), "float")
            matrix, g = self.structure.assemble([p[2] for p in parts], [p[1] for p in parts],
                                                self.framework, self.tables)  # fmt: skip
        return cost, matrix.blocks, g

    def solve(self, normal, g, damping):
        """The damped step of each problem, whether it is finite, and the scaling D."""
        from ._blocks import BlockMatrix

        xp = self.xp
        with self.clock("solve"):
            if not normal:
                return 0.0 * g, xp.isfinite(g).all(-1), 0.0 * g
            matrix = BlockMatrix(self.structure.pattern, normal, self.framework, self.tables)
            diagonal = matrix.diagonal()
            largest = self.framework.largest(diagonal, -1, keepdims=True)
            floor = 1e-12 * xp.where(largest > 1e-300, largest, 1e-300)
            scale = xp.where(diagonal > floor, diagonal, floor)
            damped = matrix.plus_diagonal(damping[:, None] * scale)
            if self.schur is not None:
                step = self.schur(damped, g, self._linear)
            else:
                step = self._linear(damped, -g)
            finite = xp.isfinite(step).all(-1)
            return xp.where(finite[:, None], step, 0.0 * step), finite, scale

    def _linear(self, matrix, rhs):
        if self.solver == "cholesky":
            return self.framework.cholesky_solve(matrix.dense(), rhs)
        if self.solver == "cudss":
            from ._cudss import cudss_solve

            return cudss_solve(matrix, rhs)
        return pcg(matrix, rhs)

    def retract(self, values, step, bounds):
        """`rplus` of every set by its part of the step, groups normalised back onto the
        group, vectors projected onto their bounds; fixed variables as they are."""
        xp, framework = self.xp, self.framework
        with self.clock("other"):
            padded = framework.concatenate([step, 0.0 * step[:, :1]], 1)
            moved = []
            for k, (s, v, free, lower, upper) in enumerate(zip(self.sets, values, self.free,
                                                               *bounds)):  # fmt: skip
                if not free.any():
                    moved.append(v)
                    continue
                delta = padded[:, self.tables[f"step {k}"]].reshape(
                    step.shape[0], -1, s.tangent_dim
                )
                new = manifold.rplus(v, delta)
                if isinstance(new, LieGroup):
                    new = new.normalize()
                else:
                    if lower is not None:
                        low = self._bound(lower, new)
                        new = xp.where(new > low, new, low)
                    if upper is not None:
                        high = self._bound(upper, new)
                        new = xp.where(new < high, new, high)
                if not free.all():
                    mask = framework.constant(free.reshape(1, -1), step) > 0.5
                    new = self.select_variables(mask, new, v)
                moved.append(new)
            return moved

    def _bound(self, bound, like):
        if self.framework.owns(bound):
            return bound
        return self.framework.constant(np.asarray(bound, dtype=np.float64), like)

    def select_variables(self, mask, new, old):
        if isinstance(new, LieGroup):
            return type(new)._trusted(
                *(self.select_variables(mask, a, b) for a, b in zip(new._arrays, old._arrays))
            )
        return self.xp.where(mask.reshape(mask.shape + (1,) * (new.ndim - mask.ndim)), new, old)



def _default_solver(size: int, problem: Problem) -> str:
    batch = problem.batch or 1
    if size <= DENSE_UP_TO and batch * size * size * 8 <= DENSE_BYTES:
        return "cholesky"
    from ._cudss import available

    # cuDSS through nvmath-python takes PyTorch's CUDA tensors (not JAX's buffers)
    framework = _frameworks.FRAMEWORKS[problem.framework]
    if framework is _frameworks.TORCH and _on_cuda(problem) and available():
        return "cudss"
    return "pcg"


def _on_cuda(problem: Problem) -> bool:
    value = first_array(problem.variable_sets[0].initial)
    return "cuda" in str(getattr(value, "device", "")).lower() or "gpu" in str(
        getattr(value, "device", "")
    ).lower()


def _check_residuals(costs, parts) -> None:
    """A residual not finite at the initial values names its cost and instance (where the
    values are concrete)."""
    for cost, (_, r, _) in zip(costs, parts):
        if not _frameworks.concrete(r):
            return
        values = _frameworks.NUMPY.convert(r)
        finite = np.isfinite(values).all(-1)
        if not finite.all():
            problem_index, instance = (int(i) for i in np.argwhere(~finite)[0])
            raise cost.non_finite_residual(instance, values[problem_index, instance])


# --- the solve -------------------------------------------------------------------------------


def solve_on_device(problem: Problem, settings: Settings, eliminate) -> Result:
    timings = Timings()
    system = DeviceSystem(problem, settings, eliminate, timings)
    framework = system.framework
    values = list(initial_values(problem.variable_sets))
    data = [c.data for c in problem.costs]
    like = first_array(values[0])
    system.like = like
    system.rounding = 16.0 * float(system.xp.finfo(like.dtype).eps)
    tables = system.index_tables()
    bounds = ([s.lower for s in problem.variable_sets], [s.upper for s in problem.variable_sets])
    if framework.traces:  # traced once per structure; tables and bounds are arguments
        bounds = tuple(
            [None if b is None else _bound_argument(framework, b, v) for b, v in zip(side, values)]
            for side in bounds
        )
        values, cost, iterations, status, solves, converged = _compiled(
            system, settings, tables
        )(values, data, {k: framework.indices(v) for k, v in tables.items()}, bounds)
        return Result(
            problem_id=problem.id, solution=list(values), cost=cost, iterations=iterations,
            converged=converged, reason=_loop.reason(settings, status), history=[],
            timings=timings, solves=int(solves) if _frameworks.concrete(solves) else solves,
        )  # fmt: skip
    if not system.batched:
        values = [_expand(v) for v in values]
        data = [_tree_expand(d) for d in data]
    system.tables = {k: framework.indices(v, like) for k, v in tables.items()}
    # the bounds as the values' arrays once, not at every step's retraction
    bounds = tuple(
        [None if b is None else system._bound(b, v) for b, v in zip(side, values)]
        for side in bounds
    )
    outcome = _loop.minimise(system, settings, values, data, bounds)
    values, cost, iterations, status = (outcome.values, outcome.cost, outcome.iterations,
                                        outcome.status)  # fmt: skip
    solves, history = int(outcome.solves), outcome.history
    converged = _loop.converged(status)
    reason = _loop.reason(settings, status)
    if not system.batched:
        values = [_squeeze(v) for v in values]
        cost, iterations, converged = cost[0], iterations[0], converged[0]
        history = [float(h[0]) for h in history]
    return Result(
        problem_id=problem.id, solution=values, cost=cost, iterations=iterations,
        converged=converged, reason=reason, history=history, timings=timings, solves=solves,
    )  # fmt: skip


# The structures of recent problems, by a digest of everything they are made from: a
# sliding window solves one structure, index arrays and all, solve after solve, and
# working it out in NumPy costs as much as the compiled loop's run (~10 ms for a window
# of 10 cameras and 300 points; benchmarks/NOTES.md 57). Read-only once made, so shared.
# Its index tables take 300-440 bytes an instance slot (the window's 1.7 MB for 5,577
# slots; 100 cameras and 5,000 points: 63 MB for 143,967), so none of over 65,536 slots
# is kept (its set-up a small part of its solve), and the 4 kept hold ~120 MB at most.
_STRUCTURES = Kept(size=4, largest=1 << 16)


@dataclass
class KeptStructure:
    normal: NormalStructure
    complement: SchurStructure | None
    tables: dict  # the index tables, by whether the (reduced) system is solved dense


def _structure(problem: Problem, plans, eliminate) -> KeptStructure:
    """The problem's normal equations' structure and its complement's, made once per
    structure. ArithmeticError where `eliminate` is joined to itself."""
    key = structure_digest(problem, eliminate)
    kept = _STRUCTURES.get(key)
    if kept is None:
        normal = NormalStructure(problem, plans, eliminate)
        e = normal.eliminated
        reduced = e is not None and len(normal.pattern.sets) > 1
        kept = KeptStructure(normal, SchurStructure(normal.pattern, e) if reduced else None, {})
        if _STRUCTURES.keeps(sum(i.size for c in problem.costs for i in c.instance_indices)):
            _STRUCTURES.put(key, kept)
    return kept


_COMPILED: dict = {}


def _compiled(system: DeviceSystem, settings: Settings, tables: dict):
    """The loop jitted once per structure and settings: a second problem of the same
    structure (the next batch of IK targets, the next window of a sliding-window
    estimator, whose index tables differ but not their sizes) compiles nothing."""
    s = system.structure
    key = (
        system.plans,
        tuple(
            (v.group, v.count, v.tangent_dim, v.fixed.tobytes(), v.lower is None, v.upper is None)
            for v in system.sets
        ),
        tuple((name, table.shape) for name, table in tables.items()),
        system.batched,
        s.eliminated,
        _frameworks.float_name(system.like.dtype),
        _placement(system.like),  # where the loop's own arrays are made
        (settings.method, settings.max_iterations, settings.relative_decrease,
         settings.step_norm, settings.gradient_norm, settings.damping, system.solver),
    )  # fmt: skip
    if key not in _COMPILED:
        if len(_COMPILED) > 32:
            _COMPILED.clear()
        system = system.shell()  # kept with the function: no problem's arrays

        def run(values, data, tables, bounds):  # all a problem's own: none baked in
            # a single problem gets its batch axis of one here, inside the trace, and loses
            # it here: eagerly, each of these is a dispatch of its own (~50 us in JAX)
            if not system.batched:
                values = [_expand(v) for v in values]
                data = [_tree_expand(d) for d in data]
            traced = copy.copy(system)  # the trace's tables on a copy: two threads may trace
            traced.tables = tables
            outcome = _loop.minimise(traced, settings, values, data, bounds)
            values, cost, iterations, status = (outcome.values, outcome.cost,
                                                outcome.iterations, outcome.status)  # fmt: skip
            converged = _loop.converged(status)
            if not system.batched:
                values = [_squeeze(v) for v in values]
                cost, iterations, status, converged = (cost[0], iterations[0], status[0],
                                                       converged[0])  # fmt: skip
            return values, cost, iterations, status, outcome.solves, converged

        _COMPILED[key] = system.framework.jit(run)
    return _COMPILED[key]


def _bound_argument(framework, bound, value):
    """A bound as an argument of the compiled loop: the framework's own array as it is
    (`Variables` holds it in the values' dtype), anything else (NumPy, a list) as NumPy in
    the values' dtype, moved in the call's own dispatch. The loop's carry keeps its types:
    a float64 bound would make float32 values float64."""
    if framework.owns(bound):
        return bound
    return np.asarray(bound, dtype=first_array(value).dtype)


def _placement(array):
    """A concrete array's sharding (its devices), else None."""
    return getattr(array, "sharding", None) if _frameworks.concrete(array) else None


def _expand(value):
    """A leading batch axis of 1."""
    if isinstance(value, LieGroup):
        return type(value)._trusted(*(a[None] for a in value._arrays))
    return value[None]


def _tree_expand(tree):
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tree_expand(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _tree_expand(v) for k, v in tree.items()}
    if isinstance(tree, LieGroup) or hasattr(tree, "shape"):
        return _expand(tree)
    return tree


def _squeeze(value):
    if isinstance(value, LieGroup):
        return type(value)._trusted(*(a[0] for a in value._arrays))
    return value[0]
