"""Nonlinear least squares on Lie groups, in PyTorch and JAX: `xform.optim`.

```python
from xform import optim

problem = optim.Problem()
poses = problem.variables(initial_poses)  # a group batch (n,) -> n variables
points = problem.variables(initial_points)  # a (m, 3) array -> m Euclidean variables
problem.fix(poses[0])  # gauge: held at its value
problem.add(residual_fn, poses[i], poses[j], data=(Z, sqrt_info), loss=optim.Huber())
result = optim.solve(problem, method="lm")  # or "gn"
result.values(poses)
```

Variables move by right perturbations (`T <- T @ G.exp(delta)`); a cost is
`1/2 sum rho(|r|^2)` over the instances of each `add`, whose residual function runs once
for all of them, with exact Jacobians by automatic differentiation through xform's ops
(reverse mode, a pass per residual component, in eager PyTorch; else forward mode). The normal
equations are sparse (CPU: a sparse Cholesky, optionally after a Schur complement) or,
for CUDA inputs, batched problems and JAX transforms, block-sparse in the framework itself
(`_device.py`: a dense or sparse direct solve or preconditioned CG, the Schur complement
too). One Levenberg-Marquardt loop serves both (`_loop.py`). Solutions are
differentiable by implicit differentiation at the optimum (`_implicit.py`). Readers:
`optim.g2o` (pose graphs) and `optim.bal` (bundle adjustment).
"""

from ._installed import available_solvers
from ._losses import Cauchy, Huber, Loss
from ._problem import Cost, Problem, Selection, Variables
from ._result import Result, Timings
from ._solve import solve
from ._whiten import sqrt_information

__all__ = [
    "Problem",
    "Variables",
    "Selection",
    "Cost",
    "Loss",
    "Huber",
    "Cauchy",
    "solve",
    "Result",
    "Timings",
    "sqrt_information",
    "available_solvers",
]
