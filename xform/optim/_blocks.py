"""Block-sparse symmetric matrices in the framework's arrays: the normal equations on the
device, never an N x N array (but where asked for, small).

The unknowns come in blocks, one per free variable (`_layout.py`): set `i` has `count`
blocks of its tangent size `dim`. A matrix keeps only its non-zero blocks, grouped by the
pair of sets they join, so that each group is one array of equal blocks, `(B, n, d_i,
d_j)` (B problems of one structure): `classes[(i, j)]` says which blocks (`rows` of set i,
`cols` of set j) a group holds. Both triangles are kept (a block and its transpose), and
every diagonal block, so that a product with a vector, the diagonal and a damped copy are
each a gather, a batched product and a segment sum: `Framework.segment_sum`, whatever the
framework and device.

A `BlockPattern` is worked out once, from index arrays, on the host. The index arrays the
framework needs of it are its `tables`, named: a matrix reads them from a dict of the
framework's arrays made from them once (on the device), which a compiled loop takes as an
argument (a JAX trace would otherwise bake them into the program as constants).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._frameworks import Framework


@dataclass(frozen=True)
class BlockSet:
    """One set's blocks: `count` of size `dim`, its unknowns from `offset`."""

    count: int
    dim: int
    offset: int


@dataclass
class BlockClass:
    """The blocks joining set `row` and set `col`: block `k` is `(rows[k], cols[k])`."""

    row: int
    col: int
    rows: np.ndarray
    cols: np.ndarray

    @property
    def size(self) -> int:
        return len(self.rows)


@dataclass
class BlockPattern:
    """Which blocks of a symmetric matrix over `sets` are stored: `classes[(i, j)]`, both
    (i, j) and (j, i) where either is, and `(i, i)` for every set, whose diagonal blocks
    are `diagonal[i]` (the block of each of the set's variables)."""

    sets: list[BlockSet]
    classes: dict[tuple[int, int], BlockClass]
    diagonal: list[np.ndarray]

    @property
    def size(self) -> int:
        return sum(s.count * s.dim for s in self.sets)

    def tables(self, prefix: str = "", dense: bool = False) -> dict[str, np.ndarray]:
        """The index arrays a `BlockMatrix` on this pattern reads, by name (`prefix` before
        each); with `dense`, those of `dense()` too."""
        out = {}
        for (i, j), c in self.classes.items():
            out[f"{prefix}rows {i} {j}"], out[f"{prefix}cols {i} {j}"] = c.rows, c.cols
            if dense:
                out[f"{prefix}dense {i} {j}"] = _dense_positions(self, i, j)
        for i, d in enumerate(self.diagonal):
            out[f"{prefix}diagonal {i}"] = d
        return out


def block_pattern(sets: list[BlockSet], entries) -> tuple[BlockPattern, list[np.ndarray]]:
    """The pattern holding every block of `entries` and every diagonal block, and each
    entry's places in it. `entries`: `(i, j, rows, cols)` with rows of set i and cols of
    set j, -1 where a variable is fixed (its place is then the class's size: a dropped
    slot). Give both orientations of a symmetric matrix's off-diagonal blocks."""
    entries = list(entries)
    keys: dict[tuple[int, int], list[np.ndarray]] = {
        (i, i): [np.arange(s.count, dtype=np.int64) * (s.count + 1)] for i, s in enumerate(sets)
    }
    for i, j, rows, cols in entries:
        valid = (rows >= 0) & (cols >= 0)
        width = sets[j].count
        keys.setdefault((i, j), []).append(
            rows[valid].astype(np.int64) * width + cols[valid].astype(np.int64)
        )
    unique = {k: np.unique(np.concatenate(v)) for k, v in keys.items()}
    classes = {
        (i, j): BlockClass(i, j, k // sets[j].count, k % sets[j].count)
        for (i, j), k in unique.items()
    }
    places = []
    for i, j, rows, cols in entries:
        key = unique[(i, j)]
        valid = (rows >= 0) & (cols >= 0)
        where = np.searchsorted(key, np.where(valid, rows * sets[j].count + cols, 0))
        places.append(np.where(valid, where, len(key)))
    diagonal = [
        np.searchsorted(unique[(i, i)], np.arange(s.count) * (s.count + 1))
        for i, s in enumerate(sets)
    ]
    return BlockPattern(sets, classes, diagonal), places


class BlockMatrix:
    """A batch of symmetric block-sparse matrices: `blocks[(i, j)] (B, n, d_i, d_j)` on
    `pattern`, in `framework`'s arrays; `tables` the framework's arrays of the pattern's
    tables (names after `prefix`)."""

    def __init__(self, pattern: BlockPattern, blocks: dict, framework: Framework,
                 tables: dict, prefix: str = ""):  # fmt: skip
        self.pattern, self.blocks, self.framework = pattern, blocks, framework
        self.tables, self.prefix = tables, prefix

    def _table(self, name: str):
        return self.tables[self.prefix + name]

    @property
    def batch(self) -> int:
        return next(iter(self.blocks.values())).shape[0]

    def split(self, x) -> list:
        """A vector `(B, N)` as its sets' parts `(B, count, dim)`."""
        return [
            x[:, s.offset : s.offset + s.count * s.dim].reshape(x.shape[0], s.count, s.dim)
            for s in self.pattern.sets
        ]

    def join(self, parts: list):
        return self.framework.concatenate([p.reshape(p.shape[0], -1) for p in parts], 1)

    def diagonal_blocks(self, i: int):
        """Set i's diagonal blocks, `(B, count, dim, dim)`."""
        return self.blocks[(i, i)][:, self._table(f"diagonal {i}")]

    def diagonal(self):
        """The diagonal, `(B, N)`."""
        xp = self.framework.namespace()
        return self.join(
            [xp.diagonal(self.diagonal_blocks(i), 0, -2, -1) for i in range(len(self.pattern.sets))]
        )

    def plus_diagonal(self, extra) -> BlockMatrix:
        """The matrix with `extra (B, N)` added to its diagonal."""
        blocks = dict(self.blocks)
        for i, (s, part) in enumerate(zip(self.pattern.sets, self.split(extra))):
            eye = self.framework.constant(np.eye(s.dim), part)
            added = part[..., None] * eye  # (B, count, dim, dim)
            size = blocks[(i, i)].shape[1]
            blocks[(i, i)] = blocks[(i, i)] + self.framework.segment_sum(
                added, self._table(f"diagonal {i}"), size
            )
        return BlockMatrix(self.pattern, blocks, self.framework, self.tables, self.prefix)

    def matvec(self, x):
        """`A x` for `x (B, N)`."""
        parts = self.split(x)
        out = [None] * len(parts)
        for (i, j), values in self.blocks.items():
            gathered = parts[j][:, self._table(f"cols {i} {j}")]  # (B, n, d_j)
            products = (values @ gathered[..., None])[..., 0]
            total = self.framework.segment_sum(
                products, self._table(f"rows {i} {j}"), self.pattern.sets[i].count
            )
            out[i] = total if out[i] is None else out[i] + total
        return self.join(out)

    def dense(self):
        """The whole matrix, `(B, N, N)`: for small systems only (its tables made `dense`)."""
        n = self.pattern.size
        total = None
        for (i, j), values in self.blocks.items():
            positions = self._table(f"dense {i} {j}")
            flat = values.reshape(values.shape[0], -1)
            part = self.framework.segment_sum(flat, positions, n * n)
            total = part if total is None else total + part
        return total.reshape(total.shape[0], n, n)


def _dense_positions(pattern: BlockPattern, i: int, j: int) -> np.ndarray:
    """Each entry of class (i, j)'s blocks, flattened, as its place in the dense N x N."""
    a, b = pattern.sets[i], pattern.sets[j]
    c = pattern.classes[(i, j)]
    rows = a.offset + c.rows[:, None, None] * a.dim + np.arange(a.dim)[None, :, None]
    cols = b.offset + c.cols[:, None, None] * b.dim + np.arange(b.dim)[None, None, :]
    return (rows * pattern.size + cols).ravel()
