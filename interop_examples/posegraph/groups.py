"""How the example's poses are xform's group objects, and what it needs of them beyond
their methods: the group of a file, rotations as files write them, the chordal start's
projection onto the group, and batches joined.

A batch of poses is an `xform.SE3` (position (n, 3), quaternion (n, 4) [w, x, y, z]) or an
`xform.SE2` (position (n, 2), unit complex (n, 2) [cos theta, sin theta]). Perturbations are
on the right, `manifold.rplus(T, delta) = T @ G.exp(delta)`, with tangents [rho, omega]
(SE(3)) and [x, y, theta] (SE(2)): the order of g2o's information matrices. A problem keeps
its poses over NumPy; `fw.group` moves them into the framework `fw`, whose xform ops the
objects' methods then run.
"""

from __future__ import annotations

import numpy as np

from xform import SE2, SE3, SO2, SO3, to_numpy

from .framework import array_in, element_in


def group_of(dim: int) -> type[SE3] | type[SE2]:
    """The group of a g2o file of dimension `dim` (3 or 2)."""
    return SE3 if dim == 3 else SE2


def from_file(fw, group, positions: np.ndarray, rotations: np.ndarray):
    """Poses (NumPy) from a file's positions and rotations, through the framework `fw`:
    quaternions (n, 4) normalised, angles (n,) as unit complex numbers."""
    positions, rotations = array_in(fw, positions), array_in(fw, rotations)
    if group is SE3:
        return SE3(positions, rotations).normalize().to_numpy()
    return SE2.from_rotation_and_translation(SO2.from_angle(rotations), positions).to_numpy()


def to_file(fw, poses) -> tuple[np.ndarray, np.ndarray]:
    """The poses' positions and rotations as a file writes them: quaternions, or angles."""
    if isinstance(poses, SE3):
        return np.asarray(poses.position), np.asarray(poses.quaternion)
    return np.asarray(poses.position), to_numpy(element_in(fw, poses).rotation().as_angle())


def nearest_rotations(fw, group, matrices):
    """The rotation nearest to each matrix (n, D, D) in the Frobenius norm, as an `SO3` or
    `SO2` over `fw`'s arrays (`matrices` NumPy or `fw`'s, traced too: inside a compiled
    JAX function). In 3D by special_procrustes (quaternions with w >= 0). In 2D in closed
    form: |M - R(theta)|^2 = const - 2 ((a + d) cos theta + (c - b) sin theta) for
    M = [[a, b], [c, d]], least at the angle of (a + d, c - b), a unit complex number once
    normalised (where both are 0, every rotation is as near: the identity; a NaN stays
    NaN). The closed form runs on NumPy but for traced matrices: XLA flushes subnormal
    numbers to zero, which would make a tiny matrix's rotation the identity."""
    traced = fw.owns(matrices) and not fw.concrete(matrices)
    if group is SE3:
        moved = matrices if fw.owns(matrices) else array_in(fw, matrices)
        return SO3.from_matrix(fw.functions()["special_procrustes"](moved))
    xp = fw.namespace() if traced else np
    if not traced:
        matrices = to_numpy(matrices)
    z = xp.stack(
        [matrices[:, 0, 0] + matrices[:, 1, 1], matrices[:, 1, 0] - matrices[:, 0, 1]], axis=-1
    )
    largest = xp.max(xp.abs(z), axis=-1, keepdims=True)
    scaled = z / xp.where(largest == 0, 1.0, largest)  # |z|^2 stays finite
    unit = SO2(xp.where(largest == 0, xp.asarray([1.0, 0.0], dtype=z.dtype), scaled))
    return (unit if traced else element_in(fw, unit)).normalize()


def concatenate(elements):
    """One batch of the elements (of one group, over NumPy), in order."""
    group = type(elements[0])
    return group(
        *(np.concatenate([getattr(e, name) for e in elements]) for name, _ in group.fields)
    )
