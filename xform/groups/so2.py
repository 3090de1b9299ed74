"""SO(2), the rotations of the plane, as unit complex numbers [cos t, sin t]."""

from __future__ import annotations

from typing import Any

from ._base import LieGroup, _batch, _zeros, argument
from ._fields import field
from ._random import Random


class SO2(LieGroup):
    """Rotations of the plane: `unit_complex (..., 2)` = `[cos t, sin t]` (jaxlie's).
    Tangent: the angle `(..., 1)`. Matrix: `(..., 2, 2)`. Nothing is normalised."""

    unit_complex: Any = field(2)
    tangent_dim, matrix_dim, space_dim = 1, 2, 2

    # --- constructors -----------------------------------------------------------------------

    @classmethod
    def exp(cls, tangent) -> SO2:
        """Rotations `[cos t, sin t]` of angles `t` `(..., 1)` (`so2_exp`).

        Example:
            >>> xform.SO2.exp(np.array([np.pi / 2])).unit_complex.round(6) + 0.0
            array([0., 1.])
        """
        return cls._trusted(cls._tangent(tangent)["so2_exp"](tangent))

    @classmethod
    def from_angle(cls, theta) -> SO2:
        """From angles `(...)`, radians."""
        ops = argument(cls, "from_angle", "theta", theta, ())
        return cls._trusted(ops["so2_exp"](theta[..., None]))

    @classmethod
    def from_matrix(cls, matrix) -> SO2:
        """From rotation matrices `(..., 2, 2)`: their first column, as jaxlie
        (`so2_from_matrix`)."""
        return cls._trusted(cls._matrix(matrix)["so2_from_matrix"](matrix))

    @classmethod
    def sample_uniform(
        cls, batch_shape=(), *, seed=None, generator=None, key=None, like=None, dtype=None
    ) -> SO2:
        """Angles uniform in [-pi, pi)."""
        random = Random("SO2.sample_uniform", seed, generator, key, like, dtype)
        angles = random.uniform(
            (*_batch(batch_shape, "SO2.sample_uniform"), 1), -3.141592653589793, 3.141592653589793
        )
        return cls.exp(angles)

    # --- methods ------------------------------------------------------------------------------

    def multiply(self, other: SO2) -> SO2:
        """`self @ other`: the complex product `(..., 2)`; batches broadcast
        (`so2_multiply`)."""
        self._same_group(other, "multiply")
        return SO2._trusted(self._ops["so2_multiply"](self.unit_complex, other.unit_complex))

    def apply(self, points):
        """`self @ points`: `R p` for points `(..., 2)`."""
        points = self._points(points, "apply")
        return self._ops["so2_rotate"](self.unit_complex, points)

    def inverse(self) -> SO2:
        """The conjugates `[cos t, -sin t]`: the inverse of a unit complex number."""
        return SO2._trusted(self._ops["so2_inverse"](self.unit_complex))

    def log(self):
        """The angle `(..., 1)` in `[-pi, pi]` (`so2_log`, `atan2`)."""
        return self._ops["so2_log"](self.unit_complex)

    def as_angle(self):
        """The angles `(...)` in `[-pi, pi]`, radians.

        Example:
            >>> float(xform.SO2.from_angle(np.array(3.0)).as_angle())
            3.0
        """
        return self.log()[..., 0]

    def as_matrix(self):
        """Rotation matrices `(..., 2, 2)` `[[cos t, -sin t], [sin t, cos t]]`."""
        return self._ops["so2_to_matrix"](self.unit_complex)

    def adjoint(self):
        """`(..., 1, 1)` ones: rotations of the plane commute."""
        return _ones_matrix(self)

    def jlog(self):
        """`(..., 1, 1)` ones: `log(R exp(d)) = log(R) + d`."""
        return _ones_matrix(self)

    def normalize(self) -> SO2:
        """Unit complex numbers `z / |z|`."""
        return SO2._trusted(self._ops["so2_normalize"](self.unit_complex))


def _ones_matrix(element: LieGroup):
    return _zeros((*element.shape, 1, 1), element._arrays[0]) + 1
