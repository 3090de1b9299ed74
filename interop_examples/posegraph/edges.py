"""A pose-graph edge as one op of the example's own: every edge's whitened residual and
Jacobians in one kernel, written with xform's element functions (`xform.define_op`, as
`interop_examples/custom_op.py` shows).

The maths is that of `optimise.edge_residuals_and_jacobians`, whitened by U (U^T U = Omega):

    r = U log(E),  E = Z^-1 T_i^-1 T_j,
    J_j = U J_r^-1(log E),  J_i = -J_j Ad(T_j^-1 T_i).

Written with the groups' methods, that is eight op calls and three batched 6 x 6 products; one
kernel does it all in a single pass over the edges (PyTorch's batched small products on one
CPU thread cost 4-5 ms each on 6,275 edges, where the whole kernel takes less; NOTES 40).
The op is not differentiable: a solver's Jacobians are not differentiated (the implicit
gradients go through `optimise.edge_residual`, written with differentiable ops).
"""

from __future__ import annotations

from typing import Any

import warp as wp

import xform
from xform import SE2, SE3
from xform.ops.se2 import (
    pose_inverse_2d,
    pose_multiply_2d,
    se2_adjoint,
    se2_log,
    se2_right_jacobian_inverse,
)
from xform.ops.se3 import se3_adjoint, se3_log, se3_right_jacobian_inverse
from xform.ops.transforms import pose_inverse, pose_multiply


def edge_function(name: str, inverse, multiply, log, right_jacobian_inverse, adjoint):
    """The Warp function of one edge, written once for both groups with the group's own
    element functions: (pose_i, pose_j, Z^-1 as (position, rotation), U) -> (U r, U J_i,
    U J_j)."""

    def edge(
        position_i: Any,
        rotation_i: Any,
        position_j: Any,
        rotation_j: Any,
        measured_position: Any,
        measured_rotation: Any,
        whitening: Any,
    ):
        inverse_position, inverse_rotation = inverse(position_i, rotation_i)
        relative_position, relative_rotation = multiply(
            inverse_position, inverse_rotation, position_j, rotation_j
        )
        error_position, error_rotation = multiply(
            measured_position, measured_rotation, relative_position, relative_rotation
        )
        residual = log(error_position, error_rotation)
        jacobian_j = whitening @ right_jacobian_inverse(residual)
        back_position, back_rotation = inverse(relative_position, relative_rotation)
        jacobian_i = -(jacobian_j @ adjoint(back_position, back_rotation))
        return whitening @ residual, jacobian_i, jacobian_j

    edge.__name__ = edge.__qualname__ = name  # Warp names its functions by these
    return wp.func(edge)


se3_edge = edge_function(
    "se3_edge", pose_inverse, pose_multiply, se3_log, se3_right_jacobian_inverse, se3_adjoint
)
se2_edge = edge_function(
    "se2_edge",
    pose_inverse_2d,
    pose_multiply_2d,
    se2_log,
    se2_right_jacobian_inverse,
    se2_adjoint,
)


def _edge_op(group, function):
    d = group.tangent_dim
    (position, _), (rotation, size) = group.fields
    pose = {position: (group.space_dim,), rotation: (size,)}
    operands = {
        **{f"{name}_i": shape for name, shape in pose.items()},
        **{f"{name}_j": shape for name, shape in pose.items()},
        **{f"measured_{name}": shape for name, shape in pose.items()},
        "whitening": (d, d),
    }
    return xform.define_op(
        f"pose_graph_{group.__name__.lower()}_edge",
        function,
        operands=operands,
        results={"residual": (d,), "jacobian_i": (d, d), "jacobian_j": (d, d)},
        differentiable=(),
        doc="U log(E), E = Z^-1 T_i^-1 T_j, and its Jacobians in right perturbations of "
        "T_i and T_j: -U J_r^-1(log E) Ad(T_j^-1 T_i) and U J_r^-1(log E).",
    )


EDGE_OPS = {SE3: _edge_op(SE3, se3_edge), SE2: _edge_op(SE2, se2_edge)}


def whitened_edges(poses_i, poses_j, measurements_inverse, whitening):
    """(r (m, d), J_i (m, d, d), J_j (m, d, d)) of every edge, whitened: one kernel."""
    fields = [getattr(g, name) for g in (poses_i, poses_j, measurements_inverse)
              for name, _ in type(g).fields]  # fmt: skip
    return EDGE_OPS[type(poses_i)](*fields, whitening)
