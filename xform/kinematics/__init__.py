"""Kinematic trees from URDF: batched forward kinematics and Jacobians as xform ops.

```python
chain = xform.kinematics.Chain.from_urdf("panda.urdf")  # or the XML text
chain.link_names, chain.joint_names, chain.dof
poses = chain.forward_kinematics(q)  # an xform.SE3 of batch shape (..., n_links)
hand = chain.forward_kinematics(q, links=["panda_hand"])
J = chain.jacobian(q, "panda_hand")  # (..., 6, dof)
tau = chain.inverse_dynamics(q, v, a)  # (..., nv); mass_matrix, forward_dynamics, ...
```

A `Chain` is an immutable model (Pinocchio's model/data split without the data: the
per-call state lives in the kernel's registers). `q` is a NumPy, PyTorch or JAX array
(float32 or float64, any batch shape); results are of the same kind, differentiable through
the framework's autodiff by the ops' closed-form tangents and VJPs (`_ops.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _dispatch, _frameworks
from .._op import Op
from ..groups import SE3
from . import _inertia, _ops, _urdf
from ._chain_dynamics import ChainDynamics
from ._inertia import Dynamics
from ._urdf import FIXED, PRISMATIC, REVOLUTE, Model

__all__ = ["Chain", "FIXED", "PRISMATIC", "REVOLUTE"]


class Chain(ChainDynamics):
    """A kinematic tree: links, and the joints between them, from a URDF, and its rigid
    bodies' dynamics.

    - `link_names`: every link, the root first and each link after its parent (depth first,
      children in the order the document lists their joints). Results list links so.
    - `joint_names`: the coordinates of `q`, in order: the movable joints (revolute,
      continuous, prismatic) that do not mimic another, in document order. `dof` counts them.
    - `link_joints`: for each link, the name of the joint from its parent (None for the
      root); `parents`: each link's parent's index (-1 for the root).
    - `model`: the constant arrays the kernels read (`xform.kinematics._urdf.Model`).

    A mimic joint moves by `multiplier * q[master] + offset`. The base frame is the root
    link's frame; a link's pose is its frame in the base frame.

    Dynamics (`inverse_dynamics`, `mass_matrix`, `forward_dynamics`, `bias_forces`,
    `gravity_torques` and the explicit partials) reads the URDF's `<inertial>`s, the links
    of fixed joints merged into their parents (`dynamics`: `xform.kinematics._inertia.
    Dynamics`). On a floating base (`floating_base`), the dynamics' `q (..., nq)` is the
    root's position and quaternion [w, x, y, z], then the joints, and `v`, `a`, `tau`
    `(..., nv)` start with the root's twist (acceleration, wrench) in its own frame,
    [linear, angular] (Pinocchio's LOCAL); kinematics' q stays the joints alone. A mimic
    joint's system is the constrained one: `tau = G^T tau_full`, `M = G^T M_full G`.
    """

    def __init__(self, model: Model, dynamics: Dynamics | None = None):
        if not model.joint_names:
            raise ValueError(
                "xform.kinematics.Chain: the URDF has no movable joint (every joint is fixed "
                "or a mimic); a chain needs at least one coordinate"
            )
        self.model = model
        self.link_names = model.link_names
        self.joint_names = model.joint_names
        self.link_joints = model.link_joints
        self.dof = len(model.joint_names)
        self.parents = (-1, *(int(p) for p in model.joints[1:, _urdf.PARENT]))
        self._link_index = {name: k for k, name in enumerate(self.link_names)}
        self.dynamics = dynamics
        self._constants = (model.table,)
        self._tables = () if dynamics is None else (dynamics.bodies, dynamics.frames)
        # The ops are made here, not at a first call that a compiled region could trace.
        self._forward_op = _ops.forward_kinematics_op(len(self.link_names), self.dof)
        self._jacobian_op = _ops.jacobian_op(len(self.link_names), self.dof)
        self._dynamics_ops = self._make_dynamics_ops(dynamics)
        self._converted: dict[tuple, tuple] = {}
        self._lock = threading.Lock()
        self._frozen = True

    def __setattr__(self, name: str, value) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"xform.kinematics.Chain is immutable: cannot set {name!r}")
        super().__setattr__(name, value)

    @classmethod
    def from_urdf(
        cls,
        path_or_xml,
        floating_base: bool = False,
        gravity=(0.0, 0.0, -9.81),
        *,
        check_inertias: bool = True,
    ) -> Chain:
        """The chain of a URDF file, given by its path or as its XML text (str or bytes).
        `floating_base`: the root is a free body for the dynamics; `gravity`: the gravity
        vector in the world frame (m/s^2), the base frame on a fixed base. A rotational
        inertia that no mass distribution has (not positive semi-definite, or breaking the
        triangle inequality) makes every dynamics call raise, naming its link; with
        `check_inertias=False` it is taken as written, as Pinocchio takes it (some
        published URDFs carry such inertias)."""
        for name, flag in (("floating_base", floating_base), ("check_inertias", check_inertias)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(
                    f"xform.kinematics.Chain.from_urdf: {name} must be True or False, got "
                    f"{flag!r}"
                )
        try:
            g = np.asarray(gravity, dtype=np.float64)
        except (TypeError, ValueError):
            g = np.full(1, np.nan)
        if g.shape != (3,) or not np.isfinite(g).all():
            raise ValueError(
                f"xform.kinematics.Chain.from_urdf: gravity is {gravity!r}; expected 3 finite "
                "numbers (m/s^2, in the world frame)"
            )
        robot = _urdf.read_root(path_or_xml)
        model = _urdf.parse_robot(robot)
        dynamics = _inertia.dynamics_model(robot, model, bool(floating_base), g,
                                           bool(check_inertias))  # fmt: skip
        return cls(model, dynamics)

    @property
    def n_links(self) -> int:
        """The number of links, the root included: `len(link_names)`."""
        return len(self.link_names)

    def __repr__(self) -> str:
        return (
            f"xform.kinematics.Chain({self.n_links} links from '{self.link_names[0]}', "
            f"{self.dof} coordinates {list(self.joint_names)})"
        )

    # --- calls ---------------------------------------------------------------------------

    def forward_kinematics(self, q, links: Sequence[str] | None = None) -> SE3:
        """Link poses in the base frame: an `xform.SE3` of batch shape `(..., n)`, its
        `position (..., n, 3)` and `quaternion (..., n, 4)` ([w, x, y, z], unit, sign as the
        product of the joints' quaternions gives it), for every link (`n = n_links`, in
        `link_names` order) or for `links`, in that order."""
        self._check_q(q, "forward_kinematics")
        index = None if links is None else self._indices(links, "forward_kinematics")
        if not _frameworks.of(q).holds_groups:
            raise TypeError(
                "xform.kinematics.Chain.forward_kinematics: the poses are an xform.SE3, which "
                "holds NumPy, PyTorch or JAX arrays; pass q as one of those, or call "
                "chain.forward_kinematics_op on Warp arrays"
            )
        position, quaternion = self._run(self._forward_op, q)
        if index is not None:  # a gather in q's framework, differentiable there
            position, quaternion = position[..., index, :], quaternion[..., index, :]
        return SE3._trusted(position, quaternion)

    def jacobian(self, q, link: str):
        """The Jacobian of `link`, `(..., 6, dof)`: rows [linear; angular], the velocity of the
        link frame's origin and its angular velocity, both in the base frame, per unit rate
        of each coordinate (Pinocchio's LOCAL_WORLD_ALIGNED)."""
        self._check_q(q, "jacobian")
        if not isinstance(link, str):
            raise TypeError(
                f"xform.kinematics.Chain.jacobian: link must be a link's name, got "
                f"{type(link).__name__}"
            )
        index = self._indices([link], "jacobian")[0]
        return self._run(self._jacobian_op, q, float(index))

    # --- the ops themselves, for xform.vjp / xform.jvp on NumPy arrays --------------------

    @property
    def forward_kinematics_op(self) -> Op:
        """The op behind `forward_kinematics`: `(q, model) -> (positions, quaternions)`."""
        return self._forward_op

    @property
    def jacobian_op(self) -> Op:
        """The op behind `jacobian`: `(q, model, link) -> jacobian`, `link` the index."""
        return self._jacobian_op

    def op_arguments(self, q, link: str | None = None) -> list:
        """The arguments of `forward_kinematics_op` (or, given `link`, of `jacobian_op`)
        for `q`: `q`, the model table in q's kind and dtype (and the link's index)."""
        self._check_q(q, "op_arguments")
        extra = () if link is None else (float(self._indices([link], "op_arguments")[0]),)
        return [q, *self._constants_like(q), *extra]

    # --- helpers -------------------------------------------------------------------------

    def _run(self, op: Op, q, *extra):
        args = [q, *self._constants_like(q), *extra]
        # Once made, a framework's function of the op is at hand: calling it directly saves
        # the dispatch's checks (q's kind is the constants' by construction), a few µs.
        adapter = op.adapters.get(_frameworks.kind(q)) if not extra else None
        return adapter(*args) if adapter is not None else _dispatch.apply(op, args)

    def _constants_like(self, q) -> tuple:
        """The model's arrays in q's kind, dtype and device, converted once per such."""
        return self._converted_like(q, "model", self._constants)

    def _converted_like(self, q, name, arrays) -> tuple:
        """`arrays` (NumPy) in q's kind, dtype and device, converted once per such."""
        framework = _frameworks.of(q)
        key = (name, framework.name, q.dtype, framework.device(q))
        converted = self._converted.get(key)
        if converted is None:
            converted = tuple(_dispatch.array_like(c, q) for c in arrays)
            if _frameworks.concrete(converted[0]):  # made under a trace, it belongs to it
                with self._lock:
                    self._converted[key] = converted
        return converted

    def _check_q(self, q: Any, function: str) -> None:
        if _frameworks.kind(q) is None:
            raise TypeError(
                f"xform.kinematics.Chain.{function}: q is a {type(q).__module__}."
                f"{type(q).__qualname__}; expected a NumPy, Warp, PyTorch or JAX array"
            )
        shape = tuple(q.shape)
        if not shape or shape[-1] != self.dof:
            names = ", ".join(self.joint_names)
            raise ValueError(
                f"xform.kinematics.Chain.{function}: q has shape {shape}; expected (..., "
                f"{self.dof}), one value per coordinate of chain.joint_names ({names})"
            )

    def _indices(self, links: Sequence[str], function: str) -> list[int]:
        if isinstance(links, str):
            raise TypeError(
                f"xform.kinematics.Chain.{function}: links must be a sequence of link names, "
                f"not the string {links!r} (write [{links!r}])"
            )
        indices = []
        for link in links:
            if link not in self._link_index:
                raise ValueError(
                    f"xform.kinematics.Chain.{function}: unknown link {link!r}; the chain's "
                    f"links are {list(self.link_names)}"
                )
            indices.append(self._link_index[link])
        return indices
