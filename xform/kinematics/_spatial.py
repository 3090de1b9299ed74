"""Spatial vectors and inertias as Warp element functions, generic in the scalar.

A motion (twist) is `[v, ω]`, a force (wrench) `[f, τ]`, both 6-vectors, linear part first
(Pinocchio's order), expressed in one frame at its origin. The pairing of a motion and a
force is the dot product of the 6-vectors. `m × x` is the motion cross product and
`m ×* f = -(m ×)^T f` its dual (`_rnea.py` states the identities its VJP uses). `linear`,
`angular` and `spatial` split and join the halves (SE(3)'s twist helpers).

An inertia is the ten numbers `[m, h, I_O]` (`_inertia.py`): as a 6x6 matrix acting on a
motion `[v, ω]`, `I [v, ω] = [m v - h × ω, h × v + I_O ω]`, symmetric.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..ops.quaternion import quat_conjugate
from ..ops.se3 import omega_of as angular
from ..ops.se3 import rho_of as linear
from ..ops.se3 import twist as spatial
from ._ops import rotate

__all__ = [
    "angular",
    "cross_force",
    "cross_motion",
    "force_moved",
    "inertia_apply",
    "inertia_moved",
    "linear",
    "motion_into",
    "spatial",
]


@wp.func
def cross_motion(m: Any, x: Any):
    """m × x for motions m = [v, ω], x: [ω × x_v + v × x_ω, ω × x_ω]."""
    w = angular(m)
    xw = angular(x)
    return spatial(wp.cross(w, linear(x)) + wp.cross(linear(m), xw), wp.cross(w, xw))


@wp.func
def cross_force(m: Any, f: Any):
    """m ×* f for a motion m = [v, ω] and a force f: [ω × f_f, ω × f_τ + v × f_f]."""
    w = angular(m)
    ff = linear(f)
    return spatial(wp.cross(w, ff), wp.cross(w, angular(f)) + wp.cross(linear(m), ff))


@wp.func
def inertia_moment(p: Any):
    return wp.vector(p[1], p[2], p[3])


@wp.func
def inertia_rotational(p: Any, x: Any):
    """I_O x for the packed rotational inertia (xx, yy, zz, xy, xz, yz) of p."""
    return wp.vector(
        p[4] * x[0] + p[7] * x[1] + p[8] * x[2],
        p[7] * x[0] + p[5] * x[1] + p[9] * x[2],
        p[8] * x[0] + p[9] * x[1] + p[6] * x[2],
    )


@wp.func
def inertia_apply(p: Any, x: Any):
    """I x for the inertia p and a motion x: [m v - h × ω, h × v + I_O ω]."""
    h = inertia_moment(p)
    v = linear(x)
    w = angular(x)
    return spatial(p[0] * v - wp.cross(h, w), wp.cross(h, v) + inertia_rotational(p, w))


@wp.func
def inertia_moved(p: Any, position: Any, quaternion: Any):
    """The inertia p of a body whose frame has the pose (position, quaternion) in another
    frame, seen from that frame: h' = R h + m t and, with g = R h,
    I' = R I R^T + m (|t|^2 - t t^T) + 2 (t.g) 1 - t g^T - g t^T."""
    m = p[0]
    g = rotate(quaternion, inertia_moment(p))
    t = position
    # R I R^T column by column: R (I (R^T e_k))
    c = quat_conjugate(quaternion)
    one = type(m)(1.0)
    zero = type(m)(0.0)
    col0 = rotate(quaternion, inertia_rotational(p, rotate(c, wp.vector(one, zero, zero))))
    col1 = rotate(quaternion, inertia_rotational(p, rotate(c, wp.vector(zero, one, zero))))
    col2 = rotate(quaternion, inertia_rotational(p, rotate(c, wp.vector(zero, zero, one))))
    tt = wp.dot(t, t)
    tg = type(m)(2.0) * wp.dot(t, g)
    xx = col0[0] + m * (tt - t[0] * t[0]) + tg - type(m)(2.0) * t[0] * g[0]
    yy = col1[1] + m * (tt - t[1] * t[1]) + tg - type(m)(2.0) * t[1] * g[1]
    zz = col2[2] + m * (tt - t[2] * t[2]) + tg - type(m)(2.0) * t[2] * g[2]
    xy = col1[0] - m * t[0] * t[1] - t[0] * g[1] - g[0] * t[1]
    xz = col2[0] - m * t[0] * t[2] - t[0] * g[2] - g[0] * t[2]
    yz = col2[1] - m * t[1] * t[2] - t[1] * g[2] - g[1] * t[2]
    h = g + m * t
    return wp.vector(m, h[0], h[1], h[2], xx, yy, zz, xy, xz, yz)


@wp.func
def force_moved(position: Any, quaternion: Any, f: Any):
    """A force given in a frame with pose (position, quaternion), in the outer frame:
    [R f, R τ + t × R f]."""
    ff = rotate(quaternion, linear(f))
    return spatial(ff, rotate(quaternion, angular(f)) + wp.cross(position, ff))


@wp.func
def motion_into(position: Any, quaternion: Any, x: Any):
    """A motion of the outer frame, seen in a frame with pose (position, quaternion)
    there: [R^T (v - t × ω), R^T ω] (the transpose of `force_moved`)."""
    c = quat_conjugate(quaternion)
    w = angular(x)
    return spatial(rotate(c, linear(x) - wp.cross(position, w)), rotate(c, w))
