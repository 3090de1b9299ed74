"""A sparse direct solve on the GPU: NVIDIA's cuDSS through nvmath-python (an optional
extra: `pip install nvmath-python nvidia-cudss-cu13`), for PyTorch tensors on CUDA.

The block matrix is handed over in CSR, both triangles (cuDSS' symmetric positive definite
type, full view): its pattern and the permutation from the blocks' entries to CSR's are
worked out once per pattern; the ordering and symbolic factorisation (`plan`) once per
pattern and device, reused by every later solve, which factorises the new values and
solves (`reset_operands`, `factorize`, `solve`).
"""

from __future__ import annotations

import functools
import importlib.util

import numpy as np

from ._blocks import BlockMatrix, BlockPattern, _dense_positions


@functools.cache
def available() -> bool:
    """Whether nvmath-python, and cuDSS's library with it, are installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("nvmath", "torch"))


def csr_layout(pattern: BlockPattern) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matrix's CSR (both triangles): row pointers (N + 1,), column indices (nnz,),
    and for each CSR entry its place among the blocks' entries flattened class after
    class (`BlockMatrix.blocks`' order)."""
    n = pattern.size
    positions = np.concatenate([_dense_positions(pattern, i, j) for i, j in pattern.classes])
    order = np.argsort(positions, kind="stable")
    sorted_positions = positions[order]
    rows, cols = sorted_positions // n, sorted_positions % n
    pointers = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    return pointers, cols, order


def cudss_solve(matrix: BlockMatrix, rhs):
    """x with `matrix x = rhs` for each problem of the batch, by cuDSS."""
    import torch
    from nvmath.sparse import advanced

    pointers, cols, order = _layout(matrix.pattern, rhs.device)
    values = torch.cat([b.reshape(b.shape[0], -1) for b in matrix.blocks.values()], 1)
    values = values[:, order]
    solutions = []
    for k in range(rhs.shape[0]):
        a = torch.sparse_csr_tensor(pointers, cols, values[k].contiguous(),
                                    size=(matrix.pattern.size,) * 2)  # fmt: skip
        b = rhs[k].contiguous()
        solver = _SOLVERS.get((id(matrix.pattern), rhs.device), (None, None))[1]
        if solver is None:
            options = advanced.DirectSolverOptions(
                sparse_system_type=advanced.DirectSolverMatrixType.SPD,
                sparse_system_view=advanced.DirectSolverMatrixViewType.FULL,
            )
            solver = advanced.DirectSolver(a, b, options=options)
            solver.plan()
            _SOLVERS[(id(matrix.pattern), rhs.device)] = (matrix.pattern, solver)
        else:
            solver.reset_operands(a=a, b=b)
        solver.factorize()
        solutions.append(solver.solve())
    return torch.stack(solutions)


# By the pattern's id, each entry holding its pattern: kept alive, no other pattern can
# take its id
_SOLVERS: dict = {}
_LAYOUTS: dict = {}


def _layout(pattern: BlockPattern, device):
    import torch

    key = (id(pattern), device)
    if key not in _LAYOUTS:
        pointers, cols, order = csr_layout(pattern)
        _LAYOUTS[key] = pattern, tuple(
            torch.from_numpy(a.astype(np.int32 if a is not order else np.int64)).to(device)
            for a in (pointers, cols, order)
        )
    return _LAYOUTS[key][1]
