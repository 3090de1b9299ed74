"""SO(3), the rotations of space, as unit quaternions [w, x, y, z]."""

from __future__ import annotations

from typing import Any

from ._base import LieGroup, _batch, argument
from ._fields import field
from ._random import Random


class SO3(LieGroup):
    """Rotations of 3D space: `quaternion (..., 4)`, `[w, x, y, z]` (cuRobo's and jaxlie's
    order). Tangent: a rotation vector `(..., 3)` (axis times angle). Matrix: `(..., 3, 3)`.
    Nothing is normalised: for a non-unit quaternion each method is its op's formula."""

    quaternion: Any = field(4)
    tangent_dim, matrix_dim, space_dim = 3, 3, 3

    # --- constructors -----------------------------------------------------------------------

    @classmethod
    def exp(cls, tangent) -> SO3:
        """Rotations of rotation vectors `omega (..., 3)` (axis times angle): by `|omega|`
        about `omega` (`so3_exp`), `w >= 0`.

        Example:
            >>> xform.SO3.exp(np.array([0.0, 0.0, np.pi / 2])).quaternion.round(4)
            array([0.7071, 0.    , 0.    , 0.7071])
        """
        return cls._trusted(cls._tangent(tangent)["so3_exp"](tangent))

    @classmethod
    def from_matrix(cls, matrix) -> SO3:
        """From rotation matrices `(..., 3, 3)` (`matrix_to_quaternion`, w >= 0)."""
        return cls._trusted(cls._matrix(matrix)["matrix_to_quaternion"](matrix))

    @classmethod
    def from_euler(cls, angles, convention: str) -> SO3:
        """From Euler angles `(..., 3)` in SciPy's `convention` ("xyz" extrinsic, "XYZ"
        intrinsic, ...)."""
        ops = argument(cls, "from_euler", "angles", angles, (3,))
        return cls._trusted(ops["euler_to_quaternion"](angles, convention))

    @classmethod
    def from_quaternion_xyzw(cls, quaternion) -> SO3:
        """From quaternions stored `[x, y, z, w]` (SciPy, PyPose, LieTorch, Warp)."""
        argument(cls, "from_quaternion_xyzw", "quaternion", quaternion, (4,))
        return cls(quaternion[..., [3, 0, 1, 2]])

    @classmethod
    def from_rotation_6d(cls, d6) -> SO3:
        """From Zhou et al.'s 6D representation `(..., 6)` (pytorch3d's: two matrix rows)."""
        ops = argument(cls, "from_rotation_6d", "d6", d6, (6,))
        return cls._trusted(ops["matrix_to_quaternion"](ops["rotation_6d_to_matrix"](d6)))

    @classmethod
    def sample_uniform(
        cls, batch_shape=(), *, seed=None, generator=None, key=None, like=None, dtype=None
    ) -> SO3:
        """Uniform (Haar) rotations: normalised standard normals, drawn as
        `random_quaternion` draws (NumPy `seed`, torch `generator`, JAX `key`)."""
        random = Random("SO3.sample_uniform", seed, generator, key, like, dtype)
        return cls._trusted(random.quaternions(_batch(batch_shape, "SO3.sample_uniform")))

    # --- methods ------------------------------------------------------------------------------

    def multiply(self, other: SO3) -> SO3:
        """`self @ other`: the Hamilton product `(..., 4)`, `other` applied first; batches
        broadcast (`quaternion_multiply`)."""
        self._same_group(other, "multiply")
        return SO3._trusted(self._ops["quaternion_multiply"](self.quaternion, other.quaternion))

    def apply(self, points):
        """`self @ points`: `R(q) p` for points `(..., 3)` (`quaternion_rotate`)."""
        points = self._points(points, "apply")
        return self._ops["quaternion_rotate"](self.quaternion, points)

    def inverse(self) -> SO3:
        """The conjugates `[w, -x, -y, -z]`: the inverse of a unit quaternion."""
        return SO3._trusted(self._ops["quaternion_conjugate"](self.quaternion))

    def log(self):
        """The rotation vectors `(..., 3)`, `|omega| <= pi` (`so3_log`): the inverse of
        `exp`, exact at the identity and at pi.

        Example:
            >>> xform.SO3(np.array([0.0, 1.0, 0.0, 0.0])).log().round(6)  # pi about x
            array([3.141593, 0.      , 0.      ])
        """
        return self._ops["so3_log"](self.quaternion)

    def as_matrix(self):
        """Rotation matrices `(..., 3, 3)` (`quaternion_to_matrix`)."""
        return self._ops["quaternion_to_matrix"](self.quaternion)

    def adjoint(self):
        """`(..., 3, 3)`: the rotation matrix."""
        return self.as_matrix()

    def jlog(self):
        """`J_r^-1(log R)`: the derivative of `log(R exp(delta))` in delta at 0."""
        return self._ops["so3_right_jacobian_inverse"](self.log())

    def normalize(self) -> SO3:
        """Unit quaternions `q / |q|`: rounding's drift, or a gradient step, projected
        back onto the group."""
        return SO3._trusted(self._ops["quaternion_normalize"](self.quaternion))

    def interpolate(self, other: SO3, t) -> SO3:
        """Spherical linear interpolation along the shorter arc (`quaternion_slerp`)."""
        self._same_group(other, "interpolate")
        t = self._parameter(t, "interpolate", other)
        return SO3._trusted(self._ops["quaternion_slerp"](self.quaternion, other.quaternion, t))

    def as_quaternion_xyzw(self):
        """The quaternions stored `[x, y, z, w]` `(..., 4)` (SciPy, PyPose, LieTorch)."""
        return self.quaternion[..., [1, 2, 3, 0]]

    def as_euler(self, convention: str):
        """Euler angles `(..., 3)` in SciPy's `convention` ("xyz" extrinsic, "XYZ"
        intrinsic, ...; `quaternion_to_euler`).

        Example:
            >>> R = xform.SO3.from_euler(np.array([0.1, 0.2, 0.3]), "xyz")
            >>> R.as_euler("xyz").round(6)
            array([0.1, 0.2, 0.3])
        """
        return self._ops["quaternion_to_euler"](self.quaternion, convention)

    def as_rotation_6d(self):
        """Zhou et al.'s 6D representation `(..., 6)`: the matrix's first two rows."""
        return self._ops["matrix_to_rotation_6d"](self.as_matrix())
