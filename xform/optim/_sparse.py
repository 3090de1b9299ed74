"""Sparse symmetric positive definite systems: a pattern worked out once, values assembled
by one `np.bincount` per linearisation, and a sparse Cholesky chosen by measurement.

`Pattern` keeps the lower triangle of a symmetric matrix in CSC (equivalently the upper
triangle in CSR, which PARDISO reads); CHOLMOD reads that half too. Every contribution of a
linearisation (an entry of some cost instance's `J^T J`) gets its slot in the value array
once; entries above the diagonal, and those of fixed variables, go to a dropped slot.

Solvers (docs/optim.md has the measurements): MKL's PARDISO through pypardiso (BSD; MKL's
wheels are free to redistribute), CHOLMOD through scikit-sparse where it is installed (it
needs SuiteSparse's headers to build), CHOLMOD's supernodal Cholesky through CVXOPT (GPL,
so not a dependency: used where a user installed it), CHOLMOD's simplicial Cholesky through
cholespy (which orders and factorises again on every call), SciPy's SuperLU, and a dense
Cholesky (NumPy) for small systems, where a sparse library's overhead costs more than it
saves.
"""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import scipy.sparse as sp

try:  # at import, with the other imports: pypardiso finds MKL by searching the disk
    import pypardiso

    # Each new PyPardisoSolver looks for MKL again (find_library, then a recursive glob
    # of the environment: 0.28 s a solver here); solvers are copies of this one instead.
    _PARDISO_TEMPLATE = pypardiso.PyPardisoSolver(mtype=2)
except ImportError:
    _PARDISO_TEMPLATE = None


class Pattern:
    """The lower triangle of a symmetric `size x size` matrix whose nonzeros are the
    entries (rows, cols) given (either triangle; negative indices left out) and the whole
    diagonal, in CSC with sorted rows."""

    def __init__(self, size: int, rows: np.ndarray, cols: np.ndarray):
        self.size = int(size)
        rows, cols = np.asarray(rows, np.int64).ravel(), np.asarray(cols, np.int64).ravel()
        keep = (rows >= 0) & (cols >= 0)
        rows, cols = rows[keep], cols[keep]
        low, high = np.minimum(rows, cols), np.maximum(rows, cols)
        diagonal = np.arange(self.size, dtype=np.int64)
        keys = np.sort(np.concatenate([low * self.size + high, diagonal * (self.size + 1)]))
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]  # unique (sorting is
        # several times faster than NumPy's hashing unique on these sizes)
        self.keys = keys
        columns = keys // self.size
        self.indices = (keys % self.size).astype(np.int32)
        counts = np.bincount(columns, minlength=self.size)
        self.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        self.nnz = len(keys)
        self.diagonal = self.indptr[:-1].astype(np.int64)  # the first row of each column

    def slots(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Each entry's place in the value array: entries below or on the diagonal, of
        indices >= 0; the others `nnz` (dropped by `assemble`)."""
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        valid = (rows >= cols) & (cols >= 0)
        place = np.searchsorted(self.keys, np.where(valid, cols * self.size + rows, 0))
        return np.where(valid, place, self.nnz)

    def assemble(self, slots: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The value array (nnz,) from the contributions `values` at `slots`."""
        return np.bincount(slots.ravel(), weights=values.ravel(), minlength=self.nnz + 1)[
            : self.nnz
        ]

    def matrix(self, values: np.ndarray) -> sp.csc_matrix:
        """The lower triangle as a SciPy matrix."""
        return sp.csc_matrix((values, self.indices, self.indptr), shape=(self.size, self.size))

    def full_matrix(self, values: np.ndarray) -> sp.csc_matrix:
        lower = self.matrix(values)
        return (lower + sp.triu(lower.T, k=1)).tocsc()

    def dense(self, values: np.ndarray) -> np.ndarray:
        return self.full_matrix(values).toarray()


def lower_slots(pattern: Pattern, columns: np.ndarray) -> np.ndarray:
    """Slots of every entry (p, q) of per-instance matrices `sum J^T J` (k, D, D) whose
    column p is the global unknown `columns[:, p]` (< 0: fixed): entry (p, q) lands on
    (columns[p], columns[q]) where that is on or below the diagonal, and is dropped above
    it (its mirror (q, p) carries the same value there)."""
    rows = np.broadcast_to(columns[:, :, None], (*columns.shape, columns.shape[1]))
    cols = np.broadcast_to(columns[:, None, :], rows.shape)
    return pattern.slots(rows, cols)


def cost_pattern(size: int, costs: list[tuple[np.ndarray, list[int]]]):
    """The pattern of `sum J^T J` over costs whose instances read variables (blocks of the
    unknowns), and each cost's slots for its per-instance `J^T J` (k, D, D), raveled.

    `costs`: per cost, `starts (k, S)` (each slot's first unknown, -1 where the variable is
    fixed) and the slots' sizes (S,), the columns of J in slot order. Worked out per block,
    not per entry: the unique block pairs make the pattern, and each instance's block
    (slot a, slot b) finds the first row of its block in each column (rows of one block are
    consecutive there): a block at or below the diagonal lands, the mirror above it is
    dropped, and in a diagonal block the entries above the diagonal are."""
    rows, cols = [], []
    for starts, dims in costs:
        for a, d_a in enumerate(dims):
            for b, d_b in enumerate(dims):
                s_a, s_b = starts[:, a], starts[:, b]
                keep = (s_b >= 0) & (s_a >= s_b)
                keys = np.unique(s_a[keep] * size + s_b[keep])
                r, c = keys // size, keys % size
                rows.append(
                    (r[:, None, None] + np.arange(d_a)[:, None] + 0 * np.arange(d_b)).ravel()
                )
                cols.append(
                    (c[:, None, None] + 0 * np.arange(d_a)[:, None] + np.arange(d_b)).ravel()
                )
    pattern = Pattern(
        size,
        np.concatenate(rows) if rows else np.zeros(0, np.int64),
        np.concatenate(cols) if cols else np.zeros(0, np.int64),
    )
    all_slots = []
    for starts, dims in costs:
        k, total = len(starts), int(sum(dims))
        slots = np.full((k, total, total), pattern.nnz, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(dims)]).astype(int)
        for a, d_a in enumerate(dims):
            for b, d_b in enumerate(dims):
                s_a, s_b = starts[:, a], starts[:, b]
                keep = (s_b >= 0) & (s_a >= s_b)
                diagonal = (s_a == s_b)[:, None, None]
                column = np.where(keep, s_b, 0)[:, None] + np.arange(d_b)  # (k, d_b)
                # the first row of the block stored in each column: the block's first row,
                # or in a diagonal block the diagonal entry (nothing above it is stored)
                first_row = np.where(diagonal[:, 0], column, np.where(keep, s_a, 0)[:, None])
                first = np.searchsorted(pattern.keys, column * size + first_row)  # (k, d_b)
                p_index = np.arange(d_a)[None, :, None]
                q_index = np.arange(d_b)[None, None, :]
                block = first[:, None, :] + p_index - np.where(diagonal, q_index, 0)
                valid = keep[:, None, None] & ~(diagonal & (p_index < q_index))
                slots[:, offsets[a] : offsets[a + 1], offsets[b] : offsets[b + 1]] = np.where(
                    valid, block, pattern.nnz
                )
        all_slots.append(slots.ravel())
    return pattern, all_slots


def block_pattern(blocks: int, d: int, i: np.ndarray, j: np.ndarray):
    """The pattern of `sum_edges J^T J` for `d x d` blocks of `blocks` block-variables and
    edges (i, j) (an index < 0: a fixed block), and the slots of each edge's blocks (ii, ij,
    jj), each (m, d, d), in that order: `assemble(slots, concatenate of the blocks)`. Only
    H_ij is given, so its entries above the diagonal go to their mirrors."""
    a = np.arange(d)
    rows_i = np.where(i[:, None] >= 0, i[:, None] * d + a, -1)
    rows_j = np.where(j[:, None] >= 0, j[:, None] * d + a, -1)
    columns = np.concatenate([rows_i, rows_j], axis=1)
    pattern = Pattern(
        blocks * d,
        np.broadcast_to(columns[:, :, None], (len(i), 2 * d, 2 * d)),
        np.broadcast_to(columns[:, None, :], (len(i), 2 * d, 2 * d)),
    )
    ii = lower_slots(pattern, rows_i)
    jj = lower_slots(pattern, rows_j)
    r = np.broadcast_to(rows_i[:, :, None], (len(i), d, d))
    c = np.broadcast_to(rows_j[:, None, :], (len(i), d, d))
    ij = pattern.slots(np.maximum(r, c), np.where((r >= 0) & (c >= 0), np.minimum(r, c), -1))
    return pattern, np.concatenate([ii.ravel(), ij.ravel(), jj.ravel()])


class Pardiso:
    """MKL's PARDISO (pypardiso), symmetric positive definite: the lower triangle in CSC is
    the upper triangle in CSR, which PARDISO reads. The ordering and symbolic analysis
    (PARDISO's phase 11) run once per pattern; each matrix is a numeric factorisation and
    a solve (phases 22 and 33), called through pypardiso's phase switch, since its
    `factorize` and `solve` copy and compare the matrix and analyse it again every time."""

    name = "pardiso"

    def __init__(self, pattern: Pattern):
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

    def __init__(self, pattern: Pattern):
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

    def __init__(self, pattern: Pattern):
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

    def __init__(self, pattern: Pattern):
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


class Cholmod:
    """CHOLMOD through scikit-sparse (`sksparse.cholmod`): the symbolic analysis once per
    pattern, then a numeric factorisation per matrix."""

    name = "cholmod"

    def __init__(self, pattern: Pattern):
        from sksparse import cholmod

        self._cholmod, self._pattern, self._factor = cholmod, pattern, None

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        matrix = self._pattern.matrix(values)
        try:
            if self._factor is None:
                self._factor = self._cholmod.analyze(matrix, mode="supernodal")
            self._factor.cholesky_inplace(matrix)
        except self._cholmod.CholmodNotPositiveDefiniteError as error:
            raise ArithmeticError(str(error)) from error
        return self._factor(rhs)


class Dense:
    """NumPy's (LAPACK's) dense Cholesky: for small systems (the reduced camera system of a
    bundle adjustment with few cameras), where the sparse libraries' fixed costs dominate."""

    name = "dense"

    def __init__(self, pattern: Pattern):
        self._pattern = pattern
        self._columns = np.repeat(np.arange(pattern.size), np.diff(pattern.indptr))

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        import scipy.linalg

        matrix = np.zeros((self._pattern.size,) * 2)
        matrix[self._pattern.indices, self._columns] = values  # lower triangle
        try:
            factor = scipy.linalg.cho_factor(matrix, lower=True, check_finite=False)
        except np.linalg.LinAlgError as error:
            raise ArithmeticError(str(error)) from error
        solution = scipy.linalg.cho_solve(factor, rhs, check_finite=False)
        if not np.all(np.isfinite(solution)):
            raise ArithmeticError("the matrix is not positive definite")
        return solution


SOLVERS = {
    s.name: s for s in (Pardiso, Cholmod, CholmodSupernodal, CholmodSimplicial, SuperLU, Dense)
}
_MODULES = {
    "pardiso": "pypardiso",
    "cholmod": "sksparse",
    "cholmod-supernodal": "cvxopt",
    "cholespy": "cholespy",
    "superlu": "scipy",
    "dense": "scipy",
}
# Below this many unknowns the dense Cholesky is the faster (measured: docs/optim.md).
DENSE_BELOW = 600


def available_solvers() -> list[str]:
    """The sparse solvers whose library is installed, fastest first (as measured), then
    the dense one."""
    return [name for name, module in _MODULES.items() if importlib.util.find_spec(module)]


def make_solver(pattern: Pattern, name: str | None = None):
    """A function (values, rhs) -> x solving H x = rhs for matrices of `pattern`; by
    default the dense Cholesky for fewer than `DENSE_BELOW` unknowns, else the fastest
    installed sparse one. A matrix that is not positive definite (to rounding) raises
    ArithmeticError."""
    if name is None:
        name = "dense" if pattern.size < DENSE_BELOW else available_solvers()[0]
    if name not in SOLVERS:
        raise ValueError(f"xform.optim: solver must be one of {sorted(SOLVERS)}, got {name!r}")
    if name not in available_solvers():
        raise ValueError(
            f"xform.optim: solver {name!r} needs {_MODULES[name]}, which is not installed"
        )
    return SOLVERS[name](pattern)
