"""A URDF's `<inertial>` elements as the dynamics' constant tables: rigid bodies (the root
and each link moved by a joint, with the links that fixed joints attach to it merged in, as
Pinocchio merges them) and, for external forces, where each link lies on its body.

Conventions (stated once; `_dynamics.py` relies on them):

- A body's frame is its moving link's frame (the frame of the joint that moves it). Its
  inertia is kept as the ten numbers that are linear in the mass distribution, about the
  frame's origin: the mass `m`, the first moment `h = m c` (c the centre of mass) and the
  rotational inertia about the origin `I_O = I_c + m (|c|^2 1 - c c^T)`. Merging bodies
  adds them; so does the dynamics' composite inertia.
- `bodies (n_bodies, BODY_COLUMNS)`: the kinematic table's 15 columns (`_urdf.py`: parent
  body, joint kind, coordinate, mimic multiplier and offset, the joint's origin in the
  parent body's frame, its axis), then the inertia (MASS, MOMENT, INERTIA as xx, yy, zz, xy,
  xz, yz), then on row 0 the gravity vector in the base frame (GRAVITY).
- `frames (n_links, FRAME_COLUMNS)`: each link's body and the link's pose in that body's
  frame (position, quaternion [w, x, y, z]).

Bad inertial data (a negative or non-finite mass, an inertia that is not positive
semi-definite or breaks the triangle inequality) is recorded here and raised by the first
dynamics call, naming the link: kinematics does not read inertias, and many published
URDFs carry such values on links that only their visuals use.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np

from . import _urdf
from ._urdf import FIXED, Model, rpy_to_quaternion

MASS = _urdf.TABLE_COLUMNS
MOMENT = MASS + 1
INERTIA = MOMENT + 3
GRAVITY = INERTIA + 6
BODY_COLUMNS = GRAVITY + 3
FRAME_BODY, FRAME_POSITION, FRAME_QUATERNION = 0, 1, 4
FRAME_COLUMNS = 8

# A rotational inertia may miss positive semi-definiteness and the triangle inequality by
# this much of its largest principal moment (URDFs print six digits or so), or by
# ABSOLUTE_SLACK kg m^2 (zero inertias written as 1e-20 and the like).
RELATIVE_SLACK = 1e-6
ABSOLUTE_SLACK = 1e-15
# Published URDFs carry such inertias (ANYmal's, Go1's and B1's bases among them): the
# remedy, in every message about one.
AS_WRITTEN = "Chain.from_urdf(..., check_inertias=False) takes it as written, as Pinocchio does"


@dataclass(frozen=True)
class Dynamics:
    """The dynamics' constants for one chain (see the module docstring). `coordinates`
    names q's velocity coordinates; `problems` holds the bad inertial data found, as
    messages naming the link (raised by every dynamics call); `massless` maps a velocity
    coordinate that moves no mass to the message forward dynamics raises for it."""

    bodies: np.ndarray
    frames: np.ndarray
    floating: bool
    body_links: tuple[str, ...]
    problems: tuple[str, ...]
    massless: tuple[str, ...]


def _matrix(quaternion: np.ndarray) -> np.ndarray:
    w, x, y, z = quaternion
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _compose(a: tuple, b: tuple) -> tuple:
    """The pose a * b of two (position, quaternion) pairs."""
    (pa, qa), (pb, qb) = a, b
    w1, x1, y1, z1 = qa
    w2, x2, y2, z2 = qb
    q = np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )
    return pa + _matrix(qa) @ pb, q / np.linalg.norm(q)


def _number(element: ET.Element | None, attribute: str, link: str, what: str) -> float:
    text = None if element is None else element.get(attribute)
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if text is None or not math.isfinite(value):
        raise _Bad(f"link '{link}': the <inertial>'s {what} is {text!r}; expected a finite number")
    return value


class _Bad(ValueError):
    pass


def _link_inertia(link: ET.Element, physical: bool = True) -> tuple[np.ndarray, list[str]]:
    """A link's ten inertial parameters about its own frame's origin (zeros without
    `<inertial>`), and the problems found in its data (with `physical`, a rotational
    inertia that no mass distribution has is one)."""
    name = link.get("name")
    inertial = link.find("inertial")
    if inertial is None:
        return np.zeros(10), []
    try:
        mass = _number(inertial.find("mass"), "value", name, "mass")
        tensor = inertial.find("inertia")
        xx, xy, xz, yy, yz, zz = (
            _number(tensor, k, name, k) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
        )
        origin = inertial.find("origin")
        where = f"the <inertial> of link '{name}'"
        xyz = np.array(_urdf._floats(origin, "xyz", (0.0, 0.0, 0.0), where))
        rpy = _urdf._floats(origin, "rpy", (0.0, 0.0, 0.0), where)
    except ValueError as error:
        return np.zeros(10), [str(error).removeprefix("xform.kinematics.Chain.from_urdf: ")]
    problems = []
    if mass < 0:
        problems.append(f"link '{name}': the <inertial>'s mass is {mass}; expected >= 0")
    tensor = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    moments = np.linalg.eigvalsh(tensor)
    slack = RELATIVE_SLACK * max(abs(moments).max(), 0.0) + ABSOLUTE_SLACK
    listed = f"ixx={xx:g} iyy={yy:g} izz={zz:g} ixy={xy:g} ixz={xz:g} iyz={yz:g}"
    if physical and moments[0] < -slack:
        problems.append(
            f"link '{name}': the inertia ({listed}) is not positive semi-definite (principal "
            f"moments {moments[0]:.6g}, {moments[1]:.6g}, {moments[2]:.6g}); "
            f"{AS_WRITTEN}"
        )
    elif physical and moments[0] + moments[1] < moments[2] - slack:
        problems.append(
            f"link '{name}': the inertia ({listed}) breaks the triangle inequality: its "
            f"principal moments {moments[0]:.6g} + {moments[1]:.6g} < {moments[2]:.6g}, "
            f"which no mass distribution has; {AS_WRITTEN}"
        )
    rotation = _matrix(rpy_to_quaternion(*rpy))
    about_com = rotation @ tensor @ rotation.T
    return _parameters(mass, xyz, about_com), problems


def _parameters(mass: float, com: np.ndarray, about_com: np.ndarray) -> np.ndarray:
    """(m, h, I_O as xx yy zz xy xz yz) of a body of mass m, centre com, and rotational
    inertia about_com about its centre, all in one frame."""
    about_origin = about_com + mass * (com @ com * np.eye(3) - np.outer(com, com))
    return _packed(mass, mass * com, about_origin)


def _packed(mass: float, moment: np.ndarray, inertia: np.ndarray) -> np.ndarray:
    i = inertia
    return np.array(
        [mass, *moment, i[0, 0], i[1, 1], i[2, 2], i[0, 1], i[0, 2], i[1, 2]], dtype=np.float64
    )


def _moved(parameters: np.ndarray, pose: tuple) -> np.ndarray:
    """Inertial parameters about a frame's origin, seen from a frame in which that frame
    has `pose` (position p, rotation R): h' = R h + m p, and I_O' by the parallel axes."""
    position, quaternion = pose
    m, h = parameters[0], parameters[1:4]
    xx, yy, zz, xy, xz, yz = parameters[4:]
    rotation = _matrix(quaternion)
    inertia = rotation @ np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]]) @ rotation.T
    g = rotation @ h
    p = position
    inertia = (
        inertia
        + m * (p @ p * np.eye(3) - np.outer(p, p))
        + 2 * (p @ g) * np.eye(3)
        - np.outer(p, g)
        - np.outer(g, p)
    )
    return _packed(m, g + m * p, inertia)


def dynamics_model(robot: ET.Element, model: Model, floating: bool, gravity,
                   physical: bool = True) -> Dynamics:  # fmt: skip
    """The bodies and frames tables of the URDF `robot`, whose kinematics is `model`
    (with `physical`, a rotational inertia no mass distribution has is a problem)."""
    elements = {link.get("name"): link for link in robot.findall("link")}
    n = len(model.link_names)
    identity = (np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]))
    body_of = [0] * n  # each link's body
    pose_in_body = [identity] * n  # each link's frame in its body's frame
    body_rows: list[int] = [0]  # the link that each body's frame is
    parents = [int(p) for p in model.joints[:, _urdf.PARENT]]
    for k in range(1, n):
        if int(model.joints[k, _urdf.KIND]) == FIXED:
            body_of[k] = body_of[parents[k]]
            origin = (model.origin_positions[k], model.origin_quaternions[k])
            pose_in_body[k] = _compose(pose_in_body[parents[k]], origin)
        else:
            body_of[k] = len(body_rows)
            body_rows.append(k)
    problems: list[str] = []
    inertias = np.zeros((len(body_rows), 10))
    for k, link in enumerate(model.link_names):
        parameters, found = _link_inertia(elements[link], physical)
        problems += found
        inertias[body_of[k]] += _moved(parameters, pose_in_body[k])
    bodies = np.zeros((len(body_rows), BODY_COLUMNS))
    for b, k in enumerate(body_rows):
        bodies[b, : _urdf.TABLE_COLUMNS] = model.table[k]
        if b:
            parent = parents[k]
            origin = (model.origin_positions[k], model.origin_quaternions[k])
            position, quaternion = _compose(pose_in_body[parent], origin)
            bodies[b, _urdf.PARENT] = body_of[parent]
            bodies[b, _urdf.POSITION : _urdf.POSITION + 3] = position
            bodies[b, _urdf.QUATERNION : _urdf.QUATERNION + 4] = quaternion
        bodies[b, MASS:GRAVITY] = inertias[b]
    bodies[0, GRAVITY : GRAVITY + 3] = gravity
    frames = np.zeros((n, FRAME_COLUMNS))
    for k in range(n):
        position, quaternion = pose_in_body[k]
        frames[k] = (body_of[k], *position, *quaternion)
    for array in (bodies, frames):
        array.flags.writeable = False
    return Dynamics(
        bodies,
        frames,
        floating,
        tuple(model.link_names[k] for k in body_rows),
        tuple(problems),
        _massless(model, body_rows, parents, body_of, inertias, floating),
    )


def _massless(model: Model, body_rows, parents, body_of, inertias, floating) -> tuple[str, ...]:
    """For each coordinate that moves no mass (every joint it drives carries only links
    without inertia), the message forward dynamics raises: its mass matrix is singular."""
    n_bodies = len(body_rows)
    carried = inertias.copy()  # each body's and its descendants'
    body_parent = [body_of[parents[k]] for k in body_rows]
    for b in range(n_bodies - 1, 0, -1):
        carried[body_parent[b]] += carried[b]
    moved = {name: False for name in model.joint_names}
    first_link = {}
    for b in range(1, n_bodies):
        k = body_rows[b]
        name = model.joint_names[int(model.joints[k, _urdf.INDEX])]
        first_link.setdefault(name, (model.link_names[k], model.link_joints[k]))
        moved[name] = moved[name] or bool(np.any(carried[b] != 0.0))
    messages = []
    if floating and not np.any(carried[0] != 0.0):
        messages.append(
            f"the floating base '{model.link_names[0]}' carries no mass: no link of the "
            "URDF has an <inertial>"
        )
    for name, has_mass in moved.items():
        if not has_mass:
            link, joint = first_link[name]
            messages.append(
                f"link '{link}' moves (joint '{joint}', coordinate '{name}') but neither it "
                "nor any link it carries has mass or inertia (no <inertial>)"
            )
    return tuple(messages)
