"""`Chain`'s dynamics: the calls of `xform.kinematics.Chain` that read inertias, each one
op call (`_dynamics.py`) on the caller's arrays with the chain's tables beside them."""

from __future__ import annotations

import numpy as np

from .. import _dispatch, _frameworks
from .._op import Op
from . import _dynamics
from ._inertia import Dynamics


def _joined(*arrays) -> list:
    """NumPy arrays among PyTorch or JAX ones as arrays of that framework, on its device,
    in their own dtype (constants of a JAX trace under one)."""
    frameworks = [None if x is None else _frameworks.of(x) for x in arrays]
    target = next((f for f in frameworks if f is not None and f.differentiates), None)
    if target is None:
        return list(arrays)
    like = arrays[frameworks.index(target)]
    return [
        target.constant(x, like, _frameworks.float_name(x.dtype))
        if f is _frameworks.NUMPY
        else x
        for x, f in zip(arrays, frameworks)
    ]


def _joins(a: _frameworks.Framework, b: _frameworks.Framework) -> bool:
    """Whether arrays of frameworks a and b may be arguments of one call: one framework,
    or NumPy constants beside a framework that differentiates (PyTorch, JAX)."""
    return a is b or (_frameworks.NUMPY in (a, b) and (a.differentiates or b.differentiates))


class ChainDynamics:
    """The dynamics half of `Chain` (its methods are documented there)."""

    dynamics: Dynamics | None
    dof: int
    n_links: int
    joint_names: tuple[str, ...]

    def _make_dynamics_ops(self, dynamics: Dynamics | None) -> dict[str, Op]:
        if dynamics is None:
            return {}
        sizes = (len(dynamics.bodies), len(dynamics.frames), self.nq, self.nv)
        return {call: _dynamics.dynamics_op(call, *sizes) for call in _dynamics.CALLS}

    @property
    def floating_base(self) -> bool:
        """Whether the root is a free body (q starts with its pose, v with its twist)."""
        return self.dynamics is not None and self.dynamics.floating

    @property
    def nq(self) -> int:
        """The length of the dynamics' q: `7 + dof` on a floating base, else `dof`."""
        return self.dof + 7 * self.floating_base

    @property
    def nv(self) -> int:
        """The number of velocity coordinates: `6 + dof` on a floating base, else `dof`."""
        return self.dof + 6 * self.floating_base

    @property
    def gravity(self) -> tuple[float, float, float]:
        """The gravity vector in the world frame (the base frame on a fixed base)."""
        if self.dynamics is None:
            raise self._no_dynamics("gravity")
        return tuple(float(g) for g in self.dynamics.bodies[0, -3:])

    def dynamics_op(self, name: str) -> Op:
        """The op behind a dynamics call, by the call's name (`"inverse_dynamics"`,
        `"mass_matrix"`, `"forward_dynamics"`, `"inverse_dynamics_derivatives"`,
        `"forward_dynamics_derivatives"`), for `xform.vjp` / `xform.jvp` on NumPy arrays;
        `dynamics_arguments` gives its arguments."""
        ops = self._dynamics_ops
        if name not in ops:
            raise ValueError(
                f"xform.kinematics.Chain.dynamics_op: unknown call {name!r}; expected one of "
                f"{sorted(ops) or 'none (the chain has no inertias)'}"
            )
        return ops[name]

    def dynamics_arguments(self, name: str, q, v=None, third=None, external_forces=None) -> list:
        """The arguments of `dynamics_op(name)` for these inputs: the chain's tables (and
        zero forces where none are given) in q's kind, dtype and device beside them."""
        self._check_dynamics(name, q, v, third, external_forces)
        return self._arguments(name, q, v, third, external_forces)

    # --- calls -------------------------------------------------------------------------

    def inverse_dynamics(self, q, v, a, external_forces=None):
        """The joint torques (and, on a floating base, the root's wrench) that give the
        accelerations `a` at `(q, v)`: `tau = M(q) a + C(q, v) v + g(q) - sum_i J_i^T f_i`,
        `(..., nv)`, by the recursive Newton-Euler algorithm. `external_forces`, `(...,
        n_links, 6)`: a spatial force `[force, torque]` on each link (`link_names` order),
        in the link's frame, at its origin."""
        return self._call("inverse_dynamics", q, v, a, external_forces)

    def mass_matrix(self, q):
        """The joint-space mass matrix `M(q)`, `(..., nv, nv)`, symmetric positive
        definite where every coordinate moves mass (composite rigid body algorithm)."""
        return self._call("mass_matrix", q)

    def forward_dynamics(self, q, v, tau, external_forces=None):
        """The accelerations `a = M(q)^-1 (tau - C(q, v) v - g(q) + sum_i J_i^T f_i)`,
        `(..., nv)`: the inverse of `inverse_dynamics` in `a`."""
        return self._call("forward_dynamics", q, v, tau, external_forces)

    def bias_forces(self, q, v):
        """`C(q, v) v + g(q)`, `(..., nv)`: the inverse dynamics at zero acceleration."""
        self._check_dynamics("bias_forces", q, v)
        zero = self._zeros_like(q, (self.nv,))
        return self._call("inverse_dynamics", q, v, zero, None, checked=True)

    def gravity_torques(self, q):
        """`g(q)`, `(..., nv)`: the torques that hold the robot still against gravity."""
        self._check_dynamics("gravity_torques", q)
        zero = self._zeros_like(q, (self.nv,))
        return self._call("inverse_dynamics", q, zero, zero, None, checked=True)

    def inverse_dynamics_derivatives(self, q, v, a):
        """`(dtau_dq, dtau_dv, M)`, each `(..., nv, nv)`: the partial derivatives of
        `inverse_dynamics` (Pinocchio's `computeRNEADerivatives`), the ones in q taken in
        its tangent space (on a floating base, the root's right perturbation `[rho,
        omega]`, then the joints), and the mass matrix (`dtau_da`). Not differentiable
        (marked so): differentiate `inverse_dynamics` twice instead."""
        return self._call("inverse_dynamics_derivatives", q, v, a)

    def forward_dynamics_derivatives(self, q, v, tau):
        """`(da_dq, da_dv, M_inv)`, each `(..., nv, nv)`: the partial derivatives of
        `forward_dynamics` (Pinocchio's `computeABADerivatives`), in q's tangent space as
        `inverse_dynamics_derivatives`, and the inverse mass matrix (`da_dtau`). Not
        differentiable (marked so)."""
        return self._call("forward_dynamics_derivatives", q, v, tau)

    # --- helpers -------------------------------------------------------------------------

    def _call(self, name, q, v=None, third=None, external_forces=None, checked=False):
        if not checked:
            self._check_dynamics(name, q, v, third, external_forces)
        op = self._dynamics_ops[name]
        q, v, third, external_forces = _joined(q, v, third, external_forces)
        args = self._arguments(name, q, v, third, external_forces)
        adapter = op.adapters.get(_frameworks.kind(q))
        return adapter(*args) if adapter is not None else _dispatch.apply(op, args)

    def _arguments(self, name, q, v, third, external_forces) -> list:
        bodies, frames = self._converted_like(q, "tables", self._tables)
        if name == "mass_matrix":
            return [q, bodies]
        if name.endswith("_derivatives"):
            return [q, v, third, bodies]
        if external_forces is None:
            external_forces = self._zeros_like(q, (self.n_links, 6))
        return [q, v, third, external_forces, bodies, frames]

    def _zeros_like(self, q, shape):
        (zeros,) = self._converted_like(q, ("zeros", shape), (np.zeros(shape),))
        return zeros

    def _no_dynamics(self, function: str) -> ValueError:
        return ValueError(
            f"xform.kinematics.Chain.{function}: this chain has no inertias; make it with "
            "Chain.from_urdf, which reads them"
        )

    def _check_dynamics(self, function, q, v=None, third=None, external_forces=None) -> None:
        if self.dynamics is None:
            raise self._no_dynamics(function)
        problems = self.dynamics.problems
        if function.startswith("forward_dynamics"):
            problems = problems + self.dynamics.massless
        if problems:
            more = f" (and {len(problems) - 1} more: {list(problems[1:])})" if problems[1:] else ""
            raise ValueError(f"xform.kinematics.Chain.{function}: {problems[0]}{more}")
        names = ["q", "v", "tau" if "forward" in function else "a", "external_forces"]
        values = [q, v, third, external_forces]
        joints = ", ".join(self.joint_names)
        root = (
            "the root's position and quaternion [w, x, y, z], then " if self.floating_base else ""
        )
        twist = (
            "the root's twist [linear, angular] in its frame, then " if self.floating_base else ""
        )
        expected = {
            "q": ((self.nq,), f"{root}one value per joint of chain.joint_names ({joints})"),
            "v": ((self.nv,), f"{twist}one value per joint"),
            "a": ((self.nv,), f"{twist}one value per joint"),
            "tau": ((self.nv,), f"{twist}one value per joint"),
            "external_forces": ((self.n_links, 6), "a force [force, torque] per link"),
        }
        kind = None
        for name, value in zip(names, values):
            if value is None:
                continue
            this = _frameworks.of(value)
            if this is None:
                raise TypeError(
                    f"xform.kinematics.Chain.{function}: {name} is a "
                    f"{type(value).__module__}.{type(value).__qualname__}; expected a NumPy, "
                    "Warp, PyTorch or JAX array"
                )
            if kind is not None and not _joins(this, kind):
                raise TypeError(
                    f"xform.kinematics.Chain.{function}: {name} is a {this.name} array among "
                    f"{kind.name} ones; pass the arrays in one framework (NumPy arrays may "
                    "join PyTorch or JAX ones)"
                )
            if this is not _frameworks.NUMPY or kind is None:
                kind = this
            shape = tuple(value.shape)
            element, what = expected[name]
            if shape[len(shape) - len(element) :] != element or len(shape) < len(element):
                raise ValueError(
                    f"xform.kinematics.Chain.{function}: {name} has shape {shape}; expected "
                    f"(..., {', '.join(map(str, element))}): {what}"
                )
