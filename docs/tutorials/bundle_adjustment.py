"""Bundle adjustment, step by step.

Bundle adjustment refines cameras and 3D points together so that the points, seen
through the cameras, land on the pixels where they were observed. This page solves a
"Bundle Adjustment in the Large" (BAL) problem with
`interop_examples/bundle_adjustment.py` on [`xform.optim`](../optim.md): camera poses
as `xform.SE3`, the points eliminated by the Schur complement. It uses the small BAL
file that GTSAM's wheel ships (3 cameras, 7 points); [bundle adjustment against GTSAM
and jaxls](../bundle_adjustment.md) has the method in full and the measured comparison
on Ladybug-49.
"""

# %% Read a BAL file
# `xform.optim.bal.read_bal` reads the format: per camera a Rodrigues rotation, a
# translation, a focal length and two radial distortion terms; the points; and each
# observation's camera, point and pixel.
import sys
from pathlib import Path

import gtsam
from xform.optim.bal import read_bal

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "interop_examples"))
import bundle_adjustment as ba  # noqa: E402

path = Path(gtsam.findExampleDataFile("dubrovnik-3-7-pre.txt"))
bal = read_bal(path)
print(bal.cameras.shape, bal.points.shape, bal.observations.shape)

# %% The cost: one residual for every observation
# A world point `X` is moved into the camera's frame by its pose (`pose @ X`, one
# batched `pose_transform_points`), projected and distorted. The Jacobians are written
# out, which the tests check against `xform.optim`'s forward mode:
#| include: interop_examples/bundle_adjustment.py reprojection reprojection_jacobians
print(f"the cost at the file's values: {ba.cost_of(bal, bal.cameras, bal.points):.6g}")

# %% The problem
# Three variable sets: the camera poses on SE(3), the intrinsics and the points in
# Euclidean space; one cost for all observations, each picking its camera and point by
# index:
#| include: interop_examples/bundle_adjustment.py build
problem, (cameras, intrinsics, points) = ba.build(bal, "torch")
print(*problem.variable_sets, sep="\n")
print(*(f"{c.name}: {c.count} residuals" for c in problem.costs))

# %% Solve, the points eliminated
# `optim.solve(..., eliminate=points)` solves the normal equations by the Schur
# complement on the points: each point's 3 x 3 block is inverted, leaving a small system
# in the cameras. The example's `run` does this and scores the result with one
# evaluator, in NumPy (this file has fewer residuals than unknowns, so its optimum is
# an exact fit):
_, solved, result, _ = ba.run(path, "torch", report=None)
print(f"cost {result.history[0]:.6g} -> below 1e-20: {result.cost < 1e-20}")
print(result.iterations, "iterations, converged:", result.converged)
assert result.converged and result.cost < 1e-20

# %% The same in JAX
_, _, jax_result, _ = ba.run(path, "jax", report=None)
print(
    f"JAX: below 1e-20: {jax_result.cost < 1e-20}, {jax_result.iterations} iterations"
)
assert jax_result.cost < 1e-20

# %% From the command line
# ```bash
# python interop_examples/bundle_adjustment.py problem-49-7776-pre.txt --framework jax \
#     --iterations 30 --out solved.txt
# ```
# solves Ladybug-49 (from the BAL site, grail.cs.washington.edu/projects/bal) as the
# comparison with GTSAM and jaxls does.
