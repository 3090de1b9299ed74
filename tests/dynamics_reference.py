"""Pinocchio as the reference for `xform.kinematics.Chain`'s dynamics: the same URDF in
Pinocchio (its mimic tags ignored: every movable joint independent), and the map between
its coordinates and the chain's.

Pinocchio orders its joints depth first, keeps a continuous joint as (cos, sin) in q, a
free-flyer's quaternion as [x, y, z, w], and supports mimic joints in RNEA and CRBA only.
So the reference is computed on the unconstrained model and mapped: with `G` (Pinocchio's
velocity coordinates by the chain's; a mimic column holds its multiplier in its master's
column), `tau = G^T tau_full(q_full, G v, G a)`, `M = G^T M_full G`,
`a = M^-1 (tau - G^T b_full)`, `dtau/dq = G^T dtau_full/dq_full G` (and the same for v),
`da/dq = -M^-1 dtau/dq` at that a."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xform.kinematics import Chain


def robots_dir() -> Path | None:
    """example-robot-data's robots folder, or None."""
    from test_kinematics import ROBOTS_DIR

    return ROBOTS_DIR


def quaternion_matrix(q) -> np.ndarray:
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


class PinocchioReference:
    """Pinocchio's model of the chain's URDF (`source`: a path or the XML text) and the
    maps between the two."""

    def __init__(self, chain: Chain, source):
        pin = pytest.importorskip("pinocchio")
        self.pin, self.chain = pin, chain
        text = source if isinstance(source, str) and source.lstrip().startswith("<") else None
        root = (pin.JointModelFreeFlyer(),) if chain.floating_base else ()
        if text is None:
            self.model = pin.buildModelFromUrdf(str(source), *root)
        else:
            self.model = pin.buildModelFromXML(text, *root)
        self.model.gravity.linear = np.array(chain.gravity)
        self.data = self.model.createData()
        model = self.model
        self.base = 6 if chain.floating_base else 0
        self.G = np.zeros((model.nv, chain.nv))
        self.G[: self.base, : self.base] = np.eye(self.base)
        self.joints = []  # (pin joint, chain coordinate, multiplier, offset)
        table = chain.model.joints
        for k in range(1, chain.n_links):
            parent, kind, index, multiplier, offset = table[k]
            if kind == 0:
                continue
            joint = model.joints[model.getJointId(chain.link_joints[k])]
            self.joints.append((joint, int(index), multiplier, offset))
            self.G[joint.idx_v, self.base + int(index)] += multiplier

    def q(self, q: np.ndarray) -> np.ndarray:
        out = self.pin.neutral(self.model)
        if self.base:
            out[:3] = q[:3]
            w, x, y, z = q[3:7] / np.linalg.norm(q[3:7])
            out[3:7] = x, y, z, w
        joints = q[7:] if self.base else q
        for joint, index, multiplier, offset in self.joints:
            value = multiplier * joints[index] + offset
            if joint.nq == 2:  # continuous: (cos, sin)
                out[joint.idx_q : joint.idx_q + 2] = np.cos(value), np.sin(value)
            else:
                out[joint.idx_q] = value
        return out

    def forces(self, q, external_forces) -> list:
        """Each link's force (in its frame) as Pinocchio's per-joint forces in the joint
        frames (a link's body is its joint's)."""
        pin = self.pin
        out = [pin.Force.Zero() for _ in range(self.model.njoints)]
        frames = self.chain.dynamics.frames
        names = self.chain.dynamics.body_links
        for link, force in enumerate(external_forces):
            body = int(frames[link, 0])
            if body == 0 and not self.base:
                continue
            rotation = quaternion_matrix(frames[link, 4:8])
            position = frames[link, 1:4]
            f = rotation @ force[:3]
            torque = rotation @ force[3:] + np.cross(position, f)
            if body == 0:
                joint = 1
            else:
                joint = self.model.getJointId(
                    self.chain.link_joints[self.chain.link_names.index(names[body])]
                )
            out[joint] = out[joint] + pin.Force(f, torque)
        return out

    def inverse_dynamics(self, q, v, a, external_forces=None):
        args = [self.model, self.data, self.q(q), self.G @ v, self.G @ a]
        if external_forces is not None:
            args.append(self.forces(q, external_forces))
        return self.G.T @ self.pin.rnea(*args)

    def mass_matrix(self, q):
        full = self.pin.crba(self.model, self.data, self.q(q))
        full = np.triu(full) + np.triu(full, 1).T
        return self.G.T @ full @ self.G

    def forward_dynamics(self, q, v, tau, external_forces=None):
        bias = self.inverse_dynamics(q, v, np.zeros_like(v), external_forces)
        return np.linalg.solve(self.mass_matrix(q), tau - bias)

    def inverse_dynamics_derivatives(self, q, v, a):
        by_q, by_v, _ = self.pin.computeRNEADerivatives(
            self.model, self.data, self.q(q), self.G @ v, self.G @ a
        )
        return self.G.T @ by_q @ self.G, self.G.T @ by_v @ self.G, self.mass_matrix(q)

    def forward_dynamics_derivatives(self, q, v, tau):
        a = self.forward_dynamics(q, v, tau)
        by_q, by_v, m = self.inverse_dynamics_derivatives(q, v, a)
        inverse = np.linalg.inv(m)
        return -inverse @ by_q, -inverse @ by_v, inverse

    def aba_derivatives(self, q, v, tau):
        """Pinocchio's own computeABADerivatives (chains without mimic joints)."""
        tau_full = np.linalg.pinv(self.G.T) @ tau
        da_dq, da_dv, inverse = self.pin.computeABADerivatives(
            self.model, self.data, self.q(q), self.G @ v, tau_full
        )
        inverse = np.triu(inverse) + np.triu(inverse, 1).T
        return self.G.T @ da_dq @ self.G, self.G.T @ da_dv @ self.G, self.G.T @ inverse @ self.G


def random_state(chain: Chain, rng: np.random.Generator, batch=(), scale=2.0):
    """q (a unit root quaternion on a floating base), v, a of a chain."""
    q = rng.uniform(-scale, scale, (*batch, chain.nq))
    if chain.floating_base:
        q[..., 3:7] /= np.linalg.norm(q[..., 3:7], axis=-1, keepdims=True)
    return q, rng.normal(size=(*batch, chain.nv)), rng.normal(size=(*batch, chain.nv))


def relative(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(actual - expected).max() / max(1.0, np.abs(expected).max()))
