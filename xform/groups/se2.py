"""SE(2), the rigid motions of the plane, as (position, unit complex) pairs."""

from __future__ import annotations

from typing import Any

from ._base import LieGroup, _batch, argument
from ._fields import field
from ._random import Random
from .so2 import SO2


class SE2(LieGroup):
    """Rigid motions of the plane, `p -> R p + t`: `position (..., 2)` and `unit_complex
    (..., 2)` `[cos t, sin t]`. Tangent: `(..., 3)` = `[vx, vy, theta]`, translation first
    (jaxlie's, and g2o's order). Matrix: `(..., 3, 3)` homogeneous."""

    position: Any = field(2)
    unit_complex: Any = field(2)
    tangent_dim, matrix_dim, space_dim = 3, 3, 2

    # --- constructors -----------------------------------------------------------------------

    @classmethod
    def exp(cls, tangent) -> SE2:
        """Poses of tangents `(..., 3)` = `[vx, vy, theta]` (`se2_exp`).

        Example:
            >>> T = xform.SE2.exp(np.array([1.0, 0.0, np.pi]))
            >>> T.position.round(4) + 0.0, T.unit_complex.round(4) + 0.0
            (array([0.    , 0.6366]), array([-1.,  0.]))
        """
        return cls._trusted(*cls._tangent(tangent)["se2_exp"](tangent))

    @classmethod
    def from_matrix(cls, matrix) -> SE2:
        """From homogeneous matrices `(..., 3, 3)`: the translation column and the rotation's
        first column, as jaxlie (`se2_from_matrix`)."""
        return cls._trusted(*cls._matrix(matrix)["se2_from_matrix"](matrix))

    @classmethod
    def from_rotation_and_translation(cls, rotation: SO2, translation) -> SE2:
        """The poses `p -> R p + t` of rotations (an `SO2`) and translations `(..., 2)`."""
        if not isinstance(rotation, SO2):
            raise TypeError(
                "xform.SE2.from_rotation_and_translation: 'rotation' must be an xform.SO2, "
                f"got {type(rotation).__name__}"
            )
        return cls(translation, rotation.unit_complex)

    @classmethod
    def sample_uniform(
        cls, batch_shape=(), *, seed=None, generator=None, key=None, like=None, dtype=None
    ) -> SE2:
        """Angles uniform in [-pi, pi) and translations uniform in [-1, 1]^2, as jaxlie's."""
        random = Random("SE2.sample_uniform", seed, generator, key, like, dtype)
        batch = _batch(batch_shape, "SE2.sample_uniform")
        angles = random.uniform((*batch, 1), -3.141592653589793, 3.141592653589793)
        ops = argument(cls, "sample_uniform", "angles", angles, (1,))
        return cls._trusted(random.uniform((*batch, 2), -1.0, 1.0), ops["so2_exp"](angles))

    # --- methods ------------------------------------------------------------------------------

    def multiply(self, other: SE2) -> SE2:
        """`self @ other`: `(R1 t2 + t1, z1 z2)`, `other` applied first; batches broadcast
        (`pose_multiply_2d`).

        Example:
            >>> turn = xform.SE2.exp(np.array([0.0, 0.0, np.pi / 2]))
            >>> shift = xform.SE2(np.array([1.0, 0.0]), np.array([1.0, 0.0]))
            >>> (turn @ shift).position.round(6) + 0.0
            array([0., 1.])
        """
        self._same_group(other, "multiply")
        return SE2._trusted(
            *self._ops["pose_multiply_2d"](
                self.position, self.unit_complex, other.position, other.unit_complex
            )
        )

    def apply(self, points):
        """`self @ points`: `R p + t` for points `(..., 2)`."""
        points = self._points(points, "apply")
        return self._ops["transform_points_2d"](self.position, self.unit_complex, points)

    def inverse(self) -> SE2:
        """The inverse poses `(-R^T t, conj(z))` (`pose_inverse_2d`)."""
        return SE2._trusted(*self._ops["pose_inverse_2d"](self.position, self.unit_complex))

    def log(self):
        """The tangents `[vx, vy, theta]` `(..., 3)`, `|theta| <= pi` (`se2_log`): the
        inverse of `exp`."""
        return self._ops["se2_log"](self.position, self.unit_complex)

    def as_matrix(self):
        """Homogeneous matrices `(..., 3, 3)` `[[R, t], [0, 1]]` (`se2_to_matrix`)."""
        return self._ops["se2_to_matrix"](self.position, self.unit_complex)

    def adjoint(self):
        """`(..., 3, 3)`: `T exp(xi) T^-1 = exp(Ad_T xi)` (`se2_adjoint`)."""
        return self._ops["se2_adjoint"](self.position, self.unit_complex)

    def jlog(self):
        """`J_r^-1(log T)`: the derivative of `log(T exp(delta))` in delta at 0."""
        return self._ops["se2_right_jacobian_inverse"](self.log())

    def normalize(self) -> SE2:
        """The poses with unit complex numbers (the position unchanged)."""
        return SE2._trusted(self.position, self._ops["so2_normalize"](self.unit_complex))

    def rotation(self) -> SO2:
        """The rotations, an `SO2` of the batch shape (the same unit complex array)."""
        return SO2._trusted(self.unit_complex)

    def translation(self):
        """The translations `(..., 2)`: the `position` field."""
        return self.position
