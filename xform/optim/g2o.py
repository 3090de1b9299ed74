"""Reading and writing pose graphs in g2o's text format (`xform.optim.g2o`).

Tags read: `VERTEX_SE3:QUAT id x y z qx qy qz qw`, `EDGE_SE3:QUAT i j x y z qx qy qz qw` and
the 21 upper-triangular entries of the 6x6 information matrix (row by row, translation
first), `VERTEX_SE2 id x y theta`, `EDGE_SE2 i j x y theta` and the 6 upper-triangular
entries of the 3x3 information matrix. Every other tag is skipped and counted. The reader
only parses: values are kept as written (quaternions are not normalised), so that writing
and reading again gives the same numbers. Every error names `file:line`: a file that is not
text (UTF-8), a wrong number of fields, a field that is not a number, an id that is not an
integer of int64's range, a non-finite value, a zero quaternion, 2D and 3D tags mixed, a
vertex defined twice, and a file with no edges.

Quaternions are stored [w, x, y, z] (xform's order); g2o writes [x, y, z, w].
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._files import write_atomically

# tag -> (dimension, number of numbers after the tag)
VERTEX_TAGS = {"VERTEX_SE3:QUAT": (3, 8), "VERTEX_SE2": (2, 4)}
EDGE_TAGS = {"EDGE_SE3:QUAT": (3, 2 + 7 + 21), "EDGE_SE2": (2, 2 + 3 + 6)}


@dataclass
class G2oGraph:
    """A g2o file's pose graph, as written in it.

    dim: 2 or 3. Vertices (possibly none): `vertex_ids (n,)`, `vertex_positions (n, dim)`,
    `vertex_rotations`: quaternions `(n, 4)` [w, x, y, z] in 3D, angles `(n,)` in 2D.
    Edges: `edge_ids (m, 2)` (i, j), `edge_positions (m, dim)`, `edge_rotations` as the
    vertices', `edge_information (m, d, d)` with d = 6 (3D) or 3 (2D), symmetric, in g2o's
    order (translation, then rotation). `edge_lines (m,)`: each edge's line in the file.
    `vertex_lines (n,)`: each vertex's line. `skipped`: the other tags and how many lines
    each had.
    """

    dim: int
    vertex_ids: np.ndarray
    vertex_positions: np.ndarray
    vertex_rotations: np.ndarray
    edge_ids: np.ndarray
    edge_positions: np.ndarray
    edge_rotations: np.ndarray
    edge_information: np.ndarray
    source: str = "<graph>"
    edge_lines: np.ndarray | None = None
    vertex_lines: np.ndarray | None = None
    skipped: Counter = field(default_factory=Counter)

    @property
    def has_vertices(self) -> bool:
        """Whether the file gave vertices (else the poses come from odometry)."""
        return len(self.vertex_ids) > 0


def _upper_to_symmetric(upper: np.ndarray, d: int) -> np.ndarray:
    rows, cols = np.triu_indices(d)
    full = np.zeros((len(upper), d, d))
    full[:, rows, cols] = upper
    full[:, cols, rows] = upper
    return full


def _quaternion_from_g2o(xyzw: np.ndarray) -> np.ndarray:
    return np.concatenate([xyzw[:, 3:], xyzw[:, :3]], axis=1)


INT64 = (-(2**63), 2**63 - 1)


def _lines(path: Path):
    """(number, text) of every line of the file, decoded as UTF-8 (g2o files are ASCII): a
    line that is not names the file, the line and the offending byte."""
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}:{number}: not UTF-8 text (byte 0x{raw[error.start]:02x} at column "
                    f"{error.start + 1}); a g2o file is text"
                ) from None


def read_g2o(path: str | os.PathLike) -> G2oGraph:
    """Parse a g2o file. Raises ValueError naming `file:line` for a line that is not UTF-8
    text or is malformed (a wrong number of fields, a field that is not a number, an id that
    is not an integer in int64's range, a non-finite value, a zero quaternion, 2D and 3D
    mixed, a vertex defined twice), and for a file with no edges."""
    path = Path(path)
    vertices: dict[str, list] = {"ids": [], "values": [], "lines": []}
    edges: dict[str, list] = {"ids": [], "values": [], "lines": []}
    skipped: Counter = Counter()
    dim = None
    for number, line in _lines(path):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        tag = fields[0]
        if tag in VERTEX_TAGS:
            kind, count, into = VERTEX_TAGS[tag], 1, vertices
        elif tag in EDGE_TAGS:
            kind, count, into = EDGE_TAGS[tag], 2, edges
        else:
            skipped[tag] += 1
            continue
        where = f"{path}:{number}"
        tag_dim, size = kind
        if dim is None:
            dim = tag_dim
        elif dim != tag_dim:
            raise ValueError(f"{where}: {tag} in a {dim}D graph: 2D and 3D tags are mixed")
        if len(fields) - 1 != size:
            raise ValueError(
                f"{where}: {tag} wants {size} numbers after the tag, got {len(fields) - 1}"
            )
        try:
            ids = [int(x) for x in fields[1 : 1 + count]]
        except ValueError:
            raise ValueError(
                f"{where}: {tag}'s vertex ids must be integers, got {fields[1 : 1 + count]}"
            ) from None
        outside = [i for i in ids if not INT64[0] <= i <= INT64[1]]
        if outside:
            raise ValueError(
                f"{where}: {tag}'s vertex id {outside[0]} is outside int64's range "
                f"[{INT64[0]}, {INT64[1]}]"
            )
        try:
            values = [float(x) for x in fields[1 + count :]]
        except ValueError as error:
            raise ValueError(f"{where}: {tag} has a field that is not a number ({error})") from None
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{where}: {tag} has a value that is not finite")
        # x y z, then qx qy qz qw, for vertices and edges alike
        if tag_dim == 3 and not np.linalg.norm(values[3:7]) >= 1e-12:
            written = " ".join(fields[4 + count : 8 + count])
            raise ValueError(f"{where}: {tag}'s quaternion ({written}) is zero (norm below 1e-12)")
        into["ids"].append(ids)
        into["values"].append(values)
        into["lines"].append(number)
    if not edges["ids"]:
        raise ValueError(f"{path}: no edges ({', '.join(EDGE_TAGS)}) in the file")

    vertex_ids = np.array(vertices["ids"], dtype=np.int64).reshape(-1)
    unique, counts = np.unique(vertex_ids, return_counts=True)
    if np.any(counts > 1):
        twice = unique[counts > 1][0]
        lines = [n for n, i in zip(vertices["lines"], vertex_ids) if i == twice]
        raise ValueError(
            f"{path}:{lines[1]}: vertex {twice} defined twice (first on line {lines[0]})"
        )
    width = {3: 7, 2: 3}[dim]  # numbers after a vertex's id
    vertex_values = np.array(vertices["values"], dtype=np.float64).reshape(-1, width)
    edge_values = np.array(edges["values"], dtype=np.float64)
    d = 6 if dim == 3 else 3
    if dim == 3:
        vertex_positions, vertex_rotations = (
            vertex_values[:, :3],
            _quaternion_from_g2o(vertex_values[:, 3:7]),
        )
        edge_positions, edge_rotations = (
            edge_values[:, :3],
            _quaternion_from_g2o(edge_values[:, 3:7]),
        )
        upper = edge_values[:, 7:]
    else:
        vertex_positions, vertex_rotations = vertex_values[:, :2], vertex_values[:, 2]
        edge_positions, edge_rotations = edge_values[:, :2], edge_values[:, 2]
        upper = edge_values[:, 3:]
    return G2oGraph(
        dim=dim,
        vertex_ids=vertex_ids,
        vertex_positions=vertex_positions.reshape(-1, dim),
        vertex_rotations=vertex_rotations,
        edge_ids=np.array(edges["ids"], dtype=np.int64),
        edge_positions=edge_positions,
        edge_rotations=edge_rotations,
        edge_information=_upper_to_symmetric(upper, d),
        source=str(path),
        edge_lines=np.array(edges["lines"], dtype=np.int64),
        vertex_lines=np.array(vertices["lines"], dtype=np.int64),
        skipped=skipped,
    )


def _number(x: float) -> str:
    return repr(float(x))  # the shortest string that reads back as the same double


def format_g2o(graph: G2oGraph) -> str:
    """The graph as g2o text, every number at full float64 precision."""
    lines = []
    d = 6 if graph.dim == 3 else 3
    rows, cols = np.triu_indices(d)
    if graph.dim == 3:
        vertex_tag, edge_tag = "VERTEX_SE3:QUAT", "EDGE_SE3:QUAT"
        reorder = [1, 2, 3, 0]  # [w, x, y, z] -> g2o's [x, y, z, w]
        vertex_values = np.concatenate(
            [graph.vertex_positions, graph.vertex_rotations[:, reorder]], axis=1
        )
        edge_values = np.concatenate(
            [graph.edge_positions, graph.edge_rotations[:, reorder]], axis=1
        )
    else:
        vertex_tag, edge_tag = "VERTEX_SE2", "EDGE_SE2"
        vertex_values = np.concatenate(
            [graph.vertex_positions, graph.vertex_rotations[:, None]], axis=1
        )
        edge_values = np.concatenate([graph.edge_positions, graph.edge_rotations[:, None]], axis=1)
    for vertex_id, values in zip(graph.vertex_ids, vertex_values):
        lines.append(" ".join([vertex_tag, str(int(vertex_id)), *map(_number, values)]))
    information = graph.edge_information[:, rows, cols]
    for (i, j), values, upper in zip(graph.edge_ids, edge_values, information):
        numbers = map(_number, np.concatenate([values, upper]))
        lines.append(" ".join([edge_tag, str(int(i)), str(int(j)), *numbers]))
    return "\n".join(lines) + "\n"


def write_g2o(graph: G2oGraph, path: str | os.PathLike) -> None:
    """Write the graph to `path` atomically: into a temporary file beside it, renamed over
    `path` only once complete, so that a failure leaves no partial file."""
    write_atomically(format_g2o(graph), path)
