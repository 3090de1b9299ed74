"""The benchmarks' synthetic problems (benchmarks/synthetic.py): a BAL problem's
observations are its cameras' reprojections of its points, each point seen by 3-20
cameras that have it in front and in view; a pose graph's edges are its poses' relative
motions. Checked against independent formulas: BAL's camera model here with SciPy's
Rodrigues, the pose graph's motions with xform's SE3 (the generator uses neither)."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import synthetic  # noqa: E402
from xform import SE3  # noqa: E402
from xform.optim.bal import read_bal, write_bal  # noqa: E402
from xform.optim.g2o import read_g2o, write_g2o  # noqa: E402


def camera_points(bal):
    """Each observation's point in its camera's frame: `R(w) X + t` (SciPy's Rodrigues)."""
    cameras = bal.cameras[bal.camera_index]
    rotated = Rotation.from_rotvec(cameras[:, :3]).apply(bal.points[bal.point_index])
    return rotated + cameras[:, 3:6], cameras


def reprojections(bal):
    """BAL's prediction of every observation (`../shared/data/bal/README.md`)."""
    P, cameras = camera_points(bal)
    p = -P[:, :2] / P[:, 2:3]
    r2 = (p * p).sum(1, keepdims=True)
    return cameras[:, 6:7] * (1 + cameras[:, 7:8] * r2 + cameras[:, 8:9] * r2 * r2) * p


@pytest.fixture(scope="module")
def truth():
    return synthetic.bal_problem(30, 1500, seed=7, noise=0.0, outliers=0.0, perturb=False)


def test_noise_free_observations_are_the_reprojections(truth):
    predicted = reprojections(truth)
    scale = np.abs(truth.observations).max()
    assert np.abs(predicted - truth.observations).max() <= 1e-12 * scale
    assert 100 < scale < 1000  # pixels about the image's centre, f ~ 500


def test_every_observation_is_in_front_and_in_view_and_counts_are_3_to_20(truth):
    P, _ = camera_points(truth)
    assert (P[:, 2] < -synthetic.NEAR).all()
    tangent = np.abs(P[:, :2] / P[:, 2:3])
    assert (tangent < synthetic.TAN_HALF_FOV).all()
    views = np.bincount(truth.point_index, minlength=len(truth.points))
    assert views.min() >= 3 and views.max() <= 20
    pairs = truth.camera_index * len(truth.points) + truth.point_index
    assert len(np.unique(pairs)) == len(pairs)  # no camera sees a point twice
    assert (np.diff(truth.point_index) >= 0).all()  # ordered by point, as BAL files are


@pytest.mark.parametrize("cameras, seed", [(20, 3), (60, 4), (400, 5)])
def test_the_candidate_window_misses_no_camera(cameras, seed):
    """Visibility is tested on the cameras near each point along the street: the same
    cameras as testing every camera."""
    rngs = synthetic._streams(seed, 6)
    street = synthetic._street(cameras, rngs[0])
    points, along = synthetic._candidate_points(3000, cameras, rngs[1])
    near, seen_near = synthetic.visible_cameras(street, points, along)
    every, seen_every = synthetic.visible_cameras(street, points, along, window=cameras)
    assert seen_near.sum() > 10_000
    assert (seen_near.sum(1) == seen_every.sum(1)).all()
    for k in range(len(points)):
        assert set(near[k][seen_near[k]]) == set(every[k][seen_every[k]])


def test_a_point_seen_by_more_than_20_keeps_20_of_them_at_random():
    visible = np.ones((50, 33), bool)
    visible[:, ::7] = False
    kept = synthetic._at_most(visible, 20, np.random.default_rng(0))
    assert (kept.sum(1) == 20).all() and not (kept & ~visible).any()
    assert len({tuple(row) for row in kept}) > 1


def test_noise_outliers_and_the_initial_guess(truth):
    noisy = synthetic.bal_problem(30, 1500, seed=7, outliers=0.05)
    assert (noisy.camera_index == truth.camera_index).all()
    assert (noisy.point_index == truth.point_index).all()
    error = np.linalg.norm(noisy.observations - truth.observations, axis=1)
    inliers = error < 6.0
    assert 0.03 < 1 - inliers.mean() < 0.07
    assert 0.95 < np.sqrt((error[inliers] ** 2).mean() / 2) < 1.05  # 1 px a coordinate
    assert np.abs(noisy.cameras[:, 6] / truth.cameras[:, 6] - 1).max() < 0.06


def in_first_camera(bal):
    """Each point in the frame of the first camera that sees it."""
    first = np.full(len(bal.points), len(bal.cameras))
    np.minimum.at(first, bal.point_index, bal.camera_index)
    cameras = bal.cameras[first]
    return Rotation.from_rotvec(cameras[:, :3]).apply(bal.points) + cameras[:, 3:6]


def centres(bal):
    rotations = Rotation.from_rotvec(bal.cameras[:, :3])
    return -rotations.inv().apply(bal.cameras[:, 3:6])


def test_the_initial_guess_drifts_as_odometry(truth):
    """The start is locally right (each point where its first camera saw it, to the noise
    of a few centimetres) and globally bent (the cameras drift from the truth, more
    along the street)."""
    start = synthetic.bal_problem(30, 1500, seed=7)
    local = np.linalg.norm(in_first_camera(start) - in_first_camera(truth), axis=1)
    assert np.median(local) < 0.06
    drift = np.linalg.norm(centres(start) - centres(truth), axis=1)
    assert drift[0] < 0.05 and np.median(drift[20:]) > 3 * np.median(local)
    assert np.median(np.linalg.norm(start.points - truth.points, axis=1)) > np.median(local)


def test_determinism_by_seed():
    a = synthetic.bal_problem(10, 300, seed=3)
    b = synthetic.bal_problem(10, 300, seed=3)
    c = synthetic.bal_problem(10, 300, seed=4)
    for field in ("camera_index", "point_index", "observations", "cameras", "points"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.points, c.points)


@pytest.mark.parametrize("cameras, points", [(3, 1), (8, 200), (100, 4000)])
def test_sizes(cameras, points):
    bal = synthetic.bal_problem(cameras, points, seed=1)
    assert bal.cameras.shape == (cameras, 9) and bal.points.shape == (points, 3)
    assert bal.observations.shape == (len(bal.camera_index), 2)
    assert len(bal.point_index) == len(bal.camera_index)
    assert set(np.unique(bal.point_index)) == set(range(points))
    assert bal.camera_index.min() >= 0 and bal.camera_index.max() < cameras
    if cameras >= 100:  # the street's middle: ~10 views a point, every camera used
        assert 8 < len(bal.observations) / points < 12
        assert np.bincount(bal.camera_index, minlength=cameras).min() > 50


def test_bal_file_round_trip(tmp_path):
    bal = synthetic.bal_problem(5, 40, seed=2)
    write_bal(bal, tmp_path / "p.txt")
    back = read_bal(tmp_path / "p.txt")
    for field in ("camera_index", "point_index", "observations", "cameras", "points"):
        assert np.array_equal(getattr(back, field), getattr(bal, field))


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="cameras must be >= 3, got 2"):
        synthetic.bal_problem(2, 10)
    with pytest.raises(ValueError, match="points must be >= 1, got 0"):
        synthetic.bal_problem(5, 0)
    with pytest.raises(ValueError, match="outliers in"):
        synthetic.bal_problem(5, 10, outliers=1.5)
    with pytest.raises(ValueError, match="poses must be >= 2, got 1"):
        synthetic.pose_graph(1)
    with pytest.raises(ValueError, match="initial must be"):
        synthetic.pose_graph(10, initial="chordal")


def poses_of(graph):
    return SE3(graph.vertex_positions, graph.vertex_rotations)


def test_pose_graph_edges_are_the_truth_at_zero_noise():
    graph = synthetic.pose_graph(1200, seed=5, ring=40, noise=False, initial="truth")
    odometry = synthetic.pose_graph(1200, seed=5, ring=40, noise=False)
    poses = poses_of(graph)
    i, j = graph.edge_ids.T
    relative = poses[i].inverse() @ poses[j]
    measured = SE3(graph.edge_positions, graph.edge_rotations)
    assert np.abs(relative.position - graph.edge_positions).max() < 1e-12
    assert np.abs((relative.inverse() @ measured).log()).max() < 1e-12
    # the odometry composed from the first pose is the truth, to rounding
    assert np.abs(poses_of(odometry).position - graph.vertex_positions).max() < 1e-9
    loops = graph.edge_ids[1199:]
    assert (graph.edge_ids[:1199] == np.stack([np.arange(1199), np.arange(1, 1200)], 1)).all()
    assert (loops[:, 1] - loops[:, 0] == 40).all() and 0.4 < len(loops) / 1160 < 0.6
    # neighbours on the helix and across a ring are near: 1 m and 2 m apart
    steps = np.linalg.norm(relative.position, axis=1)
    assert np.allclose(steps[:1199], steps[0]) and (steps[1199:] < 3).all()


def test_pose_graph_noise_matches_its_information():
    graph = synthetic.pose_graph(3000, seed=6, initial="truth")
    poses, measured = poses_of(graph), SE3(graph.edge_positions, graph.edge_rotations)
    i, j = graph.edge_ids.T
    error = (measured.inverse() @ poses[i].inverse() @ poses[j]).log()  # [rho, omega]
    whitened = np.einsum("kab,kb->ka", np.linalg.cholesky(graph.edge_information), error)
    assert np.allclose(whitened.std(axis=0), 1.0, atol=0.05)
    assert np.allclose(graph.edge_information[0], np.diag([400.0] * 3 + [1e4] * 3))


def test_pose_graph_file_round_trip(tmp_path):
    graph = synthetic.pose_graph(300, seed=1, ring=30)
    write_g2o(graph, tmp_path / "g.g2o")
    back = read_g2o(tmp_path / "g.g2o")
    for field in ("vertex_ids", "vertex_positions", "vertex_rotations", "edge_ids",
                  "edge_positions", "edge_rotations", "edge_information"):  # fmt: skip
        assert np.array_equal(getattr(back, field), getattr(graph, field)), field
