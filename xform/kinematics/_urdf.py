"""URDF to a kinematic model: links in topological order, each with the joint that leads to
it from its parent, as constant arrays that the chain's ops read.

Parsed with the standard library's `xml.etree.ElementTree`: URDF's kinematic part is a
handful of elements and attributes (`link`, `joint`, `origin`, `axis`, `mimic`), so a URDF
library would add a dependency (and, for the maintained ones, a C++ toolchain or ROS) for
no gain; `<inertial>` is read by `_inertia.py` for the dynamics, and everything else in
the file (visuals, transmissions, Gazebo tags) is ignored. The parser is strict where
kinematics is concerned: anything it cannot represent exactly raises `ValueError` naming
the element.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np

# Joint kinds, as the `joints` array's KIND column stores them.
FIXED = 0
"""A joint kind in `Chain.model.joints`' kind column: a fixed joint (no coordinate)."""
REVOLUTE = 1
"""A joint kind: a revolute or continuous joint (one angle, radians)."""
PRISMATIC = 2
"""A joint kind: a prismatic joint (one displacement along its axis)."""
KINDS = {"fixed": FIXED, "revolute": REVOLUTE, "continuous": REVOLUTE, "prismatic": PRISMATIC}
UNSUPPORTED = ("floating", "planar")

# Columns of the `joints` array, one row per link (the joint from its parent to it).
PARENT, KIND, INDEX, MULTIPLIER, OFFSET = range(5)
JOINT_COLUMNS = 5
# Columns of the packed table the kernels read, one row per link: `joints`, then the
# origin's position and quaternion, then the axis.
POSITION, QUATERNION, AXIS = JOINT_COLUMNS, JOINT_COLUMNS + 3, JOINT_COLUMNS + 7
TABLE_COLUMNS = JOINT_COLUMNS + 10


@dataclass(frozen=True)
class Model:
    """A kinematic tree, row k of each array describing link k (row 0, the root, unused):

    - `joints (n_links, 5)`: the parent link's index, the joint kind (FIXED, REVOLUTE,
      PRISMATIC), the index into q of the coordinate that drives it (its own, or its
      master's for a mimic joint), and the mimic multiplier and offset (1 and 0 otherwise):
      the joint's value is `multiplier * q[index] + offset`.
    - `origin_positions (n_links, 3)`, `origin_quaternions (n_links, 4)`: the joint's
      origin, its frame in the parent link's frame (URDF `xyz`, `rpy`; [w, x, y, z]).
    - `axes (n_links, 3)`: the unit joint axis, in the joint frame.

    Parents come before their children, so one pass from the root computes every pose.
    All arrays are float64 and read-only; `table` packs them side by side, one row per
    link, as the kernels read them (one operand, one row per joint step).
    """

    link_names: tuple[str, ...]
    joint_names: tuple[str, ...]  # movable, not mimic, in document order: q's coordinates
    link_joints: tuple[str | None, ...]  # the joint leading to each link; None for the root
    joints: np.ndarray
    origin_positions: np.ndarray
    origin_quaternions: np.ndarray
    axes: np.ndarray
    table: np.ndarray


def _error(message: str) -> ValueError:
    return ValueError(f"xform.kinematics.Chain.from_urdf: {message}")


def read_root(path_or_xml) -> ET.Element:
    """The `<robot>` element of a URDF given as a path or as its XML text."""
    is_text = isinstance(path_or_xml, str) and path_or_xml.lstrip().startswith("<")
    if is_text or isinstance(path_or_xml, bytes):
        text = path_or_xml
    elif isinstance(path_or_xml, (str, os.PathLike)):
        try:
            with open(path_or_xml, "rb") as file:
                text = file.read()
        except OSError as exc:
            raise _error(f"cannot read the URDF file {os.fspath(path_or_xml)!r}: {exc}") from exc
    else:
        raise TypeError(
            "xform.kinematics.Chain.from_urdf: expected a path or the URDF's XML text, got "
            f"{type(path_or_xml).__name__}"
        )
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise _error(f"the URDF is not well-formed XML: {exc}") from exc
    if root.tag != "robot":
        raise _error(f"the document's root element is <{root.tag}>; expected <robot>")
    return root


def _floats(element: ET.Element | None, attribute: str, default: tuple, where: str) -> tuple:
    if element is None or element.get(attribute) is None:
        return default
    text = element.get(attribute)
    try:
        values = tuple(float(v) for v in text.split())
    except ValueError:
        values = ()
    if len(values) != len(default) or not all(math.isfinite(v) for v in values):
        raise _error(f"{where}: {attribute}={text!r} is not {len(default)} finite numbers")
    return values


def rpy_to_quaternion(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """URDF's rpy: R = Rz(yaw) Ry(pitch) Rx(roll), as a unit quaternion [w, x, y, z]."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return np.array(
        [
            cy * cp * cr + sy * sp * sr,
            cy * cp * sr - sy * sp * cr,
            cy * sp * cr + sy * cp * sr,
            sy * cp * cr - cy * sp * sr,
        ]
    )


@dataclass
class _Joint:
    name: str
    kind: int
    parent: str
    child: str
    xyz: tuple
    quaternion: np.ndarray
    axis: np.ndarray
    mimic: tuple[str, float, float] | None  # master joint, multiplier, offset


def _named(element: ET.Element, what: str) -> str:
    name = element.get("name")
    if not name:
        raise _error(f"a <{what}> has no name")
    return name


def _link_reference(joint: ET.Element, name: str, role: str) -> str:
    reference = joint.find(role)
    link = None if reference is None else reference.get("link")
    if not link:
        raise _error(f"joint '{name}' has no <{role} link=...>")
    return link


def _read_joint(element: ET.Element) -> _Joint:
    name = _named(element, "joint")
    kind_name = element.get("type")
    if kind_name in UNSUPPORTED:
        raise _error(
            f"joint '{name}' is {kind_name}; supported joint types are revolute, continuous, "
            "prismatic and fixed (a floating base is a pose you compose with the chain's poses, "
            "or Chain.from_urdf(..., floating_base=True) for the dynamics)"
        )
    if kind_name not in KINDS:
        raise _error(
            f"joint '{name}' has type {kind_name!r}; expected revolute, continuous, "
            "prismatic or fixed"
        )
    where = f"joint '{name}'"
    origin = element.find("origin")
    xyz = _floats(origin, "xyz", (0.0, 0.0, 0.0), where)
    rpy = _floats(origin, "rpy", (0.0, 0.0, 0.0), where)
    axis = np.array(_floats(element.find("axis"), "xyz", (1.0, 0.0, 0.0), where))
    kind = KINDS[kind_name]
    if kind != FIXED:
        # Scaled by its largest component first, so that the norm neither overflows
        # (1e300) nor underflows (1e-200) in the squares
        largest = np.max(np.abs(axis))
        if largest == 0.0:
            raise _error(f"joint '{name}' has the zero axis; expected a direction")
        axis = axis / largest
        axis = axis / np.linalg.norm(axis)
    mimic = element.find("mimic")
    mimicked = None
    if mimic is not None and kind != FIXED:
        master = mimic.get("joint")
        if not master:
            raise _error(f"joint '{name}' has a <mimic> without joint=...")
        multiplier = _floats(mimic, "multiplier", (1.0,), f"the <mimic> of {where}")[0]
        offset = _floats(mimic, "offset", (0.0,), f"the <mimic> of {where}")[0]
        mimicked = (master, multiplier, offset)
    return _Joint(
        name,
        kind,
        _link_reference(element, name, "parent"),
        _link_reference(element, name, "child"),
        xyz,
        rpy_to_quaternion(*rpy),
        axis,
        mimicked,
    )


def _resolve_mimics(joints: dict[str, _Joint]) -> dict[str, tuple[str, float, float]]:
    """Each mimic joint's driving coordinate (a movable joint that mimics none), with the
    multiplier and offset composed along a chain of mimics."""
    resolved: dict[str, tuple[str, float, float]] = {}
    for joint in joints.values():
        if joint.mimic is None:
            continue
        multiplier, offset, seen, current = 1.0, 0.0, [joint.name], joint
        while current.mimic is not None:
            master, m, o = current.mimic
            if master not in joints:
                raise _error(f"joint '{current.name}' mimics '{master}', which is not a joint")
            if joints[master].kind == FIXED:
                raise _error(f"joint '{current.name}' mimics '{master}', a fixed joint")
            if master in seen:
                raise _error(f"the mimic joints {' -> '.join([*seen, master])} form a cycle")
            # value = m * (value of master) + o, composed into the earlier links' map
            multiplier, offset = multiplier * m, multiplier * o + offset
            seen.append(master)
            current = joints[master]
        resolved[joint.name] = (current.name, multiplier, offset)
    return resolved


def _topological_order(links: list[str], joints: dict[str, _Joint]) -> list[str]:
    """The links, each after its parent: depth first from the one root, children in the
    order the document lists their joints."""
    parent_joint: dict[str, _Joint] = {}
    children: dict[str, list[str]] = {link: [] for link in links}
    for joint in joints.values():
        for role, link in (("parent", joint.parent), ("child", joint.child)):
            if link not in children:
                raise _error(
                    f"joint '{joint.name}' names the {role} link '{link}', which is not a link"
                )
        if joint.child in parent_joint:
            other = parent_joint[joint.child].name
            raise _error(
                f"link '{joint.child}' is the child of two joints, '{other}' and '{joint.name}' "
                "(a closed loop, which a tree cannot express)"
            )
        parent_joint[joint.child] = joint
        children[joint.parent].append(joint.child)
    roots = [link for link in links if link not in parent_joint]
    if not roots:
        raise _error(f"every link has a parent: the joints form a cycle through {links}")
    if len(roots) > 1:
        raise _error(f"the URDF has several root links {roots}; expected one tree")
    order, stack = [], [roots[0]]
    while stack:
        link = stack.pop()
        order.append(link)
        stack.extend(reversed(children[link]))
    if len(order) != len(links):
        unreached = [link for link in links if link not in set(order)]
        raise _error(f"the links {unreached} form a cycle, unreachable from the root '{roots[0]}'")
    return order


def parse(path_or_xml) -> Model:
    """The kinematic model of a URDF (a path or its XML text)."""
    return parse_robot(read_root(path_or_xml))


def parse_robot(robot: ET.Element) -> Model:
    """The kinematic model of a URDF's `<robot>` element."""
    links = [_named(element, "link") for element in robot.findall("link")]
    if not links:
        raise _error("the URDF has no <link>")
    duplicates = sorted({link for link in links if links.count(link) > 1})
    if duplicates:
        raise _error(f"the links {duplicates} are declared more than once")
    joints: dict[str, _Joint] = {}
    for element in robot.findall("joint"):
        joint = _read_joint(element)
        if joint.name in joints:
            raise _error(f"joint '{joint.name}' is declared more than once")
        joints[joint.name] = joint
    order = _topological_order(links, joints)
    mimics = _resolve_mimics(joints)
    coordinates = [j.name for j in joints.values() if j.kind != FIXED and j.name not in mimics]
    index_of = {name: k for k, name in enumerate(coordinates)}
    link_index = {link: k for k, link in enumerate(order)}
    by_child = {joint.child: joint for joint in joints.values()}

    n = len(order)
    table = np.zeros((n, JOINT_COLUMNS))
    origin_positions = np.zeros((n, 3))
    origin_quaternions = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
    axes = np.zeros((n, 3))
    link_joints: list[str | None] = [None]
    table[0] = (0, FIXED, 0, 1.0, 0.0)
    for k, link in enumerate(order[1:], start=1):
        joint = by_child[link]
        master, multiplier, offset = mimics.get(joint.name, (joint.name, 1.0, 0.0))
        index = index_of.get(master, 0)  # a fixed joint reads no coordinate
        table[k] = (link_index[joint.parent], joint.kind, index, multiplier, offset)
        origin_positions[k] = joint.xyz
        origin_quaternions[k] = joint.quaternion
        axes[k] = joint.axis
        link_joints.append(joint.name)
    packed = np.concatenate([table, origin_positions, origin_quaternions, axes], axis=1)
    assert packed.shape[1] == TABLE_COLUMNS
    for array in (table, origin_positions, origin_quaternions, axes, packed):
        array.flags.writeable = False
    return Model(
        tuple(order),
        tuple(coordinates),
        tuple(link_joints),
        table,
        origin_positions,
        origin_quaternions,
        axes,
        packed,
    )
