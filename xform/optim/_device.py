"""Gauss-Newton and Levenberg-Marquardt in the framework itself: dense normal equations
assembled by a scatter-add, a batched dense Cholesky (or preconditioned conjugate
gradients), nothing leaves the device. This path serves CUDA inputs, many independent
problems of one structure (`Problem(batch=B)` in PyTorch; `jax.vmap` of `optim.solve` in
JAX), and JAX transforms: in JAX the whole iteration is one `lax.while_loop`, jitted.

Internally every array has a leading batch axis (1 for a single problem), and every
problem of the batch keeps its own damping, acceptance and stopping state; a finished
problem is frozen while the others go on. The LM rule is the CPU path's (`_host.py`).
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from .. import manifold
from ..groups import LieGroup
from ._device_arrays import (
    _cholesky_solve,
    _choose,
    _diag_embed,
    _select_columns,
    _select_values,
    _transpose,
)
from ._host import Layout, Settings, _initial_values, _maximum, _minimum
from ._linearise import Namespace, lineariser, plan
from ._problem import Problem
from ._result import Result, Timings

# status codes of each problem
RUNNING, DECREASE, STEP, GRADIENT, ZERO, LIMIT, SINGULAR = range(7)
REASONS = {
    RUNNING: "running",
    DECREASE: "relative decrease below tolerance",
    STEP: "step norm below tolerance",
    GRADIENT: "gradient norm below tolerance",
    ZERO: "the cost is zero",
    LIMIT: "iteration limit reached",
    SINGULAR: "the normal equations are singular",
}
# Unknowns above which "pcg" is the default (a dense factorisation's memory grows as N^2).
DENSE_UP_TO = 4096


class Structure:
    """What does not change between iterations, as index arrays: each cost's columns in
    the unknowns, where its J^T J entries and J^T r entries land in the flattened dense H
    (N*N, plus a dropped slot) and g, and each set's tangent positions in the step."""

    def __init__(self, problem: Problem):
        sets = problem.variable_sets
        self.layout = layout = Layout(sets, None)
        n = self.size = layout.size
        self.free = [~s.fixed for s in sets]
        self.plans = tuple(plan(c, self.free) for c in problem.costs)
        self.h_index, self.g_index = [], []
        for cost, p in zip(problem.costs, self.plans):
            cols = [
                layout.columns(sel.variables, idx)
                for sel, idx, slot in zip(cost.selections, cost.instance_indices, p.slots)
                if slot.differentiate
            ]
            c = np.concatenate(cols, axis=1) if cols else np.zeros((cost.count, 0), np.int64)
            valid = (c[:, :, None] >= 0) & (c[:, None, :] >= 0)
            self.h_index.append(np.where(valid, c[:, :, None] * n + c[:, None, :], n * n).ravel())
            self.g_index.append(np.where(c >= 0, c, n).ravel())
        self.step_index = []
        for s in sets:
            positions = layout.columns(s, np.arange(s.count))  # (n_s, d), -1 fixed
            self.step_index.append(np.where(positions >= 0, positions, n).ravel())


def _expand(value, kind):
    """A leading batch axis of 1."""
    if isinstance(value, LieGroup):
        return type(value)._trusted(*(a[None] for a in value._arrays))
    return value[None]


def _tree_expand(tree, kind):
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tree_expand(t, kind) for t in tree)
    if isinstance(tree, dict):
        return {k: _tree_expand(v, kind) for k, v in tree.items()}
    if isinstance(tree, LieGroup) or hasattr(tree, "shape"):
        return _expand(tree, kind)
    return tree


def _squeeze(value):
    if isinstance(value, LieGroup):
        return type(value)._trusted(*(a[0] for a in value._arrays))
    return value[0]


class Machine:
    """One LM (or GN) iteration on a batch, in the framework's arrays (`xp`)."""

    def __init__(self, problem: Problem, settings: Settings, kind: str):
        self.kind, self.xp = kind, Namespace(kind)
        self.settings = settings
        self.structure = s = Structure(problem)
        self.sets = problem.variable_sets
        self.linearise_costs = lineariser(s.plans, kind, True) if kind != "jax" else None
        self.jax_plans = s.plans
        self.solver = settings.solver or ("cholesky" if s.size <= DENSE_UP_TO else "pcg")
        self._parts_shape = [(None, None, p.columns > 0) for p in s.plans]
        self.lowers = [v.lower for v in self.sets]
        self.uppers = [v.upper for v in self.sets]

    def _index(self, array: np.ndarray, like):
        xp = self.xp
        if self.kind == "torch":
            import torch

            return torch.from_numpy(np.array(array)).to(like.device)
        return xp.asarray(array)

    def linearise(self, values, indices, data):
        """(cost, normal, g, parts): `normal` the normal equations, `(H,)` dense, or for
        "pcg" `(diag(H), J_1, ...)`: conjugate gradients need only products with `H`,
        formed from the Jacobians (memory as the Jacobians', not N^2)."""
        xp, s, n = self.xp, self.structure, self.structure.size
        if self.kind == "jax":
            from ._linearise import linearise_cost

            parts = [
                linearise_cost(p, values, i, d, "jax", True)
                for p, i, d in zip(s.plans, indices, data)
            ]
        else:
            parts = self.linearise_costs(values, indices, data)
        like = parts[0][1]
        batch = like.shape[0]
        cost = sum(p[0] for p in parts)
        g = xp.zeros_like_shape((batch, n + 1), like)
        dense = self.solver != "pcg"
        h = xp.zeros_like_shape((batch, (n * n if dense else n) + 1), like)
        jacobians = []
        for (_, r, j), h_index, g_index in zip(parts, s.h_index, s.g_index):
            if j is None:
                continue
            jt = _transpose(j, self.kind)
            g = self._scatter(g, g_index, (jt @ r[..., None]).reshape(batch, -1))
            if dense:
                h = self._scatter(h, h_index, (jt @ j).reshape(batch, -1))
            else:
                h = self._scatter(h, g_index, (j * j).sum(-2).reshape(batch, -1))
                jacobians.append(j)
        if dense:
            return cost, (h[:, : n * n].reshape(batch, n, n),), g[:, :n], parts
        return cost, (h[:, :n], *jacobians), g[:, :n], parts

    def _scatter(self, target, index, values):
        if self.kind == "torch":
            return target.index_add(1, self._index(index, target), values)
        return target.at[:, index].add(values)

    def _diagonal(self, normal):
        if self.solver == "pcg":
            return normal[0]
        h = normal[0]
        return self.xp.diagonal(h, 0, -2, -1) if self.kind == "jax" else h.diagonal(0, -2, -1)

    def _product(self, normal, v):
        """H v, per problem."""
        if self.solver != "pcg":
            return (normal[0] @ v[..., None])[..., 0]
        xp, s, n = self.xp, self.structure, self.structure.size
        batch = v.shape[0]
        padded = xp.concatenate([v, 0.0 * v[:, :1]], 1)
        out = 0.0 * padded
        indices = [gi for (_, _, j), gi in zip(self._parts_shape, s.g_index) if j]
        for j, g_index in zip(normal[1:], indices):
            k, r, d = j.shape[-3:]
            index = self._index(g_index, v)
            vk = padded[:, index].reshape(batch, k, d)
            jv = (j @ vk[..., None])[..., 0]
            jtjv = (_transpose(j, self.kind) @ jv[..., None])[..., 0]
            out = self._scatter(out, g_index, jtjv.reshape(batch, -1))
        return out[:, :n]

    def solve(self, normal, g, damping):
        """The damped step and whether it is finite, per problem."""
        xp = self.xp
        diagonal = self._diagonal(normal)
        largest = (
            diagonal.max(-1, keepdims=True)
            if self.kind == "jax"
            else diagonal.amax(-1, keepdim=True)
        )
        scale = xp.maximum(diagonal, 1e-12 * xp.maximum(largest, 1e-300 + 0 * largest))
        if self.solver == "pcg":
            step = self._pcg(normal, g, damping[:, None] * scale, diagonal)
        else:
            damped = normal[0] + _diag_embed(damping[:, None] * scale, self.kind)
            step = _cholesky_solve(damped, -g, self.kind)
        finite = xp.isfinite(step).all(-1)
        step = xp.where(finite[:, None], step, 0.0 * g)
        return step, finite, scale

    def _pcg(self, normal, g, extra, diagonal, iterations: int = 500, tolerance: float = 1e-10):
        """Conjugate gradients on (H + diag(extra)) x = -g, Jacobi-preconditioned, batched
        (each problem stops updating once its residual is below `tolerance` of |g|); in JAX
        a `lax.while_loop`."""
        xp = self.xp
        a_diag = diagonal + extra
        inverse = 1.0 / xp.where(a_diag > 0, a_diag, 1.0)

        def apply(v):
            return self._product(normal, v) + extra * v

        bound = tolerance * tolerance * (g * g).sum(-1)

        def step(state):
            x, r, p, rz = state
            active = (r * r).sum(-1) > bound
            ap = apply(p)
            denominator = (p * ap).sum(-1)
            ok = active & (denominator > 0)
            alpha = xp.where(ok, rz / xp.where(ok, denominator, 1.0), 0.0)
            x = x + alpha[:, None] * p
            r = r - alpha[:, None] * ap
            z = inverse * r
            rz_next = (r * z).sum(-1)
            beta = xp.where(ok & (rz > 0), rz_next / xp.where(rz > 0, rz, 1.0), 0.0)
            p = xp.where(ok[:, None], z + beta[:, None] * p, p)
            return x, r, p, xp.where(ok, rz_next, rz)

        x = 0.0 * g
        r = -g
        z = inverse * r
        state = (x, r, z, (r * z).sum(-1))
        limit = min(iterations, g.shape[-1] + 1)
        if self.kind == "jax":
            import jax

            def cond(carry):
                count, (_, r, _, _) = carry
                return (count < limit) & ((r * r).sum(-1) > bound).any()

            _, state = jax.lax.while_loop(cond, lambda c: (c[0] + 1, step(c[1])), (0, state))
            return state[0]
        for _ in range(limit):
            state = step(state)
            if not bool(((state[1] * state[1]).sum(-1) > bound).any()):
                break
        return state[0]

    def retract(self, values, step, bounds=None):
        """`rplus` of every set by its part of the step; bounds `(lowers, uppers)` (the
        problem's unless given: the jitted loop takes them as arguments)."""
        xp, s = self.xp, self.structure
        lowers, uppers = bounds if bounds is not None else (self.lowers, self.uppers)
        padded = xp.concatenate([step, 0.0 * step[:, :1]], 1)
        moved = []
        for v, index, free, lower, upper in zip(values, s.step_index, s.free, lowers, uppers):
            if not free.any():
                moved.append(v)
                continue
            d = self.sets[len(moved)].tangent_dim
            delta = padded[:, self._index(index, step)].reshape(step.shape[0], -1, d)
            new = manifold.rplus(v, delta)
            if isinstance(new, LieGroup):
                new = new.normalize()
            else:
                if lower is not None:
                    new = _maximum(new, lower, self.kind)
                if upper is not None:
                    new = _minimum(new, upper, self.kind)
            if not free.all():
                new = _select_columns(free, new, v, self.kind)
            moved.append(new)
        return moved


def solve_on_device(problem: Problem, settings: Settings, eliminate) -> Result:
    kind = problem.framework
    machine = Machine(problem, settings, kind)
    batched = problem.batch is not None
    values = list(_initial_values(problem.variable_sets))
    data = [c.data for c in problem.costs]
    if not batched:
        values = [_expand(v, kind) for v in values]
        data = [_tree_expand(d, kind) for d in data]
    like = values[0]._arrays[0] if isinstance(values[0], LieGroup) else values[0]
    indices = [
        [machine._index(np.asarray(i), like) for i in c.instance_indices] for c in problem.costs
    ]
    if machine.structure.size == 0:
        raise ValueError("xform.optim.solve: every variable is fixed")
    if kind == "jax":
        run = _jax_loop(machine, settings)
        out = run(values, indices, data, (machine.lowers, machine.uppers))
        values, cost, iterations, status, solves = out
        timings = Timings()
        history = []
    else:
        values, cost, iterations, status, solves, history, timings = _torch_loop(
            machine, settings, values, indices, data
        )
    converged = (status != LIMIT) & (status != SINGULAR) & (status != RUNNING)
    reason = _reason(status)
    if not batched:
        values = [_squeeze(v) for v in values]
        cost, iterations, converged, status = cost[0], iterations[0], converged[0], status[0]
        history = [h[0] for h in history]
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


def _reason(status) -> str:
    from ._problem import is_concrete

    if not is_concrete(status):
        return "traced: read result.converged"
    codes = np.asarray(status.detach().cpu() if hasattr(status, "detach") else status).ravel()
    counts = {REASONS[int(c)]: int((codes == c).sum()) for c in np.unique(codes)}
    if len(codes) == 1:
        return next(iter(counts))
    return "; ".join(f"{reason}: {count}/{len(codes)}" for reason, count in counts.items())


def _step_rule(xp, settings, cost, trial_cost, step, finite, scale, damping, growth, g, kind):
    """The LM bookkeeping per problem: (accept, new damping, new growth, status)."""
    lm = settings.method == "lm"
    predicted = 0.5 * (step * (damping[:, None] * scale * step - g)).sum(-1)
    actual = cost - trial_cost
    trial_finite = xp.isfinite(trial_cost) & finite
    # as on the host: a decrease within the cost's rounding is taken on the model's word
    rounding = 16.0 * float(xp.finfo(cost.dtype).eps) * cost
    unmeasurable = (predicted <= rounding) & (xp.abs(actual) <= rounding)
    accept = trial_finite & ((actual > 0) | unmeasurable if lm else True)
    measured = (predicted > 0) & ~unmeasurable
    ratio = xp.where(measured, actual / xp.where(measured, predicted, 1.0), 1.0)
    factor = xp.maximum(1.0 / 3.0 + 0.0 * ratio, 1.0 - (2.0 * ratio - 1.0) ** 3)
    if lm:
        new_damping = xp.where(
            accept, damping * factor, xp.maximum(damping, 1e-12 + 0.0 * damping) * growth
        )
        new_growth = xp.where(accept, 2.0 + 0.0 * growth, growth * 2.0)
    else:
        new_damping, new_growth = damping, growth
    norm = xp.sqrt((step * step).sum(-1))
    status = xp.where(
        trial_finite & (xp.abs(actual) < settings.relative_decrease * cost),
        DECREASE,
        xp.where(finite & (norm < settings.step_norm), STEP, RUNNING),
    )
    if not lm:
        status = xp.where(finite, status, SINGULAR)
    return accept, new_damping, new_growth, status


def _before_step_status(xp, settings, cost, g, iterations):
    """The stopping rules checked before a step: a zero cost, a small gradient, the limit."""
    status = xp.where(cost == 0, ZERO, RUNNING)
    if settings.gradient_norm > 0:
        largest = xp.abs(g).max(-1) if xp.kind == "jax" else g.abs().amax(-1)
        status = xp.where(
            (status == RUNNING) & (largest <= settings.gradient_norm), GRADIENT, status
        )
    return xp.where((status == RUNNING) & (iterations >= settings.max_iterations), LIMIT, status)


def _torch_loop(machine: Machine, settings: Settings, values, indices, data):
    import torch

    xp = machine.xp
    timings = Timings()
    tick = time.perf_counter()
    cost, h, g, parts = machine.linearise(values, indices, data)
    timings.residuals += time.perf_counter() - tick
    batch = cost.shape[0]
    damping = torch.full_like(cost, settings.damping if settings.method == "lm" else 0.0)
    growth = torch.full_like(cost, 2.0)
    iterations = torch.zeros(batch, dtype=torch.int64, device=cost.device)
    status = torch.zeros(batch, dtype=torch.int64, device=cost.device)
    history = [cost]
    solves = 0
    max_solves = 10 * settings.max_iterations + 50
    while solves < max_solves:
        before = _before_step_status(xp, settings, cost, g, iterations)
        status = torch.where(status == RUNNING, before, status)
        running = status == RUNNING
        count = int(running.sum())
        if not count:
            break
        # Problems stop at different iterations (IK: most of a batch at its first ten, a
        # few at the limit): once a quarter have, a step works on those still running only.
        rows = None if count > 0.75 * batch else running.nonzero()[:, 0]
        here = _Rows(rows, batch)
        tick = time.perf_counter()
        current_h, current_g, current_cost = here.take(h), here.take(g), here.take(cost)
        current_damping, current_growth = here.take(damping), here.take(growth)
        step, finite, scale = machine.solve(current_h, current_g, current_damping)
        if rows is None:
            step = torch.where(running[:, None], step, 0.0 * step)
        timings.solve += time.perf_counter() - tick
        tick = time.perf_counter()
        current = here.take(values)
        trial = machine.retract(current, step)
        timings.other += time.perf_counter() - tick
        tick = time.perf_counter()
        trial_cost, trial_h, trial_g, _ = machine.linearise(trial, indices, here.take(data))
        timings.residuals += time.perf_counter() - tick
        accept, damping_new, growth_new, step_status = _step_rule(
            xp, settings, current_cost, trial_cost, step, finite, scale,
            current_damping, current_growth, current_g, "torch",
        )  # fmt: skip
        active = here.take(running)
        accept = accept & active
        values = here.put(
            values, [_select_values(accept, t, v, "torch") for t, v in zip(trial, current)]
        )
        cost = here.put(cost, torch.where(accept, trial_cost, current_cost))
        h = here.put(h, _choose(accept, trial_h, current_h, "torch"))
        g = here.put(g, torch.where(accept[:, None], trial_g, current_g))
        damping = here.put(damping, torch.where(active, damping_new, current_damping))
        growth = here.put(growth, torch.where(active, growth_new, current_growth))
        iterations = iterations + here.put(torch.zeros_like(iterations), accept.long())
        current_status = here.take(status)
        status = here.put(
            status,
            torch.where(active & (step_status != RUNNING), step_status, current_status),
        )
        solves += 1
        history.append(cost)
    status = torch.where(status == RUNNING, LIMIT, status)
    return values, cost, iterations, status, solves, history, timings


class _Rows:
    """Some problems of a batch (`rows`, or all where None): `take` their part of arrays,
    group batches, and trees of them (data arrays without the batch axis kept whole);
    `put` a part back into a copy of the whole."""

    def __init__(self, rows, batch: int):
        self.rows, self.batch = rows, batch

    def take(self, tree):
        if self.rows is None:
            return tree
        if isinstance(tree, (list, tuple)):
            return type(tree)(self.take(t) for t in tree)
        if isinstance(tree, dict):
            return {k: self.take(v) for k, v in tree.items()}
        if isinstance(tree, LieGroup):
            return type(tree)._trusted(*(self.take(a) for a in tree._arrays))
        if not hasattr(tree, "shape") or tree.ndim == 0 or tree.shape[0] != self.batch:
            return tree
        if isinstance(tree, np.ndarray):
            return tree[self.rows.cpu().numpy()]
        return tree.index_select(0, self.rows)

    def put(self, whole, part):
        if self.rows is None:
            return part
        if isinstance(whole, (list, tuple)):
            return type(whole)(self.put(w, p) for w, p in zip(whole, part))
        if isinstance(whole, LieGroup):
            return type(whole)._trusted(
                *(self.put(w, p) for w, p in zip(whole._arrays, part._arrays))
            )
        return whole.index_copy(0, self.rows, part)


_JAX_LOOPS: dict = {}


def _jax_loop(machine: Machine, settings: Settings):
    """The jitted loop, cached on the problem's structure and the settings (a second
    problem of the same structure, e.g. the next batch of IK targets, compiles nothing)."""
    s = machine.structure
    key = (
        s.plans,
        tuple(
            (v.group, v.count, v.tangent_dim, v.fixed.tobytes(), v.lower is None, v.upper is None)
            for v in machine.sets
        ),
        hashlib.sha1(b"".join(i.tobytes() for i in s.g_index)).hexdigest(),
        (
            settings.method,
            settings.max_iterations,
            settings.relative_decrease,
            settings.step_norm,
            settings.gradient_norm,
            settings.damping,
            machine.solver,
        ),
    )
    if key not in _JAX_LOOPS:
        if len(_JAX_LOOPS) > 32:
            _JAX_LOOPS.clear()
        _JAX_LOOPS[key] = _make_jax_loop(machine, settings)
    return _JAX_LOOPS[key]


def _make_jax_loop(machine: Machine, settings: Settings):
    import jax
    import jax.numpy as jnp

    xp = machine.xp
    max_solves = 10 * settings.max_iterations + 50

    def run(values, indices, data, bounds):
        cost, h, g, _ = machine.linearise(values, indices, data)
        batch = cost.shape[0]
        damping = jnp.full_like(cost, settings.damping if settings.method == "lm" else 0.0)
        growth = jnp.full_like(cost, 2.0)
        iterations = jnp.zeros(batch, jnp.int32)
        status = jnp.zeros(batch, jnp.int32)

        def cond(state):
            _, _, _, _, _, _, _, status, solves = state
            return (solves < max_solves) & jnp.any(status == RUNNING)

        def body(state):
            values, cost, h, g, damping, growth, iterations, status, solves = state
            step, finite, scale = machine.solve(h, g, damping)
            running = status == RUNNING
            step = jnp.where(running[:, None], step, 0.0)
            trial = machine.retract(values, step, bounds)
            trial_cost, trial_h, trial_g, _ = machine.linearise(trial, indices, data)
            accept, damping_new, growth_new, step_status = _step_rule(
                xp, settings, cost, trial_cost, step, finite, scale, damping, growth, g, "jax"
            )
            accept = accept & running
            values = [_select_values(accept, t, v, "jax") for t, v in zip(trial, values)]
            cost = jnp.where(accept, trial_cost, cost)
            h = _choose(accept, trial_h, h, "jax")
            g = jnp.where(accept[:, None], trial_g, g)
            damping = jnp.where(running, damping_new, damping)
            growth = jnp.where(running, growth_new, growth)
            iterations = iterations + accept.astype(iterations.dtype)
            status = jnp.where(running & (step_status != RUNNING), step_status, status)
            before = _before_step_status(xp, settings, cost, g, iterations)
            status = jnp.where(status == RUNNING, before, status)
            return values, cost, h, g, damping, growth, iterations, status, solves + 1

        status = _before_step_status(xp, settings, cost, g, iterations)
        state = (values, cost, h, g, damping, growth, iterations, status, jnp.int32(0))
        state = jax.lax.while_loop(cond, body, state)
        values, cost, _, _, _, _, iterations, status, solves = state
        status = jnp.where(status == RUNNING, LIMIT, status)
        return values, cost, iterations, status, solves

    return jax.jit(run)
