"""Residuals and their exact Jacobians, all instances of a cost in one batched call.

A cost's Jacobian with respect to the right perturbation `delta_a` of each variable it reads
is taken by forward mode through xform's ops (their closed-form tangents): the residual
function of `rplus(value_a, delta_a)` is pushed forward along each tangent basis direction at
`delta = 0`, all directions at once under the framework's `vmap` (PyTorch's `torch.func`,
JAX's `jax.jvp`). Since instance `n` reads only its own variables, the basis direction `c` set
in every instance at once gives column `c` of every instance's Jacobian. A `jacobian_fn` the
user wrote replaces that.

Then the loss: `s = |r|^2`, the cost `1/2 rho(s)`, and residual and Jacobian scaled by
`sqrt(rho'(s))` (`_losses.py`). Results keep the framework; `_solve.py` takes them on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import manifold
from .._frameworks import FRAMEWORKS, float_name
from ..groups import LieGroup
from ._problem import Cost, first_array


@dataclass(frozen=True)
class Slot:
    """One variable argument of a cost: its set, tangent size, and whether its Jacobian is
    needed (some variable it selects is free)."""

    set_index: int
    tangent_dim: int
    differentiate: bool


@dataclass(frozen=True)
class CostPlan:
    """What a linearisation of one cost needs to know that does not change between
    iterations (hashable: JAX's compiled functions are cached on it)."""

    residual_fn: object
    jacobian_fn: object
    loss: object
    slots: tuple[Slot, ...]
    name: str
    count: int

    @property
    def columns(self) -> int:
        return sum(s.tangent_dim for s in self.slots if s.differentiate)


def plan(cost: Cost, free: Sequence) -> CostPlan:
    """`free[s]`: the boolean mask of free variables of set s."""
    slots = tuple(
        Slot(
            sel.variables.index,
            sel.variables.tangent_dim,
            bool(free[sel.variables.index][indices].any()),
        )
        for sel, indices in zip(cost.selections, cost.instance_indices)
    )
    return CostPlan(cost.residual_fn, cost.jacobian_fn, cost.loss, slots, cost.name, cost.count)


def _lead(value) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, LieGroup) else tuple(value.shape[:-1])


def gather(value, indices, batched: bool):
    """The selected variables: `value[indices]` (`value[:, indices]` with a batch axis)."""
    return value[:, indices] if batched else value[indices]


def residuals(plan: CostPlan, gathered: Sequence, data: tuple):
    if plan.jacobian_fn is not None:
        r, _ = plan.jacobian_fn(*gathered, *data)
        return r
    return plan.residual_fn(*gathered, *data)


def jacobian_autodiff(plan: CostPlan, gathered: Sequence, data: tuple, kind: str, lead):
    """(r (..., r), J (..., r, D)): J's columns the differentiated slots' tangents, in order;
    by reverse mode where the framework runs it cheaper (eager PyTorch: a backward pass per
    residual component), else by forward mode (a JVP per column, vectorised)."""
    framework = FRAMEWORKS[kind]
    xp = framework.namespace()
    moving = [a for a, s in enumerate(plan.slots) if s.differentiate]
    like = first_array(gathered[moving[0]])
    dtype = float_name(like.dtype)
    zeros = [
        framework.zeros((*_lead(gathered[a]), plan.slots[a].tangent_dim), dtype, like)
        for a in moving
    ]

    def moved(*deltas):
        values = list(gathered)
        for a, delta in zip(moving, deltas):
            values[a] = manifold.rplus(gathered[a], delta)
        return plan.residual_fn(*values, *data)

    def checked(*deltas):  # a residual of the wrong shape named before it is differentiated
        r = moved(*deltas)
        check_residuals(plan, r, lead)
        return r

    by_rows = framework.rows_by_reverse_mode(checked, tuple(zeros))
    if by_rows is not None:
        return by_rows  # r at zero steps: the residuals at the values themselves
    total = plan.columns
    eye = framework.constant(np.eye(total), like)
    basis, start = [], 0
    for a, zero in zip(moving, zeros):
        d = plan.slots[a].tangent_dim
        directions = eye[:, start : start + d]  # (total, d)
        shape = (total, *([1] * (zero.ndim - 1)), d)
        basis.append(xp.broadcast_to(directions.reshape(shape), (total, *zero.shape)))
        start += d
    r = plan.residual_fn(*gathered, *data)
    check_residuals(plan, r, lead)
    columns = framework.pushforward(moved, tuple(zeros), tuple(basis))
    return r, xp.moveaxis(columns, 0, -1)


def jacobian_user(plan: CostPlan, gathered: Sequence, data: tuple, kind: str, lead):
    r, jacobians = plan.jacobian_fn(*gathered, *data)
    check_residuals(plan, r, lead)
    if len(jacobians) != len(plan.slots):
        raise ValueError(
            f"xform.optim: {plan.name}'s jacobian_fn returned {len(jacobians)} Jacobians; "
            f"expected {len(plan.slots)}, one per variable argument"
        )
    chosen = []
    for a, (slot, jacobian) in enumerate(zip(plan.slots, jacobians)):
        expected = (*tuple(r.shape), slot.tangent_dim)
        if tuple(jacobian.shape) != expected:
            raise ValueError(
                f"xform.optim: {plan.name}'s jacobian_fn gave the Jacobian of argument {a} the "
                f"shape {tuple(jacobian.shape)}; expected {expected} (residual shape + "
                "tangent size)"
            )
        if slot.differentiate:
            chosen.append(jacobian)
    return r, FRAMEWORKS[kind].concatenate(chosen, -1)


def check_residuals(plan: CostPlan, r, lead: tuple[int, ...]) -> None:
    """The SPEC's bad input: a residual function whose output is not (..., k, r)."""
    shape = tuple(getattr(r, "shape", ()))
    if len(shape) != len(lead) + 1 or shape[:-1] != lead:
        expected = ", ".join(map(str, (*lead, "r")))
        raise ValueError(
            f"xform.optim: cost {plan.name!r} returned residuals of shape {shape}; expected "
            f"({expected}): one row per instance"
        )


def weigh(plan: CostPlan, r, jacobian, kind: str, costs: bool = True):
    """The loss: (cost per problem, scaled r, scaled J). The cost sums over the instance
    axis (the last but one of r): a scalar, or (batch,); without `costs`, None where no
    loss scales r (the caller sums r's squares itself, in NumPy: three eager calls
    fewer)."""
    xp = FRAMEWORKS[kind].namespace()
    if plan.loss is None and not costs:
        return None, r, jacobian
    s = (r * r).sum(-1)
    if plan.loss is None:
        return 0.5 * s.sum(-1), r, jacobian
    rho, rho1 = plan.loss.evaluate(s, xp)
    scale = xp.sqrt(rho1)
    weighted_j = None if jacobian is None else jacobian * scale[..., None, None]
    return 0.5 * rho.sum(-1), r * scale[..., None], weighted_j


def linearise_cost(
    plan: CostPlan,
    values: Sequence,
    indices: Sequence,
    data: tuple,
    kind: str,
    batched: bool,
    jacobians: bool = True,
    costs: bool = True,
):
    """(cost, r, J) of one cost at `values` (one per variable set); `costs` as `weigh`'s."""
    gathered = [gather(values[s.set_index], i, batched) for s, i in zip(plan.slots, indices)]
    lead = (*(_lead(values[0])[:1] if batched else ()), plan.count)
    if not jacobians or plan.columns == 0:
        r = residuals(plan, gathered, data)
        check_residuals(plan, r, lead)
        cost, r, _ = weigh(plan, r, None, kind, costs)
        return cost, r, None
    if plan.jacobian_fn is not None:
        r, jacobian = jacobian_user(plan, gathered, data, kind, lead)
    else:
        r, jacobian = jacobian_autodiff(plan, gathered, data, kind, lead)
    return weigh(plan, r, jacobian, kind, costs)


@functools.lru_cache(maxsize=64)
def lineariser(
    plans: tuple[CostPlan, ...], kind: str, batched: bool, jacobians: bool = True,
    costs: bool = True,
):  # fmt: skip
    """A function (values, indices, data) -> [(cost, r, J) per cost]: compiled where the
    framework compiles (JAX's jit), and kept per plans, so that a second problem of the same
    structure compiles nothing new. `costs` as `weigh`'s."""

    def run(values, indices, data):
        return [
            linearise_cost(p, values, i, d, kind, batched, jacobians, costs)
            for p, i, d in zip(plans, indices, data)
        ]

    return FRAMEWORKS[kind].jit(run)


@functools.lru_cache(maxsize=64)
def normal_blocks(plans, framework):
    """The CPU path's linearisation where the framework compiles (JAX): per cost (cost, r,
    J^T J, J^T r), the per-instance products inside the compiled function (XLA batches them
    better than NumPy's matmul of small matrices); None for J's of costs without free
    variables."""

    def run(values, indices, data):
        out = []
        for p, i, d in zip(plans, indices, data):
            cost, r, j = linearise_cost(p, values, i, d, framework.name, False, True)
            if j is None:
                out.append((cost, r, None, None))
                continue
            jt = j.mT
            out.append((cost, r, jt @ j, (jt @ r[..., None])[..., 0]))
        return out

    return framework.jit(run)
