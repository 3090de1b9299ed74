"""Things worked out once from index arrays and kept for later solves of the same
structure (a pattern, a solve's structure), by a digest of those arrays; with NumPy alone,
since the device back end keeps its structures too where SciPy is not installed."""

from __future__ import annotations

import collections
import hashlib
import threading

import numpy as np


def digest(description, arrays) -> bytes:
    """A key for what is worked out once from index arrays: a digest of `description`
    (its repr: sizes, shapes, names) and of the arrays' bytes."""
    hashed = hashlib.blake2b(repr(description).encode(), digest_size=16)
    for array in arrays:
        hashed.update(np.ascontiguousarray(array).data)
    return hashed.digest()


def structure_digest(problem, eliminate, *more) -> bytes:
    """`digest` of what a problem's structure is made from: its sets' sizes and fixed
    variables, which sets each cost reads and with which index arrays, the set to
    eliminate, and `more` (what else the caller makes from them)."""
    sets, costs = problem.variable_sets, problem.costs
    indices = [np.asarray(i) for c in costs for i in c.instance_indices]
    return digest(
        (None if eliminate is None else eliminate.index,
         [(s.count, s.tangent_dim) for s in sets],
         [[selection.variables.index for selection in c.selections] for c in costs],
         [(i.shape, i.dtype.str) for i in indices], more),
        [s.fixed for s in sets] + indices,
    )  # fmt: skip


class Kept:
    """The last `size` things worked out once from index arrays (a pattern, a solve's
    structure), by `digest`, none of more than `largest` (in the caller's unit): a sliding
    window or a training loop works out the same one solve after solve. A lock makes it
    safe to share between threads; `take` hands a thing out to one user alone."""

    def __init__(self, size: int, largest: int):
        self.size, self.largest = size, largest
        self.kept, self.lock = collections.OrderedDict(), threading.Lock()

    def get(self, key: bytes):
        """The thing kept under `key`, left there (shared), or None."""
        with self.lock:
            found = self.kept.get(key)
            if found is not None:
                self.kept.move_to_end(key)
            return found

    def take(self, key: bytes):
        """The thing kept under `key`, taken out (until `put` back), or None."""
        with self.lock:
            return self.kept.pop(key, None)

    def keeps(self, bulk: int) -> bool:
        """Whether a thing of `bulk` (the caller's measure of it: entries of a pattern,
        instance slots) is small enough to keep."""
        return bulk <= self.largest

    def put(self, key: bytes, thing) -> None:
        with self.lock:
            self.kept[key] = thing
            self.kept.move_to_end(key)
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)
