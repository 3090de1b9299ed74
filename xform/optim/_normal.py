"""The normal equations `H = J^T J`, `g = J^T r` as block-sparse arrays, assembled from each
cost's per-instance Jacobians by segment sums (`_blocks.py`), in the framework's arrays.

Each cost instance joins the variables of its slots: for every ordered pair of its free
slots (a, b), the block `J_a^T J_b` lands on block (variable of a, variable of b) of H, and
`J_a^T r` on variable a's part of g. Where each instance's blocks land is worked out once,
from the problem's index arrays; an assembly is then one batched product per cost and one
segment sum per group of equal blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._frameworks import Framework, float_name
from ._blocks import BlockMatrix, BlockPattern, BlockSet, block_pattern
from ._layout import Layout
from ._problem import Problem, Variables


@dataclass(frozen=True)
class Part:
    """One slot pair's blocks of a cost: rows `a` and columns `b` of its `J^T J` (slices
    of its free slots' columns), landing at `places` of the class's blocks."""

    cost: int
    a: slice
    b: slice


class NormalStructure:
    """What the assembly of one problem's normal equations needs, worked out once: the
    block sets (the free variables of each set with any, the eliminated set last), the
    block pattern of H, and where every cost's blocks land."""

    def __init__(self, problem: Problem, plans, eliminate: Variables | None):
        sets = problem.variable_sets
        self.layout = layout = Layout(sets, eliminate)
        # block set of each variable set with free variables (the layout's order)
        self.set_of: dict[int, int] = {}
        block_sets = []
        for s in (sets[k] for k in layout.order):
            if layout.counts[s.index]:
                self.set_of[s.index] = len(block_sets)
                block_sets.append(
                    BlockSet(layout.counts[s.index], s.tangent_dim, layout.offsets[s.index])
                )
        self.eliminated = None if eliminate is None else self.set_of.get(eliminate.index)
        entries, parts, gradients = [], [], []
        for c, (cost, p) in enumerate(zip(problem.costs, plans)):
            slots, start = [], 0
            for selection, indices, slot in zip(cost.selections, cost.instance_indices, p.slots):
                if not slot.differentiate:
                    continue
                s = selection.variables
                width = slice(start, start + s.tangent_dim)
                start += s.tangent_dim
                if s.index in self.set_of:  # a set of fixed variables only has no blocks
                    slots.append((self.set_of[s.index], layout.ranks[s.index][indices], width))
            for i, rows, a in slots:
                gradients.append((i, c, a, rows))
                for j, cols, b in slots:
                    entries.append((i, j, rows, cols))
                    parts.append(Part(c, a, b))
        self.pattern, places = block_pattern(block_sets, entries)
        self.parts: dict[tuple[int, int], list[tuple[Part, np.ndarray]]] = {}
        for (i, j, _, _), part, place in zip(entries, parts, places):
            self.parts.setdefault((i, j), []).append((part, place))
        self.gradients: list[list] = [[] for _ in block_sets]
        for i, c, a, rows in gradients:
            dropped = np.where(rows >= 0, rows, block_sets[i].count)
            self.gradients[i].append((c, a, dropped))

    @property
    def size(self) -> int:
        return self.layout.size

    def tables(self, dense: bool = False) -> dict[str, np.ndarray]:
        """The index arrays of the assembly and of H's pattern, by name."""
        out = self.pattern.tables(dense=dense)
        for (i, j), parts in self.parts.items():
            out[f"places {i} {j}"] = np.concatenate([p for _, p in parts])
        for i, g in enumerate(self.gradients):
            if g:
                out[f"gradient {i}"] = np.concatenate([r for _, _, r in g])
        return out

    def assemble(self, jacobians, residuals, framework: Framework, tables: dict):
        """(H as a `BlockMatrix`, g `(B, N)`) from each cost's `J (B, k, r, D)` (None for a
        cost without free slots) and `r (B, k, r)`; `tables` the framework's arrays of
        `self.tables()`."""
        products, gradients = {}, {}
        for c, (j, r) in enumerate(zip(jacobians, residuals)):
            if j is not None:
                jt = j.mT
                products[c] = jt @ j
                gradients[c] = (jt @ r[..., None])[..., 0]
        return self.assemble_blocks(products, gradients, framework, tables)

    def assemble_blocks(self, products: dict, gradients, framework: Framework, tables: dict):
        """(H, g) from each cost's per-instance blocks `(B, k, D, D)` and gradients `(B, k,
        D)` (by cost index; D its free slots' columns; None: no g)."""
        like = next(iter(products.values()))
        batch = like.shape[0]
        blocks = {}
        for key, class_ in self.pattern.classes.items():
            count = class_.size
            parts = self.parts.get(key)
            si, sj = self.pattern.sets[key[0]], self.pattern.sets[key[1]]
            if not parts:  # diagonal blocks of variables no cost reads
                shape = (batch, count, si.dim, sj.dim)
                blocks[key] = framework.zeros(shape, float_name(like.dtype), like)
                continue
            values = _joined(framework, [products[p.cost][:, :, p.a, p.b] for p, _ in parts])
            place = tables[f"places {key[0]} {key[1]}"]
            blocks[key] = framework.segment_sum(values, place, count + 1)[:, :count]
        matrix = BlockMatrix(self.pattern, blocks, framework, tables)
        if gradients is None:
            return matrix, None
        g = []
        for i, s in enumerate(self.pattern.sets):
            if not self.gradients[i]:
                g.append(framework.zeros((batch, s.count * s.dim), float_name(like.dtype), like))
                continue
            values = _joined(framework, [gradients[c][:, :, a] for c, a, _ in self.gradients[i]])
            total = framework.segment_sum(values, tables[f"gradient {i}"], s.count + 1)
            g.append(total[:, : s.count].reshape(batch, -1))
        return matrix, framework.concatenate(g, 1)


def _joined(framework: Framework, arrays: list):
    return arrays[0] if len(arrays) == 1 else framework.concatenate(arrays, 1)


def reduced_pattern(pattern: BlockPattern, eliminated: int):
    """The pattern of the Schur complement of block set `eliminated` (the last), and how
    each of its blocks is made (`SchurStructure`)."""
    return SchurStructure(pattern, eliminated)


class SchurStructure:
    """The Schur complement `S = A - B C^-1 B^T` of the last block set's unknowns (C block
    diagonal: no cost may join two of its variables), as block patterns: S's blocks are
    A's and, for every eliminated variable, those joining each pair of variables it is
    joined to."""

    def __init__(self, pattern: BlockPattern, eliminated: int):
        self.eliminated = e = eliminated
        c = pattern.classes[(e, e)]
        if np.any(c.rows != c.cols):
            raise ArithmeticError("a cost joins two of the eliminated variables")
        reduced = [i for i in range(len(pattern.sets)) if i != e]
        self.reduced = reduced
        sets = []
        offset = 0
        for i in reduced:
            s = pattern.sets[i]
            sets.append(BlockSet(s.count, s.dim, offset))
            offset += s.count * s.dim
        position = {i: k for k, i in enumerate(reduced)}
        entries, sources = [], []
        for (i, j), class_ in pattern.classes.items():
            if i != e and j != e:
                entries.append((position[i], position[j], class_.rows, class_.cols))
                sources.append(("a", (i, j), None))
        # pairs of B's blocks sharing an eliminated variable
        coupling = {i: pattern.classes.get((i, e)) for i in reduced}
        self.coupled = [i for i in reduced if coupling[i] is not None]
        for i in self.coupled:
            for j in self.coupled:
                first, second = _pairs(coupling[i].cols, coupling[j].cols, pattern.sets[e].count)
                entries.append(
                    (position[i], position[j], coupling[i].rows[first], coupling[j].rows[second])
                )
                sources.append(("product", (i, j), (first, second)))
        self.pattern, places = block_pattern(sets, entries)
        self.a_parts, self.products = {}, {}
        for (kind, key, pair), place, entry in zip(sources, places, entries):
            target = (entry[0], entry[1])
            if kind == "a":
                self.a_parts[key] = (target, place)
            else:
                self.products[key] = (target, pair[0], pair[1], place)
        self.position = position

    def tables(self, dense: bool = False) -> dict[str, np.ndarray]:
        """The index arrays of the complement's assembly and of its pattern ("reduced ..."),
        by name."""
        out = self.pattern.tables("reduced ", dense)
        for (i, j), (_, place) in self.a_parts.items():
            out[f"reduced a {i} {j}"] = place
        for (i, j), (_, first, second, place) in self.products.items():
            out[f"reduced first {i} {j}"], out[f"reduced second {i} {j}"] = first, second
            out[f"reduced places {i} {j}"] = place
        return out


def _pairs(first_cols: np.ndarray, second_cols: np.ndarray, count: int):
    """Every (k1, k2) with first_cols[k1] == second_cols[k2]: blocks of two classes that
    share an eliminated variable."""
    order = np.argsort(second_cols, kind="stable")
    counts = np.bincount(second_cols, minlength=count)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    repeats = counts[first_cols]
    first = np.repeat(np.arange(len(first_cols)), repeats)
    offsets = np.arange(len(first)) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    second = order[np.repeat(starts[first_cols], repeats) + offsets]
    return first, second
