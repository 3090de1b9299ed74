"""Reading and writing bundle-adjustment problems in BAL's text format (`xform.optim.bal`).

"Bundle Adjustment in the Large" (Agarwal, Snavely, Seitz, Szeliski, ECCV 2010), whitespace
separated:

```
<num_cameras> <num_points> <num_observations>
<camera_index> <point_index> <x> <y>          (num_observations lines)
<camera parameters>                           (9 numbers per camera)
<point coordinates>                           (3 numbers per point)
```

A camera is a Rodrigues rotation `w (3)`, a translation `t (3)`, a focal length `f` and
radial distortion `k1, k2`; a world point `X` projects to `f r(p) p` with `P = R(w) X + t`,
`p = -P[:2] / P[2]` and `r(p) = 1 + k1 |p|^2 + k2 |p|^4` (the camera looks down -z). Every
error names `file:line`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._files import write_atomically


@dataclass
class BalProblem:
    """`camera_index (n_obs,)`, `point_index (n_obs,)`, `observations (n_obs, 2)` pixels,
    `cameras (n_cameras, 9)` `[w, t, f, k1, k2]`, `points (n_points, 3)`."""

    camera_index: np.ndarray
    point_index: np.ndarray
    observations: np.ndarray
    cameras: np.ndarray
    points: np.ndarray
    source: str = "<bal>"


def _text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise ValueError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[error.start]:02x} at column "
            f"{column}); a BAL file is text"
        ) from None


def read_bal(path: str | os.PathLike) -> BalProblem:
    """Parse a BAL file. Raises ValueError naming `file:line` for a file that is not text, a
    header that is not three non-negative counts, an observation line that is not two
    indices in range and two numbers, a parameter that is not a finite number, too few or
    too many numbers."""
    path = Path(path)
    lines = _text(path).splitlines()
    content = [(n, line.split()) for n, line in enumerate(lines, start=1) if line.strip()]
    if not content:
        raise ValueError(f"{path}: empty file; a BAL file starts with its three counts")
    number, header = content[0]
    try:
        counts = [int(x) for x in header]
    except ValueError:
        counts = []
    if len(counts) != 3 or min(counts) < 0:
        raise ValueError(
            f"{path}:{number}: the header must be three counts (cameras, points, "
            f"observations), got {' '.join(header)!r}"
        )
    n_cameras, n_points, n_observations = counts
    rows = content[1 : 1 + n_observations]
    if len(rows) < n_observations:
        raise ValueError(
            f"{path}: the header announces {n_observations} observations, the file has "
            f"{len(rows)} lines after it"
        )
    widths = np.fromiter((len(f) for _, f in rows), dtype=np.int64, count=len(rows))
    if np.any(widths != 4):
        k = int(np.flatnonzero(widths != 4)[0])
        raise ValueError(
            f"{path}:{rows[k][0]}: an observation is 4 fields (camera, point, x, y), got "
            f"{widths[k]}"
        )
    table = [f for _, f in rows]
    try:
        indices = np.array([[int(f[0]), int(f[1])] for f in table], dtype=np.int64).reshape(-1, 2)
    except (ValueError, OverflowError):
        k = next(k for k, f in enumerate(table) if not _integers(f[:2]))
        raise ValueError(
            f"{path}:{rows[k][0]}: camera and point indices must be integers, got {table[k][:2]}"
        ) from None
    observations = _numbers(path, [f[2:] for f in table], [n for n, _ in rows], 2)
    for column, count, what in ((0, n_cameras, "camera"), (1, n_points, "point")):
        bad = np.flatnonzero((indices[:, column] < 0) | (indices[:, column] >= count))
        if len(bad):
            k = int(bad[0])
            raise ValueError(
                f"{path}:{rows[k][0]}: {what} index {indices[k, column]} out of range [0, {count})"
            )
    rest = content[1 + n_observations :]
    tokens = [t for _, f in rest for t in f]
    token_lines = np.repeat([n for n, _ in rest], [len(f) for _, f in rest])
    expected = 9 * n_cameras + 3 * n_points
    if len(tokens) != expected:
        where = f"{path}:{rest[-1][0] if rest else number}"
        raise ValueError(
            f"{where}: {n_cameras} cameras and {n_points} points need {expected} parameters "
            f"after the observations, the file has {len(tokens)}"
        )
    parameters = _numbers(path, [[t] for t in tokens], token_lines, 1).ravel()
    return BalProblem(
        camera_index=indices[:, 0].copy(),
        point_index=indices[:, 1].copy(),
        observations=observations,
        cameras=parameters[: 9 * n_cameras].reshape(n_cameras, 9),
        points=parameters[9 * n_cameras :].reshape(n_points, 3),
        source=str(path),
    )


def _integers(fields) -> bool:
    try:
        [int(x) for x in fields]
    except ValueError:
        return False
    return True


def _numbers(path: Path, fields: list, line_numbers, width: int) -> np.ndarray:
    """Finite floats (k, width), or a ValueError naming the first bad field's line."""
    try:
        values = np.array(fields, dtype=np.float64).reshape(-1, width)
    except ValueError:
        for k, row in enumerate(fields):
            try:
                [float(x) for x in row]
            except ValueError:
                raise ValueError(
                    f"{path}:{line_numbers[k]}: not a number: {' '.join(row)!r}"
                ) from None
        raise
    finite = np.isfinite(values).all(axis=1)
    if not finite.all():
        k = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{path}:{line_numbers[k]}: a value is not finite: {' '.join(fields[k])}")
    return values


def format_bal(problem: BalProblem) -> str:
    """The problem as BAL text, every number at full float64 precision (`repr`)."""
    lines = [f"{len(problem.cameras)} {len(problem.points)} {len(problem.observations)}"]
    lines += [
        f"{c} {p} {x!r} {y!r}"
        for c, p, (x, y) in zip(
            problem.camera_index.tolist(),
            problem.point_index.tolist(),
            problem.observations.tolist(),
        )
    ]
    lines += [repr(v) for v in problem.cameras.ravel().tolist()]
    lines += [repr(v) for v in problem.points.ravel().tolist()]
    return "\n".join(lines) + "\n"


def write_bal(problem: BalProblem, path: str | os.PathLike) -> None:
    """Write atomically: into a temporary file beside `path`, renamed over it once complete,
    so that a failure (or an interruption) leaves no partial file."""
    write_atomically(format_bal(problem), path)
