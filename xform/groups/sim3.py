"""Sim(3), the similarity transforms of space `p -> s R p + t`, as (position, quaternion,
scale) triples."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _frameworks
from ._base import LieGroup, _batch, argument
from ._fields import check_positive, field
from ._random import Random
from .se3 import SE3
from .so3 import SO3

# Storage layouts of a similarity's 8 parameters: each one's (position, quaternion, scale)
# columns.
LAYOUTS = {
    "xyz_wxyz_s": ([0, 1, 2], [3, 4, 5, 6], 7),  # xform's field order
    "xyz_xyzw_s": ([0, 1, 2], [6, 3, 4, 5], 7),  # LieTorch, PyPose
}


class Sim3(LieGroup):
    """Similarity transforms of 3D space, `p -> s R(q) p + t`: `position (..., 3)`,
    `quaternion (..., 4)` `[w, x, y, z]` and `scale (...)`, `s > 0` (a ValueError names the
    first scale that is not positive and finite, where the values are not traced).
    Tangent: `xi (..., 7) = [rho, omega, sigma]`, `s = e^sigma` (LieTorch's and PyPose's
    order). Matrix: `(..., 4, 4)` `[[s R, t], [0, 1]]`.

    The scale array is `T.scale()` (a method, as PyPose's, Sophus' and GTSAM's); the
    constructor takes it as its third argument."""

    position: Any = field(3)
    quaternion: Any = field(4)
    _scale: Any = field(None, alias="scale", positive=True)
    tangent_dim, matrix_dim, space_dim = 7, 4, 3

    # --- constructors -----------------------------------------------------------------------

    @classmethod
    def exp(cls, tangent) -> Sim3:
        """`sim3_exp`: `(W(omega, sigma) rho, exp(omega), e^sigma)`."""
        return cls._trusted(*cls._tangent(tangent)["sim3_exp"](tangent))

    @classmethod
    def from_matrix(cls, matrix) -> Sim3:
        """From `(..., 4, 4)` matrices `[[s R, t], [0, 1]]` (`matrix_to_sim3`)."""
        return cls._trusted(*cls._matrix(matrix)["matrix_to_sim3"](matrix))

    @classmethod
    def from_rotation_and_translation(cls, rotation: SO3, translation, scale=None) -> Sim3:
        """From an `SO3`, translations `(..., 3)` and scales `(...)` (1 if omitted)."""
        if not isinstance(rotation, SO3):
            raise TypeError(
                "xform.Sim3.from_rotation_and_translation: 'rotation' must be an xform.SO3, "
                f"got {type(rotation).__name__}"
            )
        if scale is None:
            scale = _ones_like_batch(rotation.quaternion)
        return cls(translation, rotation.quaternion, scale)

    @classmethod
    def from_se3(cls, pose: SE3, scale=1.0) -> Sim3:
        """The similarity of a rigid motion with scale `scale` (a number, or an array that
        broadcasts against the batch): `s R p + t`."""
        if not isinstance(pose, SE3):
            raise TypeError(
                f"xform.Sim3.from_se3: 'pose' must be an xform.SE3, got {type(pose).__name__}"
            )
        return cls(
            pose.position, pose.quaternion, _array(_ones_like_batch(pose.quaternion) * scale)
        )

    @classmethod
    def from_parameters(cls, parameters, layout: str = "xyz_wxyz_s") -> Sim3:
        """From 8 parameters `(..., 8)` in `layout`: "xyz_wxyz_s" (xform's field order) or
        "xyz_xyzw_s" (LieTorch's and PyPose's)."""
        argument(cls, "from_parameters", "parameters", parameters, (8,))
        position, quaternion, scale = _layout(layout)
        check_positive("Sim3.from_parameters", "parameters", parameters[..., scale], (scale,),
                       f"the scale (column {scale} of 'parameters')")  # fmt: skip
        return cls(parameters[..., position], parameters[..., quaternion], parameters[..., scale])

    @classmethod
    def from_registration(cls, points, targets, weights=None) -> Sim3:
        """The similarity minimising `sum_i w_i |s R p_i + t - y_i|^2` (Umeyama):
        `rigid_registration(points, targets, weights, scale=True)`, points and targets
        `(..., N, 3)`, weights `(..., N)`."""
        ops = argument(cls, "from_registration", "points", points, (3,))
        return cls._trusted(*ops["rigid_registration"](points, targets, weights, scale=True))

    @classmethod
    def sample_uniform(
        cls, batch_shape=(), *, seed=None, generator=None, key=None, like=None, dtype=None
    ) -> Sim3:
        """Rotations uniform (Haar), translations uniform in [-1, 1]^3 (as SE3's) and
        scales e^sigma with sigma uniform in [-1, 1]."""
        random = Random("Sim3.sample_uniform", seed, generator, key, like, dtype)
        batch = _batch(batch_shape, "Sim3.sample_uniform")
        position = random.uniform((*batch, 3), -1.0, 1.0)
        quaternion = random.quaternions(batch)
        # e^sigma as the scale of exp([0, 0, sigma])
        sigma = random.uniform((*batch, 1), -1.0, 1.0)
        ops = argument(cls, "sample_uniform", "sigma", sigma, (1,))
        no_motion = 0 * position
        twist = _frameworks.of(sigma).concatenate([no_motion, no_motion, sigma])
        return cls._trusted(position, quaternion, ops["sim3_exp"](twist)[2])

    # --- methods ------------------------------------------------------------------------------

    def multiply(self, other: Sim3) -> Sim3:
        """`self @ other`: `(s1 R1 t2 + t1, q1 q2, s1 s2)`, `other` applied first."""
        self._same_group(other, "multiply")
        return Sim3._trusted(*self._ops["sim3_multiply"](*self._arrays, *other._arrays))

    def apply(self, points):
        """`self @ points`: `s R(q) p + t` for points `(..., 3)`, broadcast against the
        batch."""
        points = self._points(points, "apply")
        return self._ops["sim3_transform_points"](*self._arrays, points)

    def inverse(self) -> Sim3:
        """The inverse `(-R^T t / s, q*, 1 / s)`."""
        return Sim3._trusted(*self._ops["sim3_inverse"](*self._arrays))

    def log(self):
        """`xi = [rho, omega, sigma]` `(..., 7)` (`sim3_log`)."""
        return self._ops["sim3_log"](*self._arrays)

    def as_matrix(self):
        """`(..., 4, 4)` `[[s R, t], [0, 1]]`."""
        return self._ops["sim3_to_matrix"](*self._arrays)

    def adjoint(self):
        """`(..., 7, 7)` `[[s R, [t]x R, -t], [0, R, 0], [0, 0, 1]]`:
        `T exp(xi) T^-1 = exp(Ad_T xi)`."""
        return self._ops["sim3_adjoint"](*self._arrays)

    def jlog(self):
        """`J_r^-1(log T)`: the derivative of `log(T exp(delta))` in delta at 0."""
        return self._ops["sim3_right_jacobian_inverse"](self.log())

    def normalize(self) -> Sim3:
        """The quaternion normalised; position and scale as they are."""
        return Sim3._trusted(
            self.position, self._ops["quaternion_normalize"](self.quaternion), self._scale
        )

    def rotation(self) -> SO3:
        """The rotation, an `xform.SO3` of the same batch."""
        return SO3._trusted(self.quaternion)

    def translation(self):
        """The translation `t`, `(..., 3)`: `position`."""
        return self.position

    def scale(self):
        """The scales `(...)`."""
        return self._scale

    def as_se3(self) -> SE3:
        """The rigid motion `(t, q)`, the scale dropped."""
        return SE3._trusted(self.position, self.quaternion)

    def parameters(self, layout: str = "xyz_wxyz_s"):
        """The 8 parameters `(..., 8)` in `layout` (see `from_parameters`)."""
        position, quaternion, scale = _layout(layout)
        order = [0] * 8
        for column, source in zip([*position, *quaternion, scale], range(8)):
            order[column] = source
        fields = [self.position, self.quaternion, self._scale[..., None]]
        joined = _frameworks.of(self.position).concatenate(fields)
        return joined[..., order]


def _layout(layout: str):
    if layout not in LAYOUTS:
        raise ValueError(f"xform.Sim3: layout {layout!r} must be one of {', '.join(LAYOUTS)}")
    return LAYOUTS[layout]


def _ones_like_batch(quaternion):
    """Ones of the batch shape of `quaternion (..., 4)`, in its framework and dtype."""
    return _array(quaternion[..., 0] * 0 + 1)


def _array(x):
    """NumPy's arithmetic on 0-d arrays returns scalars: back to a 0-d array."""
    return np.asarray(x) if isinstance(x, np.generic) else x
