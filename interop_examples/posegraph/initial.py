"""Initial estimates: the file's vertices, odometry (the measurements composed along a
spanning tree), or chordal (Carlone et al., ICRA 2015: rotations by linear least squares
on their matrices, projected onto the group, then translations by linear least squares).

Every initialisation keeps vertex 0 at the problem's anchor (the file's pose 0, or the
identity), the gauge that the optimiser then holds fixed.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, minimum_spanning_tree

from xform import to_numpy
from xform.optim._sparse import block_pattern, make_solver

from . import groups
from .framework import element_in, framework, indices_in
from .problem import Problem

# The chordal start's weights span at most this ratio: the normal equations of a graph whose
# weights span more than 1/epsilon lose the light edges to rounding (a chain with edges of
# weight 1 and 1e16 has a Schur complement of 1e16 - 1e16), and a start need not be
# weighted exactly: Levenberg-Marquardt then optimises with the full information.
WEIGHT_RANGE = 1e8

# The start is solved dense while its weighted incidence matrices are small: edges times
# unknowns up to this. Measured (random graphs, two to eleven edges a vertex): up to ~10,000
# the dense start takes 0.54-0.81x the sparse one's time in 2D and 3D, from 18,000 up to
# 1.33x in 2D; tinyGrid3D is 528 (benchmarks/NOTES.md 64).
DENSE_START_UP_TO = 10_000


def _anchored(problem: Problem, poses, fw):
    """The poses (NumPy) moved by the anchor (T_anchor T_k): relative poses, and so the
    residuals, are unchanged; vertex 0, at the identity before, lands on the anchor."""
    return (element_in(fw, problem.anchor) @ element_in(fw, poses)).to_numpy()


def from_file(problem: Problem, fw, solver: str | None = None):
    if problem.file_poses is None:
        raise ValueError(f"{problem.graph.source}: --init file: the file has no vertices")
    return problem.file_poses


def odometry(problem: Problem, fw, solver: str | None = None):
    """The measurements composed along a spanning tree from vertex 0 that prefers edges
    between consecutive ids (the odometry chain, where the file has one). The tree's
    products are taken by pointer jumping: log2(depth) rounds of one batched
    product over all vertices. (`solver`: unused, as every initialisation takes it.)"""
    n = problem.vertices
    weights = np.abs(problem.ids[problem.i] - problem.ids[problem.j]).astype(np.float64)
    graph = sp.coo_matrix((weights, (problem.i, problem.j)), shape=(n, n)).tocsr()
    tree = minimum_spanning_tree(graph)
    order, parent = breadth_first_order(tree, 0, directed=False, return_predecessors=True)
    parent[0] = 0
    # The edge between each vertex and its parent, and which way round it is.
    key = np.minimum(problem.i, problem.j) * n + np.maximum(problem.i, problem.j)
    sorted_keys, first = np.unique(key, return_index=True)
    child = np.arange(1, n)
    edge = first[
        np.searchsorted(
            sorted_keys, np.minimum(parent[child], child) * n + np.maximum(parent[child], child)
        )
    ]
    forward = problem.i[edge] == parent[child]
    # relative[v] = T_parent(v)^-1 T_v: the identity for vertex 0, else the measurement of
    # the edge to the parent, inverted where the edge runs from v to its parent.
    measurements = problem.measurements
    inverted = element_in(fw, measurements).inverse().to_numpy()
    choices = groups.concatenate([problem.group.identity((1,)), measurements, inverted])
    choice = np.concatenate([[0], np.where(forward, 1 + edge, 1 + problem.edges + edge)])
    relative = element_in(fw, choices)[indices_in(fw, choice)]
    while np.any(parent != 0):
        relative = relative[indices_in(fw, parent)] @ relative
        parent = parent[parent]
    return _anchored(problem, relative.to_numpy(), fw)


def _edge_weights(group, information, xp=np) -> tuple:
    """Isotropic weights from each information matrix, as SE-Sync reads g2o files: tau =
    D / tr(Omega_tt^-1) for the translation and kappa = (rotation dof) / tr(Omega_rr^-1) for
    the rotation, Omega_tt and Omega_rr the diagonal blocks of the information (the inverse
    mean variance of each block; SE-Sync halves kappa in 3D, a factor no solution depends
    on); each set clipped to `WEIGHT_RANGE` below its largest, so that its linear system
    stays solvable however badly scaled the information is (a trace that overflows gives a
    weight of 0, then the smallest allowed). In `xp`'s arrays (NumPy, or jax.numpy inside a
    compiled function, where the traces are of the blocks' inverses)."""
    D = group.space_dim
    rotation_dof = group.tangent_dim - D
    if xp is np:
        trace_of_inverse = _trace_of_inverse
    else:

        def trace_of_inverse(blocks):
            return xp.trace(xp.linalg.inv(blocks), axis1=-2, axis2=-1)

    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        tau = D / trace_of_inverse(information[:, :D, :D])
        kappa = rotation_dof / trace_of_inverse(information[:, D:, D:])
    return _clipped(kappa, xp), _clipped(tau, xp)


def _trace_of_inverse(blocks: np.ndarray) -> np.ndarray:
    """tr(A^-1) of each symmetric positive definite block A (m, d, d), d <= 3, in closed form
    (`np.linalg.inv` takes ~1 us a matrix, ten times this): on A scaled to a unit diagonal,
    B = S A S with S = diag(A)^-1/2, so that no product overflows, tr(A^-1) = sum_i
    adj(B)_ii / (det(B) A_ii), adj(B)_ii the principal minors of order d - 1. Where det(B)
    is below 1e-6 the minors lose digits to cancellation, and those blocks go to LAPACK's
    inverse. Not finite where A is singular or not positive on its diagonal."""
    d = blocks.shape[-1]
    if d > 3:
        raise ValueError(f"_trace_of_inverse: blocks of size {d}; the closed form is for <= 3")
    diagonal = np.diagonal(blocks, axis1=1, axis2=2)
    root = np.sqrt(diagonal)
    b = blocks / (root[:, :, None] * root[:, None, :])

    def minor(p: int, q: int, r: int, c: int) -> np.ndarray:  # rows p, q; columns r, c
        return b[:, p, r] * b[:, q, c] - b[:, p, c] * b[:, q, r]

    if d == 1:
        cofactors, determinant = np.ones((len(b), 1)), b[:, 0, 0]
    elif d == 2:
        cofactors, determinant = np.stack([b[:, 1, 1], b[:, 0, 0]], 1), minor(0, 1, 0, 1)
    else:
        cofactors = np.stack([minor(1, 2, 1, 2), minor(0, 2, 0, 2), minor(0, 1, 0, 1)], 1)
        determinant = (
            b[:, 0, 0] * minor(1, 2, 1, 2)
            - b[:, 0, 1] * minor(1, 2, 0, 2)
            + b[:, 0, 2] * minor(1, 2, 0, 1)
        )
    trace = (cofactors / diagonal).sum(axis=1) / determinant
    poor = ~(determinant > 1e-6)
    if poor.any():
        try:
            trace[poor] = np.trace(np.linalg.inv(blocks[poor]), axis1=1, axis2=2)
        except np.linalg.LinAlgError:  # a singular block among them: no weight
            trace[poor] = np.nan
    return trace


def _clipped(weights, xp=np):
    weights = xp.where(xp.isfinite(weights) & (weights > 0), weights, 0.0)
    largest = xp.max(weights, initial=0.0)
    # where no weight is usable, every edge alike
    return xp.where(largest > 0, xp.clip(weights, largest / WEIGHT_RANGE, largest), 1.0)


def chordal(problem: Problem, fw, solver: str | None = None):
    """Rotations R_v minimising sum kappa |R_j - R_i R_ij|_F^2 over all matrices with R_0 = I,
    each projected onto the group by special_procrustes; then translations minimising
    sum tau |t_j - t_i - R_i t_ij|^2 with t_0 = 0. Solved dense (`chordal_dense`, on NumPy)
    for a graph of at most `DENSE_START_UP_TO` edges times unknowns unless a `solver` is
    named, else sparse (`chordal_sparse`, which takes the named one): the same start to
    rounding, the dense one half the time on tinyGrid3D (benchmarks/NOTES.md 64). Returns
    NumPy poses."""
    if solver is None and problem.edges * problem.unknowns <= DENSE_START_UP_TO:
        # the problem's elements are over NumPy already
        return chordal_dense(problem, framework("numpy"), problem.anchor, problem.measurements,
                             problem.information).to_numpy()  # fmt: skip
    return chordal_sparse(problem, fw, solver)


def chordal_sparse(problem: Problem, fw, solver: str | None = None):
    """`chordal`'s start by two sparse solves: with Y_v = R_v^T the columns of Y separate,
    Y_j = R_ij^T Y_i; the translations' normal equations are the graph's weighted
    Laplacian, one right-hand side per coordinate. `solver`: a sparse solver's name, or
    None for the first installed."""
    group, n, D = problem.group, problem.vertices, problem.group.space_dim
    i, j = problem.i, problem.j
    kappa, tau = _edge_weights(problem.group, problem.information)
    # R_ij (m, D, D)
    measured = to_numpy(element_in(fw, problem.measurements).rotation().as_matrix())

    # Rotations: residual Y_j - M Y_i with M = R_ij^T; Y_0 = I is fixed, so its terms move to
    # the right-hand side: the gradient at Y = 0 (Y_0 = I) is -kappa M for j when i = 0, and
    # -kappa M^T for i when j = 0.
    eye = np.broadcast_to(np.eye(D), measured.shape)
    blocks, slots = block_pattern(n - 1, D, i - 1, j - 1)  # vertex 0 left out
    weight = kappa[:, None, None]
    values = blocks.assemble(
        slots,
        np.concatenate(
            [(weight * eye).ravel(), (-weight * measured).ravel(), (weight * eye).ravel()]
        ),
    )
    transposed = np.swapaxes(measured, 1, 2)
    from_zero = (i == 0)[:, None, None]
    to_zero = (j == 0)[:, None, None]
    g_i = np.where(to_zero, -weight * measured, 0.0)  # (m, D, D): columns
    g_j = np.where(from_zero, -weight * transposed, 0.0)
    gradient = np.stack(
        [_gradient(n - 1, D, i - 1, j - 1, g_i[..., c], g_j[..., c]) for c in range(D)], axis=1
    )
    y = make_solver(blocks, solver)(values, -gradient).reshape(n - 1, D, D)
    matrices = np.concatenate([np.eye(D)[None], np.swapaxes(y, 1, 2)])  # R_v = Y_v^T
    rotations = groups.nearest_rotations(fw, group, matrices).to_numpy()

    # Translations: residual t_j - t_i - b with b = R_i t_ij; t_0 = 0 fixed.
    projected = to_numpy(element_in(fw, rotations).as_matrix())
    b = np.einsum("eab,eb->ea", projected[i], problem.measurements.position)
    laplacian, slots = block_pattern(n - 1, 1, i - 1, j - 1)
    values = laplacian.assemble(slots, np.concatenate([tau, -tau, tau]))
    gradient = np.stack(
        [_gradient(n - 1, 1, i - 1, j - 1, tau * b[:, c], -tau * b[:, c]) for c in range(D)],
        axis=1,
    )
    translations = make_solver(laplacian, solver)(values, -gradient)
    positions = np.concatenate([np.zeros((1, D)), translations])
    return _anchored(problem, group.from_rotation_and_translation(rotations, positions), fw)


def chordal_dense(problem: Problem, fw, anchor, measurements, information):
    """`chordal`'s start on `fw`'s arrays (NumPy, or JAX inside a compiled function), its two
    linear least-squares problems solved dense, from their weighted incidence matrices
    (their normal equations are those `chordal_sparse` solves): `chordal`'s on a small
    graph, and a compiled solve's (`optimise.compiled_run`). Written as
    two `optim.Problem`s (one Gauss-Newton step each) it traced too, but took ~0.5 ms more
    a compiled call, most of it as the solver's code and data, cold between calls
    (benchmarks/NOTES.md 62). `anchor` (1,) and `measurements` (m,): group elements over
    `fw`; `information` (m, d, d). Returns the poses (n,) over `fw`."""
    xp = fw.namespace()
    group, n, D = problem.group, problem.vertices, problem.group.space_dim
    kappa, tau = _edge_weights(group, information, xp)
    incidence = np.eye(n)
    at_i, at_j = incidence[problem.i], incidence[problem.j]  # (m, n)

    # Rotations, Y_v = R_v^T: rows (edge, a), columns (vertex, b) of sqrt(kappa) (Y_j - M Y_i)
    transposed = xp.swapaxes(measurements.rotation().as_matrix(), -1, -2)
    rows = xp.sqrt(kappa)[:, None, None, None] * (
        at_j[:, None, :, None] * np.eye(D)[None, :, None, :]
        - at_i[:, None, :, None] * transposed[:, :, None, :]
    )
    rows = xp.reshape(rows, (-1, n * D))
    free = rows[:, D:]
    y = xp.linalg.solve(free.T @ free, -(free.T @ rows[:, :D]))  # Y_0 = I moved right
    matrices = xp.concatenate(  # R_v = Y_v^T, R_0 = I
        [xp.asarray(np.eye(D)[None]), xp.swapaxes(xp.reshape(y, (n - 1, D, D)), -1, -2)]
    )
    rotations = groups.nearest_rotations(fw, group, matrices)
    # Translations: sqrt(tau) (t_j - t_i - R_i t_ij), t_0 = 0
    rotated = rotations[problem.i].apply(measurements.position)
    weight = xp.sqrt(tau)[:, None]
    free = weight * (at_j - at_i)[:, 1:]
    t = xp.linalg.solve(free.T @ free, free.T @ (weight * rotated))
    positions = xp.concatenate([xp.zeros((1, D), dtype=t.dtype), t])
    return anchor @ group.from_rotation_and_translation(rotations, positions)


def _gradient(blocks: int, d: int, i, j, g_i, g_j) -> np.ndarray:
    """The vector (blocks d,) summing each edge's g_i (m, d) into block i and g_j into j;
    blocks < 0 (vertex 0) left out."""
    a = np.arange(d)
    rows = np.concatenate([(i[:, None] * d + a).ravel(), (j[:, None] * d + a).ravel()])
    values = np.concatenate([np.ravel(g_i), np.ravel(g_j)])
    keep = rows >= 0
    return np.bincount(rows[keep], values[keep], minlength=blocks * d)


INITIALISATIONS = {"chordal": chordal, "odometry": odometry, "file": from_file}
