"""The nearest rotation to a matrix (special orthogonal Procrustes), and rigid
registration of point sets (weighted Kabsch, and Umeyama with scale), batched.

Warp's `svd3` is the signed SVD, M = U diag(s) V^T with U and V rotations and the sign of
det(M) on the smallest singular value, so the nearest rotation is U V^T. Its derivative
(the polar decomposition's, M = R P): dR = U X V^T with X skew,
X_ij = (C_ij - C_ji) / (s_i + s_j), C = U^T dM V. The denominators are *sums* of signed
singular values, not differences: close or equal singular values (a rotation itself,
s = (1, 1, 1)) are as stable as any. They vanish only where the nearest rotation is not
unique (s_i + s_j = 0: two zero singular values, or det(M) < 0 with |s_2| = |s_3|); the
component is then set to zero, and nearby it grows as 1 / (s_i + s_j), as the rotation
itself does.

Registration reduces over the points: weighted sums (`Result` without the N group: see
`_op.py`), centred second moments, the Procrustes rotation of their cross-covariance,
then the translation (and scale).
"""

import inspect
from typing import Any

import warp as wp

from .._define import define_op
from .._op import Composite, Operand, Result
from . import _families as families
from .conversions import matrix_to_quat, matrix_to_quat_tangent, matrix_to_quat_vjp


@wp.func
def largest_magnitude(m: Any):
    """max |m_ij|."""
    rows = wp.vec3d(wp.max(wp.abs(m[0])), wp.max(wp.abs(m[1])), wp.max(wp.abs(m[2])))
    return wp.max(rows)


@wp.func
def signed_svd(m: Any):
    """In float64 whatever the input: Warp's float32 `svd3` fails to converge on about
    one matrix in a thousand (errors up to 2e-2 in the nearest rotation, at well
    separated singular values); float64 costs little next to the iteration.

    Of M / max |M_ij|, with the singular values scaled back: `svd3` has absolute
    thresholds (1e-12 in float64) that give a wrong U and V for entries below ~1e-11,
    and its squares overflow for entries near 1e100. U and V are those of M itself, so
    the rotation and its derivatives (which divide by sums of these s) see no scaling.
    A zero matrix stays as it is; NaN and Inf still propagate."""
    md = wp.mat33d(m)
    scale = largest_magnitude(md)
    if scale > wp.float64(0.0):
        md = md / scale
    else:
        scale = wp.float64(1.0)
    u = wp.mat33d()
    s = wp.vec3d()
    v = wp.mat33d()
    wp.svd3(md, u, s, v)
    return (
        wp.matrix(u, shape=(3, 3), dtype=type(m[0, 0])),
        wp.vector(scale * s, length=3, dtype=type(m[0, 0])),
        wp.matrix(v, shape=(3, 3), dtype=type(m[0, 0])),
    )


@wp.func
def ratio_or_zero(numerator: Any, denominator: Any):
    if denominator == type(denominator)(0.0):
        return type(denominator)(0.0)
    return numerator / denominator


@wp.func
def skew_over_sums(a: Any, s: Any):
    """The skew matrix X with X_ij = (a_ij - a_ji) / (s_i + s_j)."""
    x01 = ratio_or_zero(a[0, 1] - a[1, 0], s[0] + s[1])
    x02 = ratio_or_zero(a[0, 2] - a[2, 0], s[0] + s[2])
    x12 = ratio_or_zero(a[1, 2] - a[2, 1], s[1] + s[2])
    zero = type(s[0])(0.0)
    return wp.matrix(zero, x01, x02, -x01, zero, x12, -x02, -x12, zero, shape=(3, 3))


@wp.func
def nearest_rotation_and_svd(m: Any):
    """U V^T for the signed SVD M = U diag(s) V^T, and U, s, V, which its derivative
    reuses."""
    u, s, v = signed_svd(m)
    return u @ wp.transpose(v), u, s, v


@wp.func
def nearest_rotation(m: Any):
    """U V^T for the signed SVD M = U diag(s) V^T: argmin over rotations R of |R - M|."""
    rotation, u, s, v = nearest_rotation_and_svd(m)
    return rotation


@wp.func
def nearest_rotation_derivative(u: Any, s: Any, v: Any, d: Any):
    """dR along dM = d, given the signed SVD of M; the map is self-adjoint (the skew part
    of a matrix, scaled per entry), so it is also the VJP of a cotangent d."""
    return u @ skew_over_sums(wp.transpose(u) @ d @ v, s) @ wp.transpose(v)


@wp.func
def nearest_rotation_tangent(m: Any, dm: Any):
    u, s, v = signed_svd(m)
    return nearest_rotation_derivative(u, s, v, dm)


SPECIAL_PROCRUSTES = define_op(
    "special_procrustes",
    nearest_rotation,
    operands={"matrix": (3, 3)},
    results={"out_rotation": (3, 3)},
    tangent=nearest_rotation_tangent,
    vjp=nearest_rotation_tangent,
    doc="The rotation nearest to M (Frobenius): U V^T for M = U diag(s) V^T with U, V "
    "rotations (the sign of det(M) on the smallest singular value). Its derivative "
    "divides by sums of singular values, so it is stable where they are close or equal.",
    family=families.UTILITIES,
)


# --- rigid registration: sums over the points, centred moments, then the pose ---------------

_POINTS = ("...", "N")  # the points' batch: the leading dimensions, then the N summed over
_PER_SET = ("...",)


@wp.func
def weighted_sums(points: Any, targets: Any, weights: Any):
    return weights, weights * points, weights * targets


@wp.func
def unweighted_sums(points: Any, targets: Any):
    return type(points[0])(1.0), points, targets


@wp.func
def weighted_sums_tangent(
    points: Any, targets: Any, weights: Any, d_points: Any, d_targets: Any, d_weights: Any
):
    return (
        d_weights,
        d_weights * points + weights * d_points,
        d_weights * targets + weights * d_targets,
    )


@wp.func
def weighted_sums_vjp(
    points: Any, targets: Any, weights: Any, g_total: Any, g_point: Any, g_target: Any
):
    return (
        weights * g_point,
        weights * g_target,
        g_total + wp.dot(g_point, points) + wp.dot(g_target, targets),
    )


@wp.func
def unweighted_sums_tangent(points: Any, targets: Any, d_points: Any, d_targets: Any):
    return type(points[0])(0.0), d_points, d_targets


@wp.func
def unweighted_sums_vjp(points: Any, targets: Any, g_total: Any, g_point: Any, g_target: Any):
    return g_point, g_target


@wp.func
def centroids(total: Any, point_sum: Any, target_sum: Any):
    """The set's centroids and 1 / total: one division per point, not one per component
    of each (divisions bound the per-point code of the moments on a CPU, NOTES 29)."""
    inverse = type(total)(1.0) / total
    return inverse * point_sum, inverse * target_sum, inverse


@wp.func
def weighted_moments(
    points: Any, targets: Any, weights: Any, total: Any, point_sum: Any, target_sum: Any
):
    """w y~ p~^T and w |p~|^2 about the centroids (sums / total weight): two passes, so far
    from the origin nothing cancels."""
    point_mean, target_mean, _inverse = centroids(total, point_sum, target_sum)
    p = points - point_mean
    y = targets - target_mean
    return weights * wp.outer(y, p), weights * wp.dot(p, p)


@wp.func
def weighted_moments_tangent(
    points: Any, targets: Any, weights: Any, total: Any, point_sum: Any, target_sum: Any,
    d_points: Any, d_targets: Any, d_weights: Any, d_total: Any, d_point_sum: Any,
    d_target_sum: Any,
):  # fmt: skip
    point_mean, target_mean, inverse = centroids(total, point_sum, target_sum)
    p = points - point_mean
    y = targets - target_mean
    dp = d_points - inverse * (d_point_sum - d_total * point_mean)
    dy = d_targets - inverse * (d_target_sum - d_total * target_mean)
    two = type(total)(2.0)
    return (
        d_weights * wp.outer(y, p) + weights * (wp.outer(dy, p) + wp.outer(y, dp)),
        d_weights * wp.dot(p, p) + (two * weights) * wp.dot(p, dp),
    )


@wp.func
def weighted_moments_vjp(
    points: Any, targets: Any, weights: Any, total: Any, point_sum: Any, target_sum: Any,
    g_moment: Any, g_variance: Any,
):  # fmt: skip
    """The centroids' cotangents are summed over a set's points, where they cancel (the
    centred points sum to zero) but for rounding: kept, so that the op is exact alone."""
    point_mean, target_mean, inverse = centroids(total, point_sum, target_sum)
    p = points - point_mean
    y = targets - target_mean
    moment_p = g_moment @ p
    p_bar = weights * (wp.transpose(g_moment) @ y + (type(total)(2.0) * g_variance) * p)
    y_bar = weights * moment_p
    return (
        p_bar,
        y_bar,
        wp.dot(y, moment_p) + g_variance * wp.dot(p, p),
        inverse * (wp.dot(p_bar, point_mean) + wp.dot(y_bar, target_mean)),
        -inverse * p_bar,
        -inverse * y_bar,
    )


@wp.func
def unweighted_moments(points: Any, targets: Any, total: Any, point_sum: Any, target_sum: Any):
    return weighted_moments(points, targets, type(total)(1.0), total, point_sum, target_sum)


@wp.func
def unweighted_moments_tangent(
    points: Any, targets: Any, total: Any, point_sum: Any, target_sum: Any,
    d_points: Any, d_targets: Any, d_total: Any, d_point_sum: Any, d_target_sum: Any,
):  # fmt: skip
    zero, one = type(total)(0.0), type(total)(1.0)
    return weighted_moments_tangent(
        points, targets, one, total, point_sum, target_sum,
        d_points, d_targets, zero, d_total, d_point_sum, d_target_sum,
    )  # fmt: skip


@wp.func
def unweighted_moments_vjp(
    points: Any, targets: Any, total: Any, point_sum: Any, target_sum: Any,
    g_moment: Any, g_variance: Any,
):  # fmt: skip
    p_bar, y_bar, _w_bar, total_bar, point_sum_bar, target_sum_bar = weighted_moments_vjp(
        points, targets, type(total)(1.0), total, point_sum, target_sum, g_moment, g_variance
    )
    return p_bar, y_bar, total_bar, point_sum_bar, target_sum_bar


@wp.func
def pose_of_moments(moment: Any, variance: Any, total: Any, point_sum: Any, target_sum: Any):
    """R = nearest rotation to M = sum w y~ p~^T (it maximises tr(R^T M)), the scale
    s = tr(R^T M) / sum w |p~|^2, and t = y_bar - s R p_bar."""
    rotation = nearest_rotation(moment)
    scale = wp.ddot(rotation, moment) / variance
    position = target_sum / total - scale * (rotation @ (point_sum / total))
    return position, matrix_to_quat(rotation), scale


@wp.func
def pose_of_moments_tangent(
    moment: Any, variance: Any, total: Any, point_sum: Any, target_sum: Any,
    d_moment: Any, d_variance: Any, d_total: Any, d_point_sum: Any, d_target_sum: Any,
):  # fmt: skip
    """d tr(R^T M) = tr(R^T dM): tr(dR^T M) vanishes, dR = R (skew) and R^T M symmetric."""
    rotation, u, s, v = nearest_rotation_and_svd(moment)
    scale = wp.ddot(rotation, moment) / variance
    point_mean = point_sum / total
    d_rotation = nearest_rotation_derivative(u, s, v, d_moment)
    d_scale = (wp.ddot(rotation, d_moment) - scale * d_variance) / variance
    d_point_mean = (d_point_sum - point_mean * d_total) / total
    d_target_mean = (d_target_sum - target_sum / total * d_total) / total
    d_position = (
        d_target_mean
        - d_scale * (rotation @ point_mean)
        - scale * (d_rotation @ point_mean + rotation @ d_point_mean)
    )
    return d_position, matrix_to_quat_tangent(rotation, d_rotation), d_scale


@wp.func
def pose_of_moments_vjp(
    moment: Any, variance: Any, total: Any, point_sum: Any, target_sum: Any,
    g_position: Any, g_quaternion: Any, g_scale: Any,
):  # fmt: skip
    rotation, u, s, v = nearest_rotation_and_svd(moment)
    scale = wp.ddot(rotation, moment) / variance
    point_mean = point_sum / total
    target_mean = target_sum / total
    g_rotation = matrix_to_quat_vjp(rotation, g_quaternion) - scale * wp.outer(
        g_position, point_mean
    )
    g_scale_total = g_scale - wp.dot(g_position, rotation @ point_mean)
    g_point_mean = -scale * (wp.transpose(rotation) @ g_position)
    g_moment = (
        nearest_rotation_derivative(u, s, v, g_rotation) + (g_scale_total / variance) * rotation
    )
    g_total = -(wp.dot(g_point_mean, point_mean) + wp.dot(g_position, target_mean)) / total
    return (
        g_moment,
        -g_scale_total * scale / variance,
        g_total,
        g_point_mean / total,
        g_position / total,
    )


@wp.func
def rigid_pose_of_moment(moment: Any, total: Any, point_sum: Any, target_sum: Any):
    """Scale 1: R as above, t = y_bar - R p_bar."""
    rotation = nearest_rotation(moment)
    position = target_sum / total - rotation @ (point_sum / total)
    return position, matrix_to_quat(rotation)


@wp.func
def rigid_pose_of_moment_tangent(
    moment: Any, total: Any, point_sum: Any, target_sum: Any,
    d_moment: Any, d_total: Any, d_point_sum: Any, d_target_sum: Any,
):  # fmt: skip
    rotation, u, s, v = nearest_rotation_and_svd(moment)
    point_mean = point_sum / total
    d_rotation = nearest_rotation_derivative(u, s, v, d_moment)
    d_point_mean = (d_point_sum - point_mean * d_total) / total
    d_target_mean = (d_target_sum - target_sum / total * d_total) / total
    d_position = d_target_mean - d_rotation @ point_mean - rotation @ d_point_mean
    return d_position, matrix_to_quat_tangent(rotation, d_rotation)


@wp.func
def rigid_pose_of_moment_vjp(
    moment: Any, total: Any, point_sum: Any, target_sum: Any, g_position: Any, g_quaternion: Any
):
    rotation, u, s, v = nearest_rotation_and_svd(moment)
    point_mean = point_sum / total
    g_rotation = matrix_to_quat_vjp(rotation, g_quaternion) - wp.outer(g_position, point_mean)
    g_point_mean = -(wp.transpose(rotation) @ g_position)
    g_total = -(wp.dot(g_point_mean, point_mean) + wp.dot(g_position, target_sum / total)) / total
    g_moment = nearest_rotation_derivative(u, s, v, g_rotation)
    return g_moment, g_total, g_point_mean / total, g_position / total


def _points(**names) -> dict:
    return {name: Operand(element, _POINTS) for name, element in names.items()}


def _per_set(**names) -> dict:
    return {name: Operand(element, _PER_SET) for name, element in names.items()}


_SUMS = {"total": Result((), _PER_SET), "point_sum": Result((3,), _PER_SET),
         "target_sum": Result((3,), _PER_SET)}  # fmt: skip
_MOMENTS = {"moment": Result((3, 3), _PER_SET), "variance": Result((), _PER_SET)}

REGISTRATION_SUMS = {
    True: define_op(
        "rigid_registration_weighted_sums",
        weighted_sums,
        operands=_points(points=(3,), targets=(3,), weights=()),
        results=_SUMS,
        tangent=weighted_sums_tangent,
        vjp=weighted_sums_vjp,
        doc="Per point set: the total weight and the weighted sums of points and targets.",
    ),
    False: define_op(
        "rigid_registration_sums",
        unweighted_sums,
        operands=_points(points=(3,), targets=(3,)),
        results=_SUMS,
        tangent=unweighted_sums_tangent,
        vjp=unweighted_sums_vjp,
        doc="Per point set: the point count and the sums of points and targets.",
    ),
}
REGISTRATION_MOMENTS = {
    True: define_op(
        "rigid_registration_weighted_moments",
        weighted_moments,
        operands={
            **_points(points=(3,), targets=(3,), weights=()),
            **_per_set(total=(), point_sum=(3,), target_sum=(3,)),
        },
        results=_MOMENTS,
        tangent=weighted_moments_tangent,
        vjp=weighted_moments_vjp,
        doc="Per point set: M = sum w y~ p~^T and sum w |p~|^2, about the weighted centroids.",
    ),
    False: define_op(
        "rigid_registration_moments",
        unweighted_moments,
        operands={
            **_points(points=(3,), targets=(3,)),
            **_per_set(total=(), point_sum=(3,), target_sum=(3,)),
        },
        results=_MOMENTS,
        tangent=unweighted_moments_tangent,
        vjp=unweighted_moments_vjp,
        doc="Per point set: M = sum y~ p~^T and sum |p~|^2, about the centroids.",
    ),
}
REGISTRATION_POSE = {
    True: define_op(
        "similarity_of_moments",
        pose_of_moments,
        operands={
            "moment": (3, 3),
            "variance": (),
            "total": (),
            "point_sum": (3,),
            "target_sum": (3,),
        },  # fmt: skip
        results={"out_position": (3,), "out_quaternion": (4,), "out_scale": ()},
        tangent=pose_of_moments_tangent,
        vjp=pose_of_moments_vjp,
        doc="Umeyama's solution from the moments: R = special_procrustes(M), "
        "s = tr(R^T M) / variance, t = y_bar - s R p_bar.",
    ),
    False: define_op(
        "rigid_pose_of_moment",
        rigid_pose_of_moment,
        operands={"moment": (3, 3), "total": (), "point_sum": (3,), "target_sum": (3,)},
        results={"out_position": (3,), "out_quaternion": (4,)},
        tangent=rigid_pose_of_moment_tangent,
        vjp=rigid_pose_of_moment_vjp,
        doc="Kabsch's solution from the moments: R = special_procrustes(M), t = y_bar - R p_bar.",
    ),
}


def _shape(x) -> tuple[int, ...]:
    """An array's shape, a Warp array's element dimensions included."""
    return tuple(x.shape) + tuple(getattr(getattr(x, "dtype", None), "_shape_", ()))


def _check_point_sets(points, targets, weights) -> None:
    """The shape errors a user of rigid_registration makes, named in its own terms (the
    ops check the rest: dtypes, devices, broadcasting of the leading dimensions)."""
    name = "xform.rigid_registration"
    shapes = {"points": _shape(points), "targets": _shape(targets)}
    for what, shape in shapes.items():
        if len(shape) < 2 or shape[-1] != 3:
            raise ValueError(f"{name}: '{what}' has shape {shape}; expected (..., N, 3)")
    if shapes["points"][-2] != shapes["targets"][-2]:
        raise ValueError(
            f"{name}: 'points' has {shapes['points'][-2]} points (shape {shapes['points']}) "
            f"but 'targets' has {shapes['targets'][-2]} (shape {shapes['targets']}); "
            "each point needs its target"
        )
    if weights is not None:
        shape = _shape(weights)
        if len(shape) < 1 or shape[-1] != shapes["points"][-2]:
            raise ValueError(
                f"{name}: 'weights' has shape {shape}; expected (..., N) with "
                f"N = {shapes['points'][-2]}, the number of points"
            )


def rigid_registration(call, points, targets, weights=None, scale=False):
    weighted = weights is not None
    if not isinstance(scale, bool):
        raise TypeError(
            f"xform.rigid_registration: 'scale' must be True or False, got {scale!r} "
            "(a static choice of kernels)"
        )
    _check_point_sets(points, targets, weights)
    arrays = (points, targets, weights) if weighted else (points, targets)
    sums = call(REGISTRATION_SUMS[weighted], *arrays)
    moment, variance = call(REGISTRATION_MOMENTS[weighted], *arrays, *sums)
    if scale:
        return call(REGISTRATION_POSE[True], moment, variance, *sums)
    return call(REGISTRATION_POSE[False], moment, *sums)


RIGID_REGISTRATION = Composite(
    "rigid_registration",
    rigid_registration,
    inspect.Signature(
        [
            inspect.Parameter("points", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("targets", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("weights", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
            inspect.Parameter("scale", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=False),
        ]
    ),  # fmt: skip
    "The pose (and with scale=True the scale) minimising sum_i w_i |s R p_i + t - y_i|^2: "
    "weighted Kabsch (s = 1) or Umeyama. R is the rotation nearest to "
    "M = sum w (y_i - y_bar)(p_i - p_bar)^T (special_procrustes), s = tr(R^T M) / "
    "sum w |p_i - p_bar|^2, t = y_bar - s R p_bar, about the weighted centroids. Batched: "
    "a sum over the N points per leading index (deterministic: chunks of points summed "
    "in order, then their partial sums in order).\n\nArguments:\n    points: (..., N, 3)\n"
    "    targets: (..., N, 3)\n    weights: (..., N) or None (all ones)\n"
    "    scale: bool, static\nReturns:\n    out_position: (..., 3)\n    out_quaternion: "
    "(..., 4), w >= 0\n    out_scale: (...), only with scale=True\n"
    "Differentiable with respect to: points, targets, weights (the rotation's derivative "
    "is special_procrustes's, finite where the rotation is unique).\n"
    "Leading dimensions broadcast; float32 or float64; results have the input dtype.",
    (*REGISTRATION_SUMS.values(), *REGISTRATION_MOMENTS.values(), *REGISTRATION_POSE.values()),
    arrays=("points", "targets", "weights"),
)
