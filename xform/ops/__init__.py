"""xform's built-in ops, one file per family; each file holds the family's element
functions and the `define_op` calls that make them ops. The element functions are
`@wp.func`s that user ops can call too."""

from .. import _registry

# Importing a family's file defines its ops.
from . import (  # noqa: F401
    _families,
    conversions,
    euler,
    interpolation,
    quaternion,
    registration,
    se2,
    se3,
    sim3,
    so2,
    so3,
    transforms,
)

# Every built-in op by family (the reference's sections, in its order) and by name: the
# ops defined with a family while this package is imported, before any user's op.
_by_family = _registry.families(_registry.DEFINED)
_unknown = set(_by_family) - set(_families.ORDER)
if _unknown:
    raise RuntimeError(f"xform.ops: families {sorted(_unknown)} are not in _families.ORDER")
FAMILIES = {family: _by_family[family] for family in _families.ORDER if family in _by_family}
OPS = {op.name: op for ops in FAMILIES.values() for op in ops}

# Functions over ops: choosing among them by static arguments (a convention string, a
# flag), or chaining them.
COMPOSITES = {**euler.COMPOSITES, "rigid_registration": registration.RIGID_REGISTRATION}
