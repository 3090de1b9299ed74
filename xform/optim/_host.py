"""Gauss-Newton and Levenberg-Marquardt on the CPU: residuals and Jacobians in the
framework (`_linearise.py`, jitted in JAX), the sparse normal equations assembled in NumPy
into a pattern worked out once (`_sparse.py`), a sparse Cholesky, and optionally a Schur
complement that eliminates one variable set first (bundle adjustment's points).

Levenberg-Marquardt solves `(H + lambda D) delta = -g` with `D = diag(H)` (Marquardt's
scaling, clamped from below at 1e-12 of its largest entry, so that nothing depends on the
units), lambda updated from the gain ratio by Nielsen's rule (Madsen, Nielsen and Tingleff,
"Methods for non-linear least squares problems", 2004, sec. 3.2): a third at most after a
good step, 2, 4, 8, ... times after a rejected one. Gauss-Newton takes every step undamped.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .. import manifold
from ._linearise import jax_normal_blocks, lineariser, plan
from ._problem import Problem, Variables, numpy_of
from ._result import Result, Timings
from ._sparse import DENSE_BELOW, Pattern, cost_pattern, make_solver, slot_blocks


@dataclass
class Settings:
    method: str = "lm"
    max_iterations: int = 100
    relative_decrease: float = 1e-10
    step_norm: float = 1e-10
    gradient_norm: float = 0.0
    damping: float = 1e-4
    solver: str | None = None
    report: object = None


def _to_framework(array: np.ndarray, like, kind: str):
    if kind == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(array)).to(like.dtype)
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.asarray(array, dtype=like.dtype)
    return array.astype(like.dtype, copy=False)


def _retract(value, delta, free, lower, upper, kind: str):
    """`rplus(value, delta)` on free variables (normalised back onto the group, since
    rounding drifts a quaternion's norm), projected onto bounds; fixed ones as they are."""
    from ..groups import LieGroup

    moved = manifold.rplus(value, delta)
    if isinstance(moved, LieGroup):
        moved = moved.normalize()
    else:
        if lower is not None:
            moved = _maximum(moved, lower, kind)
        if upper is not None:
            moved = _minimum(moved, upper, kind)
    if isinstance(free, np.ndarray) and free.all():
        return moved
    return _select(free, moved, value, kind)


def _maximum(a, b, kind):
    if kind == "torch":
        import torch

        return torch.maximum(a, torch.as_tensor(b, dtype=a.dtype, device=a.device))
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.maximum(a, b)
    return np.maximum(a, b)


def _minimum(a, b, kind):
    if kind == "torch":
        import torch

        return torch.minimum(a, torch.as_tensor(b, dtype=a.dtype, device=a.device))
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.minimum(a, b)
    return np.minimum(a, b)


def _select(mask: np.ndarray, a, b, kind: str):
    """`a` where mask (over the first axis of the variables), else `b`; groups field by field."""
    from ..groups import LieGroup

    if isinstance(a, LieGroup):
        return type(a)._trusted(*(_select(mask, x, y, kind) for x, y in zip(a._arrays, b._arrays)))
    m = mask.reshape((-1,) + (1,) * (a.ndim - 1))
    if kind == "torch":
        import torch

        return torch.where(torch.from_numpy(np.ascontiguousarray(m)).to(a.device), a, b)
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.where(m, a, b)
    return np.where(m, a, b)


@functools.lru_cache(maxsize=32)
def _jax_retract(groups):
    import jax

    @functools.partial(jax.jit, static_argnums=(5,))
    def run(values, deltas, frees, lowers, uppers, all_free):
        return [
            _retract(v, d, np.ones(1, bool) if a else f, lo, up, "jax") if d is not None else v
            for v, d, f, lo, up, a in zip(values, deltas, frees, lowers, uppers, all_free)
        ]

    return run


class Layout:
    """Where each free variable's tangent lies in the unknowns: the reduced sets first, then
    the eliminated one (if any). `columns(set, indices) -> (k, d)`, -1 where fixed."""

    def __init__(self, sets: list[Variables], eliminated: Variables | None):
        order = [s for s in sets if s is not eliminated] + ([eliminated] if eliminated else [])
        self.offsets, self.ranks = {}, {}
        offset = 0
        self.reduced = 0
        for s in order:
            free = ~s.fixed
            self.ranks[s.index] = np.where(free, np.cumsum(free) - 1, -1)
            self.offsets[s.index] = offset
            offset += int(free.sum()) * s.tangent_dim
            if s is not eliminated:
                self.reduced = offset
        if eliminated is None:
            self.reduced = offset
        self.size = offset
        self.sets = sets

    def columns(self, s: Variables, indices: np.ndarray) -> np.ndarray:
        rank = self.ranks[s.index][indices]
        base = self.offsets[s.index] + rank * s.tangent_dim
        cols = base[:, None] + np.arange(s.tangent_dim)
        return np.where(rank[:, None] >= 0, cols, -1)

    def split(self, step: np.ndarray, s: Variables) -> np.ndarray:
        """The step of set s, (n, d), zero for fixed variables."""
        delta = np.zeros((s.count, s.tangent_dim))
        free = s.fixed == 0
        start = self.offsets[s.index]
        delta[free] = step[start : start + int(free.sum()) * s.tangent_dim].reshape(
            -1, s.tangent_dim
        )
        return delta


class Schur:
    """The Schur complement of the eliminated unknowns (indices >= `reduced`), whose block of
    H must be block diagonal (no cost joins two eliminated variables):
    `S = A - B C^-1 B^T`, `S x_r = -g_r + B C^-1 g_e`, `x_e = C^-1 (-g_e - B^T x_r)`."""

    def __init__(
        self, pattern: Pattern, reduced: int, d: int, block: int, name: str, solver: str | None
    ):
        self.pattern, self.reduced, self.d = pattern, reduced, d
        rows = pattern.indices.astype(np.int64)
        cols = np.repeat(np.arange(pattern.size), np.diff(pattern.indptr))
        in_a = rows < reduced
        in_b = (rows >= reduced) & (cols < reduced)
        in_c = cols >= reduced
        # C: block diagonal
        block_r, block_c = (rows[in_c] - reduced) // d, (cols[in_c] - reduced) // d
        if np.any(block_r != block_c):
            raise ValueError(
                f"xform.optim.solve: cannot eliminate {name}: a cost joins two of its "
                "variables (its block of the normal equations is not block diagonal)"
            )
        n_e = (pattern.size - reduced) // d
        self.n_e = n_e
        # C's entries, both triangles, as (n_e, d, d) gathered from the values
        r_in, c_in = (rows[in_c] - reduced) % d, (cols[in_c] - reduced) % d
        where_c = np.flatnonzero(in_c)
        self.c_lower = (block_r, r_in, c_in, where_c)
        # A's values on S's pattern; S = A's entries and the fill of B C^-1 B^T
        # B's rows in blocks of `block` (the tangent sizes' common divisor): SciPy's block
        # products are several times faster than its scalar ones here
        self.block = block if reduced % block == 0 else 1
        b_rows, b_cols = cols[in_b], rows[in_b] - reduced  # B is reduced x eliminated
        ones = sp.csr_matrix(
            (np.ones(len(b_rows)), (b_rows, b_cols)), shape=(reduced, self.n_e * d)
        )
        self.b_order = np.flatnonzero(in_b)
        csr = sp.csr_matrix(
            (np.arange(1, len(b_rows) + 1, dtype=np.float64), (b_rows, b_cols)),
            shape=(reduced, self.n_e * d),
        )
        csr.sort_indices()
        self.b_perm = self.b_order[csr.data.astype(np.int64) - 1]
        self.b_indices, self.b_indptr = csr.indices, csr.indptr
        fill = (ones @ ones.T).tocoo()
        a_rows, a_cols = rows[in_a], cols[in_a]
        self.s_pattern = Pattern(
            reduced, np.concatenate([fill.row, a_rows]), np.concatenate([fill.col, a_cols])
        )
        self.a_slots = self.s_pattern.slots(a_rows, a_cols)
        self.a_where = np.flatnonzero(in_a)
        self.solve_reduced = make_solver(self.s_pattern, solver)
        self._product_slots = None
        self._product_key = None

    def __call__(self, values: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        d, reduced = self.d, self.reduced
        block, r_in, c_in, where = self.c_lower
        c = np.zeros((self.n_e, d, d))
        c[block, r_in, c_in] = values[where]
        c[block, c_in, r_in] = values[where]
        try:
            c_inverse = np.linalg.inv(c)
        except np.linalg.LinAlgError as error:
            raise ArithmeticError(str(error)) from error
        if not np.all(np.isfinite(c_inverse)):
            raise ArithmeticError("an eliminated block is singular")
        b = sp.csr_matrix(
            (values[self.b_perm], self.b_indices, self.b_indptr), shape=(reduced, self.n_e * d)
        )
        k = self.block
        c_bsr = sp.bsr_matrix(
            (c_inverse, np.arange(self.n_e), np.arange(self.n_e + 1)), shape=(self.n_e * d,) * 2
        )
        b_bsr = b.tobsr(blocksize=(k, d)) if k > 1 else b
        y = b_bsr @ c_bsr  # B C^-1
        product = (y @ b_bsr.T).tocoo()
        key = (len(product.row), product.row[:8].tobytes(), product.col[-8:].tobytes())
        if key != self._product_key:
            self._product_slots = self.s_pattern.slots(product.row, product.col)
            self._product_key = key
        s_values = self.s_pattern.assemble(
            np.concatenate([self.a_slots, self._product_slots]),
            np.concatenate([values[self.a_where], -product.data]),
        )
        g_r, g_e = gradient[:reduced], gradient[reduced:]
        rhs = -g_r + y @ g_e
        x_r = self.solve_reduced(s_values, rhs)
        x_e = -(c_inverse @ (g_e + b.T @ x_r).reshape(-1, d)[..., None])[..., 0]
        return np.concatenate([x_r, x_e.ravel()])


def solve_on_host(problem: Problem, settings: Settings, eliminate: Variables | None) -> Result:
    timings = Timings()
    start = time.perf_counter()
    kind = problem.framework
    sets = problem.variable_sets
    layout = Layout(sets, eliminate)
    free = [~s.fixed for s in sets]
    plans = tuple(plan(c, free) for c in problem.costs)
    columns, blocks, gradient_slots = [], [], []
    for cost, p in zip(problem.costs, plans):
        cols = [
            layout.columns(sel.variables, idx)
            for sel, idx, slot in zip(cost.selections, cost.instance_indices, p.slots)
            if slot.differentiate
        ]
        columns.append(
            np.concatenate(cols, axis=1) if cols else np.zeros((cost.count, 0), np.int64)
        )
        blocks.append(slot_blocks(cols, cost.count))
    pattern, slots = cost_pattern(layout.size, blocks)
    for c in columns:
        gradient_slots.append(np.where(c >= 0, c, layout.size).ravel())
    slots = _joined(slots) if slots else np.zeros(0, np.int64)
    gradient_slots = np.concatenate(gradient_slots)
    factor = make_solver(pattern, settings.solver) if layout.size else None

    def linear(values, gradient):
        return factor(values, -gradient)

    if eliminate is not None and layout.size > layout.reduced:
        block = functools.reduce(
            math.gcd, [s.tangent_dim for s in sets if s is not eliminate], eliminate.tangent_dim
        )
        schur = Schur(
            pattern, layout.reduced, eliminate.tangent_dim, block, eliminate.name, settings.solver
        )  # checks that the set can be eliminated
        if layout.size >= DENSE_BELOW or settings.solver not in (None, "dense"):
            linear = schur  # small systems: one dense Cholesky is cheaper than the complement

    run = lineariser(plans, kind, False)
    normal_blocks = jax_normal_blocks(plans) if kind == "jax" else None
    indices = [_indices_in(kind, c.instance_indices) for c in problem.costs]
    data = [c.data for c in problem.costs]
    frees = [f.copy() for f in free]
    if kind == "jax":  # all-free sets skip the selection; the others' masks go in as arrays
        frees = [f if f.all() else _to_framework(f, f, "jax") for f in frees]
    lowers = [s.lower for s in sets]
    uppers = [s.upper for s in sets]
    moving = [bool(f.any()) for f in free]
    timings.other += time.perf_counter() - start

    products = {}  # each cost's J^T and J^T J, written in place: fresh pages cost ~0.4 ms a
    # MB here

    def linearise(values):
        tick = time.perf_counter()
        if kind == "jax":  # the per-instance products inside the jitted function
            blocks = [
                (float(numpy_of(c)), numpy_of(r), j if j is None else numpy_of(j), jr)
                for c, r, j, jr in normal_blocks(values, indices, data)
            ]
        else:
            blocks = [
                (float(numpy_of(c)), numpy_of(r), None if j is None else numpy_of(j), None)
                for c, r, j in run(values, indices, data)
            ]
        parts = [b[:2] + (None,) for b in blocks]
        tock = time.perf_counter()
        timings.residuals += tock - tick
        cost = math.fsum(p[0] for p in parts)
        contributions, gradients = [], []
        for index, (_, r, j, jr) in enumerate(blocks):
            if j is None:
                continue
            if jr is not None:  # J^T J and J^T r from JAX
                contributions.append(j.ravel())
                gradients.append(numpy_of(jr).ravel())
                continue
            # J^T copied before the product: NumPy's matmul of small matrices runs ~1.5x
            # faster on a contiguous operand than on the transposed view (NOTES 40)
            key = (index, j.shape, j.dtype)
            if key not in products:
                transposed = j.shape[:-2] + j.shape[-1:] + j.shape[-2:-1]
                products[key] = (
                    np.empty(transposed, j.dtype),
                    np.empty(transposed[:-1] + j.shape[-1:], j.dtype),
                )
            jt, product = products[key]
            np.copyto(jt, np.swapaxes(j, -1, -2))
            contributions.append(np.matmul(jt, j, out=product).ravel())
            gradients.append(np.matmul(jt, r[..., None]).ravel())
        if contributions:
            values_h = pattern.assemble(slots, _joined(contributions))
            gradient = np.bincount(gradient_slots, _joined(gradients), minlength=layout.size + 1)[
                : layout.size
            ]
        else:
            values_h, gradient = np.zeros(pattern.nnz), np.zeros(layout.size)
        timings.assembly += time.perf_counter() - tock
        return cost, values_h, gradient, parts

    values = list(_initial_values(sets))
    cost, h, gradient, parts = linearise(values)
    _check_initial(problem, parts, cost)
    rounding = _rounding(parts)
    history = [cost]
    report = settings.report
    if report:
        report(f"iteration 0 cost={cost:.10g}")
    damping, growth = (settings.damping if settings.method == "lm" else 0.0), 2.0
    iterations = solves = 0
    reason, converged = "", False
    max_solves = 10 * settings.max_iterations + 50
    if kind == "jax":
        retract_jax = _jax_retract(tuple(s.group for s in sets))
    while True:
        if cost == 0.0:
            reason, converged = "the cost is zero", True
            break
        if (
            settings.gradient_norm > 0
            and np.max(np.abs(gradient), initial=0.0) <= settings.gradient_norm
        ):
            reason, converged = f"gradient norm below {settings.gradient_norm:g}", True
            break
        if iterations >= settings.max_iterations:
            reason = f"iteration limit ({settings.max_iterations}) reached"
            break
        if solves >= max_solves:
            reason = f"{solves} trial steps without converging"
            break
        if layout.size == 0:
            reason, converged = "every variable is fixed", True
            break
        tick = time.perf_counter()
        diagonal = h[pattern.diagonal]
        scale = np.maximum(diagonal, 1e-12 * max(diagonal.max(initial=0.0), 1e-300))
        damped = h.copy()
        damped[pattern.diagonal] = diagonal + damping * scale
        timings.other += time.perf_counter() - tick
        tick = time.perf_counter()
        try:
            step = linear(damped, gradient)
        except ArithmeticError:
            step = None
        solves += 1
        timings.solve += time.perf_counter() - tick
        if step is None or not np.all(np.isfinite(step)):
            if settings.method != "lm":
                reason = "the normal equations are singular (try method='lm')"
                break
            damping, growth = max(damping, 1e-12) * growth, growth * 2.0
            continue
        step_norm = float(np.linalg.norm(step))
        tick = time.perf_counter()
        deltas = [
            _to_framework(layout.split(step, s), _like(v), kind) if m else None
            for s, v, m in zip(sets, values, moving)
        ]
        if kind == "jax":
            trial = retract_jax(
                values,
                deltas,
                [None if isinstance(f, np.ndarray) else f for f in frees],
                lowers,
                uppers,
                tuple(isinstance(f, np.ndarray) for f in frees),
            )
        else:
            trial = [
                _retract(v, d, f, lo, up, kind) if d is not None else v
                for v, d, f, lo, up in zip(values, deltas, frees, lowers, uppers)
            ]
        timings.other += time.perf_counter() - tick
        trial_cost, trial_h, trial_gradient, _ = linearise(trial)
        tick = time.perf_counter()
        # the decrease of the damped quadratic model, -g.s - s.H s / 2, which is
        # s.(lambda D s - g) / 2 since (H + lambda D) s = -g
        predicted = 0.5 * float(step @ (damping * scale * step - gradient))
        actual = cost - trial_cost
        finite = math.isfinite(trial_cost)
        small_change = finite and abs(actual) < settings.relative_decrease * cost
        small_step = step_norm < settings.step_norm
        # A decrease within the cost's rounding cannot be measured: such a step is taken on
        # the model's word, or LM stalls some sqrt(eps) short of the minimum.
        unmeasurable = predicted <= rounding * cost and abs(actual) <= rounding * cost
        if finite and (actual > 0 or unmeasurable or settings.method != "lm"):
            values, cost, h, gradient = trial, trial_cost, trial_h, trial_gradient
            ratio = actual / predicted if predicted > 0 and not unmeasurable else 1.0
            damping *= max(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3)
            growth = 2.0
            iterations += 1
            history.append(cost)
            if report:
                report(
                    f"iteration {iterations} cost={cost:.10g} decrease={actual / history[-2]:.3g} "
                    f"step={step_norm:.3g} lambda={damping:.3g} solves={solves}"
                )
        elif settings.method == "lm":
            damping, growth = max(damping, 1e-12) * growth, growth * 2.0
        timings.other += time.perf_counter() - tick
        if small_change:
            reason, converged = f"relative decrease below {settings.relative_decrease:g}", True
            break
        if small_step:
            reason, converged = f"step norm below {settings.step_norm:g}", True
            break
        if not finite and settings.method != "lm":
            reason = "the cost became non-finite"
            break
    if report:
        report(f"stopped: {reason}")
    return Result(
        problem_id=problem.id,
        solution=values,
        cost=cost,
        iterations=iterations,
        converged=converged,
        reason=reason,
        history=history,
        timings=timings,
        solves=solves,
    )


def _rounding(parts) -> float:
    """A few rounding steps of a cost summed from these residuals, relative to it."""
    dtypes = [p[1].dtype for p in parts if np.issubdtype(p[1].dtype, np.floating)]
    return 16.0 * float(np.finfo(np.result_type(*dtypes) if dtypes else np.float64).eps)


def _like(value):
    from ..groups import LieGroup

    return value._arrays[0] if isinstance(value, LieGroup) else value


def _indices_in(kind: str, indices: list[np.ndarray]):
    if kind == "torch":
        import torch

        return [torch.from_numpy(np.array(i)) for i in indices]  # a copy: writable
    if kind == "jax":
        import jax.numpy as jnp

        return [jnp.asarray(i, dtype=jnp.int32) for i in indices]
    return [np.ascontiguousarray(i) for i in indices]


def _initial_values(sets: list[Variables]):
    for s in sets:
        value = s.initial
        if hasattr(value, "detach"):
            value = value.detach()
        elif hasattr(value, "_arrays") and hasattr(value._arrays[0], "detach"):
            value = type(value)._trusted(*(a.detach() for a in value._arrays))
        yield value


def _check_initial(problem: Problem, parts, cost: float) -> None:
    """The SPEC's bad input: a residual of the wrong shape or not finite names the cost."""
    for c, (_, r, _) in zip(problem.costs, parts):
        if r.ndim != 2 or r.shape[0] != c.count:
            raise ValueError(
                f"xform.optim.solve: cost {c.name!r} returned residuals of shape {r.shape}; "
                f"expected ({c.count}, r): one row per instance"
            )
        finite = np.isfinite(r).all(axis=-1)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            variables = ", ".join(
                f"{sel.variables.name}[{int(idx[bad])}]"
                for sel, idx in zip(c.selections, c.instance_indices)
            )
            raise ValueError(
                f"xform.optim.solve: cost {c.name!r} has a non-finite residual at the initial "
                f"values (instance {bad}, of {variables}): {r[bad]}"
            )


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
