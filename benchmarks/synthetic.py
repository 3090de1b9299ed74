"""Seeded synthetic problems for the solver's benchmarks and tests: bundle adjustment in
BAL's camera model and SE(3) pose graphs, at any size (up to 2,000 cameras, 500k points
and 5M observations; 100k poses), vectorised in NumPy (no Python loop over observations
or edges).

    python -m benchmarks.synthetic bal CAMERAS POINTS [--seed S] OUT.txt
    python -m benchmarks.synthetic pose-graph POSES [--seed S] OUT.g2o

- `bal_problem(cameras, points, seed=...)`: a street. The cameras ride a gently curving
  path one metre apart, each looking to the left of its travel (a side-looking rig, as
  street capture and Ladybug-49 are), 2 degrees of wobble; the points lie on the left
  side, 3 to 14 m from the path, at heights within the cameras' vertical field of view.
  A point is observed by every camera that has it in front (`P.z < -0.5`, BAL's camera
  looks down -z) and inside its field of view (62 x 48 degrees); points seen by fewer than
  3 cameras are drawn again, and those seen by more than 20 keep 20 of them at random
  (about 10 a point on average: 2,000 cameras and 500k points make ~5M observations).
  The camera model is BAL's (`../shared/data/bal/README.md`): Rodrigues `w`, `t`, `f`
  (about 500 px), `k1`, `k2`; `pred = f (1 + k1 |p|^2 + k2 |p|^4) p`, `p = -P[:2] / P[2]`.
  Observations get Gaussian pixel noise (`noise` px) and a fraction `outliers` of them are
  moved 10-40 px; the problem's cameras and points start from the truth drifted as
  visual odometry drifts (the poses integrated from perturbed camera-to-camera motions,
  each point moved with its first camera) plus a little noise (`perturb=False` leaves
  the truth).
- `pose_graph(poses, seed=...)`: a helix of rings (`ring` poses a turn, 1 m apart, each
  heading along the helix with a little roll and pitch), odometry edges `i -> i+1` and loop
  closures `i -> i + ring` to the ring above (a fraction `closures` of them), measurements
  `Z = T_i^-1 T_j` perturbed by `(exp(w) R, t + r)`, `w ~ N(0, sigma_r^2)`,
  `r ~ N(0, sigma_t^2)`, information `diag(1/sigma_t^2 (x3), 1/sigma_r^2 (x3))`, g2o's
  order; the vertices are the odometry composed from the first pose (as g2o files give
  them) or, with `initial="truth"`, the truth. Returns what `xform.optim.g2o.read_g2o`
  returns (`G2oGraph`); `write_g2o` writes it.

Every random draw comes from its own stream of `numpy.random.SeedSequence(seed)`, so that
`noise=0` or `perturb=False` changes nothing else. The geometry uses NumPy and SciPy's
rotations only (nothing of xform, so the tests check one against the other).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from xform.optim.bal import BalProblem, write_bal
from xform.optim.g2o import G2oGraph, write_g2o

# The street's geometry (metres) and the cameras' field of view (tangents of half-angles).
SPACING = 1.0
DEPTHS = (3.0, 14.0)
TAN_HALF_FOV = (0.6, 0.45)
NEAR = 0.5
VIEWS = (3, 20)
WOBBLE = np.deg2rad(2.0)
# Candidate cameras of a point: those within this many of the one nearest along the path
# (a point 14 m away is in the field of view of cameras within ~8.4 m along the path, 11
# with the wobble and the bend; tests/test_synthetic.py checks that none is missed).
WINDOW = 14
CHUNK = 65_536  # points a pass, bounding the candidates' temporary arrays (~100 MB)

# An outlier is moved this far (pixels) in a random direction: a feature matched to a
# neighbour, not anywhere in the image (which, with no robust loss, drags the solution
# for hundreds of iterations).
OUTLIER_PIXELS = (10.0, 40.0)
# The initial guess drifts as visual odometry does: each camera-to-camera motion perturbed
# (radians and metres; scaled down past 100 cameras, so that the whole street drifts as 100
# cameras do), the poses integrated; each point moved with its first camera; then a little
# noise: radians, metres, relative focal length, k1 / k2, metres.
DRIFT_ROTATION, DRIFT_TRANSLATION, DRIFT_CAMERAS = 0.005, 0.03, 100
PERTURB_ROTATION, PERTURB_TRANSLATION, PERTURB_FOCAL = 0.002, 0.01, 0.01
PERTURB_DISTORTION, PERTURB_POINT = (0.005, 0.001), 0.02


def _streams(seed: int, n: int) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def _path(x: np.ndarray, length: float):
    """The street's centre line at arc-length-like coordinate x: a gentle S-bend in the
    ground plane. Returns (points (k, 3), left normals (k, 3), tangents (k, 3))."""
    amplitude, wavelength = 0.01 * length + 0.5, max(length, 100.0)  # slopes up to ~0.07
    y = amplitude * np.sin(2 * np.pi * x / wavelength)
    slope = amplitude * 2 * np.pi / wavelength * np.cos(2 * np.pi * x / wavelength)
    tangent = np.stack([np.ones_like(x), slope, np.zeros_like(x)], -1)
    tangent /= np.linalg.norm(tangent, axis=-1, keepdims=True)
    normal = np.stack([-tangent[:, 1], tangent[:, 0], np.zeros_like(x)], -1)
    return np.stack([x, y, np.zeros_like(x)], -1), normal, tangent


@dataclass
class Street:
    """The truth: cameras `(n, 9)` BAL parameters, their world-to-camera rotations
    `(n, 3, 3)` and translations `(n, 3)`."""

    cameras: np.ndarray
    rotations: np.ndarray
    translations: np.ndarray


def _street(n_cameras: int, rng: np.random.Generator) -> Street:
    length = n_cameras * SPACING
    x = (np.arange(n_cameras) + 0.5) * SPACING
    centres, normal, tangent = _path(x, length)
    centres[:, 2] = 1.5 + 0.05 * rng.standard_normal(n_cameras)
    # camera to world: the camera looks along the left normal (-z), y up, x = y cross z
    # (the direction of travel, to the right in the image)
    up = np.broadcast_to([0.0, 0.0, 1.0], normal.shape)
    z_axis = -normal
    x_axis = np.cross(up, z_axis)
    to_world = np.stack([x_axis, up, z_axis], -1)
    wobble = Rotation.from_rotvec(WOBBLE * rng.standard_normal((n_cameras, 3))).as_matrix()
    to_world = to_world @ wobble
    rotations = np.swapaxes(to_world, 1, 2)
    translations = -np.einsum("nij,nj->ni", rotations, centres)
    focal = 500.0 * (1.0 + 0.05 * rng.standard_normal(n_cameras))
    k1 = rng.uniform(-0.05, 0.05, n_cameras)
    k2 = rng.uniform(-0.01, 0.01, n_cameras)
    w = Rotation.from_matrix(rotations).as_rotvec()
    cameras = np.concatenate([w, translations, focal[:, None], k1[:, None], k2[:, None]], 1)
    return Street(cameras, rotations, translations)


def _candidate_points(count: int, n_cameras: int, rng: np.random.Generator):
    """Points on the left of the street: (points (k, 3), their coordinates along the path)."""
    length = n_cameras * SPACING
    x = rng.uniform(-0.5 * WINDOW * SPACING, length + 0.5 * WINDOW * SPACING, count)
    base, normal, _ = _path(x, length)
    depth = rng.uniform(*DEPTHS, count)
    height = 1.5 + depth * TAN_HALF_FOV[1] * rng.uniform(-0.9, 0.9, count)
    points = base + depth[:, None] * normal
    points[:, 2] = height
    return points, x


def project(cameras: np.ndarray, camera_rotations: np.ndarray, points: np.ndarray):
    """BAL's prediction of each (camera, point) pair, given their rotation matrices (k, 3,
    3): (pixels (k, 2), camera-frame points (k, 3))."""
    p_camera = np.einsum("kij,kj->ki", camera_rotations, points) + cameras[:, 3:6]
    p = -p_camera[:, :2] / p_camera[:, 2:3]
    r2 = np.sum(p * p, axis=1, keepdims=True)
    radial = 1.0 + r2 * (cameras[:, 7:8] + cameras[:, 8:9] * r2)
    return cameras[:, 6:7] * radial * p, p_camera


def visible_cameras(street: Street, points: np.ndarray, along: np.ndarray, window: int = WINDOW):
    """(candidate camera indices (k, 2 window + 1), whether each sees the point): the
    cameras within `window` of the one nearest to each point's coordinate `along` the
    path, tested for being in front (`P.z < -NEAR`) with the point in the field of view."""
    n = len(street.cameras)
    nearest = np.clip(np.round(along / SPACING - 0.5).astype(np.int64), 0, n - 1)
    offsets = np.arange(-window, window + 1)
    candidates = nearest[:, None] + offsets
    inside = (candidates >= 0) & (candidates < n)
    candidates = np.clip(candidates, 0, n - 1)
    k, width = candidates.shape
    flat = candidates.ravel()
    _, p_camera = project(
        street.cameras[flat], street.rotations[flat], np.repeat(points, width, axis=0)
    )
    z = p_camera[:, 2]
    in_front = z < -NEAR
    ratio = np.abs(p_camera[:, :2]) / np.maximum(-z, NEAR)[:, None]
    visible = in_front & (ratio[:, 0] < TAN_HALF_FOV[0]) & (ratio[:, 1] < TAN_HALF_FOV[1])
    return candidates, visible.reshape(k, width) & inside


def _at_most(visible: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """`visible` with at most `count` True a row, those kept chosen at random."""
    keys = np.where(visible, rng.random(visible.shape), np.inf)
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)
    return visible & (rank < count)


def _scene(n_cameras: int, n_points: int, rngs):
    """The truth and the observed pairs: (street, points (m, 3), camera_index, point_index),
    the observations ordered by point, then camera (as BAL files are)."""
    street = _street(n_cameras, rngs[0])
    kept_points, kept_cameras, kept_counts = [], [], []
    found = 0
    while found < n_points:
        count = min(CHUNK, int(1.25 * (n_points - found)) + 64)
        points, along = _candidate_points(count, n_cameras, rngs[1])
        candidates, visible = visible_cameras(street, points, along)
        visible = _at_most(visible, VIEWS[1], rngs[2])
        views = visible.sum(axis=1)
        keep = np.flatnonzero(views >= VIEWS[0])[: n_points - found]
        kept_points.append(points[keep])
        kept_cameras.append(candidates[keep][visible[keep]])
        kept_counts.append(views[keep])
        found += len(keep)
    points = np.concatenate(kept_points)
    counts = np.concatenate(kept_counts)
    camera_index = np.concatenate(kept_cameras)
    point_index = np.repeat(np.arange(n_points), counts)
    return street, points, camera_index, point_index


def _drifted(street: Street, points: np.ndarray, first: np.ndarray, rng: np.random.Generator):
    """The initial guess: (cameras (n, 9), points (m, 3)), given each point's first camera.
    The cameras' poses are integrated from their true relative motions, each perturbed
    (visual odometry); each point moves with its first camera."""
    n = len(street.cameras)
    step = min(1.0, np.sqrt(DRIFT_CAMERAS / n))
    to_world = np.zeros((n, 4, 4))
    to_world[:, :3, :3] = np.swapaxes(street.rotations, 1, 2)
    to_world[:, :3, 3] = -np.einsum("nji,nj->ni", street.rotations, street.translations)
    to_world[:, 3, 3] = 1.0
    motion = np.linalg.inv(to_world[:-1]) @ to_world[1:]
    turn = Rotation.from_rotvec(step * DRIFT_ROTATION * rng.standard_normal((n - 1, 3)))
    rotations = Rotation.from_matrix(motion[:, :3, :3]) * turn
    shifts = motion[:, :3, 3] + step * DRIFT_TRANSLATION * rng.standard_normal((n - 1, 3))
    drifted = _compose(rotations, shifts, to_world[0])
    drift = drifted @ np.linalg.inv(to_world)  # world -> world, camera by camera
    noise = Rotation.from_rotvec(PERTURB_ROTATION * rng.standard_normal((n, 3))).as_matrix()
    rotations = noise @ np.swapaxes(drifted[:, :3, :3], 1, 2)
    centres = drifted[:, :3, 3] + PERTURB_TRANSLATION * rng.standard_normal((n, 3))
    cameras = street.cameras.copy()
    cameras[:, :3] = Rotation.from_matrix(rotations).as_rotvec()
    cameras[:, 3:6] = -np.einsum("nij,nj->ni", rotations, centres)
    cameras[:, 6] *= 1.0 + PERTURB_FOCAL * rng.standard_normal(n)
    cameras[:, 7:9] += np.array(PERTURB_DISTORTION) * rng.standard_normal((n, 2))
    moved = np.einsum("nij,nj->ni", drift[first, :3, :3], points) + drift[first, :3, 3]
    return cameras, moved + PERTURB_POINT * rng.standard_normal(points.shape)


def bal_problem(
    cameras: int,
    points: int,
    *,
    seed: int = 0,
    noise: float = 1.0,
    outliers: float = 0.01,
    perturb: bool = True,
) -> BalProblem:
    """A synthetic BAL problem of `cameras` cameras and `points` points (the observations
    follow from visibility: 3-20 a point, ~10 on average). `noise`: the pixel noise's
    standard deviation; `outliers`: the fraction of observations moved 10-40 px in a random
    direction; `perturb`: whether the problem's cameras and points are the truth drifted
    and perturbed (the initial guess) or the truth itself."""
    if cameras < VIEWS[0]:
        raise ValueError(f"bal_problem: cameras must be >= {VIEWS[0]}, got {cameras}")
    if points < 1:
        raise ValueError(f"bal_problem: points must be >= 1, got {points}")
    if not (noise >= 0 and 0 <= outliers <= 1):
        raise ValueError(
            f"bal_problem: noise must be >= 0 and outliers in [0, 1], got {noise}, {outliers}"
        )
    rngs = _streams(seed, 6)
    street, truth_points, camera_index, point_index = _scene(cameras, points, rngs)
    observations, _ = project(
        street.cameras[camera_index], street.rotations[camera_index], truth_points[point_index]
    )
    k = len(observations)
    observations += noise * rngs[3].standard_normal((k, 2))
    wrong = rngs[4].random(k) < outliers
    angle = rngs[4].uniform(0.0, 2 * np.pi, int(wrong.sum()))
    radius = rngs[4].uniform(*OUTLIER_PIXELS, len(angle))
    observations[wrong] += radius[:, None] * np.stack([np.cos(angle), np.sin(angle)], -1)
    initial_cameras, initial_points = street.cameras, truth_points
    if perturb:
        first = np.full(points, cameras)
        np.minimum.at(first, point_index, camera_index)
        initial_cameras, initial_points = _drifted(street, truth_points, first, rngs[5])
    return BalProblem(
        camera_index, point_index, observations, initial_cameras, initial_points,
        f"<synthetic BAL: {cameras} cameras, {points} points, seed {seed}>",
    )  # fmt: skip


# --- pose graphs ---------------------------------------------------------------------------


def _helix(poses: int, ring: int, rng: np.random.Generator):
    """The true poses: positions (n, 3) and body-to-world rotations (a SciPy Rotation)."""
    i = np.arange(poses)
    angle = 2 * np.pi * i / ring
    radius = ring * 1.0 / (2 * np.pi)
    rise = 2.0 / ring  # two metres a ring
    positions = np.stack([radius * np.cos(angle), radius * np.sin(angle), rise * i], -1)
    heading = Rotation.from_euler("z", (angle + np.pi / 2)[:, None])
    tilt = Rotation.from_rotvec(0.02 * rng.standard_normal((poses, 3)) * [1, 1, 0])
    return positions, heading * tilt


def _compose(rotations: Rotation, translations: np.ndarray, first: np.ndarray) -> np.ndarray:
    """World poses (n + 1, 4, 4) of a chain of relative poses, from `first` (4, 4): the
    prefix products by doubling (log2 n batched passes, no loop over poses)."""
    n = len(translations)
    chain = np.zeros((n + 1, 4, 4))
    chain[:, 3, 3] = 1.0
    chain[0] = first
    chain[1:, :3, :3] = rotations.as_matrix()
    chain[1:, :3, 3] = translations
    step = 1
    while step <= n:
        chain[step:] = chain[:-step] @ chain[step:]
        step *= 2
    return chain


def pose_graph(
    poses: int,
    *,
    seed: int = 0,
    ring: int = 100,
    closures: float = 0.5,
    sigma_translation: float = 0.05,
    sigma_rotation: float = 0.01,
    noise: bool = True,
    initial: str = "odometry",
) -> G2oGraph:
    """A synthetic SE(3) pose graph of `poses` vertices (the module's docstring). `noise`:
    whether the measurements are perturbed (their information is the same either way);
    `initial`: "odometry" or "truth" for the vertices."""
    if poses < 2:
        raise ValueError(f"pose_graph: poses must be >= 2, got {poses}")
    if ring < 3:
        raise ValueError(f"pose_graph: ring must be >= 3, got {ring}")
    if initial not in ("odometry", "truth"):
        raise ValueError(f"pose_graph: initial must be 'odometry' or 'truth', got {initial!r}")
    rngs = _streams(seed, 4)
    positions, rotations = _helix(poses, ring, rngs[0])
    odometry = np.stack([np.arange(poses - 1), np.arange(1, poses)], -1)
    above = np.arange(max(poses - ring, 0))
    loops = above[rngs[1].random(len(above)) < closures]
    edges = np.concatenate([odometry, np.stack([loops, loops + ring], -1)])
    i, j = edges[:, 0], edges[:, 1]
    relative_rotation = rotations[i].inv() * rotations[j]
    relative_translation = rotations[i].inv().apply(positions[j] - positions[i])
    m = len(edges)
    scale = 1.0 if noise else 0.0
    turn = Rotation.from_rotvec(scale * sigma_rotation * rngs[2].standard_normal((m, 3)))
    measured_rotation = relative_rotation * turn
    shift = scale * sigma_translation * rngs[3].standard_normal((m, 3))
    measured_translation = relative_translation + shift
    information = np.diag([sigma_translation**-2] * 3 + [sigma_rotation**-2] * 3)
    if initial == "truth":
        vertex_positions, vertex_rotations = positions, rotations
    else:
        first = np.eye(4)
        first[:3, :3], first[:3, 3] = rotations[0].as_matrix(), positions[0]
        chain = _compose(measured_rotation[: poses - 1], measured_translation[: poses - 1], first)
        vertex_positions = chain[:, :3, 3]
        vertex_rotations = Rotation.from_matrix(chain[:, :3, :3])
    return G2oGraph(
        dim=3,
        vertex_ids=np.arange(poses, dtype=np.int64),
        vertex_positions=vertex_positions,
        vertex_rotations=_wxyz(vertex_rotations),
        edge_ids=edges.astype(np.int64),
        edge_positions=measured_translation,
        edge_rotations=_wxyz(measured_rotation),
        edge_information=np.broadcast_to(information, (m, 6, 6)).copy(),
        source=f"<synthetic pose graph: {poses} poses, seed {seed}>",
    )


def _wxyz(rotations: Rotation) -> np.ndarray:
    return rotations.as_quat()[:, [3, 0, 1, 2]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    kinds = parser.add_subparsers(dest="kind", required=True)
    bal = kinds.add_parser("bal", help="a BAL file")
    bal.add_argument("cameras", type=int)
    bal.add_argument("points", type=int)
    graph = kinds.add_parser("pose-graph", help="a g2o file")
    graph.add_argument("poses", type=int)
    for sub in (bal, graph):
        sub.add_argument("out")
        sub.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.kind == "bal":
        problem = bal_problem(args.cameras, args.points, seed=args.seed)
        write_bal(problem, args.out)
        print(f"{args.out}: {len(problem.observations)} observations")
    else:
        written = pose_graph(args.poses, seed=args.seed)
        write_g2o(written, args.out)
        print(f"{args.out}: {len(written.edge_ids)} edges")


if __name__ == "__main__":
    main()
