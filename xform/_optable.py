"""The op table: one declarative entry per SPEC op.

An entry says, for each argument, its trailing (element) shape and how its leading
dimensions take part in broadcasting; for each result, its element shape and which
leading dimensions it carries; which arguments are differentiable; and the kernels.
The launch layer and every framework adapter are generated from these entries, so a
new op is one kernel in `_kernels.py` plus one entry here.

Leading-dimension layouts (`batch`) are tuples of group names:

- ``"..."``: any number of dimensions, broadcast by NumPy rules (right-aligned) among
  all arguments that carry ``"..."``;
- any other name (``"B"``, ``"N"``): exactly one dimension, broadcast by size 1 among
  the arguments that carry the same name.

A result's layout lists the groups that make up its leading shape, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import warp as wp

from . import _kernels as k

VARIADIC = "..."


@dataclass(frozen=True)
class Operand:
    """An array argument of an op."""

    name: str
    element: tuple[int, ...]
    batch: tuple[str, ...] = (VARIADIC,)
    differentiable: bool = True
    # cuRobo's single pose: leading dims must be () or (1,), and do not reach the result.
    single: bool = False

    def expected_shape(self) -> str:
        if self.single:
            return f"{self.element} or {(1, *self.element)}"
        return "(" + ", ".join([*self.batch, *map(str, self.element)]) + ")"


@dataclass(frozen=True)
class Result:
    """An array result of an op."""

    name: str
    element: tuple[int, ...]
    batch: tuple[str, ...] = (VARIADIC,)


@dataclass(frozen=True)
class OpSpec:
    """Everything the launch layer and the adapters need to know about one op.

    `kernel` reads the operands (each followed by its strides) after a leading `Grid`
    and writes the results. `tangent_kernel`, when set, is the forward-mode product
    (JVP): same operands, then their tangents, then the result tangents. `vjp_kernel`,
    when set, is the reverse-mode product: same operands, then the result cotangents,
    then the operands' gradients, which it adds into; without one, the VJP is Warp's
    adjoint launch of `kernel`.
    """

    name: str
    operands: tuple[Operand, ...]
    results: tuple[Result, ...]
    kernel: wp.Kernel
    formula: str
    tangent_kernel: wp.Kernel | None = None
    vjp_kernel: wp.Kernel | None = None
    # `kernel` and `vjp_kernel` loop over a run of `grid.run` launch indices per thread
    # (see _kernels.py).
    runs: bool = False
    differentiable: bool = True
    # cuRobo's optional preallocated buffers, in its order: result buffers, then
    # gradient buffers (the PyTorch adapter's functional API takes them).
    result_buffers: tuple[str, ...] = ()
    gradient_buffers: tuple[str, ...] = ()

    def docstring(self, not_differentiable: str, notes: str = "") -> str:
        """The docstring every framework's function of this op carries."""
        grads = ", ".join(self.differentiable_operands) or not_differentiable
        arguments = "\n".join(f"    {o.name}: {o.expected_shape()}" for o in self.operands)
        results = "\n".join(
            f"    {r.name}: ({', '.join([*r.batch, *map(str, r.element)])})" for r in self.results
        )
        return (
            f"{self.formula}\n\nArguments:\n{arguments}\nReturns:\n{results}\n"
            f"Differentiable with respect to: {grads}.\n"
            "Leading dimensions broadcast; float32 or float64; results have the input dtype."
            + (f"\n{notes}" if notes else "")
        )

    @property
    def differentiable_operands(self) -> tuple[str, ...]:
        if not self.differentiable:
            return ()
        return tuple(o.name for o in self.operands if o.differentiable)


POSITION = Operand("position", (3,))
QUATERNION = Operand("quaternion", (4,))
BATCH_POSE = (Operand("position", (3,), ("B",)), Operand("quaternion", (4,), ("B",)))
BATCH_POINTS = Operand("points", (3,), ("B", "N"))
BATCH_RESULT = (Result("out_points", (3,), ("B", "N")),)

OPS: dict[str, OpSpec] = {
    op.name: op
    for op in (
        OpSpec(
            "transform_points",
            (
                Operand("position", (3,), single=True),
                Operand("quaternion", (4,), single=True),
                Operand("points", (3,)),
            ),
            (Result("out_points", (3,)),),
            k.transform_points_kernel,
            "R(q) p + t, where R(q) v = q (0, v) q* (|q|^2 times a rotation).",
            k.transform_points_tangent_kernel,
            k.transform_points_vjp_kernel,
            runs=True,
            result_buffers=("out_points",),
            gradient_buffers=("out_gp", "out_gq", "out_gpt"),
        ),
        OpSpec(
            "batch_transform_points",
            (*BATCH_POSE, BATCH_POINTS),
            BATCH_RESULT,
            k.transform_points_kernel,
            "R(q_b) p_bn + t_b, where R(q) v = q (0, v) q*.",
            k.transform_points_tangent_kernel,
            k.transform_points_vjp_kernel,
            runs=True,
            result_buffers=("out_points",),
            gradient_buffers=("out_gp", "out_gq", "out_gpt"),
        ),
        OpSpec(
            "batch_transform_points_inverse",
            (*BATCH_POSE, BATCH_POINTS),
            BATCH_RESULT,
            k.transform_points_inverse_kernel,
            "R(q_b)^T (p_bn - t_b), where R(q)^T v = q* (0, v) q.",
            k.transform_points_inverse_tangent_kernel,
            k.transform_points_inverse_vjp_kernel,
            runs=True,
            result_buffers=("out_points",),
            gradient_buffers=("out_gp", "out_gq", "out_gpt"),
        ),
        OpSpec(
            "transform_point_inverse",
            (Operand("point", (3,)), Operand("rot", (3, 3)), Operand("trans", (3,))),
            (Result("out_point", (3,)),),
            k.transform_point_inverse_kernel,
            "R^T (p - t).",
            k.transform_point_inverse_tangent_kernel,
        ),
        OpSpec(
            "get_inv_transform",
            (Operand("w_rot_c", (3, 3)), Operand("w_trans_c", (3,))),
            (Result("out_rot", (3, 3)), Result("out_trans", (3,))),
            k.inverse_transform_kernel,
            "(R^T, -R^T t).",
            k.inverse_transform_tangent_kernel,
        ),
        OpSpec(
            "quaternion_to_matrix",
            (QUATERNION,),
            (Result("out_matrix", (3, 3)),),
            k.quaternion_to_matrix_kernel,
            "The matrix of v -> q (0, v) q*: entries are quadratic in q, and equal |q|^2 "
            "times the rotation matrix of q / |q|.",
            k.quaternion_to_matrix_tangent_kernel,
            k.quaternion_to_matrix_vjp_kernel,
            result_buffers=("out_mat",),
            gradient_buffers=("adj_quaternion",),
        ),
        OpSpec(
            "matrix_to_quaternion",
            (Operand("matrix", (3, 3)),),
            (Result("out_quaternion", (4,)),),
            k.matrix_to_quaternion_kernel,
            "Shepperd's method: the largest of 4w^2 = 1 + m00 + m11 + m22 (and likewise "
            "4x^2, 4y^2, 4z^2) gives one component, the off-diagonal sums and differences "
            "the others; the sign is chosen so that w >= 0.",
            k.matrix_to_quaternion_tangent_kernel,
            result_buffers=("out_quat",),
            gradient_buffers=("adj_matrix",),
        ),
        OpSpec(
            "cuda_matrix_to_quaternion",
            (Operand("matrix", (3, 3)),),
            (Result("out_quaternion", (4,)),),
            k.matrix_to_quaternion_kernel,
            "As matrix_to_quaternion; not differentiable.",
            differentiable=False,
        ),
        OpSpec(
            "pose_to_matrix",
            (POSITION, QUATERNION),
            (Result("out_matrix", (4, 4)),),
            k.pose_to_matrix_kernel,
            "[[R(q), t], [0, 0, 0, 1]].",
            k.pose_to_matrix_tangent_kernel,
            result_buffers=("out_matrix",),
        ),
        OpSpec(
            "pose_multiply",
            (POSITION, QUATERNION, Operand("position2", (3,)), Operand("quaternion2", (4,))),
            (Result("out_position", (3,)), Result("out_quaternion", (4,))),
            k.pose_multiply_kernel,
            "T1 T2 = (R(q1) t2 + t1, q1 q2): pose 2 is applied first.",
            k.pose_multiply_tangent_kernel,
            result_buffers=("out_position", "out_quaternion"),
            gradient_buffers=("adj_pos", "adj_quat", "adj_pos2", "adj_quat2"),
        ),
        OpSpec(
            "pose_inverse",
            (POSITION, QUATERNION),
            (Result("out_position", (3,)), Result("out_quaternion", (4,))),
            k.pose_inverse_kernel,
            "(-R(q)^T t, q*), with q* the conjugate.",
            k.pose_inverse_tangent_kernel,
            result_buffers=("out_position", "out_quaternion"),
            gradient_buffers=("adj_pos", "adj_quat"),
        ),
    )
}
