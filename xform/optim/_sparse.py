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

import contextlib
import copy
import ctypes
import functools
import os
import site
import sys
import weakref
from pathlib import Path

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from ._installed import DENSE_BELOW, MODULES, available_solvers
from ._kept import Kept, digest


def _mkl_runtime() -> str | None:
    """MKL's runtime library where its wheel puts it (the environment's `lib/`, or
    `Library/bin/` on Windows), found by reading those folders alone."""
    for base in dict.fromkeys((sys.prefix, site.USER_BASE or sys.prefix)):
        for folder in (Path(base) / "lib", Path(base) / "Library" / "bin"):
            found = sorted(folder.glob("*mkl_rt*"), key=lambda path: len(path.name))
            if found:
                return str(found[0])
    return None


def _import_pardiso():
    """pypardiso and a PARDISO solver to copy (each new PyPardisoSolver looks for MKL
    again), or (None, None). Where `PYPARDISO_MKL_RT` is unset, pypardiso looks for MKL with
    `find_library` and then a recursive glob of the whole environment, and its import makes
    a solver: 0.9 s on a warm disk with torch and JAX installed, at every import of
    `xform.optim` (benchmarks/NOTES.md 48). So the variable is set for that import to what
    `_mkl_runtime` finds, and pypardiso's own search is left for where that fails."""
    chosen = None if "PYPARDISO_MKL_RT" in os.environ else _mkl_runtime()
    for given in ([chosen, None] if chosen else [None]):
        if given:
            os.environ["PYPARDISO_MKL_RT"] = given
        try:
            import pypardiso

            return pypardiso, pypardiso.PyPardisoSolver(mtype=2)
        except (ImportError, OSError):  # no MKL, or not one that loads
            continue
        finally:
            if given:
                del os.environ["PYPARDISO_MKL_RT"]
    return None, None


pypardiso, _PARDISO_TEMPLATE = _import_pardiso()

# PARDISO's settings (MKL's `iparm`, 0-based): its defaults for symmetric positive definite
# matrices (`pardisoinit`), but a minimum-degree ordering (AMD), which leaves 3-19% less
# fill than the default nested dissection on every pose graph of the data folder, and no
# iterative refinement, which a damped Gauss-Newton step has no use for (the residual of a
# solve without it is ~1e-15; benchmarks/NOTES.md 39).
_PARDISO_ORDERING, _PARDISO_MINIMUM_DEGREE = 1, 0
_PARDISO_USER_PERMUTATION = 4  # 1: use `perm`; 2: write the ordering it computes there
_PARDISO_REFINEMENT_STEPS = 7


def _pardiso_settings() -> np.ndarray:
    iparm, handle = np.zeros(64, np.int32), np.zeros(64, np.int64)
    initialise = _PARDISO_TEMPLATE.libmkl.pardisoinit
    initialise.restype = None
    initialise(
        handle.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
        ctypes.byref(ctypes.c_int32(_PARDISO_TEMPLATE.mtype)),
        iparm.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
    )
    iparm[_PARDISO_ORDERING] = _PARDISO_MINIMUM_DEGREE
    iparm[_PARDISO_REFINEMENT_STEPS] = 0
    return iparm


class Pattern:
    """The lower triangle of a symmetric `size x size` matrix whose nonzeros are the
    entries (rows, cols) given (either triangle; negative indices left out) and the whole
    diagonal, in CSC with sorted rows.

    `blocks`, where known: `(b, block_rows, block_cols)` when the unknowns come in blocks of
    one size b and the pattern is made of whole b x b blocks (the lower triangle of those
    on the diagonal), block_rows >= block_cols listing them by column, then row. A solver
    can then order the blocks' graph, b^2 times smaller, instead of the entries'."""

    blocks: tuple[int, np.ndarray, np.ndarray] | None = None

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

    @classmethod
    def from_csc(cls, size: int, indices: np.ndarray, indptr: np.ndarray) -> Pattern:
        """A pattern given in CSC (sorted rows, each column's diagonal first)."""
        pattern = cls.__new__(cls)
        pattern.size = int(size)
        pattern.indices = np.asarray(indices).astype(np.int32)
        pattern.indptr = np.asarray(indptr).astype(np.int32)
        pattern.nnz = len(pattern.indices)
        pattern.diagonal = pattern.indptr[:-1].astype(np.int64)
        return pattern

    @functools.cached_property
    def keys(self) -> np.ndarray:
        """Each stored entry's `column * size + row`, ascending (what `slots` searches)."""
        columns = np.repeat(np.arange(self.size, dtype=np.int64), np.diff(self.indptr))
        return columns * self.size + self.indices

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


def slot_blocks(columns: list[np.ndarray], count: int) -> tuple[np.ndarray, list[int]]:
    """One cost as `cost_pattern` reads it, from its slots' unknowns `columns` ((k, d_a)
    each, consecutive, -1 where the variable is fixed): each slot's first unknown (k, S)
    and the slots' sizes."""
    if not columns:
        return np.zeros((count, 0), np.int64), []
    return np.stack([c[:, 0] for c in columns], 1), [c.shape[1] for c in columns]


def cost_pattern(size: int, costs: list[tuple[np.ndarray, list[int]]]):
    """The pattern of `sum J^T J` over costs whose instances read variables (blocks of the
    unknowns), and each cost's slots for its per-instance `J^T J` (k, D, D), raveled.

    `costs`: per cost, `starts (k, S)` (each slot's first unknown, -1 where the variable is
    fixed) and the slots' sizes (S,), the columns of J in slot order. Worked out per block,
    not per entry: the unique block pairs (row block at or below column block) make the
    pattern, each column of a block pair holds one run of consecutive rows (from the
    diagonal down in a diagonal block), and an instance's entry lands at its run's start
    plus its row's place in the run; a block above the diagonal is dropped (its mirror
    lands), and so are a diagonal block's entries above the diagonal. Unknowns no cost
    reads keep a diagonal entry of their own."""
    row_starts, col_starts, heights, widths = [], [], [], []
    for starts, dims in costs:
        for a, d_a in enumerate(dims):
            for b, d_b in enumerate(dims):
                s_a, s_b = starts[:, a], starts[:, b]
                keep = (s_b >= 0) & (s_a >= s_b)
                row_starts.append(s_a[keep])
                col_starts.append(s_b[keep])
                heights.append(np.full(int(keep.sum()), d_a))
                widths.append(np.full(int(keep.sum()), d_b))
    row_start, col_start, height, width = (
        np.concatenate(x).astype(np.int64) if x else np.zeros(0, np.int64)
        for x in (row_starts, col_starts, heights, widths)
    )
    # every unknown outside the diagonal blocks: a 1 x 1 block of its own
    on_diagonal = row_start == col_start
    depth = np.zeros(size + 1, np.int64)
    np.add.at(depth, col_start[on_diagonal], 1)
    np.add.at(depth, col_start[on_diagonal] + width[on_diagonal], -1)
    alone = np.flatnonzero(np.cumsum(depth[:size]) == 0)
    row_start, col_start = np.concatenate([row_start, alone]), np.concatenate([col_start, alone])
    height = np.concatenate([height, np.ones(len(alone), np.int64)])
    width = np.concatenate([width, np.ones(len(alone), np.int64)])

    pair_keys, first = np.unique(col_start * size + row_start, return_index=True)  # by column
    row_start, col_start, height, width = (x[first] for x in (row_start, col_start, height, width))
    # a run per (block pair, column of the block), stored column by column, then by row
    run_of_pair = np.concatenate([[0], np.cumsum(width)])
    pair = np.repeat(np.arange(len(pair_keys)), width)
    q = np.arange(run_of_pair[-1]) - run_of_pair[pair]
    column = col_start[pair] + q
    diagonal = row_start[pair] == col_start[pair]
    first_row = np.where(diagonal, column, row_start[pair])
    length = np.where(diagonal, width[pair] - q, height[pair])
    order = np.argsort(column, kind="stable")  # pairs of one column already sorted by row
    run_start = np.empty_like(length)
    run_start[order] = np.cumsum(length[order]) - length[order]
    nnz = int(length.sum())
    indices = np.repeat(first_row[order] - run_start[order], length[order]) + np.arange(nnz)
    counts = np.bincount(column, weights=length, minlength=size).astype(np.int64)
    pattern = Pattern.from_csc(size, indices, np.concatenate([[0], np.cumsum(counts)]))
    b = int(height.max(initial=0))
    uniform = b > 1 and height.min() == width.min() == width.max() == b and size % b == 0
    if uniform and not np.any(row_start % b) and not np.any(col_start % b):
        pattern.blocks = (b, row_start // b, col_start // b)

    all_slots = []
    for starts, dims in costs:
        k, total = len(starts), int(sum(dims))
        # the largest arrays of a set-up, written once in place: fresh memory costs more
        # here than the arithmetic (NOTES 39)
        slots = np.empty((k, total, total), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(dims)]).astype(int)
        for a, d_a in enumerate(dims):
            for b, d_b in enumerate(dims):
                s_a, s_b = starts[:, a], starts[:, b]
                keep = (s_b >= 0) & (s_a >= s_b)
                found = np.searchsorted(pair_keys, s_b[keep] * size + s_a[keep])
                first = np.zeros((k, d_b), np.int64)  # each column's run start in the block
                first[keep] = run_start[run_of_pair[found][:, None] + np.arange(d_b)]
                on_diagonal = keep & (s_a == s_b)
                first[on_diagonal] -= np.arange(d_b)  # a diagonal run starts at the diagonal
                block = slots[:, offsets[a] : offsets[a + 1], offsets[b] : offsets[b + 1]]
                np.add(first[:, None, :], np.arange(d_a)[:, None], out=block)
                above = np.arange(d_a)[:, None] < np.arange(d_b)  # not stored
                if on_diagonal.all():
                    block[:, above] = nnz
                else:
                    block[np.flatnonzero(on_diagonal)[:, None], above] = nnz
                block[~keep] = nnz
        all_slots.append(slots.ravel())
    return pattern, all_slots


# The block patterns of recent graphs: a start or a sliding window builds the same pattern
# solve after solve, at ~1-2 ms a small graph (benchmarks/NOTES.md 53). A larger graph's
# (over 2M slots) is not kept, its set-up a small part of its solve: at most 8 x 16 MB
# of slots stay, as `_host.Structures` keeps no large structure either.
_BLOCK_PATTERNS = Kept(size=8, largest=1 << 21)


def block_pattern(blocks: int, d: int, i: np.ndarray, j: np.ndarray):
    """The pattern of `sum_edges J^T J` for `d x d` blocks of `blocks` block-variables and
    edges (i, j) (an index < 0: a fixed block), and the slots of each edge's blocks (ii, ij,
    jj), each (m, d, d), in that order: `assemble(slots, concatenate of the blocks)`. Only
    H_ij is given, so its entries above the diagonal go to their mirrors. The last few
    graphs' patterns are kept: the same objects for the same edges, the slots read-only
    (the pattern's own arrays stay writable: sparse libraries such as cholespy refuse
    read-only index arrays, and no caller writes to a pattern)."""
    i, j = np.asarray(i, np.int64), np.asarray(j, np.int64)
    key = digest((blocks, d, i.shape, j.shape), (i, j))
    kept = _BLOCK_PATTERNS.get(key)
    if kept is not None:
        return kept
    starts = np.stack([np.where(i >= 0, i * d, -1), np.where(j >= 0, j * d, -1)], axis=1)
    pattern, (slots,) = cost_pattern(blocks * d, [(starts, [d, d])])
    slots = slots.reshape(len(i), 2 * d, 2 * d)
    ij, ji = slots[:, :d, d:], np.swapaxes(slots[:, d:, :d], 1, 2)
    ij = np.where(ij < pattern.nnz, ij, ji)  # stored as H_ij, else as its mirror H_ji
    slots = np.concatenate([slots[:, :d, :d].ravel(), ij.ravel(), slots[:, d:, d:].ravel()])
    if _BLOCK_PATTERNS.keeps(slots.size):
        slots.setflags(write=False)
        _BLOCK_PATTERNS.put(key, (pattern, slots))
    return pattern, slots


def _new_pardiso():
    """A PARDISO solver of our settings with a handle of its own, copied from the template
    (MKL found once)."""
    solver = copy.copy(_PARDISO_TEMPLATE)
    solver.pt = np.zeros_like(_PARDISO_TEMPLATE.pt)  # PARDISO's handle: a new one
    solver.iparm = _pardiso_settings()
    solver.perm = _PARDISO_TEMPLATE.perm.copy()
    return solver


def _release(solver) -> None:
    """PARDISO's memory of `solver` given back (phase -1, as pypardiso's `free_memory`):
    MKL keeps it, some 170 MB for an 18,000-unknown pose graph, until told."""
    solver.set_phase(-1)
    with contextlib.suppress(pypardiso.pardiso_wrapper.PyPardisoError):
        solver._call_pardiso(sp.csr_matrix((0, 0)), np.zeros(0))


class Pardiso:
    """MKL's PARDISO (pypardiso), symmetric positive definite: the lower triangle in CSC is
    the upper triangle in CSR, which PARDISO reads. The ordering and symbolic analysis
    (PARDISO's phase 11) run once per pattern; each matrix is a numeric factorisation and
    a solve (phase 23), called through pypardiso's phase switch, since its
    `factorize` and `solve` copy and compare the matrix and analyse it again every time.
    Its memory is given back when the solver is collected."""

    name = "pardiso"

    def __init__(self, pattern: Pattern):
        if _PARDISO_TEMPLATE is None:
            raise ImportError("the pardiso solver needs pypardiso (pip install pypardiso)")
        self._error = pypardiso.pardiso_wrapper.PyPardisoError
        self._solver = _new_pardiso()
        weakref.finalize(self, _release, self._solver)
        self._pattern = pattern
        self._analysed = False

    def _phase(self, phase: int, matrix, rhs):
        self._solver.set_phase(phase)
        return self._solver._call_pardiso(matrix, rhs)

    def _block_ordering(
        self, size: int, b: int, block_rows: np.ndarray, block_cols: np.ndarray
    ) -> np.ndarray | None:
        """PARDISO's own ordering (AMD, as `_pardiso_settings`) of the graph of the blocks,
        each block's unknowns then kept together in order: the same fill as ordering the
        entries on the pose graphs here, with an analysis some 1.5x faster (NOTES 40).
        None (PARDISO then orders the entries) if PARDISO fails on the graph."""
        count = size // b
        # The blocks' graph as the upper triangle in CSR (by block column, then row, as
        # listed), diagonally dominant; PARDISO's analysis reads the structure alone.
        indptr = np.concatenate([[0], np.cumsum(np.bincount(block_cols, minlength=count))])
        values = np.where(block_rows == block_cols, float(count), 1.0)
        graph = sp.csr_matrix(
            (values, block_rows.astype(np.int32), indptr.astype(np.int32)), (count, count)
        )
        ordering = _new_pardiso()
        ordering.iparm[_PARDISO_USER_PERMUTATION] = 2  # return the ordering it computes
        ordering.perm = np.zeros(count, np.int32)
        try:
            ordering.set_phase(11)
            ordering._call_pardiso(graph, np.zeros((count, 1), order="F"))
        except self._error:
            return None
        finally:
            _release(ordering)
        # 1-based, as PARDISO's; a block's unknowns follow its place, in order
        return ((ordering.perm[:, None] - 1) * b + np.arange(b) + 1).astype(np.int32).ravel()

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        pattern = self._pattern
        upper = sp.csr_matrix((values, pattern.indices, pattern.indptr), (pattern.size,) * 2)
        rhs = np.asfortranarray(rhs, dtype=np.float64)  # PARDISO reads columns
        try:
            if not self._analysed:
                self._solver._check_A(upper)  # CSR with sorted indices, float64
                ordering = None
                if pattern.blocks is not None:
                    ordering = self._block_ordering(pattern.size, *pattern.blocks)
                if ordering is not None:
                    self._solver.perm = ordering
                    self._solver.iparm[_PARDISO_USER_PERMUTATION] = 1
                self._phase(11, upper, rhs)
                self._analysed = True
            solution = self._phase(23, upper, rhs)  # factorise and solve: one call, not two
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


def cholesky_solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """x with `matrix x = rhs`, `matrix` (float64, symmetric positive definite, its lower
    triangle read) overwritten by its factor: LAPACK's `potrf` and `potrs` called directly,
    since SciPy's `cho_factor` and `cho_solve` check and copy their arguments at ~35 us a
    solve, as much as factorising 48 unknowns (benchmarks/NOTES.md 58). A matrix that is
    not positive definite (to rounding) raises ArithmeticError."""
    if not len(matrix):  # nothing to solve (LAPACK refuses the empty system)
        return np.zeros_like(rhs, dtype=np.float64)
    factor, info = _POTRF(matrix, lower=1, clean=0, overwrite_a=1)
    if info != 0:
        raise ArithmeticError(f"the matrix is not positive definite (LAPACK potrf: {info})")
    solution, info = _POTRS(factor, rhs, lower=1)
    if info != 0 or not np.all(np.isfinite(solution)):
        raise ArithmeticError("the matrix is not positive definite")
    return solution


_POTRF, _POTRS = scipy.linalg.lapack.get_lapack_funcs(("potrf", "potrs"), (np.zeros(1),))


class Dense:
    """LAPACK's dense Cholesky: for small systems (the reduced camera system of a bundle
    adjustment with few cameras), where the sparse libraries' fixed costs dominate."""

    name = "dense"

    def __init__(self, pattern: Pattern):
        self._pattern = pattern
        self._columns = np.repeat(np.arange(pattern.size), np.diff(pattern.indptr))

    def __call__(self, values: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        matrix = np.zeros((self._pattern.size,) * 2, order="F")
        matrix[self._pattern.indices, self._columns] = values  # lower triangle
        return cholesky_solve(matrix, rhs)


SOLVERS = {
    s.name: s for s in (Pardiso, Cholmod, CholmodSupernodal, CholmodSimplicial, SuperLU, Dense)
}


def make_solver(pattern: Pattern, name: str | None = None):
    """A function (values, rhs) -> x solving H x = rhs for matrices of `pattern`; by
    default the dense Cholesky for fewer than `DENSE_BELOW` unknowns, else the fastest
    installed sparse one. A matrix that is not positive definite (to rounding) raises
    ArithmeticError (SuperLU's, an LU: a singular one)."""
    if name is None:
        name = "dense" if pattern.size < DENSE_BELOW else available_solvers()[0]
    if name not in SOLVERS:
        raise ValueError(f"xform.optim: solver must be one of {sorted(SOLVERS)}, got {name!r}")
    if name not in available_solvers():
        raise ValueError(
            f"xform.optim: solver {name!r} needs {MODULES[name]}, which is not installed"
        )
    return SOLVERS[name](pattern)
