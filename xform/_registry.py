"""Every op made in this process, and who wants to hear of new ones.

An op is registered once per definition: the same definition again (a notebook cell run
twice) returns the op already made, with no new kernels, modules or custom ops. A
different definition under a taken name is a new op with a key of its own, and both stay
usable. Listeners (the torch adapter registers a custom op for each op) hear of every op
before it is returned, so no compiled region can meet an op they have not seen.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Callable, Hashable

from ._op import Op

DEFINED: list[Op] = []
_listeners: list[Callable[[Op], None]] = []
_definitions: dict[Hashable, Op] = {}
_counter = itertools.count(1)
lock = threading.RLock()


def _after_fork_in_child() -> None:
    global lock
    lock = threading.RLock()  # a thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork_in_child)


def on_define(listener: Callable[[Op], None]) -> None:
    """Call `listener` for every op defined so far and every op defined later."""
    with lock:
        for op in list(DEFINED):
            listener(op)
        _listeners.append(listener)


def register(op: Op, definition: Hashable) -> Op:
    """The op of `definition` (what identifies it: its name, functions, specs and
    options): `op`, given a unique key, or the one registered before under it."""
    with lock:
        same = _definitions.get(definition)
        if same is not None:
            return same
        taken = {made.key for made in DEFINED}
        key = op.name
        while key in taken:
            key = f"{op.name}_{next(_counter)}"
        op = dataclasses.replace(op, key=key)
        for listener in list(_listeners):  # a listener's failure leaves no half-made op
            listener(op)
        DEFINED.append(op)
        _definitions[definition] = op
    return op


def families(ops: list[Op]) -> dict[str, tuple[Op, ...]]:
    """`ops` that have a family, by family, each family where its first op stands."""
    grouped: dict[str, list[Op]] = {}
    for op in ops:
        if op.family:
            grouped.setdefault(op.family, []).append(op)
    return {family: tuple(members) for family, members in grouped.items()}
