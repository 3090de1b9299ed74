"""The normal equations of a pose graph as one sparse matrix, and their solution.

The matrix H = sum_edges J^T Omega J has one d x d block per vertex and one per pair of
vertices joined by an edge; the gauge is fixed by leaving out one vertex (its blocks and
its rows), which GTSAM's prior on pose 0 does in the limit. The pattern does not change
between iterations, so it is built once: every entry of every edge's blocks gets its slot
in the matrix's value array, and assembling is one `np.bincount`. Only the lower triangle
is kept (CHOLMOD reads only that half of a symmetric matrix).

Solvers, chosen by measurement (docs/pose_graph.md): CHOLMOD's supernodal Cholesky through
CVXOPT (its wheels bundle SuiteSparse; the symbolic factorisation is kept between
iterations), CHOLMOD's simplicial Cholesky through cholespy (which orders and factorises
again on every call), and SciPy's SuperLU. scikit-sparse has no wheel and does not build
without SuiteSparse's headers.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class BlockPattern:
    """The lower triangle of the block-sparse normal matrix of a graph with `vertices`
    vertices of tangent size `d` and edges (i, j), vertex `fixed` left out, in CSC
    (equivalently the upper triangle in CSR)."""

    def __init__(self, vertices: int, d: int, i: np.ndarray, j: np.ndarray, fixed: int = 0):
        self.d = d
        variable = np.arange(vertices) - (np.arange(vertices) > fixed)  # vertex -> block
        variable[fixed] = -1
        self.variable = variable
        self.size = d * (vertices - 1)
        bi, bj = variable[i], variable[j]
        a, b = np.meshgrid(np.arange(d), np.arange(d), indexing="ij")  # block entry (a, b)
        a, b = a.ravel(), b.ravel()

        def entries(block_row, block_col):  # rows and columns of each edge's d x d block
            rows = (block_row[:, None] * d + a).ravel()
            cols = (block_col[:, None] * d + b).ravel()
            valid = np.repeat((block_row >= 0) & (block_col >= 0), d * d)
            return rows, cols, valid

        # The value array of one linearisation: H_ii, H_ij, H_jj of every edge, flat.
        parts = [entries(bi, bi), entries(bi, bj), entries(bj, bj)]
        rows = np.concatenate([p[0] for p in parts])
        cols = np.concatenate([p[1] for p in parts])
        valid = np.concatenate([p[2] for p in parts])
        # H_ij's entries above the diagonal are stored as their mirror, below it.
        lower_rows, lower_cols = np.maximum(rows, cols), np.minimum(rows, cols)
        # (i != j: the problem rejects self-loops, so H_ij is never on the diagonal.)
        part = np.repeat(np.arange(3), d * d * len(i))
        keep = valid & ((part == 1) | (rows >= cols))
        # CSC of the lower triangle: sorted by column, then row.
        key = lower_cols.astype(np.int64) * self.size + lower_rows
        unique, slot = np.unique(key[keep], return_inverse=True)
        self.nnz = len(unique)
        self.slots = np.full(len(rows), self.nnz, dtype=np.int64)  # the last slot: dropped
        self.slots[keep] = slot
        self.indices = (unique % self.size).astype(np.int32)
        columns = unique // self.size
        self.indptr = np.searchsorted(columns, np.arange(self.size + 1)).astype(np.int32)
        self.diagonal = np.searchsorted(unique, np.arange(self.size) * (self.size + 1))
        self.gradient_slots = np.concatenate(
            [(bi[:, None] * d + np.arange(d)).ravel(), (bj[:, None] * d + np.arange(d)).ravel()]
        )
        self.gradient_slots[self.gradient_slots < 0] = self.size

    def assemble(self, h_ii: np.ndarray, h_ij: np.ndarray, h_jj: np.ndarray) -> np.ndarray:
        """The value array (nnz,) of H from the edges' blocks (each (m, d, d))."""
        values = np.concatenate([h_ii.ravel(), h_ij.ravel(), h_jj.ravel()])
        return np.bincount(self.slots, weights=values, minlength=self.nnz + 1)[: self.nnz]

    def gradient(self, g_i: np.ndarray, g_j: np.ndarray) -> np.ndarray:
        values = np.concatenate([g_i.ravel(), g_j.ravel()])
        return np.bincount(self.gradient_slots, weights=values, minlength=self.size + 1)[:-1]

    def matrix(self, values: np.ndarray) -> sp.csc_matrix:
        """The lower triangle as a SciPy matrix."""
        return sp.csc_matrix((values, self.indices, self.indptr), shape=(self.size, self.size))

    def full_matrix(self, values: np.ndarray) -> sp.csc_matrix:
        lower = self.matrix(values)
        return (lower + sp.triu(lower.T, k=1)).tocsc()


class CholmodSupernodal:
    """CHOLMOD's supernodal Cholesky through CVXOPT: the ordering (AMD) and the symbolic
    factorisation once per pattern, then a numeric factorisation per matrix."""

    name = "cholmod-supernodal"

    def __init__(self, pattern: BlockPattern):
        import cvxopt
        from cvxopt import cholmod

        self._cvxopt, self._cholmod = cvxopt, cholmod
        columns = np.repeat(np.arange(pattern.size), np.diff(pattern.indptr))
        self._matrix = cvxopt.spmatrix(
            0.0, cvxopt.matrix(pattern.indices.astype(np.int64)),
            cvxopt.matrix(columns), (pattern.size, pattern.size),
        )  # fmt: skip
        # Our CSC order is CVXOPT's own, so values are set without sorting.
        assert np.array_equal(np.array(self._matrix.CCS[1]).ravel(), pattern.indices)
        self._symbolic = None

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        cvxopt, cholmod = self._cvxopt, self._cholmod
        self._matrix.V = cvxopt.matrix(values)
        cholmod.options["supernodal"] = 2  # always supernodal (dense kernels through BLAS)
        if self._symbolic is None:
            self._symbolic = cholmod.symbolic(self._matrix, uplo="L")
        cholmod.numeric(self._matrix, self._symbolic)
        solution = cvxopt.matrix(rhs)
        cholmod.solve(self._symbolic, solution)
        return np.array(solution).reshape(rhs.shape)


class CholmodSimplicial:
    """CHOLMOD's simplicial Cholesky through cholespy, which orders (nested dissection)
    and factorises anew for every matrix."""

    name = "cholespy"

    def __init__(self, pattern: BlockPattern):
        import cholespy

        self._cholespy, self._pattern = cholespy, pattern

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        cholespy, pattern = self._cholespy, self._pattern
        factor = cholespy.CholeskySolverD(
            pattern.size, pattern.indptr, pattern.indices, values, cholespy.MatrixType.CSC
        )
        solution = np.zeros_like(rhs, order="C")
        factor.solve(np.ascontiguousarray(rhs), solution)
        return solution


class SuperLU:
    """SciPy's SuperLU on the full matrix, symmetric mode (diagonal pivots, an ordering of
    A^T + A)."""

    name = "superlu"

    def __init__(self, pattern: BlockPattern):
        self._pattern = pattern

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        import scipy.sparse.linalg as spla

        factor = spla.splu(
            self._pattern.full_matrix(values), permc_spec="MMD_AT_PLUS_A",
            diag_pivot_thresh=0.0, options={"SymmetricMode": True},
        )  # fmt: skip
        return factor.solve(rhs)


SOLVERS = {s.name: s for s in (CholmodSupernodal, CholmodSimplicial, SuperLU)}
_MODULES = {"cholmod-supernodal": "cvxopt", "cholespy": "cholespy", "superlu": "scipy"}


def available_solvers() -> list[str]:
    """The solvers whose library is installed, fastest first (as measured)."""
    import importlib.util

    return [name for name, module in _MODULES.items() if importlib.util.find_spec(module)]


def make_solver(pattern: BlockPattern, name: str | None = None):
    """A function (values, rhs) -> x solving H x = rhs for matrices of `pattern`; by
    default the fastest installed."""
    if name is None:
        name = available_solvers()[0]
    if name not in SOLVERS:
        raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {name!r}")
    return SOLVERS[name](pattern)
