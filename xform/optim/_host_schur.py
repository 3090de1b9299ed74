"""The Schur complement on the CPU, in SciPy's sparse matrices: the eliminated set's blocks
of H (block diagonal) inverted, the reduced system assembled into its own pattern and
solved by the CPU's sparse Cholesky, the eliminated unknowns back-substituted."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._sparse import Pattern, make_solver


class Schur:
    """The Schur complement of the eliminated unknowns (indices >= `reduced`), whose block of
    H must be block diagonal (no cost joins two eliminated variables):
    `S = A - B C^-1 B^T`, `S x_r = -g_r + B C^-1 g_e`, `x_e = C^-1 (-g_e - B^T x_r)`."""

    def __init__(
        self, pattern: Pattern, reduced: int, d: int, block: int, name: str, solver: str | None
    ):
        self.pattern, self.reduced, self.d = pattern, reduced, d
        rows = pattern.indices.astype(np.int64)
        cols = np.repeat(np.arange(pattern.size), np.diff(pattern.indptr))
        in_a = rows < reduced
        in_b = (rows >= reduced) & (cols < reduced)
        in_c = cols >= reduced
        # C: block diagonal
        block_r, block_c = (rows[in_c] - reduced) // d, (cols[in_c] - reduced) // d
        if np.any(block_r != block_c):
            raise ValueError(
                f"xform.optim.solve: cannot eliminate {name}: a cost joins two of its "
                "variables (its block of the normal equations is not block diagonal)"
            )
        n_e = (pattern.size - reduced) // d
        self.n_e = n_e
        # C's entries, both triangles, as (n_e, d, d) gathered from the values
        r_in, c_in = (rows[in_c] - reduced) % d, (cols[in_c] - reduced) % d
        where_c = np.flatnonzero(in_c)
        self.c_lower = (block_r, r_in, c_in, where_c)
        # A's values on S's pattern; S = A's entries and the fill of B C^-1 B^T
        # B's rows in blocks of `block` (the tangent sizes' common divisor): SciPy's block
        # products are several times faster than its scalar ones here
        self.block = block if reduced % block == 0 else 1
        b_rows, b_cols = cols[in_b], rows[in_b] - reduced  # B is reduced x eliminated
        ones = sp.csr_matrix(
            (np.ones(len(b_rows)), (b_rows, b_cols)), shape=(reduced, self.n_e * d)
        )
        self.b_order = np.flatnonzero(in_b)
        csr = sp.csr_matrix(
            (np.arange(1, len(b_rows) + 1, dtype=np.float64), (b_rows, b_cols)),
            shape=(reduced, self.n_e * d),
        )
        csr.sort_indices()
        self.b_perm = self.b_order[csr.data.astype(np.int64) - 1]
        self.b_indices, self.b_indptr = csr.indices, csr.indptr
        fill = (ones @ ones.T).tocoo()
        a_rows, a_cols = rows[in_a], cols[in_a]
        self.s_pattern = Pattern(
            reduced, np.concatenate([fill.row, a_rows]), np.concatenate([fill.col, a_cols])
        )
        self.a_slots = self.s_pattern.slots(a_rows, a_cols)
        self.a_where = np.flatnonzero(in_a)
        self.solve_reduced = make_solver(self.s_pattern, solver)
        self._product_slots = None
        self._product_key = None

    def __call__(self, values: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        d, reduced = self.d, self.reduced
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
        b = sp.csr_matrix(
            (values[self.b_perm], self.b_indices, self.b_indptr), shape=(reduced, self.n_e * d)
        )
        k = self.block
        c_bsr = sp.bsr_matrix(
            (c_inverse, np.arange(self.n_e), np.arange(self.n_e + 1)), shape=(self.n_e * d,) * 2
        )
        b_bsr = b.tobsr(blocksize=(k, d)) if k > 1 else b
        y = b_bsr @ c_bsr  # B C^-1
        product = (y @ b_bsr.T).tocoo()
        # SciPy's product may leave out entries that come out zero: the slots are found
        # again whenever its pattern differs, in any entry, from the last one's
        key = self._product_key
        if key is None or not (
            np.array_equal(key[0], product.row) and np.array_equal(key[1], product.col)
        ):
            self._product_slots = self.s_pattern.slots(product.row, product.col)
            self._product_key = (product.row, product.col)
        s_values = self.s_pattern.assemble(
            np.concatenate([self.a_slots, self._product_slots]),
            np.concatenate([values[self.a_where], -product.data]),
        )
        g_r, g_e = gradient[:reduced], gradient[reduced:]
        rhs = -g_r + y @ g_e
        x_r = self.solve_reduced(s_values, rhs)
        x_e = -(c_inverse @ (g_e + b.T @ x_r).reshape(-1, d)[..., None])[..., 0]
        return np.concatenate([x_r, x_e.ravel()])
