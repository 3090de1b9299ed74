"""What a group is made of, declared once: its fields.

A group names its arrays as annotated class attributes, in the constructor's order:

```python
class SE3(LieGroup):
    position: Any = field(3)      # (..., 3)
    quaternion: Any = field(4)    # (..., 4)
```

and `GroupType`, every group's metaclass, makes the rest of its header from them: the
slots, `fields` (name and size of each, for the shared methods), the constructor (its
arguments the fields' names; a field stored under another attribute gives its `alias`,
as Sim3's scale array `_scale` beside its method `scale()`), and the group's registration
as a pytree of every framework that has them. Type checkers read the same declaration
(`dataclass_transform`).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _frameworks

if TYPE_CHECKING or sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: the declaration is for type checkers only

    def dataclass_transform(**_):
        return lambda cls: cls


@dataclass(frozen=True)
class Field:
    """One array of an element: its last axis's `size` (None: one number per element),
    the constructor's name for it where the attribute differs (`alias`), and whether its
    values must be positive (`positive`: checked where they are concrete)."""

    size: int | None
    alias: str | None = None
    positive: bool = False


def field(size: int | None, *, alias: str | None = None, positive: bool = False) -> Any:
    """Declare a field of a group (see the module's docstring)."""
    return Field(size, alias, positive)


# Every group, and the frameworks they are registered with as pytrees so far.
GROUPS: list[type] = []
_registered: set[str] = set()


@dataclass_transform(field_specifiers=(field,), frozen_default=True)
class GroupType(type):
    """The metaclass of every group: its header made from its field declarations."""

    def __new__(mcls, name: str, bases: tuple, namespace: dict[str, Any]):
        declared = {a: f for a, f in namespace.items() if isinstance(f, Field)}
        if declared:
            for attribute in declared:
                del namespace[attribute]
            fields = tuple((f.alias or a, f.size) for a, f in declared.items())
            namespace["__slots__"] = tuple(declared)
            namespace["fields"] = fields
            namespace["renamed"] = {f.alias: a for a, f in declared.items() if f.alias}
            namespace["positive"] = frozenset(f.alias or a for a, f in declared.items()
                                              if f.positive)  # fmt: skip
            namespace.setdefault("__signature__", _constructor_signature(fields))
        cls = super().__new__(mcls, name, bases, namespace)
        if declared:
            GROUPS.append(cls)
            for framework in _registered:
                _register(cls, framework)
        return cls


def _constructor_signature(fields) -> inspect.Signature:
    return inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name, _ in fields]
    )


def register_pytrees() -> None:
    """Make every group a pytree of each framework imported so far, once: JAX's (`jit`,
    `vmap`, `grad`, `scan` take and return elements; a gradient with respect to an element
    is an element-shaped tree of its fields' cotangents, as jaxlie) and PyTorch's
    (`torch.func` and `torch.compile`). Called by every element made from user arrays, so
    a framework imported after xform is still registered before its first element."""
    global _modules_when_registered
    for framework in _frameworks.imported():
        if framework.name in _registered or not framework.holds_groups:
            continue
        _registered.add(framework.name)
        for cls in GROUPS:
            _register(cls, framework.name)
        # The adapter too, now: a group's first op may run under torch.compile, which
        # traces no import
        framework.functions()
    _modules_when_registered = len(sys.modules)  # after: the adapters' imports counted


def pytrees_registered() -> bool:
    """Whether every framework that holds groups and is imported has them as pytrees (a
    cheap test, made at every element's construction): all are, or no module was imported
    since the last registration (a process without JAX would otherwise look at every
    framework at every element)."""
    return len(_registered) == _HOLDING or len(sys.modules) == _modules_when_registered


_HOLDING = sum(f.holds_groups for f in _frameworks.FRAMEWORKS.values())
_modules_when_registered = -1


def _register(cls, framework: str) -> None:
    _frameworks.FRAMEWORKS[framework].register_pytree(
        cls, lambda element: element._arrays, lambda arrays: cls._trusted(*arrays)
    )


def check_positive(where: str, argument: str, array, column: tuple = (), what: str = "") -> None:
    """A ValueError unless every value of `array` is positive and finite, naming
    `argument` and the first bad element's index (its `column` appended: the values' place
    in the argument's last axis; `what` says what they are). Traced values are not read."""
    if not _frameworks.concrete(array):
        return
    values = _frameworks.NUMPY.convert(array)
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        place = ", ".join(map(str, (*index, *column)))
        raise ValueError(
            f"xform.{where}: {what or repr(argument)} must be positive and finite; "
            f"{argument}{f'[{place}]' if place else ''} is {float(values[index])!r}"
        )
