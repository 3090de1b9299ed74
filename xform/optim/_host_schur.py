"""The Schur complement on the CPU: the eliminated set's blocks of H (block diagonal)
inverted, the reduced system formed and solved, the eliminated unknowns back-substituted.

For `H = [[A, B], [B^T, C]]`, C block diagonal:

    S = A - B C^-1 B^T,   S x_r = -g_r + B C^-1 g_e,   x_e = -C^-1 (g_e + B^T x_r).

Two ways to form S, chosen by size once per structure:
- small (S solved by the dense Cholesky, B held dense in a few MB): B as a dense array,
  `B C^-1` as one batched product over the eliminated blocks and `(B C^-1) B^T` as one
  matrix product (BLAS), S dense. A small bundle adjustment's iteration then costs a few
  NumPy calls, where SciPy's sparse products cost ~20 calls of fixed overhead each
  (benchmarks/NOTES.md, 46);
- otherwise `B C^-1 B^T` summed eliminated variable by eliminated variable in one Warp
  kernel (`_schur_pairs.py`: each variable's pairs of blocks, straight into S's blocks),
  S assembled into its own sparse pattern and solved by the CPU's sparse Cholesky; B in
  SciPy's sparse matrices for the matrix-vector products.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._installed import DENSE_BELOW
from ._schur_pairs import schur_pair_sums
from ._sparse import Pattern, cholesky_solve, make_solver

# The most entries of B (reduced x eliminated unknowns) held dense: 32 MB of float64.
DENSE_B_ENTRIES = 1 << 22


class Schur:
    """The Schur complement of the eliminated unknowns (indices >= `reduced`), whose block of
    H must be block diagonal (no cost joins two eliminated variables)."""

    def __init__(
        self, pattern: Pattern, reduced: int, d: int, block: int, name: str, solver: str | None
    ):
        self.pattern, self.reduced, self.d, self.name = pattern, reduced, d, name
        rows = pattern.indices.astype(np.int64)
        cols = np.repeat(np.arange(pattern.size), np.diff(pattern.indptr))
        in_a = rows < reduced
        in_b = (rows >= reduced) & (cols < reduced)
        in_c = cols >= reduced
        block_r, block_c = (rows[in_c] - reduced) // d, (cols[in_c] - reduced) // d
        if np.any(block_r != block_c):
            raise ValueError(
                f"xform.optim.solve: cannot eliminate {name}: a cost joins two of its "
                "variables (its block of the normal equations is not block diagonal)"
            )
        self.n_e = n_e = (pattern.size - reduced) // d
        # C's entries, both triangles, as (n_e, d, d) gathered from the values
        r_in, c_in = (rows[in_c] - reduced) % d, (cols[in_c] - reduced) % d
        self.c_lower = (block_r, r_in, c_in, np.flatnonzero(in_c))
        # B is reduced x eliminated: the lower triangle holds B^T
        b_rows, b_cols = cols[in_b], rows[in_b] - reduced
        self.b_where = np.flatnonzero(in_b)
        a_rows, a_cols = rows[in_a], cols[in_a]
        self.a_where = np.flatnonzero(in_a)
        self.dense = reduced == 0 or (  # nothing left to factorise sparse
            (solver == "dense" or (solver is None and reduced < DENSE_BELOW))
            and reduced * n_e * d <= DENSE_B_ENTRIES
        )
        if self.dense:
            self.b_flat = b_rows * (n_e * d) + b_cols
            self.a_flat = a_rows * reduced + a_cols  # lower triangle: what Cholesky reads
            return
        self._sparse_init(b_rows, b_cols, a_rows, a_cols, block, solver)

    def _sparse_init(self, b_rows, b_cols, a_rows, a_cols, block, solver):
        reduced, d = self.reduced, self.d
        # B's rows in blocks of `block` (the tangent sizes' common divisor), each block of B
        # k x d: its pairs' products are small dense ones (`_schur_pairs.py`)
        self.block = k = block if reduced % block == 0 else 1
        row_blocks = reduced // k
        # B in CSR over its entries' places in the values, for the matrix-vector products
        csr = sp.csr_matrix(
            (np.arange(1, len(b_rows) + 1, dtype=np.float64), (b_rows, b_cols)),
            shape=(reduced, self.n_e * d),
        )
        csr.sort_indices()
        self.b_perm = self.b_where[csr.data.astype(np.int64) - 1]
        self.b_indices, self.b_indptr = csr.indices, csr.indptr
        # B's blocks, each eliminated variable's together and in ascending block row, as
        # places in the values (a place past the end reads 0: an entry no cost makes)
        keys, block_of = np.unique((b_cols // d) * row_blocks + b_rows // k, return_inverse=True)
        self.block_rows = (keys % row_blocks).astype(np.int32)
        eliminated = keys // row_blocks
        self.first = np.concatenate(
            [[0], np.cumsum(np.bincount(eliminated, minlength=self.n_e))]
        ).astype(np.int32)
        self.block_slots = np.full((len(keys), k, d), self.pattern.nnz, np.int64)
        self.block_slots[block_of, b_rows % k, b_cols % d] = self.b_where
        self.padded = bool(np.any(self.block_slots == self.pattern.nnz))
        # S's lower block triangle: the blocks that two blocks of one variable meet in
        ones = sp.csr_matrix(
            (np.ones(len(keys)), (self.block_rows, eliminated)), shape=(row_blocks, self.n_e)
        )
        fill = sp.tril(ones @ ones.T).tocsr()
        fill.sort_indices()
        if max(len(keys), fill.nnz, self.n_e) >= np.iinfo(np.int32).max:
            raise ValueError(
                f"xform.optim.solve: eliminating {self.name}: {len(keys):,} blocks of B and "
                f"{fill.nnz:,} of the reduced system; the CPU's Schur complement indexes them "
                "with 32-bit integers"
            )
        self.s_indptr = fill.indptr.astype(np.int32)
        self.s_columns = fill.indices.astype(np.int32)
        block_row = np.repeat(np.arange(row_blocks), np.diff(fill.indptr))
        within, shape = np.arange(k), (len(fill.indices), k, k)
        entry_rows = np.broadcast_to(block_row[:, None, None] * k + within[:, None], shape)
        entry_cols = np.broadcast_to(fill.indices[:, None, None] * k + within, shape)
        # S's entries: A's, then its blocks' (the order of the values `_sparse_reduced`
        # assembles); the diagonal blocks' entries above the diagonal get the dropped slot
        rows = np.concatenate([a_rows, entry_rows.ravel()])
        cols = np.concatenate([a_cols, entry_cols.ravel()])
        self.s_pattern = Pattern(reduced, rows, cols)
        self.s_slots = self.s_pattern.slots(rows, cols)
        self.solve_reduced = make_solver(self.s_pattern, solver)

    def __call__(self, values: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        c_inverse = self._c_inverse(values)
        g_r, g_e = gradient[: self.reduced], gradient[self.reduced :]
        if self.dense:
            x_r, pulled = self._dense_reduced(values, c_inverse, g_r, g_e)
        else:
            x_r, pulled = self._sparse_reduced(values, c_inverse, g_r, g_e)
        x_e = -(c_inverse @ (g_e + pulled).reshape(-1, self.d)[..., None])[..., 0]
        return np.concatenate([x_r, x_e.ravel()])

    def _c_inverse(self, values: np.ndarray) -> np.ndarray:
        d = self.d
        block, r_in, c_in, where = self.c_lower
        c = np.zeros((self.n_e, d, d))
        c[block, r_in, c_in] = values[where]
        c[block, c_in, r_in] = values[where]
        try:
            c_inverse = np.linalg.inv(c)
        except np.linalg.LinAlgError as error:
            raise ArithmeticError(str(error)) from error
        if not np.all(np.isfinite(c_inverse)):
            raise ArithmeticError("an eliminated block is singular")
        return c_inverse

    def _dense_reduced(self, values, c_inverse, g_r, g_e):
        """x_r and `B^T x_r`, S formed and factorised dense."""
        reduced, n_e, d = self.reduced, self.n_e, self.d
        b = np.zeros(reduced * n_e * d)
        b[self.b_flat] = values[self.b_where]
        b = b.reshape(reduced, n_e * d)
        # B C^-1: each eliminated block's d columns times its inverse
        y = np.matmul(b.reshape(reduced, n_e, d).transpose(1, 0, 2), c_inverse)
        y = y.transpose(1, 0, 2).reshape(reduced, n_e * d)
        s = -(y @ b.T)
        s.ravel()[self.a_flat] += values[self.a_where]
        x_r = cholesky_solve(s, -g_r + y @ g_e)
        return x_r, b.T @ x_r

    def _sparse_reduced(self, values, c_inverse, g_r, g_e):
        """x_r and `B^T x_r`, S assembled into its sparse pattern, `B C^-1 B^T` summed by
        eliminated variable (`_schur_pairs.py`)."""
        reduced, n_e, d = self.reduced, self.n_e, self.d
        b = sp.csr_matrix(
            (values[self.b_perm], self.b_indices, self.b_indptr), shape=(reduced, n_e * d)
        )
        blocks = (np.append(values, 0.0) if self.padded else values)[self.block_slots]
        product = schur_pair_sums(
            blocks, self.block_rows, self.first, c_inverse, self.s_indptr, self.s_columns
        )
        s_values = self.s_pattern.assemble(
            self.s_slots, np.concatenate([values[self.a_where], -product.ravel()])
        )
        c_inverse_g = (c_inverse @ g_e.reshape(n_e, d, 1)).ravel()
        x_r = self.solve_reduced(s_values, -g_r + b @ c_inverse_g)
        return x_r, b.T @ x_r
