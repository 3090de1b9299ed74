"""Lie groups as objects over the ops: `SO2`, `SE2`, `SO3`, `SE3`, `Sim3` (see `_base.py` for
what they share and the conventions)."""

from ._base import LieGroup
from ._fields import GROUPS
from .se2 import SE2
from .se3 import SE3
from .sim3 import Sim3
from .so2 import SO2
from .so3 import SO3

__all__ = ["LieGroup", "SO2", "SE2", "SO3", "SE3", "Sim3", "GROUPS"]
