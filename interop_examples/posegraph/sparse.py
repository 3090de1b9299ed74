"""The normal equations of a pose graph as one sparse matrix, and their solution.

The matrix H = sum_edges J^T Omega J has one d x d block per vertex and one per pair of
vertices joined by an edge; the gauge is fixed by leaving out one vertex (its blocks and
its rows), which GTSAM's prior on pose 0 does in the limit. The pattern does not change
between iterations, so it is built once: every entry of every edge's blocks gets its slot
in the matrix's value array, and assembling is one `np.bincount`. Only the lower triangle
is kept (CHOLMOD reads only that half of a symmetric matrix).

Solvers, chosen by measurement (docs/pose_graph.md): MKL's PARDISO through pypardiso
(BSD; MKL's wheels are free to redistribute), as fast as CHOLMOD's supernodal Cholesky
through CVXOPT (GPL, so not a dependency: used where a user installed it), CHOLMOD's
simplicial Cholesky through cholespy (which orders and factorises again on every call),
and SciPy's SuperLU. scikit-sparse has no wheel and does not build without SuiteSparse's
headers.
"""

from __future__ import annotations

import copy

import numpy as np
import scipy.sparse as sp

try:  # at import, with the other imports: pypardiso finds MKL by searching the disk
    import pypardiso

    # Each new PyPardisoSolver looks for MKL again (find_library, then a recursive glob
    # of the environment: 0.28 s a solver here); solvers are copies of this one instead.
    _PARDISO_TEMPLATE = pypardiso.PyPardisoSolver(mtype=2)
except ImportError:
    _PARDISO_TEMPLATE = None


class BlockPattern:
    """The lower triangle of the block-sparse normal matrix of a graph with `vertices`
    vertices of tangent size `d` and edges (i, j) (no self-loops), vertex 0 left out, in
    CSC (equivalently the upper triangle in CSR).

    Blocks are numbered from the vertices (vertex v > 0 is block v - 1), and the layout is
    worked out per block, not per entry: block column B holds its diagonal block's lower
    triangle, then one d x d block for each block R > B that an edge joins to B, in
    increasing R. Column c = B d + a has d - a + d k_B entries (k_B such blocks), the
    first of them the diagonal."""

    def __init__(self, vertices: int, d: int, i: np.ndarray, j: np.ndarray):
        self.d = d
        blocks = vertices - 1
        self.size = d * blocks
        bi, bj = i - 1, j - 1  # -1: vertex 0, left out
        # The off-diagonal blocks (R, B), R > B, each once, sorted by B then R.
        joined = (bi >= 0) & (bj >= 0)
        low, high = np.minimum(bi, bj), np.maximum(bi, bj)
        pair_keys = np.unique(low[joined] * blocks + high[joined])
        pair_col, pair_row = pair_keys // blocks, pair_keys % blocks
        first_pair = np.searchsorted(pair_col, np.arange(blocks))
        neighbours = np.bincount(pair_col, minlength=blocks)
        a = np.tile(np.arange(d), blocks)  # each column's place in its block
        column_size = d - a + d * np.repeat(neighbours, d)
        self.indptr = np.concatenate([[0], np.cumsum(column_size)]).astype(np.int32)
        self.nnz = int(self.indptr[-1])
        self.diagonal = self.indptr[:-1].astype(np.int64)
        start = self.indptr[:-1].astype(np.int64)

        def diagonal_slot(block, row, col):  # entry (row, col), row >= col, of block (B, B)
            return start[block * d + col] + row - col

        def pair_slot(block_row, block_col, row, col):  # entry (row, col) of block (R, B)
            rank = np.searchsorted(pair_keys, block_col * blocks + block_row)
            rank = rank - first_pair[block_col]
            return start[block_col * d + col] + d - col + d * rank + row

        # Where each row index goes: diagonal blocks, then the off-diagonal ones.
        self.indices = np.empty(self.nnz, dtype=np.int32)
        row, col = np.tril_indices(d)
        every = np.arange(blocks)[:, None]
        self.indices[diagonal_slot(every, row, col)] = every * d + row
        row, col = (x.ravel() for x in np.meshgrid(np.arange(d), np.arange(d), indexing="ij"))
        self.indices[pair_slot(pair_row[:, None], pair_col[:, None], row, col)] = (
            pair_row[:, None] * d + row
        )

        # Each value of one linearisation (H_ii, H_ij, H_jj of every edge, flat) and its
        # slot; entries above the diagonal, and vertex 0's, go to the dropped slot nnz.
        dropped = self.nnz

        def diagonal_slots(block):
            slots = np.where(row >= col, diagonal_slot(block[:, None], row, col), dropped)
            return np.where(block[:, None] >= 0, slots, dropped)

        # H_ij's (row, col) lies in block (bi, bj); below the diagonal when bi > bj, else
        # its mirror (col, row) in block (bj, bi) does.
        below = (bi > bj)[:, None]
        ij = np.where(
            below,
            pair_slot(high[:, None], low[:, None], row, col),
            pair_slot(high[:, None], low[:, None], col, row),
        )
        ij = np.where(joined[:, None], ij, dropped)
        self.slots = np.concatenate(
            [diagonal_slots(bi).ravel(), ij.ravel(), diagonal_slots(bj).ravel()]
        )
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


class Pardiso:
    """MKL's PARDISO (pypardiso), symmetric positive definite: the lower triangle in CSC is
    the upper triangle in CSR, which PARDISO reads. The ordering and symbolic analysis
    (PARDISO's phase 11) run once per pattern; each matrix is a numeric factorisation and
    a solve (phases 22 and 33), called through pypardiso's phase switch, since its
    `factorize` and `solve` copy and compare the matrix and analyse it again every time."""

    name = "pardiso"

    def __init__(self, pattern: BlockPattern):
        if _PARDISO_TEMPLATE is None:
            raise ImportError("the pardiso solver needs pypardiso (pip install pypardiso)")
        self._error = pypardiso.pardiso_wrapper.PyPardisoError
        solver = self._solver = copy.copy(_PARDISO_TEMPLATE)  # MKL found once
        solver.pt = np.zeros_like(_PARDISO_TEMPLATE.pt)  # PARDISO's handle: a new one
        solver.iparm = _PARDISO_TEMPLATE.iparm.copy()
        solver.perm = _PARDISO_TEMPLATE.perm.copy()
        self._pattern = pattern
        self._analysed = False

    def _phase(self, phase: int, matrix, rhs):
        self._solver.set_phase(phase)
        return self._solver._call_pardiso(matrix, rhs)

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        pattern = self._pattern
        upper = sp.csr_matrix((values, pattern.indices, pattern.indptr), (pattern.size,) * 2)
        rhs = np.asfortranarray(rhs, dtype=np.float64)  # PARDISO reads columns
        try:
            if not self._analysed:
                self._solver._check_A(upper)  # CSR with sorted indices, float64
                self._phase(11, upper, rhs)
                self._analysed = True
            self._phase(22, upper, rhs)
            solution = self._phase(33, upper, rhs)
        except self._error as error:  # "zero pivot": not positive definite
            raise ArithmeticError(str(error)) from error
        if not np.all(np.isfinite(solution)):
            raise ArithmeticError("PARDISO: the matrix is not positive definite")
        return solution


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
        # Our CSC order is CVXOPT's own (columns, then rows, ascending), so each matrix's
        # values are set as they are (tests/test_pose_graph.py checks the solutions).
        self._symbolic = None

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        cvxopt, cholmod = self._cvxopt, self._cholmod
        self._matrix.V = cvxopt.matrix(values)
        cholmod.options["supernodal"] = 2  # always supernodal (dense kernels through BLAS)
        if self._symbolic is None:
            self._symbolic = cholmod.symbolic(self._matrix, uplo="L")
        cholmod.numeric(self._matrix, self._symbolic)  # ArithmeticError if not definite
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
        try:
            factor = cholespy.CholeskySolverD(
                pattern.size, pattern.indptr, pattern.indices, values, cholespy.MatrixType.CSC
            )
        except (RuntimeError, ValueError) as error:  # CHOLMOD's "not positive definite"
            raise ArithmeticError(str(error)) from error
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

        try:
            factor = spla.splu(
                self._pattern.full_matrix(values), permc_spec="MMD_AT_PLUS_A",
                diag_pivot_thresh=0.0, options={"SymmetricMode": True},
            )  # fmt: skip
        except RuntimeError as error:  # "Factor is exactly singular"
            raise ArithmeticError(str(error)) from error
        return factor.solve(rhs)


SOLVERS = {s.name: s for s in (Pardiso, CholmodSupernodal, CholmodSimplicial, SuperLU)}
_MODULES = {
    "pardiso": "pypardiso",
    "cholmod-supernodal": "cvxopt",
    "cholespy": "cholespy",
    "superlu": "scipy",
}


def available_solvers() -> list[str]:
    """The solvers whose library is installed, fastest first (as measured)."""
    import importlib.util

    return [name for name, module in _MODULES.items() if importlib.util.find_spec(module)]


def make_solver(pattern: BlockPattern, name: str | None = None):
    """A function (values, rhs) -> x solving H x = rhs for matrices of `pattern`; by
    default the fastest installed. A matrix that is not positive definite (to rounding)
    raises ArithmeticError."""
    if name is None:
        name = available_solvers()[0]
    if name not in SOLVERS:
        raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {name!r}")
    return SOLVERS[name](pattern)
