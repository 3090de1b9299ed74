"""SE(3), the rigid motions of space, as (position, quaternion) pairs."""

from __future__ import annotations

from typing import Any

from .. import _frameworks
from ._base import LieGroup, _batch, argument
from ._fields import field
from ._random import Random
from .so3 import SO3

# Storage layouts of a pose's 7 parameters: each one's (position, quaternion) columns.
LAYOUTS = {
    "xyz_wxyz": ([0, 1, 2], [3, 4, 5, 6]),  # xform, cuRobo
    "wxyz_xyz": ([4, 5, 6], [0, 1, 2, 3]),  # jaxlie
    "xyz_xyzw": ([0, 1, 2], [6, 3, 4, 5]),  # PyPose, LieTorch
}


class SE3(LieGroup):
    """Rigid motions of 3D space, `p -> R(q) p + t`: `position (..., 3)` and `quaternion
    (..., 4)` `[w, x, y, z]`, the functional API's pose. Tangent: `xi (..., 6) = [rho,
    omega]`, translation first. Matrix: `(..., 4, 4)` homogeneous."""

    position: Any = field(3)
    quaternion: Any = field(4)
    tangent_dim, matrix_dim, space_dim = 6, 4, 3

    # --- constructors -----------------------------------------------------------------------

    @classmethod
    def exp(cls, tangent) -> SE3:
        """Poses of tangents `xi (..., 6) = [rho, omega]`: `(J_l(omega) rho, exp(omega))`
        (`se3_exp`).

        Example:
            >>> T = xform.SE3.exp(np.array([1.0, 0.0, 0.0, 0.0, 0.0, np.pi / 2]))
            >>> T.position.round(4) + 0.0, T.quaternion.round(4)
            (array([0.6366, 0.6366, 0.    ]), array([0.7071, 0.    , 0.    , 0.7071]))
        """
        return cls._trusted(*cls._tangent(tangent)["se3_exp"](tangent))

    @classmethod
    def from_matrix(cls, matrix) -> SE3:
        """From homogeneous matrices `(..., 4, 4)` (`matrix_to_pose`)."""
        return cls._trusted(*cls._matrix(matrix)["matrix_to_pose"](matrix))

    @classmethod
    def from_rotation_and_translation(cls, rotation: SO3, translation) -> SE3:
        """The poses `p -> R p + t` of rotations (an `SO3`) and translations `(..., 3)`."""
        if not isinstance(rotation, SO3):
            raise TypeError(
                "xform.SE3.from_rotation_and_translation: 'rotation' must be an xform.SO3, "
                f"got {type(rotation).__name__}"
            )
        return cls(translation, rotation.quaternion)

    @classmethod
    def from_parameters(cls, parameters, layout: str = "xyz_wxyz") -> SE3:
        """From 7 parameters a pose `(..., 7)` in `layout`: "xyz_wxyz" (xform, cuRobo),
        "wxyz_xyz" (jaxlie), "xyz_xyzw" (PyPose, LieTorch)."""
        argument(cls, "from_parameters", "parameters", parameters, (7,))
        position, quaternion = _layout(layout)
        return cls(parameters[..., position], parameters[..., quaternion])

    @classmethod
    def sample_uniform(
        cls, batch_shape=(), *, seed=None, generator=None, key=None, like=None, dtype=None
    ) -> SE3:
        """Rotations uniform (Haar) and translations uniform in [-1, 1]^3, as jaxlie's."""
        random = Random("SE3.sample_uniform", seed, generator, key, like, dtype)
        batch = _batch(batch_shape, "SE3.sample_uniform")
        return cls._trusted(random.uniform((*batch, 3), -1.0, 1.0), random.quaternions(batch))

    # --- methods ------------------------------------------------------------------------------

    def multiply(self, other: SE3) -> SE3:
        """`self @ other`: `(R1 t2 + t1, q1 q2)`, `other` applied first; batches broadcast
        (`pose_multiply`).

        Example:
            >>> shift = xform.SE3(np.array([1.0, 0.0, 0.0]), np.array([1.0, 0, 0, 0]))
            >>> turn = xform.SE3.exp(np.array([0, 0, 0, 0, 0, np.pi / 2]))
            >>> (turn @ shift).position.round(6) + 0.0  # shift first, then turn
            array([0., 1., 0.])
        """
        self._same_group(other, "multiply")
        return SE3._trusted(
            *self._ops["pose_multiply"](
                self.position, self.quaternion, other.position, other.quaternion
            )
        )

    def apply(self, points):
        """`self @ points`: `R(q) p + t` for points `(..., 3)`, broadcast against the batch
        (`pose_transform_points`).

        Example:
            >>> T = xform.SE3.exp(np.array([0, 0, 1.0, 0, 0, np.pi / 2]))
            >>> (T @ np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])).round(6) + 0.0
            array([[ 0.,  1.,  1.],
                   [-2.,  0.,  1.]])
        """
        points = self._points(points, "apply")
        return self._ops["pose_transform_points"](self.position, self.quaternion, points)

    def inverse(self) -> SE3:
        """The inverse poses `(-R^T t, q*)` (`pose_inverse`).

        Example:
            >>> T = xform.SE3.sample_uniform((3,), seed=0)
            >>> bool(np.allclose((T @ T.inverse()).as_matrix(), np.eye(4)))
            True
        """
        return SE3._trusted(*self._ops["pose_inverse"](self.position, self.quaternion))

    def log(self):
        """The tangents `xi = [rho, omega]` `(..., 6)`, `|omega| <= pi` (`se3_log`): the
        inverse of `exp`.

        Example:
            >>> xi = np.array([0.1, -0.2, 0.3, 0.4, 0.5, -0.6])
            >>> bool(np.allclose(xform.SE3.exp(xi).log(), xi))
            True
        """
        return self._ops["se3_log"](self.position, self.quaternion)

    def as_matrix(self):
        """Homogeneous matrices `(..., 4, 4)` `[[R, t], [0, 1]]` (`pose_to_matrix`).

        Example:
            >>> xform.SE3(np.array([1.0, 2.0, 3.0]), np.array([1.0, 0, 0, 0])).as_matrix()
            array([[1., 0., 0., 1.],
                   [0., 1., 0., 2.],
                   [0., 0., 1., 3.],
                   [0., 0., 0., 1.]])
        """
        return self._ops["pose_to_matrix"](self.position, self.quaternion)

    def adjoint(self):
        """`(..., 6, 6)` `[[R, [t]x R], [0, R]]`: `T exp(xi) T^-1 = exp(Ad_T xi)`."""
        return self._ops["se3_adjoint"](self.position, self.quaternion)

    def jlog(self):
        """`J_r^-1(log T)`: the derivative of `log(T exp(delta))` in delta at 0."""
        return self._ops["se3_right_jacobian_inverse"](self.log())

    def normalize(self) -> SE3:
        """The poses with unit quaternions (the position unchanged): rounding's drift, or a
        gradient step, projected back onto the group."""
        return SE3._trusted(self.position, self._ops["quaternion_normalize"](self.quaternion))

    def interpolate(self, other: SE3, t) -> SE3:
        """The SE(3) geodesic `T1 exp(t log(T1^-1 T2))` (`pose_interpolate`): the
        translation follows a screw."""
        self._same_group(other, "interpolate")
        t = self._parameter(t, "interpolate", other)
        return SE3._trusted(
            *self._ops["pose_interpolate"](
                self.position, self.quaternion, other.position, other.quaternion, t
            )
        )

    def rotation(self) -> SO3:
        """The rotations, an `SO3` of the batch shape (the same quaternion array)."""
        return SO3._trusted(self.quaternion)

    def translation(self):
        """The translations `(..., 3)`: the `position` field."""
        return self.position

    def parameters(self, layout: str = "xyz_wxyz"):
        """The 7 parameters `(..., 7)` in `layout` (see `from_parameters`)."""
        position, quaternion = _layout(layout)
        order = [0] * 7
        for column, source in zip(position + quaternion, range(7)):
            order[column] = source
        joined = _frameworks.of(self.position).concatenate([self.position, self.quaternion])
        return joined[..., order]


def _layout(layout: str):
    if layout not in LAYOUTS:
        raise ValueError(f"xform.SE3: layout {layout!r} must be one of {', '.join(LAYOUTS)}")
    return LAYOUTS[layout]
