"""Implicit differentiation at the optimum, in PyTorch (`torch.autograd.Function`) and JAX
(`jax.custom_vjp`).

At the solution `x*` the gradient of the cost in the free variables' tangents vanishes:
`g(0; theta, X) = 0`, where `g(delta) = d cost(rplus(x*, delta)) / d delta`, `theta` the
costs' data and `X` the variables' values (fixed ones are parameters too). So
`d delta* / d theta = -H^-1 dg/dtheta`, `H` the exact Hessian of the cost in `delta` at 0
(not its Gauss-Newton part: residuals need not vanish at an optimum), and for a loss `L`
of the solution, with `v = dL/d delta` (the cotangent of the solution's fields pulled back
through `rplus` at 0) and `w = H^-1 v`:

    dL/dtheta = -d<w, g(0; theta, X)>/dtheta,    dL/dX_fixed = dL/dX*_fixed - d<w, g>/dX_fixed.

`H` is assembled from per-instance blocks (forward mode over the reverse-mode gradient of
each cost in its instances' tangents: instances are independent, so one basis direction
set in every instance at once gives one column of every block) into the solver's sparse
pattern on the CPU, or densely in the framework; `<w, g>` is differentiated by reverse mode
twice. The derivative is with respect to the values the costs read, not the free
variables' initial guess (on which a converged solution does not depend: their gradient
is zero).
"""

from __future__ import annotations

import numpy as np

from .. import manifold
from ..groups import LieGroup
from ._linearise import Namespace, gather, plan
from ._problem import Problem, is_concrete, numpy_of


def _arrays(value):
    return list(value._arrays) if isinstance(value, LieGroup) else [value]


def _rebuild(like, arrays):
    return type(like)._trusted(*arrays) if isinstance(like, LieGroup) else arrays[0]


def _flatten(tree):
    """Leaves (arrays; group fields) of a data tree, and a function rebuilding it."""
    if isinstance(tree, LieGroup):
        arrays = list(tree._arrays)
        return arrays, lambda leaves: type(tree)._trusted(*leaves)
    if isinstance(tree, (list, tuple)):
        parts = [_flatten(t) for t in tree]
        sizes = [len(p[0]) for p in parts]

        def rebuild(leaves):
            out, start = [], 0
            for (_, function), size in zip(parts, sizes):
                out.append(function(leaves[start : start + size]))
                start += size
            return type(tree)(out)

        return [leaf for p in parts for leaf in p[0]], rebuild
    if hasattr(tree, "shape") and hasattr(tree, "dtype") and _floating(tree):
        return [tree], lambda leaves: leaves[0]
    return [], lambda leaves: tree  # integers, booleans, Python objects: constants


def _floating(array) -> bool:
    return str(array.dtype).removeprefix("torch.") in ("float16", "bfloat16", "float32", "float64")


def wants_gradients(problem: Problem) -> bool:
    """PyTorch: an input requires grad. JAX: always (the custom VJP costs nothing unless
    differentiated). NumPy: never."""
    kind = problem.framework
    if kind == "jax":
        return True
    if kind != "torch":
        return False
    for s in problem.variable_sets:
        if any(getattr(a, "requires_grad", False) for a in _arrays(s.initial)):
            return True
    for c in problem.costs:
        if any(getattr(a, "requires_grad", False) for a in _flatten(c.data)[0]):
            return True
    return False


class _Inputs:
    """The differentiable inputs of a problem, flat: every cost's data leaves, then every
    variable set's arrays; and how to make a copy of the problem holding others."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.data = [_flatten(c.data) for c in problem.costs]
        self.values = [_arrays(s.initial) for s in problem.variable_sets]
        self.leaves = [leaf for leaves, _ in self.data for leaf in leaves] + [
            a for arrays in self.values for a in arrays
        ]

    def split(self, leaves):
        data, start = [], 0
        for arrays, rebuild in self.data:
            data.append(rebuild(list(leaves[start : start + len(arrays)])))
            start += len(arrays)
        values = []
        for s, arrays in zip(self.problem.variable_sets, self.values):
            values.append(_rebuild(s.initial, list(leaves[start : start + len(arrays)])))
            start += len(arrays)
        return data, values

    def substituted(self, leaves) -> Problem:
        """A shallow copy of the problem (same id, same variable sets' identities) whose
        data and initial values are `leaves`."""
        import copy

        data, values = self.split(leaves)
        twin = copy.copy(self.problem)
        twin.costs = [copy.copy(c) for c in self.problem.costs]
        for cost, d in zip(twin.costs, data):
            cost.data = d
        twin.variable_sets = [copy.copy(s) for s in self.problem.variable_sets]
        for s, v in zip(twin.variable_sets, values):
            s.initial = v
        return twin


def differentiable_solve(problem: Problem, settings, eliminate, run):
    kind = problem.framework
    if kind == "torch":
        return _torch_solve(problem, settings, eliminate, run)
    if kind == "jax":
        return _jax_solve(problem, settings, eliminate, run)
    return run(problem, settings, eliminate)


# --- the backward pass, framework-generic --------------------------------------------------


class Backward:
    """The implicit VJP of a solved problem: `__call__(cotangents of the solution's arrays)
    -> cotangents of the inputs' leaves`."""

    def __init__(self, problem: Problem, inputs: _Inputs, solution, kind: str):
        self.problem, self.inputs, self.kind = problem, inputs, kind
        self.solution = solution  # values per set, at the optimum
        self.batched = problem.batch is not None
        self.free = [~s.fixed for s in problem.variable_sets]
        self.plans = [plan(c, self.free) for c in problem.costs]
        from ._host import Layout

        self.layout = Layout(problem.variable_sets, None)
        self.columns = []
        for cost, p in zip(problem.costs, self.plans):
            cols = [
                self.layout.columns(sel.variables, idx)
                for sel, idx, slot in zip(cost.selections, cost.instance_indices, p.slots)
            ]
            self.columns.append(cols)

    # the gradient of one cost in its instances' tangents (one array per slot)
    def _cost_of(self, p, values, data, indices, deltas):
        xp = Namespace(self.kind)
        gathered = [gather(values[s.set_index], i, self.batched) for s, i in zip(p.slots, indices)]
        moved = [manifold.rplus(v, d) for v, d in zip(gathered, deltas)]
        r = p.residual_fn(*moved, *data)
        s = (r * r).sum(-1)
        if p.loss is None:
            return 0.5 * s.sum()
        rho, _ = p.loss.evaluate(s, xp)
        return 0.5 * rho.sum()

    def _indices(self, cost, like):
        if self.kind == "torch":
            import torch

            return [torch.from_numpy(np.array(i)).to(like.device) for i in cost.instance_indices]
        import jax.numpy as jnp

        return [jnp.asarray(i) for i in cost.instance_indices]

    def _zeros(self, p, values, indices):
        xp = Namespace(self.kind)
        out = []
        for s, i in zip(p.slots, indices):
            v = gather(values[s.set_index], i, self.batched)
            lead = tuple(v.shape) if isinstance(v, LieGroup) else tuple(v.shape[:-1])
            out.append(xp.zeros_like_shape((*lead, s.tangent_dim), _arrays(v)[0]))
        return out

    def hessian_blocks(self, values, data_per_cost):
        """Per cost: (..., k, D, D), D the sum of its slots' tangent sizes."""
        xp = Namespace(self.kind)
        blocks = []
        for cost, p, data in zip(self.problem.costs, self.plans, data_per_cost):
            like = _arrays(values[0])[0]
            indices = self._indices(cost, like)
            zeros = self._zeros(p, values, indices)
            total = sum(z.shape[-1] for z in zeros)

            def gradient(*deltas, p=p, data=data, indices=indices):
                return self._grad(
                    lambda *moved: self._cost_of(p, values, data, indices, moved), deltas
                )

            eye = xp.eye_like(total, like)
            basis, start = [], 0
            for z in zeros:
                d = z.shape[-1]
                shape = (total, *([1] * (z.ndim - 1)), d)
                basis.append(
                    xp.broadcast_to(eye[:, start : start + d].reshape(shape), (total, *z.shape))
                )
                start += d
            columns = self._vmap_jvp(gradient, zeros, basis)  # tuple over slots of (total, ..., d)
            joined = xp.concatenate(list(columns), -1)  # (total, ..., k, D)
            blocks.append(xp.moveaxis(joined, 0, -1))  # (..., k, D, D)
        return blocks

    def _grad(self, function, deltas):
        if self.kind == "torch":
            import torch

            return torch.func.grad(function, argnums=tuple(range(len(deltas))))(*deltas)
        import jax

        return jax.grad(function, argnums=tuple(range(len(deltas))))(*deltas)

    def _vmap_jvp(self, function, primals, basis):
        if self.kind == "torch":
            import torch

            return torch.func.vmap(lambda *t: torch.func.jvp(function, tuple(primals), t)[1])(
                *basis
            )
        import jax

        return jax.vmap(lambda *t: jax.jvp(function, tuple(primals), t)[1])(*basis)

    def solve(self, blocks, v):
        """w with H w = v over the free unknowns: (N,) or, batched, (B, N)."""
        n = self.layout.size
        if not self.batched and self._host(v):
            from ._sparse import cost_pattern, make_solver, slot_blocks

            pattern, slots = cost_pattern(
                n,
                [slot_blocks(c, cost.count) for cost, c in zip(self.problem.costs, self.columns)],
            )
            values = pattern.assemble(
                np.concatenate(slots), np.concatenate([numpy_of(b).ravel() for b in blocks])
            )
            rhs = numpy_of(v)
            try:
                w = make_solver(pattern, None)(values, rhs)
            except ArithmeticError:
                w = _least_squares(pattern.dense(values), rhs)
            return w
        # dense, in the framework
        xp = Namespace(self.kind)
        like = v
        batch = v.shape[0] if self.batched else 1
        flat = xp.zeros_like_shape((batch, n * n + 1), like)
        for b, cols in zip(blocks, self.columns):
            c = np.concatenate(cols, axis=1)
            valid = (c[:, :, None] >= 0) & (c[:, None, :] >= 0)
            index = np.where(valid, c[:, :, None] * n + c[:, None, :], n * n).ravel()
            flat = self._scatter(flat, index, b.reshape(batch, -1))
        h = flat[:, : n * n].reshape(batch, n, n)
        rhs = v.reshape(batch, n)
        if self.kind == "torch":
            import torch

            w = torch.linalg.solve(h, rhs[..., None])[..., 0]
        else:
            import jax.numpy as jnp

            w = jnp.linalg.solve(h, rhs[..., None])[..., 0]
        return w if self.batched else w[0]

    def _host(self, v) -> bool:
        if not is_concrete(v):
            return False
        device = getattr(v, "device", None)
        return (
            device is None
            or "cpu" in str(getattr(device, "type", device)).lower()
            or (self.kind == "jax")
        )

    def _scatter(self, target, index, values):
        if self.kind == "torch":
            import torch

            return target.index_add(1, torch.from_numpy(np.array(index)).to(target.device), values)
        return target.at[:, index].add(values)

    def tangent_cotangent(self, cotangents):
        """v = dL/d delta over the free unknowns, from the cotangents of every set's arrays,
        and the cotangents of the fixed variables' arrays (passed through)."""
        xp = Namespace(self.kind)
        pieces = []
        like = _arrays(self.solution[0])[0]
        batch = like.shape[0] if self.batched else None
        n = self.layout.size
        v = xp.zeros_like_shape(((batch,) if batch else ()) + (n + 1,), like)
        for s, value, cot in zip(self.problem.variable_sets, self.solution, cotangents):
            lead = tuple(value.shape) if isinstance(value, LieGroup) else tuple(value.shape[:-1])
            zero = xp.zeros_like_shape((*lead, s.tangent_dim), like)

            def fields(delta, value=value):
                return tuple(_arrays(manifold.rplus(value, delta)))

            tangent = self._vjp(fields, zero, tuple(cot))  # (..., n_s, d)
            index = self.layout.columns(s, np.arange(s.count))  # (n_s, d)
            index = np.where(index >= 0, index, n).ravel()
            flat = tangent.reshape(*((batch,) if batch else ()), -1)
            if self.kind == "torch":
                import torch

                idx = torch.from_numpy(np.array(index)).to(like.device)
                v = v.index_add(-1, idx, flat)
            else:
                v = v.at[..., index].add(flat)
            pieces.append(tangent)
        return v[..., :n]

    def _vjp(self, function, primal, cotangent):
        if self.kind == "torch":
            import torch

            _, pull = torch.func.vjp(function, primal)
            return pull(cotangent)[0]
        import jax

        _, pull = jax.vjp(function, primal)
        return pull(cotangent)[0]

    def input_cotangents(self, w, leaves):
        """-d<w, g>/d(leaves) for every input leaf (data and variables' arrays); the
        variables' arrays are the solution's (their free entries get zero)."""
        xp = Namespace(self.kind)
        n = self.layout.size
        padded = xp.concatenate([w, 0.0 * w[..., :1]], -1)
        problem = self.problem
        inputs = self.inputs
        n_data = sum(len(a) for a, _ in inputs.data)
        solution_leaves = [a for value in self.solution for a in _arrays(value)]

        def pairing(*all_leaves):
            data, _ = inputs.split(list(all_leaves[:n_data]) + solution_leaves)
            values = []
            start = n_data
            for value in self.solution:
                count = len(_arrays(value))
                values.append(_rebuild(value, list(all_leaves[start : start + count])))
                start += count
            total = 0.0
            for cost, p, d, cols in zip(problem.costs, self.plans, data, self.columns):
                like = _arrays(values[0])[0]
                indices = self._indices(cost, like)
                zeros = self._zeros(p, values, indices)
                grads = self._grad(
                    lambda *deltas, p=p, d=d, indices=indices: self._cost_of(
                        p, values, d, indices, deltas
                    ),
                    zeros,
                )
                for grad, c in zip(grads, cols):
                    index = self._index(np.where(c >= 0, c, n), like)
                    weight = padded[..., index] if self.batched else padded[index]
                    total = total + (grad * weight).sum()
            return -total

        arguments = list(leaves[:n_data]) + solution_leaves
        if self.kind == "torch":
            import torch

            grads = torch.func.grad(pairing, argnums=tuple(range(len(arguments))))(*arguments)
        else:
            import jax

            grads = jax.grad(pairing, argnums=tuple(range(len(arguments))))(*arguments)
        return list(grads)

    def _index(self, array, like):
        if self.kind == "torch":
            import torch

            return torch.from_numpy(np.array(array)).to(like.device)
        return array

    def __call__(self, cotangents_per_set, leaves):
        """Cotangents of every input leaf."""
        data_per_cost = self.inputs.split(leaves)[0]
        blocks = self.hessian_blocks(self.solution, data_per_cost)
        v = self.tangent_cotangent(cotangents_per_set)
        w = self.solve(blocks, v)
        if not isinstance(w, type(v)):
            w = _like(w, v, self.kind)
        grads = self.input_cotangents(w, leaves)
        n_data = sum(len(a) for a, _ in self.inputs.data)
        out = list(grads[:n_data])
        position = n_data
        for s, cot in zip(self.problem.variable_sets, cotangents_per_set):
            fixed = s.fixed
            for field_grad, field_cot in zip(grads[position : position + len(cot)], cot):
                total = field_grad + field_cot
                mask = fixed.reshape(
                    (1,) * int(self.batched)
                    + (-1,)
                    + (1,) * (field_grad.ndim - 1 - int(self.batched))
                )
                out.append(_where(mask, total, 0.0 * total, self.kind))
            position += len(cot)
        return out


def _where(mask, a, b, kind):
    if kind == "torch":
        import torch

        return torch.where(torch.from_numpy(np.array(mask)).to(a.device), a, b)
    import jax.numpy as jnp

    return jnp.where(mask, a, b)


def _like(w: np.ndarray, v, kind):
    if kind == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(w)).to(dtype=v.dtype, device=v.device)
    import jax.numpy as jnp

    return jnp.asarray(w, dtype=v.dtype)


def _least_squares(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """The minimum-norm solution where the Hessian is singular (a free gauge): the
    derivative of what the gauge does not move."""
    return np.linalg.lstsq(matrix, rhs, rcond=None)[0]


# --- PyTorch -------------------------------------------------------------------------------


def _torch_solve(problem: Problem, settings, eliminate, run):
    import torch

    inputs = _Inputs(problem)
    holder = {}
    set_sizes = [len(a) for a in inputs.values]

    class ImplicitSolve(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *leaves):
            with torch.no_grad():
                twin = inputs.substituted([leaf.detach() for leaf in leaves])
                result = run(twin, settings, eliminate)
            holder["result"] = result
            outputs = [a.detach() for value in result.solution for a in _arrays(value)]
            ctx.save_for_backward(*leaves)
            return tuple(outputs)

        @staticmethod
        def backward(ctx, *cotangents):
            leaves = [leaf.detach() for leaf in ctx.saved_tensors]
            result = holder["result"]
            twin = inputs.substituted(leaves)
            backward = Backward(twin, _Inputs(twin), result.solution, "torch")
            per_set, start = [], 0
            for size in set_sizes:
                per_set.append(
                    tuple(
                        c if c is not None else torch.zeros_like(a)
                        for c, a in zip(
                            cotangents[start : start + size],
                            _arrays(result.solution[len(per_set)]),
                        )
                    )
                )
                start += size
            with torch.enable_grad():
                grads = backward(per_set, leaves)
            return tuple(
                g if leaf.requires_grad else None for g, leaf in zip(grads, ctx.saved_tensors)
            )

    outputs = ImplicitSolve.apply(*inputs.leaves)
    result = holder["result"]
    solution, start = [], 0
    for value, size in zip(result.solution, set_sizes):
        solution.append(_rebuild(value, list(outputs[start : start + size])))
        start += size
    result.solution = solution
    return result


# --- JAX -----------------------------------------------------------------------------------


def _jax_solve(problem: Problem, settings, eliminate, run):
    import jax
    import jax.numpy as jnp

    inputs = _Inputs(problem)
    set_sizes = [len(a) for a in inputs.values]
    holder = {}

    def forward(*leaves):
        twin = inputs.substituted(list(leaves))
        result = run(twin, settings, eliminate)
        holder["result"] = result
        outputs = [jnp.asarray(a) for value in result.solution for a in _arrays(value)]
        extras = [
            jnp.asarray(result.cost, dtype=outputs[0].dtype),
            jnp.asarray(result.iterations, dtype=outputs[0].dtype),
            jnp.asarray(result.converged, dtype=outputs[0].dtype),
        ]
        return tuple(outputs + extras)

    @jax.custom_vjp
    def solve(*leaves):
        return forward(*leaves)

    def solve_forward(*leaves):
        outputs = forward(*leaves)
        return outputs, (leaves, outputs)

    def solve_backward(saved, cotangents):
        leaves, outputs = saved
        twin = inputs.substituted(list(leaves))
        solution, start = [], 0
        for s, size in zip(twin.variable_sets, set_sizes):
            solution.append(_rebuild(s.initial, list(outputs[start : start + size])))
            start += size
        backward = Backward(twin, _Inputs(twin), solution, "jax")
        per_set, start = [], 0
        for size in set_sizes:
            per_set.append(tuple(cotangents[start : start + size]))
            start += size
        return tuple(backward(per_set, list(leaves)))

    solve.defvjp(solve_forward, solve_backward)
    outputs = solve(*inputs.leaves)
    result = holder["result"]
    solution, start = [], 0
    for value, size in zip(result.solution, set_sizes):
        solution.append(_rebuild(value, list(outputs[start : start + size])))
        start += size
    count = sum(set_sizes)
    cost, iterations, converged = outputs[count : count + 3]
    result.solution = solution
    if is_concrete(cost):
        result.cost = float(cost) if np.ndim(cost) == 0 else cost
        result.iterations = int(iterations) if np.ndim(iterations) == 0 else iterations
        result.converged = bool(converged > 0.5) if np.ndim(converged) == 0 else converged > 0.5
    else:
        result.cost, result.iterations, result.converged = cost, iterations, converged > 0.5
    return result
