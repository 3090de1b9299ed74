"""The CPU Schur complement's product `B C^-1 B^T`, summed point by point in one Warp kernel.

Eliminating points (or any set whose block of H is block diagonal), each eliminated
variable p couples the reduced unknowns of the costs that read it: B's blocks `B_ap`
(k x d: a block of k reduced rows, p's d columns). Its part of the complement is

    sum over pairs of its blocks (a, c), row(a) >= row(c):  B_ap C_p^-1 B_cp^T  (k x k),

added into the block (row(a), row(c)) of S's lower triangle. SciPy's block product forms
the same sum as `(B C^-1) B^T` through general sparse machinery at ~0.8 GFLOP/s (3 x 3
blocks; benchmarks/NOTES.md 50, 54); here one thread per eliminated variable walks its own
pairs, with its blocks and inverse in registers, and finds each target block by a binary
search in S's block row (each row's columns sorted; a variable's blocks come in row order,
so the search narrows as it goes). Nothing per pair is stored: a 5M-observation problem has
~10^8 pairs.

The kernels are made per block shape (k, d) and run on the CPU, where a launch's threads
run one after another; the sums go through `atomic_add` so that a launch split over
threads would stay correct (in another order of summation). Indices are int32:
`Schur` refuses a structure whose counts do not fit. No `from __future__ import
annotations` here: Warp reads the kernel's annotations as objects.
"""

import functools

import numpy as np
import warp as wp


@functools.cache
def _kernel(k: int, d: int):
    block = wp.types.matrix(shape=(k, d), dtype=wp.float64)
    inverse = wp.types.matrix(shape=(d, d), dtype=wp.float64)
    product = wp.types.matrix(shape=(k, k), dtype=wp.float64)

    def schur_pairs(
        blocks: wp.array(dtype=block),
        rows: wp.array(dtype=wp.int32),
        first: wp.array(dtype=wp.int32),
        inverses: wp.array(dtype=inverse),
        s_indptr: wp.array(dtype=wp.int32),
        s_columns: wp.array(dtype=wp.int32),
        out: wp.array(dtype=product),
    ):
        p = wp.tid()
        begin = first[p]
        end = first[p + 1]
        c_inverse = inverses[p]
        for a in range(begin, end):
            y = blocks[a] * c_inverse
            row = rows[a]
            low = s_indptr[row]
            high = s_indptr[row + 1]
            for c in range(begin, a + 1):
                column = rows[c]
                lo = low
                hi = high
                while lo < hi:
                    middle = (lo + hi) // 2
                    if s_columns[middle] < column:
                        lo = middle + 1
                    else:
                        hi = middle
                if lo < high:  # always, by S's pattern; a guard against writing elsewhere
                    wp.atomic_add(out, lo, y * wp.transpose(blocks[c]))
                low = lo + 1

    kernel = wp.kernel(
        schur_pairs, name=f"schur_pairs_{k}x{d}", enable_backward=False, module="unique"
    )
    return kernel, block, inverse, product


def schur_pair_sums(
    blocks: np.ndarray,
    rows: np.ndarray,
    first: np.ndarray,
    inverses: np.ndarray,
    s_indptr: np.ndarray,
    s_columns: np.ndarray,
) -> np.ndarray:
    """`sum B_ap C_p^-1 B_cp^T` into S's lower block pattern, (blocks of S, k, k).

    blocks (n, k, d) float64: B's blocks, those of each eliminated variable together and in
    ascending block row; rows (n,) their block rows; first (n_e + 1,) where each variable's
    blocks begin; inverses (n_e, d, d) the C_p^-1; s_indptr, s_columns: S's lower block
    triangle in CSR (row >= column), every pair's block present, columns sorted."""
    n, k, d = blocks.shape
    out = np.zeros((len(s_columns), k, k))
    if len(inverses) == 0 or n == 0:
        return out

    def array(values, dtype):
        return wp.array(np.ascontiguousarray(values), dtype=dtype, device="cpu", copy=False)

    kernel, block, inverse, product = _kernel(k, d)
    result = array(out, product)
    wp.launch(
        kernel,
        dim=len(inverses),
        inputs=[
            array(blocks, block),
            array(rows.astype(np.int32, copy=False), wp.int32),
            array(first.astype(np.int32, copy=False), wp.int32),
            array(inverses, inverse),
            array(s_indptr.astype(np.int32, copy=False), wp.int32),
            array(s_columns.astype(np.int32, copy=False), wp.int32),
            result,
        ],
        device="cpu",
    )
    return out
