"""The Schur complement on the device: the eliminated set's diagonal blocks inverted in one
batch, the reduced system's blocks and right-hand side by segment sums of per-block
products, the reduced system solved, the eliminated unknowns back-substituted in one
batch. For `H = [[A, B], [B^T, C]]`, C block diagonal:

    S = A - B C^-1 B^T,   S x_r = -g_r + B C^-1 g_e,   x_e = -C^-1 (g_e + B^T x_r).
"""

from __future__ import annotations

from collections.abc import Callable

from .._frameworks import Framework, float_name
from ._blocks import BlockMatrix
from ._normal import SchurStructure


class Schur:
    """Steps of a damped block-sparse system through the complement of its last set."""

    def __init__(self, structure: SchurStructure, framework: Framework):
        self.structure, self.framework = structure, framework

    def __call__(self, matrix: BlockMatrix, g, solve: Callable):
        """The step `x` of `matrix x = -g`, `solve(reduced BlockMatrix, rhs)` solving the
        reduced system; the complement's tables are `matrix.tables`' "reduced ..."."""
        framework, s = self.framework, self.structure
        xp = framework.namespace()
        e = s.eliminated
        tables = matrix.tables
        parts = matrix.split(g)
        batch = g.shape[0]
        inverse = xp.linalg.inv(matrix.diagonal_blocks(e))  # (B, n_e, d_e, d_e)
        coupling = {i: matrix.blocks[(i, e)] for i in s.coupled}
        eliminated_of = {i: tables[f"cols {i} {e}"] for i in s.coupled}
        y = {i: coupling[i] @ inverse[:, eliminated_of[i]] for i in s.coupled}  # B C^-1
        reduced = {}
        for key, class_ in s.pattern.classes.items():
            si, sj = s.pattern.sets[key[0]], s.pattern.sets[key[1]]
            reduced[key] = framework.zeros(
                (batch, class_.size + 1, si.dim, sj.dim), float_name(g.dtype), g
            )
        for (i, j), (target, _) in s.a_parts.items():
            reduced[target] = reduced[target] + framework.segment_sum(
                matrix.blocks[(i, j)], tables[f"reduced a {i} {j}"], reduced[target].shape[1]
            )
        for (i, j), (target, *_) in s.products.items():
            first, second = tables[f"reduced first {i} {j}"], tables[f"reduced second {i} {j}"]
            product = y[i][:, first] @ coupling[j][:, second].mT
            reduced[target] = reduced[target] - framework.segment_sum(
                product, tables[f"reduced places {i} {j}"], reduced[target].shape[1]
            )
        reduced = {k: v[:, :-1] for k, v in reduced.items()}
        complement = BlockMatrix(s.pattern, reduced, framework, tables, "reduced ")
        g_e = parts[e]
        rhs = []
        for k, i in enumerate(s.reduced):
            part = -parts[i]
            if i in y:
                moved = (y[i] @ g_e[:, eliminated_of[i]][..., None])[..., 0]
                part = part + framework.segment_sum(
                    moved, tables[f"rows {i} {e}"], s.pattern.sets[k].count
                )
            rhs.append(part)
        x_reduced = solve(complement, complement.join(rhs))
        x_parts = complement.split(x_reduced)
        total = g_e
        for k, i in enumerate(s.reduced):
            if i in coupling:
                rows = tables[f"rows {i} {e}"]
                pulled = (coupling[i].mT @ x_parts[k][:, rows][..., None])[..., 0]
                total = total + framework.segment_sum(
                    pulled, eliminated_of[i], matrix.pattern.sets[e].count
                )
        x_eliminated = -(inverse @ total[..., None])[..., 0]
        return framework.concatenate([x_reduced, x_eliminated.reshape(batch, -1)], 1)


