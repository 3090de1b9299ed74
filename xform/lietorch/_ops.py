"""The kernels of `xform.lietorch`: LieTorch's group operations and their backward passes,
as xform ops over LieTorch's storage layouts, written with xform's element functions.

LieTorch stores an element as one vector per group (its `.data`): SO3 `[x, y, z, w]`,
RxSO3 `[x, y, z, w, s]`, SE3 `[t, x, y, z, w]`, Sim3 `[t, x, y, z, w, s]`, and normalises
the quaternion wherever it reads one. Each group here is a table row of small functions:
`read` (data to `(t, q, s)` with `q = [w, x, y, z]` normalised, `t = 0` and `s = 1` where
the group has none), `write` (back, dropping what the group lacks), `split`/`join` between
a tangent `(K,)` and its `(rho, omega, sigma)` parts, `head`/`pad` between a data-wide
gradient `(N,)` and a tangent, and the group's own exp, log and left Jacobians (xform's
so3, se3 and sim3 functions, exact at the identity; LieTorch's Sim3 Jacobian is a
truncated series). Everything else is one generic function over `(t, q, s)`, made per
group by a factory: the Warp compiler folds away the translation of a rotation group and
the unit scale of a rigid one.

Derivatives follow LieTorch: with respect to an element, the gradient is the tangent of
a left perturbation, `dL/d eps` of `L(exp(eps) X)` at 0, padded with zeros to the data's
width; with respect to a Euclidean argument, the ordinary gradient. So the forward ops are
marked not differentiable, and each backward pass is an op of its own (`*_backward`), called
by `xform.lietorch`'s autograd functions, as LieTorch's own kernels are.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from .._define import define_op
from .._op import Op
from ..ops._scaled_rotation import (
    jacobian_blocks,
    quadratic_apply,
    scaled_rotation_coefficients_less_one,
)
from ..ops.quaternion import quat_conjugate, quat_multiply, quat_rotate
from ..ops.se3 import se3_left_jacobian, se3_left_jacobian_inverse, se3_log
from ..ops.sim3 import sim3_left_jacobian, sim3_left_jacobian_inverse, sim3_log
from ..ops.so3 import (
    left_jacobian,
    left_jacobian_apply,
    left_jacobian_inverse,
    left_jacobian_transpose_apply,
    quat_exp,
    so3_log,
)


@wp.func
def _zero3(like: Any):
    zero = type(like)(0.0)
    return wp.vector(zero, zero, zero)


@wp.func
def _unit(x: Any, i: int):
    """The quaternion [w, x, y, z] of data stored [x, y, z, w] from index i, normalised."""
    q = wp.vector(x[i + 3], x[i], x[i + 1], x[i + 2])
    return q / wp.length(q)


@wp.func
def _gradient_quaternion(g: Any, i: int):
    """Quaternion components stored [x, y, z, w] from index i, reordered [w, x, y, z], not
    normalised: a data gradient's, or a quaternion for the logarithm (which is invariant
    to the quaternion's scale, so that it skips the normalisation)."""
    return wp.vector(g[i + 3], g[i], g[i + 1], g[i + 2])


# --- SO3: [x, y, z, w]; tangent phi -------------------------------------------------------------


@wp.func
def so3_read(x: Any):
    return _zero3(x[0]), _unit(x, 0), type(x[0])(1.0)


@wp.func
def so3_split_gradient(g: Any):
    return _zero3(g[0]), _gradient_quaternion(g, 0), type(g[0])(0.0)


@wp.func
def so3_write(t: Any, q: Any, s: Any):
    return wp.vector(q[1], q[2], q[3], q[0])


@wp.func
def so3_split(a: Any):
    return _zero3(a[0]), wp.vector(a[0], a[1], a[2]), type(a[0])(0.0)


@wp.func
def so3_join(rho: Any, omega: Any, sigma: Any):
    return omega


@wp.func
def so3_head(g: Any):
    return wp.vector(g[0], g[1], g[2])


@wp.func
def so3_pad(a: Any):
    return wp.vector(a[0], a[1], a[2], type(a[0])(0.0))


@wp.func
def so3_exp_parts(a: Any):
    return _zero3(a[0]), quat_exp(a), type(a[0])(1.0)


@wp.func
def so3_log_of(x: Any):
    return so3_log(_gradient_quaternion(x, 0))


# --- RxSO3: [x, y, z, w, s]; tangent [phi, sigma] -----------------------------------------------


@wp.func
def rxso3_read(x: Any):
    return _zero3(x[0]), _unit(x, 0), x[4]


@wp.func
def rxso3_split_gradient(g: Any):
    return _zero3(g[0]), _gradient_quaternion(g, 0), g[4]


@wp.func
def rxso3_write(t: Any, q: Any, s: Any):
    return wp.vector(q[1], q[2], q[3], q[0], s)


@wp.func
def rxso3_split(a: Any):
    return _zero3(a[0]), wp.vector(a[0], a[1], a[2]), a[3]


@wp.func
def rxso3_join(rho: Any, omega: Any, sigma: Any):
    return wp.vector(omega[0], omega[1], omega[2], sigma)


@wp.func
def rxso3_head(g: Any):
    return wp.vector(g[0], g[1], g[2], g[3])


@wp.func
def rxso3_pad(a: Any):
    return wp.vector(a[0], a[1], a[2], a[3], type(a[0])(0.0))


@wp.func
def rxso3_exp_parts(a: Any):
    return _zero3(a[0]), quat_exp(wp.vector(a[0], a[1], a[2])), wp.exp(a[3])


@wp.func
def rxso3_log_of(x: Any):
    omega = so3_log(_gradient_quaternion(x, 0))
    return wp.vector(omega[0], omega[1], omega[2], wp.log(x[4]))


@wp.func
def _rotation_and_scale(m: Any):
    """The 4x4 [[m, 0], [0, 1]] of a 3x3 block: RxSO3 = SO3 x R+, its Jacobians block
    diagonal."""
    z = type(m[0, 0])(0.0)
    return wp.matrix(
        m[0, 0], m[0, 1], m[0, 2], z,
        m[1, 0], m[1, 1], m[1, 2], z,
        m[2, 0], m[2, 1], m[2, 2], z,
        z, z, z, type(m[0, 0])(1.0),
        shape=(4, 4),
    )  # fmt: skip


@wp.func
def rxso3_left_jacobian(a: Any):
    return _rotation_and_scale(left_jacobian(wp.vector(a[0], a[1], a[2])))


@wp.func
def rxso3_left_jacobian_inverse(a: Any):
    return _rotation_and_scale(left_jacobian_inverse(wp.vector(a[0], a[1], a[2])))


# --- SE3: [t, x, y, z, w]; tangent [tau, phi] ----------------------------------------------------


@wp.func
def se3_read(x: Any):
    return wp.vector(x[0], x[1], x[2]), _unit(x, 3), type(x[0])(1.0)


@wp.func
def se3_split_gradient(g: Any):
    return wp.vector(g[0], g[1], g[2]), _gradient_quaternion(g, 3), type(g[0])(0.0)


@wp.func
def se3_write(t: Any, q: Any, s: Any):
    return wp.vector(t[0], t[1], t[2], q[1], q[2], q[3], q[0])


@wp.func
def se3_split(a: Any):
    return wp.vector(a[0], a[1], a[2]), wp.vector(a[3], a[4], a[5]), type(a[0])(0.0)


@wp.func
def se3_join(rho: Any, omega: Any, sigma: Any):
    return wp.vector(rho[0], rho[1], rho[2], omega[0], omega[1], omega[2])


@wp.func
def se3_head(g: Any):
    return wp.vector(g[0], g[1], g[2], g[3], g[4], g[5])


@wp.func
def se3_pad(a: Any):
    return wp.vector(a[0], a[1], a[2], a[3], a[4], a[5], type(a[0])(0.0))


@wp.func
def se3_exp_parts(a: Any):
    """se3_exp's translation J_l(phi) tau, with the quaternion of either sign (LieTorch's
    w is cos(theta / 2), negative past pi)."""
    omega = wp.vector(a[3], a[4], a[5])
    return left_jacobian_apply(omega, wp.vector(a[0], a[1], a[2])), quat_exp(omega), type(a[0])(1.0)


@wp.func
def se3_log_of(x: Any):
    return se3_log(wp.vector(x[0], x[1], x[2]), _gradient_quaternion(x, 3))


# --- Sim3: [t, x, y, z, w, s]; tangent [tau, phi, sigma] -----------------------------------------


@wp.func
def sim3_read(x: Any):
    return wp.vector(x[0], x[1], x[2]), _unit(x, 3), x[7]


@wp.func
def sim3_split_gradient(g: Any):
    return wp.vector(g[0], g[1], g[2]), _gradient_quaternion(g, 3), g[7]


@wp.func
def sim3_write(t: Any, q: Any, s: Any):
    return wp.vector(t[0], t[1], t[2], q[1], q[2], q[3], q[0], s)


@wp.func
def sim3_split(a: Any):
    return wp.vector(a[0], a[1], a[2]), wp.vector(a[3], a[4], a[5]), a[6]


@wp.func
def sim3_join(rho: Any, omega: Any, sigma: Any):
    return wp.vector(rho[0], rho[1], rho[2], omega[0], omega[1], omega[2], sigma)


@wp.func
def sim3_head(g: Any):
    return wp.vector(g[0], g[1], g[2], g[3], g[4], g[5], g[6])


@wp.func
def sim3_pad(a: Any):
    return wp.vector(a[0], a[1], a[2], a[3], a[4], a[5], a[6], type(a[0])(0.0))


@wp.func
def sim3_exp_parts(a: Any):
    """sim3_exp's (W rho, e^sigma), with the quaternion of either sign (as LieTorch's)."""
    omega = wp.vector(a[3], a[4], a[5])
    a0_less_one, a1, a2 = scaled_rotation_coefficients_less_one(a[6], wp.dot(omega, omega))
    rho = wp.vector(a[0], a[1], a[2])
    return rho + quadratic_apply(omega, a0_less_one, a1, a2, rho), quat_exp(omega), wp.exp(a[6])


@wp.func
def sim3_exp_backward(a: Any, g: Any):
    """J_l(a)^T g, its diagonal blocks applied as g + (block - I)^T g (W^T = a0 I - a1 K
    + a2 K^2, J_l(omega)^T likewise): g enters unrounded, so near the identity each part is
    g and small terms to one rounding (float32, docs/lietorch.md)."""
    omega = wp.vector(a[3], a[4], a[5])
    x = wp.dot(omega, omega)
    a0_less_one, a1, a2 = scaled_rotation_coefficients_less_one(a[6], x)
    w, q, column, j = jacobian_blocks(a)
    g_t = wp.vector(g[0], g[1], g[2])
    g_r = wp.vector(g[3], g[4], g[5])
    rho_bar = g_t + quadratic_apply(omega, a0_less_one, -a1, a2, g_t)
    omega_bar = wp.transpose(q) @ g_t + left_jacobian_transpose_apply(omega, g_r)
    sigma_bar = wp.dot(column, g_t) + g[6]
    return wp.vector(
        rho_bar[0], rho_bar[1], rho_bar[2], omega_bar[0], omega_bar[1], omega_bar[2], sigma_bar
    )


@wp.func
def sim3_log_of(x: Any):
    return sim3_log(wp.vector(x[0], x[1], x[2]), _gradient_quaternion(x, 3), x[7])


# --- the generic operations over (t, q, s) -----------------------------------------------------


@wp.func
def adjoint_parts(t: Any, q: Any, s: Any, rho: Any, omega: Any, sigma: Any):
    """Ad_X a for X = (t, q, s): [s R rho + t x R omega - sigma t, R omega, sigma] (SE3's
    [[R, [t]x R], [0, R]] where s = 1, sigma = 0)."""
    rotated = quat_rotate(q, omega)
    return s * quat_rotate(q, rho) + wp.cross(t, rotated) - sigma * t, rotated, sigma


@wp.func
def adjoint_transpose_parts(t: Any, q: Any, s: Any, rho: Any, omega: Any, sigma: Any):
    """Ad_X^T a: [s R^T rho, R^T (omega + rho x t), sigma - t . rho]."""
    inverse = quat_conjugate(q)
    return (
        s * quat_rotate(inverse, rho),
        quat_rotate(inverse, omega + wp.cross(rho, t)),
        sigma - wp.dot(t, rho),
    )


@wp.func
def coadjoint_parts(rho: Any, omega: Any, sigma: Any, g_rho: Any, g_omega: Any):
    """ad(b)^T g for b = (rho, omega, sigma): ad(b) = [[[omega]x + sigma I, [rho]x, -rho],
    [0, [omega]x, 0], [0, 0, 0]] (LieTorch's), so ad^T g = [sigma g_rho - omega x g_rho,
    -rho x g_rho - omega x g_omega, -rho . g_rho]."""
    return (
        sigma * g_rho - wp.cross(omega, g_rho),
        -wp.cross(rho, g_rho) - wp.cross(omega, g_omega),
        -wp.dot(rho, g_rho),
    )


@wp.func
def inverse_parts(t: Any, q: Any, s: Any):
    inverse = quat_conjugate(q)
    reciprocal = type(s)(1.0) / s
    return -reciprocal * quat_rotate(inverse, t), inverse, reciprocal


def _operations(g: dict[str, Any], name: str, n: int, k: int) -> dict[str, Op]:
    """LieTorch's operations of one group (its row `g` of functions), as xform ops."""
    read, write, split, join = g["read"], g["write"], g["split"], g["join"]
    head, pad, split_gradient = g["head"], g["pad"], g["split_gradient"]
    exp_parts, log_of = g["exp_parts"], g["log_of"]
    jacobian, jacobian_inverse = g["left_jacobian"], g["left_jacobian_inverse"]

    @wp.func
    def exp(a: Any):
        t, q, s = exp_parts(a)
        return write(t, q, s)

    exp_backward_of = g["exp_backward"]
    if exp_backward_of is None:

        @wp.func
        def exp_backward(a: Any, g: Any):
            return wp.transpose(jacobian(a)) @ head(g)

    else:

        @wp.func
        def exp_backward(a: Any, g: Any):
            return exp_backward_of(a, head(g))

    @wp.func
    def log(x: Any):
        return log_of(x)

    @wp.func
    def log_backward(x: Any, g: Any):
        return pad(wp.transpose(jacobian_inverse(log_of(x))) @ g)

    @wp.func
    def jinv(x: Any, a: Any):
        return jacobian_inverse(log_of(x)) @ a

    @wp.func
    def inv(x: Any):
        t, q, s = read(x)
        ti, qi, si = inverse_parts(t, q, s)
        return write(ti, qi, si)

    @wp.func
    def inv_backward(x: Any, g: Any):
        # -dY Ad(X^-1), as a column: -Ad(X^-1)^T g
        t, q, s = read(x)
        ti, qi, si = inverse_parts(t, q, s)
        rho, omega, sigma = split(head(g))
        r, o, z = adjoint_transpose_parts(ti, qi, si, rho, omega, sigma)
        return -pad(join(r, o, z))

    @wp.func
    def mul(x: Any, y: Any):
        t1, q1, s1 = read(x)
        t2, q2, s2 = read(y)
        return write(t1 + s1 * quat_rotate(q1, t2), quat_multiply(q1, q2), s1 * s2)

    @wp.func
    def mul_backward(x: Any, g: Any):
        """(dX, dY) = (dZ, dZ Ad(X)): the tangent part of dZ, and Ad(X)^T of it."""
        t, q, s = read(x)
        rho, omega, sigma = split(head(g))
        r, o, z = adjoint_transpose_parts(t, q, s, rho, omega, sigma)
        return pad(head(g)), pad(join(r, o, z))

    @wp.func
    def adj(x: Any, a: Any):
        t, q, s = read(x)
        rho, omega, sigma = split(a)
        r, o, z = adjoint_parts(t, q, s, rho, omega, sigma)
        return join(r, o, z)

    @wp.func
    def adj_backward(x: Any, a: Any, g: Any):
        """b = Ad(X) a: dX = -ad(b)^T g (padded), da = Ad(X)^T g."""
        t, q, s = read(x)
        rho, omega, sigma = split(a)
        br, bo, bz = adjoint_parts(t, q, s, rho, omega, sigma)
        g_rho, g_omega, g_sigma = split(g)
        cr, co, cz = coadjoint_parts(br, bo, bz, g_rho, g_omega)
        dr, do, dz = adjoint_transpose_parts(t, q, s, g_rho, g_omega, g_sigma)
        return -pad(join(cr, co, cz)), join(dr, do, dz)

    @wp.func
    def adjT(x: Any, a: Any):
        t, q, s = read(x)
        rho, omega, sigma = split(a)
        r, o, z = adjoint_transpose_parts(t, q, s, rho, omega, sigma)
        return join(r, o, z)

    @wp.func
    def adjT_backward(x: Any, a: Any, g: Any):
        """b = Ad(X)^T a: da = Ad(X) g = c, dX = -ad(c)^T a (padded)."""
        t, q, s = read(x)
        g_rho, g_omega, g_sigma = split(g)
        cr, co, cz = adjoint_parts(t, q, s, g_rho, g_omega, g_sigma)
        a_rho, a_omega, a_sigma = split(a)
        er, eo, ez = coadjoint_parts(cr, co, cz, a_rho, a_omega)
        return -pad(join(er, eo, ez)), join(cr, co, cz)

    @wp.func
    def act(x: Any, p: Any):
        t, q, s = read(x)
        return s * quat_rotate(q, p) + t

    @wp.func
    def act_backward(x: Any, p: Any, g: Any):
        """y = X p: dX = [g, y x g, y . g] (LieTorch's act_jacobian(y)^T g), dp = s R^T g."""
        t, q, s = read(x)
        y = s * quat_rotate(q, p) + t
        tangent = join(g, wp.cross(y, g), wp.dot(y, g))
        return pad(tangent), s * quat_rotate(quat_conjugate(q), g)

    @wp.func
    def act4(x: Any, p: Any):
        t, q, s = read(x)
        point = s * quat_rotate(q, wp.vector(p[0], p[1], p[2])) + p[3] * t
        return wp.vector(point[0], point[1], point[2], p[3])

    @wp.func
    def act4_backward(x: Any, p: Any, g: Any):
        """y = X p (homogeneous): dX = [y_w g, y x g, y . g], dp = M^T g, M = [[sR, t], [0, 1]]."""
        t, q, s = read(x)
        y = s * quat_rotate(q, wp.vector(p[0], p[1], p[2])) + p[3] * t
        g3 = wp.vector(g[0], g[1], g[2])
        tangent = join(p[3] * g3, wp.cross(y, g3), wp.dot(y, g3))
        back = s * quat_rotate(quat_conjugate(q), g3)
        return pad(tangent), wp.vector(back[0], back[1], back[2], wp.dot(t, g3) + g[3])

    @wp.func
    def to_vec_backward(x: Any, g: Any):
        """g P(X), P the data's derivative in a left perturbation (LieTorch's projector):
        dt = rho + omega x t + sigma t, dq = (omega / 2) q, ds = sigma s."""
        t, q, s = read(x)
        g_t, g_q, g_s = split_gradient(g)
        v = wp.vector(q[1], q[2], q[3])
        g_v = wp.vector(g_q[1], g_q[2], g_q[3])
        half = type(s)(0.5)
        omega = wp.cross(t, g_t) + half * (q[0] * g_v + wp.cross(v, g_v) - g_q[0] * v)
        return pad(join(g_t, omega, wp.dot(t, g_t) + s * g_s))

    @wp.func
    def from_vec_backward(x: Any, g: Any):
        """g pinv(P), in closed form: P^T P = [[I, -T, t], [T, -T^2 + I/4, 0], [t^T, 0,
        |t|^2 + s^2]] (T = [t]x, a unit q) solves by elimination to data gradients
        (g_rho, 4 (dq/domega)(g_omega - t x g_rho), (g_sigma - t . g_rho) / s)."""
        t, q, s = read(x)
        rho, omega, sigma = split(head(g))
        u = type(s)(4.0) * (omega - wp.cross(t, rho))
        v = wp.vector(q[1], q[2], q[3])
        half = type(s)(0.5)
        vector = half * (q[0] * u - wp.cross(v, u))
        g_q = wp.vector(-half * wp.dot(v, u), vector[0], vector[1], vector[2])
        return write(rho, g_q, (sigma - wp.dot(t, rho)) / s)

    data, tangent, point, point4 = {"x": (n,)}, {"a": (k,)}, {"p": (3,)}, {"p": (4,)}
    gradient = {"g": (n,)}

    def make(operation: str, function, operands, results) -> Op:
        return define_op(
            f"lietorch_{name.lower()}_{operation}",
            function,
            operands=operands,
            results=results,
            differentiable=(),
            doc=f"LieTorch's {name} {operation} on its data layout (xform.lietorch).",
        )

    return {
        "exp": make("exp", exp, tangent, {"out": (n,)}),
        "exp_backward": make("exp_backward", exp_backward, {**tangent, **gradient}, {"da": (k,)}),
        "log": make("log", log, data, {"out": (k,)}),
        "log_backward": make("log_backward", log_backward, {**data, "g": (k,)}, {"dx": (n,)}),
        "jinv": make("jinv", jinv, {**data, **tangent}, {"out": (k,)}),
        "inv": make("inv", inv, data, {"out": (n,)}),
        "inv_backward": make("inv_backward", inv_backward, {**data, **gradient}, {"dx": (n,)}),
        "mul": make("mul", mul, {**data, "y": (n,)}, {"out": (n,)}),
        "mul_backward": make(
            "mul_backward", mul_backward, {**data, **gradient}, {"dx": (n,), "dy": (n,)}
        ),
        "adj": make("adj", adj, {**data, **tangent}, {"out": (k,)}),
        "adj_backward": make(
            "adj_backward", adj_backward, {**data, **tangent, "g": (k,)}, {"dx": (n,), "da": (k,)}
        ),
        "adjT": make("adjT", adjT, {**data, **tangent}, {"out": (k,)}),
        "adjT_backward": make(
            "adjT_backward", adjT_backward, {**data, **tangent, "g": (k,)}, {"dx": (n,), "da": (k,)}
        ),
        "act": make("act", act, {**data, **point}, {"out": (3,)}),
        "act_backward": make(
            "act_backward", act_backward, {**data, **point, "g": (3,)}, {"dx": (n,), "dp": (3,)}
        ),
        "act4": make("act4", act4, {**data, **point4}, {"out": (4,)}),
        "act4_backward": make(
            "act4_backward", act4_backward, {**data, **point4, "g": (4,)}, {"dx": (n,), "dp": (4,)}
        ),
        "to_vec_backward": make(
            "to_vec_backward", to_vec_backward, {**data, **gradient}, {"dx": (n,)}
        ),
        "from_vec_backward": make(
            "from_vec_backward", from_vec_backward, {**data, **gradient}, {"dx": (n,)}
        ),
    }


def _row(prefix: str, left, left_inverse) -> dict[str, Any]:
    functions = globals()
    row = {
        part: functions[f"{prefix}_{part}"]
        for part in (
            "read", "write", "split", "join", "head", "pad", "split_gradient",
            "exp_parts", "log_of",
        )
    }  # fmt: skip
    # a group's own J_l(a)^T g where the matrix product loses accuracy near the identity
    row["exp_backward"] = functions.get(f"{prefix}_exp_backward")
    return row | {"left_jacobian": left, "left_jacobian_inverse": left_inverse}


# name: (data width N, tangent width K, the group's functions)
GROUPS = {
    "SO3": (4, 3, _row("so3", left_jacobian, left_jacobian_inverse)),
    "RxSO3": (5, 4, _row("rxso3", rxso3_left_jacobian, rxso3_left_jacobian_inverse)),
    "SE3": (7, 6, _row("se3", se3_left_jacobian, se3_left_jacobian_inverse)),
    "Sim3": (8, 7, _row("sim3", sim3_left_jacobian, sim3_left_jacobian_inverse)),
}

# OPERATIONS[group][operation]: the op
OPERATIONS = {name: _operations(row, name, n, k) for name, (n, k, row) in GROUPS.items()}
