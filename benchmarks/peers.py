"""What a user would use instead of xform: the same transforms as plain PyTorch and jnp
formulas, and the peer libraries' own functions (roma and PyPose for PyTorch, jaxlie for
JAX) where they have the op. Each maps an op to {peer name: function}; the benchmark
measures xform against the best of them in each framework."""

import jax
import jax.numpy as jnp
import torch

from .formulas import (
    euler_xyz_quaternion,
    quaternion_product,
    rotation_matrix,
    rows_gram_schmidt,
    shepperd_quaternion,
    svd_kabsch,
    svd_procrustes,
)


def _optional(name):
    try:
        return __import__(name)
    except ImportError:
        return None


roma = _optional("roma")
pypose = _optional("pypose")
jaxlie = _optional("jaxlie")


def _xyzw(q):
    """[w, x, y, z] -> [x, y, z, w]: roma's and PyPose's quaternion layout."""
    return torch.roll(q, -1, -1)


def _roma_peers():
    if roma is None:
        return {}
    return {
        "so3_exp": lambda w: roma.rotvec_to_unitquat(w),
        "so3_log": lambda q: roma.unitquat_to_rotvec(_xyzw(q)),
        "quaternion_multiply": lambda a, b: roma.quat_product(_xyzw(a), _xyzw(b)),
        "euler_to_quaternion": lambda a: roma.euler_to_unitquat("XYZ", a),
        # roma orthonormalises columns: the transposes give pytorch3d's rows
        "rotation_6d_to_matrix": lambda d6: (
            roma.special_gramschmidt(d6.unflatten(-1, (2, 3)).mT).mT
        ),
        "special_procrustes": roma.special_procrustes,
        "rigid_registration": roma.rigid_points_registration,
    }


def _pypose_peers():
    if pypose is None:
        return {}
    pp = pypose
    return {
        "so3_exp": lambda w: pp.so3(w).Exp().tensor(),
        "so3_log": lambda q: pp.SO3(_xyzw(q)).Log().tensor(),
        "se3_exp": lambda xi: pp.se3(xi).Exp().tensor(),
        "se3_log": lambda t, q: pp.SE3(torch.cat([t, _xyzw(q)], -1)).Log().tensor(),
        "quaternion_multiply": lambda a, b: (pp.SO3(_xyzw(a)) * pp.SO3(_xyzw(b))).tensor(),
        "so3_left_jacobian": lambda w: pp.so3(-w).Jr(),  # J_l(w) = J_r(-w)
    }


FORMULAS = {
    "transform_points": lambda t, q, p: p @ rotation_matrix(torch, q).T + t,
    "batch_transform_points": lambda t, q, p: (
        torch.einsum("bij,bnj->bni", rotation_matrix(torch, q), p) + t[:, None]
    ),
    "pose_multiply": lambda t, q, t2, q2: (
        torch.einsum("...ij,...j->...i", rotation_matrix(torch, q), t2) + t,
        quaternion_product(torch, q, q2),
    ),
    "quaternion_to_matrix": lambda q: rotation_matrix(torch, q),
    "matrix_to_quaternion": lambda m: shepperd_quaternion(torch, m),
    "quaternion_multiply": lambda a, b: quaternion_product(torch, a, b),
    "euler_to_quaternion": lambda a: euler_xyz_quaternion(torch, a),
    "rotation_6d_to_matrix": lambda d6: rows_gram_schmidt(torch, d6),
    "special_procrustes": lambda m: svd_procrustes(torch, m),
    "rigid_registration": lambda p, y: svd_kabsch(torch, p, y),
}

TORCH: dict[str, dict] = {}
for _name, _peers in (("torch", FORMULAS), ("roma", _roma_peers()), ("pypose", _pypose_peers())):
    for _op, _fn in _peers.items():
        TORCH.setdefault(_op, {})[_name] = _fn


def jnp_rotate(q, v):
    """Two cross products: v + 2w (u x v) + 2 u x (u x v)."""
    w, u = q[..., :1], q[..., 1:]
    uv = jnp.cross(u, v)
    return v + 2 * w * uv + 2 * jnp.cross(u, uv)


def jnp_left_jacobian(w):
    """Barfoot's closed form, with the small-angle limits where theta is small."""
    theta2 = (w * w).sum(-1)[..., None, None]
    small = theta2 < 1e-6
    safe = jnp.where(small, 1.0, theta2)
    theta = jnp.sqrt(safe)
    a = jnp.where(small, 0.5 - theta2 / 24, (1 - jnp.cos(theta)) / safe)
    b = jnp.where(small, 1 / 6 - theta2 / 120, (theta - jnp.sin(theta)) / (safe * theta))
    x, y, z = jnp.moveaxis(w, -1, 0)
    zero = jnp.zeros_like(x)
    k = jnp.stack(
        [jnp.stack([zero, -z, y], -1), jnp.stack([z, zero, -x], -1), jnp.stack([-y, x, zero], -1)],
        -2,
    )
    return jnp.eye(3) + a * k + b * (k @ k)


def jnp_se3_log(t, q):
    """[rho, omega]: omega the rotation vector of q (its w >= 0 sign), rho = V(omega)^-1 t
    with V^-1 = I - K/2 + c K^2, K = [omega]x, c = (1 - theta sin(theta) / (2 (1 -
    cos(theta)))) / theta^2; series where theta or |q_xyz| is small."""
    q = q * jnp.where(q[..., :1] < 0, -1.0, 1.0)
    w, v = q[..., 0], q[..., 1:]
    s2 = (v * v).sum(-1)
    small = s2 < 1e-4
    s = jnp.sqrt(jnp.where(small, 1.0, s2))
    scale = jnp.where(small, 2 / w * (1 - s2 / (3 * w * w)), 2 * jnp.arctan2(s, w) / s)
    omega = scale[..., None] * v
    theta2 = (omega * omega).sum(-1)
    near = theta2 < 1e-2
    safe = jnp.where(near, 1.0, theta2)
    theta = jnp.sqrt(safe)
    c = jnp.where(
        near,
        1 / 12 + theta2 / 720 + theta2 * theta2 / 30240,
        (1 - theta * jnp.sin(theta) / (2 * (1 - jnp.cos(theta)))) / safe,
    )
    kt = jnp.cross(omega, t)
    rho = t - kt / 2 + c[..., None] * jnp.cross(omega, kt)
    return jnp.concatenate([rho, omega], -1)


def _jaxlie_peers():
    if jaxlie is None:
        return {}
    so3, se3 = jaxlie.SO3, jaxlie.SE3
    return {
        "so3_exp": lambda w: so3.exp(w).wxyz,
        "so3_log": lambda q: so3(q).log(),
        "se3_exp": lambda xi: se3.exp(xi).wxyz_xyz,
        "se3_log": lambda t, q: se3.from_rotation_and_translation(so3(q), t).log(),
        "quaternion_multiply": lambda a, b: (so3(a) @ so3(b)).wxyz,
    }


# Two jnp forms of the point ops: the rotation matrix, and two cross products.
JAX = {
    "transform_points": {
        "matrix": lambda t, q, p: p @ rotation_matrix(jnp, q).T + t,
        "cross": lambda t, q, p: jnp_rotate(q, p) + t,
    },
    "batch_transform_points": {
        "matrix": lambda t, q, p: (
            jnp.einsum("bij,bnj->bni", rotation_matrix(jnp, q), p) + t[:, None]
        ),
        "cross": lambda t, q, p: jnp_rotate(q[:, None], p) + t[:, None],
    },
    "pose_multiply": {
        "matrix": lambda t, q, t2, q2: (
            jnp.einsum("...ij,...j->...i", rotation_matrix(jnp, q), t2) + t,
            quaternion_product(jnp, q, q2),
        ),
        "cross": lambda t, q, t2, q2: (jnp_rotate(q, t2) + t, quaternion_product(jnp, q, q2)),
    },
    "quaternion_to_matrix": {"matrix": lambda q: rotation_matrix(jnp, q)},
    "se3_log": {"formula": jnp_se3_log},
    "matrix_to_quaternion": {"shepperd": lambda m: shepperd_quaternion(jnp, m)},
    "quaternion_multiply": {"formula": lambda a, b: quaternion_product(jnp, a, b)},
    "so3_left_jacobian": {"formula": jnp_left_jacobian},
    "euler_to_quaternion": {"formula": lambda a: euler_xyz_quaternion(jnp, a)},
    "rotation_6d_to_matrix": {"formula": lambda d6: rows_gram_schmidt(jnp, d6)},
    "special_procrustes": {"svd": lambda m: svd_procrustes(jnp, m)},
    "rigid_registration": {"svd": lambda p, y: svd_kabsch(jnp, p, y)},
}
for _op, _fn in _jaxlie_peers().items():
    JAX.setdefault(_op, {})["jaxlie"] = _fn
del jax


# --- kinematic chains (benchmarks/kinematics.py) -------------------------------------------


def jnp_forward_kinematics(table):
    """Forward kinematics in jnp for a kinematic tree given as xform.kinematics' packed
    table (one row per link: parent, kind, coordinate, mimic multiplier and offset, origin
    position and quaternion, axis), unrolled link by link at trace time: unit quaternions
    composed as in xform's kernel. Returns positions (..., n, 3) and quaternions (..., n, 4).

    Each link's pose passes an optimization_barrier: without one, XLA's fusion recomputed
    every ancestor's sines and cosines inside each link's fusion (219 sines for Panda's 8
    joints, and a call of 100 configurations took a second)."""
    from jax.lax import optimization_barrier

    rows = [tuple(float(x) for x in row) for row in table]

    def fk(q):
        batch, dtype = q.shape[:-1], q.dtype
        positions = [jnp.zeros((*batch, 3), dtype)]
        quaternions = [jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.0, 0.0], dtype), (*batch, 4))]
        for row in rows[1:]:
            parent, kind, index = int(row[0]), int(row[1]), int(row[2])
            multiplier, offset = row[3:5]
            shift = jnp.broadcast_to(jnp.asarray(row[5:8], dtype), (*batch, 3))
            turn = jnp.broadcast_to(jnp.asarray(row[8:12], dtype), (*batch, 4))
            axis = jnp.asarray(row[12:15], dtype)
            if kind != 0:
                theta = (multiplier * q[..., index] + offset)[..., None]
                if kind == 1:
                    half = theta / 2
                    motion = jnp.concatenate([jnp.cos(half), jnp.sin(half) * axis], -1)
                    turn = quaternion_product(jnp, turn, motion)
                else:
                    shift = shift + jnp_rotate(turn, theta * axis)
            frame = quaternions[parent]
            position, quaternion = optimization_barrier(
                (positions[parent] + jnp_rotate(frame, shift), quaternion_product(jnp, frame, turn))
            )
            positions.append(position)
            quaternions.append(quaternion)
        return jnp.stack(positions, -2), jnp.stack(quaternions, -2)

    return fk
