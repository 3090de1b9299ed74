"""Pose-graph SLAM, step by step.

A pose graph is a robot's trajectory as poses `T_i` and measurements `Z_ij` of the
relative pose between two of them (odometry between consecutive poses, loop closures
between others). Pose-graph optimisation finds the poses that agree best with all the
measurements: it minimises `chi2 = sum r_ij^T Omega_ij r_ij` over the residuals
`r_ij = log(Z_ij^-1 T_i^-1 T_j)`, with each edge's information matrix `Omega_ij`.

This page solves the standard benchmark graphs shipped in `data/pose_graphs/` (three
come with a clone; see its README for sources and licences) with
`interop_examples/pose_graph.py`, on xform's group objects and
[`xform.optim`](../optim.md), in PyTorch and JAX. [Pose graphs against
GTSAM](../pose_graph.md) has how each part works and the measured comparison on all
eight graphs of the benchmark.
"""

# %% Read a graph
# `xform.optim.g2o.read_g2o` reads g2o files, 3D (`VERTEX_SE3:QUAT`, `EDGE_SE3:QUAT`)
# and 2D (`VERTEX_SE2`, `EDGE_SE2`). A malformed line raises a `ValueError` naming
# `file:line`. smallGrid3D is a synthetic 3D grid: 125 poses, 297 edges.
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from xform.optim.g2o import read_g2o

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "interop_examples"))
DATA = ROOT / "data" / "pose_graphs"

graph = read_g2o(DATA / "smallGrid3D.g2o")
print(graph.dim, "D:", len(graph.vertex_ids), "vertices,", len(graph.edge_ids), "edges")

# %% The problem on group objects
# The example turns the file into group objects over NumPy: the measurements as one
# batch of `xform.SE3` (or `xform.SE2` for a 2D file), the edges as index arrays `i`,
# `j`, the information matrices as an array `(m, d, d)`.
from posegraph.framework import framework  # noqa: E402
from posegraph.problem import make_problem  # noqa: E402

torch_fw = framework("torch")
problem = make_problem(graph, torch_fw)
print(problem.group.__name__, problem.measurements.shape, problem.information.shape)

# %% A start: chordal initialisation
# Levenberg–Marquardt needs a start near the optimum. The chordal initialisation
# (Carlone et al., ICRA 2015) solves two linear least-squares problems: rotations
# relaxed to 3 x 3 matrices, each projected back onto SO(3) by `special_procrustes`,
# then the translations given the rotations.
from posegraph.initial import chordal, odometry  # noqa: E402

initial = chordal(problem, torch_fw)
print(type(initial).__name__, initial.shape)

# %% The cost: one residual for every edge
# The residual of all edges is a few batched group operations, one kernel launch each
# for the whole graph, and its Jacobians in right perturbations are closed forms of the
# same objects (`jlog` is `J_r^-1`, `adjoint` the adjoint matrix):
#| include: interop_examples/posegraph/optimise.py edge_residuals_and_jacobians
#| include: interop_examples/posegraph/optimise.py edge_residual edge_jacobians
# The solver's `jacobian_fn`, `edge_jacobians`, computes the same whitened values
# with one kernel of the example's own: a Warp function written once for both groups
# with xform's element functions, made an op by `xform.define_op`, that runs on NumPy,
# PyTorch and JAX arrays alike. One pass over the edges replaces eight op calls and
# three batched 6 x 6 products, which PyTorch runs slowly on one CPU thread
# (docs/pose_graph.md):
#| include: interop_examples/posegraph/edges.py edge_function
from posegraph.optimise import edge_residuals_and_jacobians  # noqa: E402

i, j = problem.i[:3], problem.j[:3]
residual, jacobian_i, jacobian_j = edge_residuals_and_jacobians(
    initial[i], initial[j], problem.measurements[np.arange(3)].inverse()
)
print(residual.shape, jacobian_i.shape, jacobian_j.shape)

# %% Solve with xform.optim
# The poses are one variable set, vertex 0 is fixed (the gauge), and one cost covers
# every edge, whitened by the Cholesky factor of its information matrix; `optim.solve`
# runs Levenberg–Marquardt with a sparse Cholesky solve of the normal equations:
#| include: interop_examples/posegraph/optimise.py optimise
from posegraph.optimise import optimise  # noqa: E402

result = optimise(problem, initial, torch_fw, report=None)
print(f"chi2 {result.history[0]:.6g} -> {result.chi2:.10g}")
print(result.iterations, "iterations,", "converged:", result.converged)
assert result.converged

# %% The same in JAX
# The example's other framework gives the same optimum: only the arrays change.
jax_fw = framework("jax")
jax_problem = make_problem(graph, jax_fw)
jax_result = optimise(jax_problem, chordal(jax_problem, jax_fw), jax_fw, report=None)
print(f"JAX: chi2 {jax_result.chi2:.10g}, {jax_result.iterations} iterations")
print("agree:", abs(jax_result.chi2 - result.chi2) <= 1e-9 * result.chi2)
assert abs(jax_result.chi2 - result.chi2) <= 1e-9 * result.chi2

# %% A real trajectory: the Intel Research Lab
# intel is a 2D graph recorded by a robot (1728 poses, 2512 edges): `xform.SE2`
# throughout, the same code. The figure starts from odometry (the measurements composed
# along the trajectory, whose drift the loop closures in grey correct) to show what the
# optimisation does; the chordal start is already close to the optimum.
intel = make_problem(read_g2o(DATA / "intel.g2o"), torch_fw)
start = odometry(intel, torch_fw)
optimum = optimise(intel, start, torch_fw, report=None)
print(intel.group.__name__, f"chi2 {optimum.history[0]:.6g} -> {optimum.chi2:.10g}")

closures = np.abs(intel.ids[intel.i] - intel.ids[intel.j]) > 1
figure, axes = plt.subplots(1, 2, figsize=(10, 4.6))
for axis, poses, title in zip(
    axes, (start, optimum.poses), ("odometry start", "optimum")
):
    xy = np.asarray(poses.position)
    pairs = np.stack([xy[intel.i[closures]], xy[intel.j[closures]]], axis=1)
    axis.plot(*pairs.transpose(2, 1, 0), color="0.85", linewidth=0.3)
    axis.plot(xy[:, 0], xy[:, 1], linewidth=0.7)
    axis.set(title=title, aspect="equal")
figure.tight_layout()

# %% From the command line
# `interop_examples/pose_graph.py` does all of this for a file, and writes the result:
#
# ```bash
# python interop_examples/pose_graph.py data/pose_graphs/MIT.g2o --framework jax \
#     --out MIT-optimised.g2o --plot MIT.png
# ```
#
# Every number of `--out` is written at full float64 precision, into a temporary file
# renamed over the target once complete. On MIT, GTSAM's Levenberg–Marquardt from
# either of its starts stops in a local minimum, which the chordal start here avoids
# (see [the comparison](../pose_graph.md)).
from pose_graph import run  # noqa: E402

_, _, mit, _ = run(DATA / "MIT.g2o", "jax", report=None)
print(f"MIT: chi2 {mit.chi2:.10g} in {mit.iterations} iterations")
