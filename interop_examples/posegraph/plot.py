"""The trajectory before and after optimisation, side by side (matplotlib)."""

from __future__ import annotations

import numpy as np

from .problem import Problem


def plot_trajectories(
    problem: Problem, before, after, path, title: str = "", labels=("before", "after")
) -> None:
    """Two panels: the vertices' positions before and after, joined in id order, and the
    loop closures (edges between vertices that are not consecutive) in light grey. 3D
    graphs are drawn from above (x, y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    closures = np.abs(problem.ids[problem.i] - problem.ids[problem.j]) > 1
    figure, axes = plt.subplots(1, 2, figsize=(12, 6))
    for axis, poses, label in zip(axes, (before, after), labels):
        xy = np.asarray(poses.position)[:, :2]
        segments = np.stack([xy[problem.i[closures]], xy[problem.j[closures]]], axis=1)
        axis.plot(*segments.transpose(2, 1, 0), color="0.85", linewidth=0.3, zorder=1)
        axis.plot(xy[:, 0], xy[:, 1], color="tab:blue", linewidth=0.6, zorder=2)
        axis.set_title(label)
        axis.set_aspect("equal", adjustable="datalim")
        axis.set_xlabel("x")
        axis.set_ylabel("y")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
