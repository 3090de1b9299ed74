"""A pose-graph problem from a parsed g2o file: vertices indexed 0..n-1 (ids sorted), edges
as index pairs, measurements on the group, checked for what would break the optimiser.

Poses become group objects over NumPy here (groups.py: quaternions normalised, SE(2)
angles as unit complex numbers) through the chosen framework's xform ops (`fw`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from xform import SE2, SE3
from xform.optim.g2o import G2oGraph

from . import groups


@dataclass
class Problem:
    """`ids (n,)`: vertex ids, sorted; vertex 0 (the smallest id) is the gauge's anchor.
    `i, j (m,)`: each edge's vertex indices. `group`: `xform.SE3` or `xform.SE2`.
    `measurements`: the edges' poses Z_ij, a batch (m,) of the group over NumPy;
    `information (m, d, d)`. `anchor`: the pose of vertex 0, batch (1,) (the file's, or
    the identity for a file without vertices), which every initialisation keeps.
    `file_poses`: the file's vertices, batch (n,), or None."""

    graph: G2oGraph
    group: type[SE3] | type[SE2]
    ids: np.ndarray
    i: np.ndarray
    j: np.ndarray
    measurements: SE3 | SE2
    information: np.ndarray
    anchor: SE3 | SE2
    file_poses: SE3 | SE2 | None

    @property
    def vertices(self) -> int:
        return len(self.ids)

    @property
    def edges(self) -> int:
        return len(self.i)

    @property
    def unknowns(self) -> int:
        """The optimiser's: every vertex's tangent but the gauge's (vertex 0)."""
        return self.group.tangent_dim * (self.vertices - 1)


def _where(graph: G2oGraph, edge: int) -> str:
    if graph.edge_lines is None:
        return f"{graph.source}: edge {edge}"
    return f"{graph.source}:{graph.edge_lines[edge]}"


def _poses(group, positions: np.ndarray, rotations: np.ndarray, fw):
    """A file's poses on the group (the reader refused zero quaternions, naming the line)."""
    return groups.from_file(fw, group, positions, rotations)


def make_problem(graph: G2oGraph, fw) -> Problem:
    """Index the vertices, check the edges and the graph, and put the rotations on the
    group. Raises ValueError for an edge to a vertex the file does not define, an edge
    from a vertex to itself, an information matrix that is not symmetric positive
    definite, and a graph that is not connected."""
    group = groups.group_of(graph.dim)
    if graph.has_vertices:
        ids = np.sort(graph.vertex_ids)
        known = np.isin(graph.edge_ids, ids)
        if not known.all():
            edge, end = np.argwhere(~known)[0]
            raise ValueError(
                f"{_where(graph, edge)}: edge {graph.edge_ids[edge, 0]} -> "
                f"{graph.edge_ids[edge, 1]} names vertex {graph.edge_ids[edge, end]}, "
                "which the file does not define"
            )
    else:
        ids = np.unique(graph.edge_ids)
    loops = np.flatnonzero(graph.edge_ids[:, 0] == graph.edge_ids[:, 1])
    if len(loops):
        raise ValueError(
            f"{_where(graph, loops[0])}: edge from vertex {graph.edge_ids[loops[0], 0]} to itself"
        )
    eigenvalues = np.linalg.eigvalsh(graph.edge_information)
    bad = np.flatnonzero(eigenvalues[:, 0] <= 0)
    if len(bad):
        raise ValueError(
            f"{_where(graph, bad[0])}: the information matrix is not positive definite "
            f"(smallest eigenvalue {eigenvalues[bad[0], 0]:.3g})"
        )
    i, j = np.searchsorted(ids, graph.edge_ids[:, 0]), np.searchsorted(ids, graph.edge_ids[:, 1])
    adjacency = sp.coo_matrix((np.ones(len(i)), (i, j)), shape=(len(ids), len(ids)))
    count, labels = connected_components(adjacency, directed=False)
    if count > 1:
        cut_off = np.flatnonzero(labels != labels[0])
        raise ValueError(
            f"{graph.source}: the graph is not connected: {count} components; vertex "
            f"{ids[cut_off[0]]} and {len(cut_off) - 1} others cannot be reached from "
            f"vertex {ids[0]}"
        )
    measurements = _poses(group, graph.edge_positions, graph.edge_rotations, fw)
    if graph.has_vertices:
        order = np.argsort(graph.vertex_ids)
        file_poses = _poses(group, graph.vertex_positions[order], graph.vertex_rotations[order], fw)
        anchor = file_poses[:1]
    else:
        file_poses = None
        anchor = group.identity((1,))
    return Problem(
        graph=graph,
        group=group,
        ids=ids,
        i=i,
        j=j,
        measurements=measurements,
        information=graph.edge_information,
        anchor=anchor,
        file_poses=file_poses,
    )


def with_poses(problem: Problem, poses, fw) -> G2oGraph:
    """The problem's graph with its vertices set to `poses` (group objects over NumPy)."""
    graph = problem.graph
    positions, rotations = groups.to_file(fw, poses)
    return G2oGraph(
        dim=graph.dim,
        vertex_ids=problem.ids,
        vertex_positions=positions,
        vertex_rotations=rotations,
        edge_ids=graph.edge_ids,
        edge_positions=graph.edge_positions,
        edge_rotations=graph.edge_rotations,
        edge_information=graph.edge_information,
        source=graph.source,
        edge_lines=graph.edge_lines,
        vertex_lines=None,
        skipped=graph.skipped,
    )
