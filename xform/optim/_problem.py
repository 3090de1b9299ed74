"""A least-squares problem: sets of variables (a batch of one group, or of Euclidean
vectors), costs over them (batched residual functions), and the variables held fixed.

Nothing is evaluated here beyond checks of what the user hands over; `_solve.py` runs it.
The conventions, stated once: a variable moves by a right perturbation,
`T <- T @ G.exp(delta)` (`manifold.rplus`; `x + delta` for a vector), so every Jacobian is
with respect to the tangent `delta` at 0. A cost's value is `1/2 sum rho(|r|^2)` over its
instances (`rho(s) = s` without a loss).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _frameworks
from ..groups import LieGroup
from ._losses import Loss

_PROBLEMS = itertools.count()


def framework_of(x) -> str | None:
    """The name of the framework of a group element, or of an array a group may hold
    ('numpy', 'torch', 'jax'), else None."""
    if isinstance(x, LieGroup):
        return x._kind
    framework = _frameworks.of(x)
    return framework.name if framework is not None and framework.holds_groups else None


def arrays_of(value) -> tuple:
    """A group element's fields, or an array alone: the arrays a value is made of."""
    return value._arrays if isinstance(value, LieGroup) else (value,)


def first_array(value):
    """A variable set's value as one array: a group's first field (its device, dtype and
    framework are the set's)."""
    return value._arrays[0] if isinstance(value, LieGroup) else value


def is_concrete(x) -> bool:
    """Whether the arrays of `x` (an array or a group element) hold values, not traced."""
    return all(_frameworks.concrete(a) for a in arrays_of(x))


def _in_dtype_of(bound, initial):
    """A bound in the values' framework in their dtype: every path compares the values
    with it at each step, and a float64 bound made float32 values float64. Bounds of
    another kind (NumPy beside PyTorch or JAX values, lists) each path converts already."""
    if bound is None:
        return None
    framework = _frameworks.of(bound)
    if framework is None or framework is not _frameworks.of(initial):
        return bound
    if bound.dtype == initial.dtype:
        return bound
    return framework.namespace().asarray(bound, dtype=initial.dtype)


class Variables:
    """A set of `n` variables of one kind, made by `Problem.variables`: a batch of a group
    (`xform.SO2`, `SE2`, `SO3`, `SE3`, `Sim3`, or any `xform.groups.LieGroup`) or of
    Euclidean vectors `(n, d)`. Index it to select variables for a cost (`poses[i]`, `i` an
    int, a slice or an integer array of shape `(k,)`)."""

    def __init__(self, problem: Problem, initial, name: str, lower=None, upper=None):
        self.problem_id = problem.id
        self.name = name
        self.index = len(problem.variable_sets)
        self.initial = initial
        self.framework = framework_of(initial)
        batch = problem.batch
        lead = 0 if batch is None else 1
        if isinstance(initial, LieGroup):
            self.group: type[LieGroup] | None = type(initial)
            shape = initial.shape
            self.tangent_dim = initial.tangent_dim
            if len(shape) != 1 + lead:
                raise ValueError(
                    f"xform.optim.Problem.variables: {name} is an xform.{type(initial).__name__} "
                    f"of batch shape {shape}; expected {'(batch, n)' if lead else '(n,)'}"
                )
        else:
            self.group = None
            shape = tuple(initial.shape)
            if len(shape) != 2 + lead:
                raise ValueError(
                    f"xform.optim.Problem.variables: {name} has shape {shape}; expected "
                    f"{'(batch, n, d)' if lead else '(n, d)'}: n Euclidean vectors of size d "
                    "(a group batch for variables on a group)"
                )
            self.tangent_dim = shape[-1]
        if lead and shape[0] != batch:
            raise ValueError(
                f"xform.optim.Problem.variables: {name}'s leading axis is {shape[0]}, the "
                f"problem's batch is {batch}"
            )
        self.count = shape[lead]
        self.fixed = np.zeros(self.count, dtype=bool)
        if (lower is not None or upper is not None) and self.group is not None:
            raise TypeError(
                f"xform.optim.Problem.variables: bounds ('lower', 'upper') are for Euclidean "
                f"variables; {name} is an xform.{self.group.__name__}"
            )
        self.lower, self.upper = _in_dtype_of(lower, initial), _in_dtype_of(upper, initial)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index) -> Selection:
        return Selection(self, _indices(index, self.count, self.name))

    def __repr__(self) -> str:
        kind = f"xform.{self.group.__name__}" if self.group else f"R^{self.tangent_dim}"
        return f"xform.optim.Variables({self.name}: {self.count} x {kind})"

    @property
    def dtype(self):
        """The initial values' dtype."""
        return self.initial.dtype


def _indices(index, count: int, name: str) -> np.ndarray:
    """An index of a variable set as a NumPy int64 array of shape () or (k,), checked."""
    framework = _frameworks.of(index)
    if isinstance(index, slice):
        array = np.arange(count)[index]
    elif framework is None and hasattr(type(index), "__index__"):
        position = operator.index(index)  # one variable: checked in Python
        if not -count <= position < count:
            raise IndexError(
                f"xform.optim: {name}[...]: index {position} out of range for {count} variables"
            )
        array = np.array(position + count if position < 0 else position, np.int64)
    else:
        array = _index_array(index, framework, count, name)
    array.flags.writeable = False  # a selection's indices, and its costs' instances, stay put
    return array


def _index_array(index, framework, count: int, name: str) -> np.ndarray:
    if framework is not None:
        array = np.asarray(_frameworks.NUMPY.convert(index))
    elif isinstance(index, (list, tuple)):
        array = np.asarray(index)
    else:
        raise TypeError(
            f"xform.optim: {name}[...] takes an int, a slice or an integer array, got "
            f"{type(index).__name__}"
        )
    if array.dtype.kind not in "iu" and (array.size or array.dtype.kind == "b"):
        raise TypeError(f"xform.optim: {name}[...]: indices must be integers, got {array.dtype}")
    array = array.astype(np.int64)  # a copy: the caller's array may change later
    if array.ndim > 1:
        raise ValueError(f"xform.optim: {name}[...]: indices of shape {array.shape}; expected (k,)")
    if array.size:
        lowest, highest = array.min(), array.max()
        if lowest < -count or highest >= count:
            bad = array[(array < -count) | (array >= count)][0]
            raise IndexError(
                f"xform.optim: {name}[...]: index {bad} out of range for {count} variables"
            )
        if lowest < 0:
            array = np.where(array < 0, array + count, array)
    return array


@dataclass(frozen=True)
class Selection:
    """Variables of one set selected by an index: `indices` of shape () (one, shared by every
    instance of a cost) or (k,)."""

    variables: Variables
    indices: np.ndarray

    def __repr__(self) -> str:
        return f"{self.variables.name}[{self.indices.tolist()}]"


@dataclass
class Cost:
    """One `Problem.add`: `count` instances of `residual_fn(*values, *data)`."""

    residual_fn: Callable
    selections: tuple[Selection, ...]
    data: tuple
    loss: Loss | None
    jacobian_fn: Callable | None
    name: str
    count: int
    instance_indices: list[np.ndarray] = field(default_factory=list)  # (count,) per slot

    def non_finite_residual(self, instance: int, residual) -> ValueError:
        """The error for a non-finite `residual` of `instance` at the initial values, naming
        the variables the instance joins."""
        variables = ", ".join(
            f"{sel.variables.name}[{int(idx[instance])}]"
            for sel, idx in zip(self.selections, self.instance_indices)
        )
        return ValueError(
            f"xform.optim.solve: cost {self.name!r} has a non-finite residual at the initial "
            f"values (instance {instance}, of {variables}): {residual}"
        )


class Problem:
    """Variables, costs and fixed variables of a nonlinear least-squares problem.

    ```python
    problem = optim.Problem()
    poses = problem.variables(initial_poses)  # a group batch (n,): n variables
    points = problem.variables(initial_points)  # an (m, 3) array: m Euclidean variables
    problem.fix(poses[0])
    problem.add(residual_fn, poses[i], poses[j], data=(Z, sqrt_info), loss=optim.Huber())
    result = optim.solve(problem)
    ```

    `batch`: in PyTorch, the size of a leading axis of independent problems of one structure
    (every initial value `(batch, n, ...)`, every data array `(batch, ...)`; residuals
    `(batch, k, r)`). In JAX, map `optim.solve` with `jax.vmap` instead.
    """

    def __init__(self, batch: int | None = None):
        if batch is not None:
            batch = operator.index(batch)
            if batch < 1:
                raise ValueError(f"xform.optim.Problem: batch must be positive, got {batch}")
        self.batch = batch
        self.id = next(_PROBLEMS)
        self.variable_sets: list[Variables] = []
        self.costs: list[Cost] = []

    def __repr__(self) -> str:
        sets = ", ".join(map(repr, self.variable_sets))
        costs = ", ".join(f"{c.name} x{c.count}" for c in self.costs)
        return f"xform.optim.Problem(variables=[{sets}], costs=[{costs}])"

    @property
    def framework(self) -> str:
        """The framework of the variables' initial values: "numpy", "torch" or "jax"."""
        kinds = {v.framework for v in self.variable_sets}
        return kinds.pop() if len(kinds) == 1 else "numpy"

    # --- variables ------------------------------------------------------------------------

    def variables(self, initial, *, name: str | None = None, lower=None, upper=None) -> Variables:
        """Add a set of variables with their initial values: a group batch `(n,)` or an array
        `(n, d)` of NumPy, PyTorch or JAX (one framework per problem). Euclidean variables
        may have bounds `lower`, `upper` (arrays broadcasting against `initial`): each step
        is projected onto them."""
        name = name or f"variables{len(self.variable_sets)}"
        kind = framework_of(initial)
        if kind is None:
            raise TypeError(
                f"xform.optim.Problem.variables: {name} is a {type(initial).__name__}; expected "
                "an xform group batch or a NumPy, PyTorch or JAX array"
            )
        if not isinstance(initial, LieGroup) and str(initial.dtype).removeprefix("torch.") not in (
            "float32",
            "float64",
        ):
            raise TypeError(
                f"xform.optim.Problem.variables: {name} has dtype {initial.dtype}; expected "
                "float32 or float64"
            )
        others = {v.framework for v in self.variable_sets}
        if others and kind not in others:
            raise TypeError(
                f"xform.optim.Problem.variables: {name} holds {kind} arrays and the problem's "
                f"other variables {others.pop()} arrays; one framework per problem"
            )
        variables = Variables(self, initial, name, lower, upper)
        _check_finite(initial, name)
        self.variable_sets.append(variables)
        return variables

    def fix(self, selection: Selection | Variables) -> None:
        """Hold variables at their values (a gauge, known poses)."""
        if isinstance(selection, Variables):
            selection = selection[:]
        self._own(selection, "fix")
        selection.variables.fixed[selection.indices] = True

    def _own(self, selection, where: str) -> None:
        if not isinstance(selection, Selection):
            raise TypeError(
                f"xform.optim.Problem.{where}: expected variables selected from this problem "
                f"(e.g. poses[i]), got {type(selection).__name__}"
            )
        if selection.variables.problem_id != self.id:
            raise ValueError(
                f"xform.optim.Problem.{where}: {selection.variables.name} belongs to another "
                "problem"
            )

    # --- costs ----------------------------------------------------------------------------

    def add(
        self,
        residual_fn: Callable,
        *variables: Selection | Variables,
        data: Any = (),
        loss: Loss | None = None,
        jacobian_fn: Callable | None = None,
        name: str | None = None,
    ) -> Cost:
        """Add the costs `1/2 rho(|residual_fn(*values, *data)|^2)` of `k` instances at once.

        `variables`: selections (`poses[i]`), each of `k` variables or of one shared by all
        instances (a whole set counts as `set[:]`). `residual_fn` receives, for each, the
        values (a group batch `(k,)` or an array `(k, d)`; with `Problem(batch=B)`, `(B, k)`
        and `(B, k, d)`), then the items of `data` (a tuple; one array is one item) as given,
        and returns `(k, r)` (`(B, k, r)`). Write it with xform's ops and groups in the
        inputs' framework: its Jacobians are taken by forward mode through the ops'
        closed-form tangents. `jacobian_fn(*values, *data)` may give them instead: it returns
        `(residual, [J_1, ...])`, `J_a (k, r, d_a)` the derivative in the right perturbation
        of the a-th variable (every one, fixed or not). `loss`: `optim.Huber`, `optim.Cauchy`
        or None."""
        name = name or getattr(residual_fn, "__name__", None) or f"cost{len(self.costs)}"
        if not callable(residual_fn):
            raise TypeError(
                f"xform.optim.Problem.add: residual_fn must be callable, got {residual_fn!r}"
            )
        if jacobian_fn is not None and not callable(jacobian_fn):
            raise TypeError(f"xform.optim.Problem.add: {name}: jacobian_fn must be callable")
        if loss is not None and not isinstance(loss, Loss):
            raise TypeError(
                f"xform.optim.Problem.add: {name}: loss must be optim.Huber, optim.Cauchy (an "
                f"optim.Loss) or None, got {type(loss).__name__}"
            )
        if not variables:
            raise ValueError(f"xform.optim.Problem.add: {name} reads no variables")
        selections = []
        for selection in variables:
            if isinstance(selection, Variables):
                selection = selection[:]
            self._own(selection, "add")
            selections.append(selection)
        # the lengths broadcast: one variable (an int, or an index of length 1) is shared
        lengths = {len(s.indices) for s in selections if s.indices.ndim} - {1}
        if len(lengths) > 1:
            raise ValueError(
                f"xform.optim.Problem.add: {name}: the selections' lengths "
                + ", ".join(f"{s!r}: {len(s.indices)}" for s in selections if s.indices.ndim)
                + " differ"
            )
        count = lengths.pop() if lengths else 1
        data = data if isinstance(data, tuple) else (data,)
        # NumPy data is a constant of any framework's costs
        allowed = ("numpy", self.framework)
        for item in _leaves(data):
            kind = framework_of(item)
            if kind is not None and kind not in allowed:
                raise TypeError(
                    f"xform.optim.Problem.add: {name}: data holds {kind} arrays and the "
                    f"variables {self.framework} arrays; one framework per problem"
                )
            if kind is not None:
                _check_finite(item, f"{name}'s data")  # where its values can be read now
        cost = Cost(residual_fn, tuple(selections), data, loss, jacobian_fn, name, count)
        cost.instance_indices = [
            s.indices if s.indices.shape == (count,) else np.broadcast_to(s.indices, (count,))
            for s in selections
        ]
        self.costs.append(cost)
        return cost


def _leaves(tree):
    if isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _leaves(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _leaves(item)
    else:
        yield tree


def _check_finite(value, name: str) -> None:
    """A ValueError naming `name` and the first non-finite entry's index."""
    if not is_concrete(value):
        return
    for array in arrays_of(value):
        values = _frameworks.NUMPY.convert(array)
        finite = np.isfinite(values)
        if not finite.all():
            where = np.argwhere(~finite)[0]
            raise ValueError(
                f"xform.optim: {name} has a non-finite value ({values[tuple(where)]}) at index "
                f"{tuple(int(w) for w in where)}"
            )


def initial_values(sets: list[Variables]):
    """The sets' initial values, out of autograd's graph (the solve differentiates
    implicitly, not through its iterations)."""
    for s in sets:
        value = s.initial
        if hasattr(value, "detach"):
            value = value.detach()
        elif isinstance(value, LieGroup) and hasattr(value._arrays[0], "detach"):
            value = type(value)._trusted(*(a.detach() for a in value._arrays))
        yield value
