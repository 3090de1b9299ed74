"""Robust losses `rho(s)` of the squared residual norm `s = |r|^2`: a cost is
`1/2 sum rho(|r|^2)`. The solver linearises them as Ceres does for losses whose second
derivative is not positive (iteratively reweighted least squares): residual and Jacobian
scaled by `sqrt(rho'(s))`, so that the gradient is exact and the Gauss-Newton matrix leaves
out the (negative) curvature of rho.
"""

from __future__ import annotations

from dataclasses import dataclass


class Loss:
    """`rho(s)` and `rho'(s)` of `s = |r|^2`, written with the arrays' own arithmetic (any
    framework): `evaluate(s) -> (rho, rho_prime)`."""

    def evaluate(self, s, xp):
        """`(rho(s), rho'(s))` for squared norms `s` `(k,)`, with `xp` the arrays' module
        (`numpy`, `torch` or `jax.numpy`)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Huber(Loss):
    """`rho(s) = s` for `s <= delta^2`, `2 delta sqrt(s) - delta^2` beyond: quadratic near 0,
    linear in `|r|` far away (Ceres' `HuberLoss(delta)`)."""

    delta: float = 1.0

    def __post_init__(self):
        if not self.delta > 0:
            raise ValueError(f"xform.optim.Huber: delta must be positive, got {self.delta}")

    def evaluate(self, s, xp):
        """`(rho(s), rho'(s))`: `(s, 1)` inside `delta^2`, `(2 delta sqrt(s) - delta^2,
        delta / sqrt(s))` beyond."""
        d2 = self.delta * self.delta
        inside = s <= d2
        root = xp.sqrt(xp.where(inside, d2, s))  # no sqrt of 0 on the branch not taken
        rho = xp.where(inside, s, 2.0 * self.delta * root - d2)
        rho1 = xp.where(inside, 1.0 + 0.0 * s, self.delta / root)
        return rho, rho1


@dataclass(frozen=True)
class Cauchy(Loss):
    """`rho(s) = c^2 log(1 + s / c^2)` (Ceres' `CauchyLoss(c)`)."""

    scale: float = 1.0

    def __post_init__(self):
        if not self.scale > 0:
            raise ValueError(f"xform.optim.Cauchy: scale must be positive, got {self.scale}")

    def evaluate(self, s, xp):
        """`(rho(s), rho'(s))` = `(c^2 log(1 + s / c^2), 1 / (1 + s / c^2))`."""
        c2 = self.scale * self.scale
        return c2 * xp.log1p(s / c2), 1.0 / (1.0 + s / c2)
