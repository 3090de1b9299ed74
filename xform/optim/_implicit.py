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

from .. import _frameworks, manifold
from .._interop import to_numpy
from ..groups import LieGroup
from ._linearise import gather, plan
from ._problem import Problem, arrays_of, first_array, is_concrete


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
    """PyTorch: an input requires grad. JAX: an input is traced (a transform differentiates
    only what it traces; the custom VJP's call costs a few milliseconds, a tenth of a
    small pose graph's solve). NumPy: never."""
    framework = _frameworks.FRAMEWORKS[problem.framework]
    if not framework.differentiates:
        return False
    if framework.traces:
        return not all(_frameworks.concrete(leaf) for leaf in _Inputs(problem).leaves)
    return any(_requires_grad(s.initial) for s in problem.variable_sets) or any(
        _requires_grad(c.data) for c in problem.costs
    )


def _requires_grad(tree) -> bool:
    """Whether a leaf of `tree` (as `_flatten` walks it) requires grad: its walk without
    the rebuilding closures, at every solve."""
    if isinstance(tree, (list, tuple)):
        return any(_requires_grad(t) for t in tree)
    return any(getattr(a, "requires_grad", False) and _floating(a) for a in arrays_of(tree))


class _Inputs:
    """The differentiable inputs of a problem, flat: every cost's data leaves, then every
    variable set's arrays; and how to make a copy of the problem holding others."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.data = [_flatten(c.data) for c in problem.costs]
        self.values = [arrays_of(s.initial) for s in problem.variable_sets]
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


# --- the backward pass, framework-generic --------------------------------------------------


class Backward:
    """The implicit VJP of a solved problem: `__call__(cotangents of the solution's arrays)
    -> cotangents of the inputs' leaves`."""

    def __init__(self, problem: Problem, inputs: _Inputs, solution, kind: str,
                 on_device: bool = False):  # fmt: skip
        self.problem, self.inputs, self.kind = problem, inputs, kind
        self.on_device = on_device  # as the solve was: H block-sparse in the framework
        self.framework = _frameworks.FRAMEWORKS[kind]
        self.xp = self.framework.namespace()
        self.solution = solution  # values per set, at the optimum
        self.batched = problem.batch is not None
        self.free = [~s.fixed for s in problem.variable_sets]
        self.plans = [plan(c, self.free) for c in problem.costs]
        from ._layout import Layout

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
        xp = self.xp
        gathered = [gather(values[s.set_index], i, self.batched) for s, i in zip(p.slots, indices)]
        moved = [manifold.rplus(v, d) for v, d in zip(gathered, deltas)]
        r = p.residual_fn(*moved, *data)
        s = (r * r).sum(-1)
        if p.loss is None:
            return 0.5 * s.sum()
        rho, _ = p.loss.evaluate(s, xp)
        return 0.5 * rho.sum()

    def _indices(self, cost, like):
        return [self.framework.indices(np.asarray(i), like) for i in cost.instance_indices]

    def _zeros(self, p, values, indices):
        out = []
        for s, i in zip(p.slots, indices):
            v = gather(values[s.set_index], i, self.batched)
            lead = tuple(v.shape) if isinstance(v, LieGroup) else tuple(v.shape[:-1])
            like = first_array(v)
            dtype = _frameworks.float_name(like.dtype)
            out.append(self.framework.zeros((*lead, s.tangent_dim), dtype, like))
        return out

    def hessian_blocks(self, values, data_per_cost):
        """Per cost: (..., k, D, D), D the sum of its slots' tangent sizes."""
        xp = self.xp
        blocks = []
        for cost, p, data in zip(self.problem.costs, self.plans, data_per_cost):
            like = first_array(values[0])
            indices = self._indices(cost, like)
            zeros = self._zeros(p, values, indices)
            total = sum(z.shape[-1] for z in zeros)

            def gradient(*deltas, p=p, data=data, indices=indices):
                return self._grad(
                    lambda *moved: self._cost_of(p, values, data, indices, moved), deltas
                )

            eye = self.framework.constant(np.eye(total), like)
            basis, start = [], 0
            for z in zeros:
                d = z.shape[-1]
                shape = (total, *([1] * (z.ndim - 1)), d)
                basis.append(
                    xp.broadcast_to(eye[:, start : start + d].reshape(shape), (total, *z.shape))
                )
                start += d
            # a tuple over slots of (total, ..., d)
            columns = self.framework.pushforward(gradient, tuple(zeros), tuple(basis))
            joined = self.framework.concatenate(list(columns), -1)  # (total, ..., k, D)
            blocks.append(xp.moveaxis(joined, 0, -1))  # (..., k, D, D)
        return blocks

    def _grad(self, function, deltas):
        return self.framework.gradient(function, tuple(range(len(deltas))))(*deltas)

    def solve(self, blocks, v):
        """w with H w = v over the free unknowns: (N,) or, batched, (B, N)."""
        n = self.layout.size
        if not (self.batched or self.on_device) and self._host(v):
            from ._sparse import cost_pattern, make_solver, slot_blocks

            pattern, slots = cost_pattern(
                n,
                [slot_blocks(c, cost.count) for cost, c in zip(self.problem.costs, self.columns)],
            )
            values = pattern.assemble(
                np.concatenate(slots), np.concatenate([to_numpy(b).ravel() for b in blocks])
            )
            rhs = to_numpy(v)
            try:
                w = make_solver(pattern, None)(values, rhs)
            except ArithmeticError:
                w = _least_squares(pattern.dense(values), rhs)
            return w
        return self._solve_on_device(blocks, v)

    def _solve_on_device(self, blocks, v):
        """The device back end's block-sparse H (never N x N but where small) and its
        linear solve; where H is singular (a free gauge), the least-squares solution."""
        from ._device import DENSE_UP_TO
        from ._normal import NormalStructure
        from ._pcg import pcg

        xp, framework = self.xp, self.framework
        batch = v.shape[0] if self.batched else 1
        structure = NormalStructure(self.problem, self.plans, None)
        products = {}
        for c, (b, p) in enumerate(zip(blocks, self.plans)):
            moving = _moving_columns(p)
            if len(moving):
                index = framework.indices(moving, b)
                b = b.reshape(batch, *b.shape[-3:])[:, :, index][..., index]
                products[c] = b
        rhs = v.reshape(batch, -1)
        if not products:
            return 0.0 * v
        dense = structure.size <= DENSE_UP_TO
        like = next(iter(products.values()))
        tables = {k: framework.indices(t, like) for k, t in structure.tables(dense).items()}
        matrix, _ = structure.assemble_blocks(products, None, framework, tables)
        if dense:
            dense = matrix.dense()
            w = framework.cholesky_solve(dense, rhs)
            w = xp.where(xp.isfinite(w), w, (xp.linalg.pinv(dense) @ rhs[..., None])[..., 0])
        else:
            w = pcg(matrix, rhs)
        return w if self.batched else w[0]

    def _host(self, v) -> bool:
        """Whether the CPU's sparse solve serves: concrete values on the CPU, SciPy there."""
        from ._installed import installed

        return is_concrete(v) and _on_cpu(v) and installed("scipy")

    def tangent_cotangent(self, cotangents):
        """v = dL/d delta over the free unknowns, from the cotangents of every set's arrays,
        and the cotangents of the fixed variables' arrays (passed through)."""
        framework = self.framework
        like = first_array(self.solution[0])
        batch = like.shape[0] if self.batched else 1
        n = self.layout.size
        v = framework.zeros((batch, n + 1), _frameworks.float_name(like.dtype), like)
        for s, value, cot in zip(self.problem.variable_sets, self.solution, cotangents):
            lead = tuple(value.shape) if isinstance(value, LieGroup) else tuple(value.shape[:-1])
            zero = framework.zeros((*lead, s.tangent_dim), _frameworks.float_name(like.dtype), like)

            def fields(delta, value=value):
                return arrays_of(manifold.rplus(value, delta))

            tangent = framework.pullback(fields, zero, tuple(cot))  # (..., n_s, d)
            index = self.layout.columns(s, np.arange(s.count))  # (n_s, d)
            index = np.where(index >= 0, index, n).ravel()
            flat = tangent.reshape(batch, 1, -1)
            v = v + framework.segment_sum(flat.mT, framework.indices(index, like), n + 1)[..., 0]
        v = v[:, :n]
        return v if self.batched else v[0]

    def input_cotangents(self, w, leaves):
        """-d<w, g>/d(leaves) for every input leaf (data and variables' arrays); the
        variables' arrays are the solution's (their free entries get zero)."""
        n = self.layout.size
        padded = self.framework.concatenate([w, 0.0 * w[..., :1]], -1)
        problem = self.problem
        inputs = self.inputs
        n_data = sum(len(a) for a, _ in inputs.data)
        solution_leaves = [a for value in self.solution for a in arrays_of(value)]

        def pairing(*all_leaves):
            data, _ = inputs.split(list(all_leaves[:n_data]) + solution_leaves)
            values = []
            start = n_data
            for value in self.solution:
                count = len(arrays_of(value))
                values.append(_rebuild(value, list(all_leaves[start : start + count])))
                start += count
            total = 0.0
            for cost, p, d, cols in zip(problem.costs, self.plans, data, self.columns):
                like = first_array(values[0])
                indices = self._indices(cost, like)
                zeros = self._zeros(p, values, indices)
                grads = self._grad(
                    lambda *deltas, p=p, d=d, indices=indices: self._cost_of(
                        p, values, d, indices, deltas
                    ),
                    zeros,
                )
                for grad, c in zip(grads, cols):
                    index = self.framework.indices(np.where(c >= 0, c, n), like)
                    weight = padded[..., index] if self.batched else padded[index]
                    total = total + (grad * weight).sum()
            return -total

        arguments = list(leaves[:n_data]) + solution_leaves
        grads = self.framework.gradient(pairing, tuple(range(len(arguments))))(*arguments)
        return list(grads)

    def __call__(self, cotangents_per_set, leaves):
        """Cotangents of every input leaf."""
        data_per_cost = self.inputs.split(leaves)[0]
        blocks = self.hessian_blocks(self.solution, data_per_cost)
        v = self.tangent_cotangent(cotangents_per_set)
        w = self.solve(blocks, v)
        if isinstance(w, np.ndarray) and not isinstance(v, np.ndarray):
            w = self.framework.constant(w, v)
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
                keep = self.framework.constant(mask, total) > 0.5
                out.append(self.xp.where(keep, total, 0.0 * total))
            position += len(cot)
        return out


def _on_cpu(array) -> bool:
    device = _frameworks.of(array).device(array)
    return device is None or device == "cpu"


def _moving_columns(p) -> np.ndarray:
    """The columns of a cost's all-slot blocks that belong to its free slots."""
    columns, start = [], 0
    for slot in p.slots:
        if slot.differentiate:
            columns.extend(range(start, start + slot.tangent_dim))
        start += slot.tangent_dim
    return np.asarray(columns, dtype=np.int64)


def _least_squares(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """The minimum-norm solution where the Hessian is singular (a free gauge): the
    derivative of what the gauge does not move."""
    return np.linalg.lstsq(matrix, rhs, rcond=None)[0]


# --- the differentiable solve, through the framework's custom-derivative rule ---------------


def differentiable_solve(problem: Problem, settings, eliminate, run, on_device):
    """`run`'s solution, differentiable by the framework's own custom-derivative rule
    (`torch.autograd.Function`, `jax.custom_vjp`) with the implicit VJP of `Backward`, on
    the back end the solve took (`on_device(problem, settings)`). The
    rule's outputs are the solution's arrays, then the cost, the iterations, whether it
    converged and the solves (not differentiable: as outputs, they leave a JAX trace as
    arrays)."""
    framework = _frameworks.FRAMEWORKS[problem.framework]
    if not framework.differentiates:
        return run(problem, settings, eliminate)
    inputs = _Inputs(problem)
    set_sizes = [len(a) for a in inputs.values]
    count = sum(set_sizes)
    holder = {}

    def forward(*leaves):
        result = run(inputs.substituted(list(leaves)), settings, eliminate)
        holder["result"] = result
        outputs = [a for value in result.solution for a in arrays_of(value)]
        extras = [_extra(v, outputs[0], framework)
                  for v in (result.cost, result.iterations, result.converged,
                            result.solves)]  # fmt: skip
        return (*outputs, *extras)

    def backward(leaves, outputs, cotangents):
        twin = inputs.substituted(list(leaves))
        solution = _per_set(twin.variable_sets, set_sizes, outputs,
                            lambda s, arrays: _rebuild(s.initial, arrays))  # fmt: skip
        per_set = _per_set(twin.variable_sets, set_sizes, cotangents, lambda _, arrays: arrays)
        device = on_device(twin, settings)
        return Backward(twin, _Inputs(twin), solution, framework.name, device)(per_set,
                                                                              list(leaves))

    outputs = framework.custom_vjp(forward, backward, count)(*inputs.leaves)
    result = holder["result"]
    result.solution = _per_set(result.solution, set_sizes, outputs,
                               lambda value, arrays: _rebuild(value, arrays))  # fmt: skip
    cost, iterations, converged, solves = outputs[count : count + 4]
    if not is_concrete(result.cost):  # the run's own values left with its trace: the rule's
        result.cost, result.iterations, result.converged = cost, iterations, converged > 0.5
        result.solves = solves
    return result


def _extra(value, like, framework):
    """A number or array of the result as a floating array of `like`'s framework."""
    if _frameworks.concrete(value):
        value = np.asarray(
            _frameworks.NUMPY.convert(value) if _frameworks.of(value) else value, np.float64
        )
    return framework.constant(value, like)


def _per_set(sets, sizes, arrays, make):
    """`make(set, its arrays)` for each set, the flat `arrays` split by the sets' sizes."""
    out, start = [], 0
    for s, size in zip(sets, sizes):
        out.append(make(s, list(arrays[start : start + size])))
        start += size
    return out
