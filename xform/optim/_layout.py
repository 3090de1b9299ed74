"""Where each free variable's tangent lies in the unknowns, the solvers' one numbering.

The unknowns are the free variables' tangents, set after set (the eliminated set, if any,
last), in each set variable after variable, in each variable its tangent's components. A
set's free variables are its blocks: block `i` of set `s` is its `i`-th free variable.
"""

from __future__ import annotations

import numpy as np

from ._problem import Variables


class Layout:
    """`columns(set, indices) -> (k, d)` unknowns, -1 where a variable is fixed; `ranks`:
    each set's variable -> its block (-1 fixed); `offsets`: each set's first unknown;
    `reduced`: the unknowns before the eliminated set's."""

    def __init__(self, sets: list[Variables], eliminated: Variables | None = None):
        # by index: `sets` may be a copy's (the differentiable solve's twin problem)
        if eliminated is not None:
            eliminated = sets[eliminated.index]
        order = [s for s in sets if s is not eliminated] + ([eliminated] if eliminated else [])
        self.offsets, self.ranks, self.counts, self.free = {}, {}, {}, {}
        offset = 0
        self.reduced = 0
        for s in order:
            self.free[s.index] = free = ~s.fixed
            self.ranks[s.index] = np.where(free, np.cumsum(free) - 1, -1)
            self.counts[s.index] = int(free.sum())
            self.offsets[s.index] = offset
            offset += self.counts[s.index] * s.tangent_dim
            if s is not eliminated:
                self.reduced = offset
        if eliminated is None:
            self.reduced = offset
        self.size = offset
        # indices and sizes, not the sets: a structure kept for later solves must not hold
        # a problem's values
        self.tangent_dims = [s.tangent_dim for s in sets]
        self.order = [s.index for s in order]

    def columns(self, s: Variables, indices: np.ndarray) -> np.ndarray:
        rank = self.ranks[s.index][indices]
        base = self.offsets[s.index] + rank * s.tangent_dim
        cols = base[:, None] + np.arange(s.tangent_dim)
        return np.where(rank[:, None] >= 0, cols, -1)

    def split(self, step: np.ndarray, s: Variables) -> np.ndarray:
        """The step of set s, (n, d), zero for fixed variables."""
        start = self.offsets[s.index]
        free = step[start : start + self.counts[s.index] * s.tangent_dim].reshape(-1, s.tangent_dim)
        if self.counts[s.index] == s.count:
            return free
        delta = np.zeros((s.count, s.tangent_dim))
        delta[self.free[s.index]] = free
        return delta
