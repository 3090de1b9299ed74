"""interop_examples/pose_graph.py: g2o reading and writing, the edges' analytic Jacobians
against forward-mode autodiff, bad input, and the optimum against GTSAM's on real graphs
in both frameworks."""

import dataclasses
import gc
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

from xform import SE2, SE3, manifold, to_numpy

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "pose_graphs"  # the small graphs shipped with the repository
SHARED = REPO.parent / "shared" / "data" / "pose_graphs"  # all of the benchmark's
sys.path.insert(0, str(REPO / "interop_examples"))

import pose_graph  # noqa: E402
from posegraph import groups  # noqa: E402
from posegraph.framework import array_in, element_in, framework  # noqa: E402
from posegraph.initial import chordal, chordal_sparse, odometry  # noqa: E402
from posegraph.optimise import edge_jacobians, edge_residuals_and_jacobians  # noqa: E402
from posegraph.problem import make_problem  # noqa: E402

from xform.optim._sparse import available_solvers, block_pattern, make_solver  # noqa: E402
from xform.optim.g2o import G2oGraph, format_g2o, read_g2o, write_g2o  # noqa: E402

needs_shared = pytest.mark.skipif(not SHARED.exists(), reason=f"no pose-graph data at {SHARED}")


def random_quaternions(rng, count):
    q = rng.normal(size=(count, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def random_information(rng, count, d):
    a = rng.normal(size=(count, d, d))
    return a @ np.swapaxes(a, 1, 2) + d * np.eye(d)


def random_graph(rng, dim=3, vertices=12, extra_edges=10) -> G2oGraph:
    """A connected random graph (as a file holds it): a chain plus random loop closures."""
    i = np.concatenate([np.arange(vertices - 1), rng.integers(0, vertices, extra_edges)])
    j = np.concatenate([np.arange(1, vertices), rng.integers(0, vertices, extra_edges)])
    j = np.where(i == j, (j + 1) % vertices, j)
    m = len(i)

    def rotations(count):
        if dim == 3:
            return random_quaternions(rng, count)
        return rng.uniform(-np.pi, np.pi, count)

    return G2oGraph(
        dim=dim,
        vertex_ids=np.arange(vertices),
        vertex_positions=rng.normal(size=(vertices, dim)),
        vertex_rotations=rotations(vertices),
        edge_ids=np.stack([i, j], axis=1),
        edge_positions=rng.normal(size=(m, dim)),
        edge_rotations=rotations(m),
        edge_information=random_information(rng, m, 6 if dim == 3 else 3),
    )


# --- the Jacobians ---------------------------------------------------------------------


def random_poses(rng, group, count):
    """Random poses over NumPy: normal positions, uniform rotations."""
    rotations = group.sample_uniform((count,), seed=rng).rotation()
    return group.from_rotation_and_translation(rotations, rng.normal(size=(count, group.space_dim)))


def edge_cases(rng, group, count=64):
    """Poses T (2 count: the edges' T_i, then their T_j) and measurements Z (count) whose
    errors E = Z^-1 T_i^-1 T_j are random (uniform rotations), the identity, tiny (1e-9),
    and a rotation near pi (pi - 1e-3)."""
    d = group.tangent_dim
    poses = random_poses(rng, group, 2 * count)
    error = random_poses(rng, group, count).log()
    error[:3] = 0.0
    error[3:6] = 1e-9 * rng.normal(size=(3, d))
    error[6:9] = rng.normal(size=(3, d))
    error[6:9, group.space_dim :] = 0.0
    error[6:9, -1] = np.pi - 1e-3
    # Z = (T_i^-1 T_j) E^-1, so that Z^-1 T_i^-1 T_j = E
    measurements = poses[:count].inverse() @ poses[count:] @ group.exp(error).inverse()
    return poses, measurements


def check_against_forward_mode(group, cases, arange, vmap, jacfwd, close):
    """The analytic residuals and Jacobians of all edges at once against forward-mode
    autodiff of log(Z^-1 (T_i exp(delta_i))^-1 T_j exp(delta_j)) at delta = 0, one edge at a
    time under vmap."""
    poses, measurements = cases
    z_inverse = measurements.inverse()
    i = arange(len(measurements))
    j = i + len(i)
    residual, jacobian_i, jacobian_j = edge_residuals_and_jacobians(poses[i], poses[j], z_inverse)

    def error(delta_i, delta_j, t_i, t_j, z_inverse):
        moved_i, moved_j = manifold.rplus(t_i, delta_i), manifold.rplus(t_j, delta_j)
        return (z_inverse @ (moved_i.inverse() @ moved_j)).log()

    zero = residual * 0.0
    arguments = (zero, zero, poses[i], poses[j], z_inverse)
    expected_i, expected_j = vmap(jacfwd(error, argnums=(0, 1)))(*arguments)
    close(residual, error(*arguments))
    close(jacobian_i, expected_i)
    close(jacobian_j, expected_j)


GROUPS = pytest.mark.parametrize("group", [SE3, SE2], ids=lambda g: g.__name__)


@GROUPS
def test_jacobians_match_jax_jacfwd(rng, group):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    check_against_forward_mode(
        group,
        tuple(c.to_jax() for c in edge_cases(rng, group)),
        jnp.arange,
        jax.vmap,
        jax.jacfwd,
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9),
    )


@GROUPS
def test_jacobians_match_torch_jacfwd(rng, group):
    torch = pytest.importorskip("torch")

    check_against_forward_mode(
        group,
        tuple(c.to_torch() for c in edge_cases(rng, group)),
        torch.arange,
        torch.func.vmap,
        torch.func.jacfwd,
        lambda a, b: torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9),
    )


@GROUPS
@pytest.mark.parametrize("framework_name", ["numpy", "torch", "jax"])
def test_one_kernel_edges_match_the_group_methods_whitened(rng, group, framework_name):
    """The example's one-kernel edges (`edges.py`, what the solver calls) against
    `edge_residuals_and_jacobians` times the whitening U, at the edge cases (the identity, a
    tiny error, a rotation near pi, random ones) and with a random upper-triangular U."""
    if framework_name != "numpy":
        pytest.importorskip(framework_name)
    fw = framework(framework_name)
    poses, measurements = edge_cases(rng, group)
    count, d = len(measurements), group.tangent_dim
    whitening = np.triu(rng.normal(size=(count, d, d))) + 3.0 * np.eye(d)
    i, j = np.arange(count), np.arange(count, 2 * count)
    poses_i, poses_j = element_in(fw, poses[i]), element_in(fw, poses[j])
    z_inverse = element_in(fw, measurements).inverse()
    residual, (jacobian_i, jacobian_j) = edge_jacobians(
        poses_i, poses_j, z_inverse, array_in(fw, whitening)
    )
    expected = edge_residuals_and_jacobians(*(g.to_numpy() for g in (poses_i, poses_j, z_inverse)))
    np.testing.assert_allclose(
        to_numpy(residual), (whitening @ expected[0][..., None])[..., 0], rtol=1e-12, atol=1e-12
    )
    for got, want in zip((jacobian_i, jacobian_j), expected[1:]):
        np.testing.assert_allclose(to_numpy(got), whitening @ want, rtol=1e-12, atol=1e-12)


def test_nearest_rotations_in_2d(rng):
    """The chordal start's closed-form projection in 2D against every angle of a fine grid,
    and, where det M > 0, against special_procrustes of diag(M, 1) (where det M < 0 the
    nearest rotation of diag(M, 1) turns its third axis too); a matrix with no rotation part
    (zero, or a reflection) gets the identity."""
    import xform

    matrices = rng.normal(size=(300, 2, 2))
    nearest = groups.nearest_rotations(framework("numpy"), SE2, matrices).as_matrix()
    embedded = np.zeros((300, 3, 3))
    embedded[:, :2, :2], embedded[:, 2, 2] = matrices, 1.0
    positive = np.linalg.det(matrices) > 0
    np.testing.assert_allclose(
        nearest[positive],
        xform.special_procrustes(embedded[positive])[:, :2, :2],
        rtol=1e-12,
        atol=1e-12,
    )
    grid = SE2.exp(np.linspace(-np.pi, np.pi, 20001)[:, None] * [0, 0, 1]).rotation().as_matrix()
    on_grid = np.linalg.norm(matrices[:, None] - grid[None], axis=(2, 3)).min(axis=1)
    assert np.all(np.linalg.norm(matrices - nearest, axis=(1, 2)) <= on_grid + 1e-12)
    flat = np.array([np.zeros((2, 2)), [[1.0, 0.0], [0.0, -1.0]], [[0.0, 2.0], [2.0, 0.0]]])
    identity = groups.nearest_rotations(framework("numpy"), SE2, flat).as_matrix()
    np.testing.assert_array_equal(identity, np.broadcast_to(np.eye(2), (3, 2, 2)))
    # the nearest rotation of s M is that of M, for any scale s
    scales = 10.0 ** np.array([-310.0, -170.0, -160.0, 160.0, 200.0, 300.0])
    for s in scales:
        scaled = groups.nearest_rotations(framework("numpy"), SE2, s * matrices[:20])
        np.testing.assert_allclose(scaled.as_matrix(), nearest[:20], rtol=1e-12, atol=1e-12)
    # a NaN stays NaN (a failed solve upstream shows), where a zero gives the identity
    broken = groups.nearest_rotations(framework("numpy"), SE2, np.full((1, 2, 2), np.nan))
    assert np.isnan(broken.as_matrix()).all()
    # in each framework, eagerly the same closed form on NumPy (subnormal scales included);
    # traced inside jax.jit, XLA's arithmetic
    tiny = 1e-310 * matrices[:20]
    for name in ("torch", "jax"):
        pytest.importorskip(name)
        fw = framework(name)
        for m, expected in ((matrices, nearest), (tiny, nearest[:20])):
            found = groups.nearest_rotations(fw, SE2, array_in(fw, m))
            np.testing.assert_allclose(
                to_numpy(found.as_matrix()), expected, rtol=1e-12, atol=1e-12
            )
    import jax

    fw = framework("jax")
    traced = jax.jit(lambda m: groups.nearest_rotations(fw, SE2, m).as_matrix())
    np.testing.assert_allclose(traced(matrices), nearest, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_trace_of_inverse_in_closed_form(rng, d):
    """The chordal weights' tr(A^-1) against NumPy's inverse: blocks scaled by 10^u, u in
    [-300, 300] (no overflow), with diagonals apart by up to 1e8, and rotated ones with
    eigenvalues down to 1e-8 and 1e-12 of the largest (where the closed form would lose
    digits); not finite for a singular block."""
    from posegraph.initial import _trace_of_inverse

    count = 400
    a = rng.normal(size=(count, d, d))
    well = a @ np.swapaxes(a, 1, 2) + 0.1 * np.eye(d)
    spread = 10.0 ** rng.uniform(-4, 4, size=(count, d))
    well = well * np.sqrt(spread[:, :, None] * spread[:, None, :])
    rotations, _ = np.linalg.qr(rng.normal(size=(count, d, d)))
    eigenvalues = 10.0 ** -rng.uniform(0, 12, size=(count, d))
    eigenvalues[:, 0] = 1.0
    poor = rotations @ (eigenvalues[:, :, None] * np.swapaxes(rotations, 1, 2))
    for blocks in (well, poor):
        blocks = blocks * 10.0 ** rng.uniform(-300, 300, size=(count, 1, 1))
        expected = np.trace(np.linalg.inv(blocks), axis1=1, axis2=2)
        with np.errstate(over="ignore"):  # a trace beyond float64's range is inf in both
            np.testing.assert_allclose(_trace_of_inverse(blocks), expected, rtol=1e-6)
    singular = np.ones((1, d, d)) if d > 1 else np.zeros((1, 1, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        assert not np.isfinite(_trace_of_inverse(singular)).any()


# --- the normal equations and their solvers ------------------------------------------------


def test_block_assembly_matches_dense_normal_equations(rng):
    """H assembled from the edges' blocks (vertex 0 fixed) against J^T J built densely."""
    n, d, m = 9, 6, 20
    i = rng.integers(0, n, m)
    j = (i + rng.integers(1, n, m)) % n
    j_i, j_j = rng.normal(size=(m, d, d)), rng.normal(size=(m, d, d))
    dense_j = np.zeros((m * d, n * d))
    for e in range(m):
        dense_j[e * d : e * d + d, i[e] * d : i[e] * d + d] += j_i[e]
        dense_j[e * d : e * d + d, j[e] * d : j[e] * d + d] += j_j[e]
    expected_h = (dense_j.T @ dense_j)[d:, d:]
    jt_i, jt_j = np.swapaxes(j_i, 1, 2), np.swapaxes(j_j, 1, 2)
    pattern, slots = block_pattern(n - 1, d, i - 1, j - 1)
    values = pattern.assemble(
        slots, np.concatenate([(jt_i @ j_i).ravel(), (jt_i @ j_j).ravel(), (jt_j @ j_j).ravel()])
    )
    np.testing.assert_allclose(pattern.full_matrix(values).toarray(), expected_h, atol=1e-10)
    assert np.all(pattern.matrix(values).tocoo().row >= pattern.matrix(values).tocoo().col)


def test_block_patterns_are_kept_per_graph(rng):
    """A second call with the same edges returns the kept pattern and slots, the slots
    read-only (a caller writing to them would change every later solve); other edges,
    another size of block or another count of blocks each get their own; the kept pattern
    is the graph's."""
    import scipy.sparse as sparse

    n, m = 12, 30
    i = rng.integers(0, n, m)
    j = (i + rng.integers(1, n, m)) % n
    pattern, slots = block_pattern(n - 1, 3, i - 1, j - 1)
    again, again_slots = block_pattern(n - 1, 3, (i - 1).copy(), (j - 1).copy())
    assert again is pattern and again_slots is slots
    with pytest.raises(ValueError, match="read-only"):
        slots[0] = 0
    moved = j.copy()
    moved[0] = (moved[0] + 1) % n
    for other in (
        block_pattern(n - 1, 3, i - 1, moved - 1),
        block_pattern(n - 1, 1, i - 1, j - 1),
        block_pattern(n, 3, i - 1, j - 1),
    ):
        assert other[0] is not pattern
    # the kept d = 1 pattern: the graph's own, vertex 0 left out
    d1_pattern, d1_slots = block_pattern(n - 1, 1, i - 1, j - 1)
    expected = sparse.coo_matrix(
        (np.ones(3 * m), (np.concatenate([i, i, j]), np.concatenate([i, j, j]))),
        shape=(n, n),
    )
    assert d1_pattern.size == n - 1 and len(d1_slots) == 3 * m
    lower = d1_pattern.matrix(np.ones(d1_pattern.nnz)).toarray() != 0
    fill = expected.toarray()[1:, 1:] + expected.toarray()[1:, 1:].T != 0
    assert np.array_equal(lower, np.tril(fill | np.eye(n - 1, dtype=bool)))


def test_a_large_graphs_block_pattern_is_not_kept(rng, monkeypatch):
    """Past the kept patterns' `largest` slots a pattern is built afresh each time (and its
    slots stay writable: nothing shares them), so that the kept ones hold bounded memory."""
    from xform.optim import _sparse

    i = np.arange(40)
    j = (i + 1) % 41
    monkeypatch.setattr(_sparse._BLOCK_PATTERNS, "largest", 3 * len(i) * 9 - 1)
    first, first_slots = block_pattern(40, 3, i - 1, j - 1)
    second, second_slots = block_pattern(40, 3, i - 1, j - 1)
    assert second is not first and second_slots.flags.writeable
    np.testing.assert_array_equal(first_slots, second_slots)
    monkeypatch.setattr(_sparse._BLOCK_PATTERNS, "largest", 3 * len(i) * 9)
    assert block_pattern(40, 3, i - 1, j - 1)[0] is block_pattern(40, 3, i - 1, j - 1)[0]


@pytest.mark.parametrize("solver", available_solvers())
def test_solvers(rng, solver):
    n, d = 30, 6
    i = np.arange(n - 1)
    j = i + 1
    pattern, slots = block_pattern(
        n - 1, d, np.concatenate([i, [0, 5]]) - 1, np.concatenate([j, [n - 1, 20]]) - 1
    )
    blocks = random_information(rng, n + 1, d)

    def assemble(a, b, c):
        return pattern.assemble(slots, np.concatenate([a.ravel(), b.ravel(), c.ravel()]))

    values = assemble(2 * blocks, -0.5 * blocks, 2 * blocks)
    rhs = rng.normal(size=(pattern.size, 2))
    x = make_solver(pattern, solver)(values, rhs)
    np.testing.assert_allclose(pattern.full_matrix(values) @ x, rhs, atol=1e-9)
    if solver not in ("superlu",):  # an LU does not see that a matrix is indefinite
        indefinite = assemble(blocks, -2 * blocks, blocks)
        with pytest.raises(ArithmeticError):
            make_solver(pattern, solver)(indefinite, rhs)


# --- reading and writing -------------------------------------------------------------------


def assert_same_graph(a: G2oGraph, b: G2oGraph):
    assert a.dim == b.dim
    for name in (
        "vertex_ids",
        "vertex_positions",
        "vertex_rotations",
        "edge_ids",
        "edge_positions",
        "edge_rotations",
        "edge_information",
    ):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_round_trip_is_exact(rng, tmp_path):
    graph = random_graph(rng)
    graph.vertex_positions[0] = [1 / 3, np.pi * 1e-300, -(2.0**-1074)]  # 17 digits, subnormal
    path = tmp_path / "random.g2o"
    write_g2o(graph, path)
    assert_same_graph(read_g2o(path), graph)
    graph_2d = random_graph(rng, dim=2)
    write_g2o(graph_2d, path)
    assert_same_graph(read_g2o(path), graph_2d)


@pytest.mark.parametrize("name", ["smallGrid3D", "MIT"])
def test_round_trip_of_a_file(tmp_path, name):
    graph = read_g2o(DATA / f"{name}.g2o")
    write_g2o(graph, tmp_path / "copy.g2o")
    assert_same_graph(read_g2o(tmp_path / "copy.g2o"), graph)


def test_other_tags_are_skipped_and_counted(tmp_path):
    text = (
        "VERTEX_SE2 0 0 0 0\nVERTEX_SE2 1 1 0 0\nFIX 0\nVERTEX_XY 7 1 2\n"
        "EDGE_SE2 0 1 1 0 0 1 0 0 1 0 1\nEDGE_SE2_XY 0 7 1 2 1 0 1\nVERTEX_XY 8 1 2\n"
    )
    path = tmp_path / "tags.g2o"
    path.write_text(text)
    graph = read_g2o(path)
    assert dict(graph.skipped) == {"FIX": 1, "VERTEX_XY": 2, "EDGE_SE2_XY": 1}
    assert len(graph.vertex_ids) == 2 and len(graph.edge_ids) == 1


# --- bad input -----------------------------------------------------------------------------


def edge_3d(i="0", j="1", position="1 0 0", quaternion="0 0 0 1", diagonal="1"):
    upper = " ".join(diagonal if r == c else "0" for r in range(6) for c in range(r, 6))
    return f"EDGE_SE3:QUAT {i} {j} {position} {quaternion} {upper}"


EDGE_3D = edge_3d()
GOOD_3D = ["VERTEX_SE3:QUAT 0 0 0 0 0 0 0 1", "VERTEX_SE3:QUAT 1 1 0 0 0 0 0 1", EDGE_3D]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (EDGE_3D.rsplit(" ", 1)[0], "wants 30 numbers after the tag, got 29"),
        (edge_3d(quaternion="0 0 x 1"), "not a number"),
        (edge_3d(j="1.5"), "must be integers"),
        (edge_3d(position="1 nan 0"), "not finite"),
        ("EDGE_SE2 0 1 1 0 0 1 0 0 1 0 1", "mixed"),
        ("VERTEX_SE3:QUAT 1 1 0 0 0 0 0 1", "vertex 1 defined twice"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    path = tmp_path / "bad.g2o"
    path.write_text("\n".join([*GOOD_3D, bad_line, EDGE_3D]) + "\n")
    with pytest.raises(ValueError, match=message) as error:
        read_g2o(path)
    assert f"{path}:4" in str(error.value)


@pytest.mark.parametrize(
    "edge, message",
    [
        (edge_3d(j="7"), "names vertex 7, which the file does not define"),
        (edge_3d(i="1"), "edge from vertex 1 to itself"),
        (edge_3d(diagonal="-1"), "not positive definite"),
        (edge_3d(quaternion="0 0 0 0"), "quaternion \\(0 0 0 0\\) is zero"),
    ],
)
def test_bad_edge_is_a_clear_error(tmp_path, edge, message):
    path = tmp_path / "bad.g2o"
    path.write_text("\n".join([*GOOD_3D, edge]) + "\n")
    with pytest.raises(ValueError, match=message) as error:
        make_problem(read_g2o(path), framework("numpy"))
    assert f"{path}:4" in str(error.value)


def test_disconnected_graph_is_a_clear_error(tmp_path):
    path = tmp_path / "two.g2o"
    lines = [
        *GOOD_3D,
        "VERTEX_SE3:QUAT 5 0 0 0 0 0 0 1",
        "VERTEX_SE3:QUAT 6 0 0 0 0 0 0 1",
        edge_3d("5", "6"),
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="not connected: 2 components; vertex 5 and 1 others"):
        make_problem(read_g2o(path), framework("numpy"))


def test_nothing_written_on_failure(tmp_path, capsys):
    bad = tmp_path / "bad.g2o"
    bad.write_text("\n".join([*GOOD_3D, edge_3d(j="7")]) + "\n")
    out = tmp_path / "out.g2o"
    assert pose_graph.main([str(bad), "--out", str(out)]) == 1
    assert "names vertex 7" in capsys.readouterr().err
    assert not out.exists()
    out.write_text("kept")
    assert pose_graph.main([str(bad), "--out", str(out)]) == 1
    assert out.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.g2o", "out.g2o"]


def test_failed_write_leaves_nothing(rng, tmp_path, monkeypatch):
    """A write that fails before the rename leaves no partial file, not even the
    temporary one, and the file it was to replace as it was."""
    import xform.optim.g2o

    def fail(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(xform.optim.g2o.os, "replace", fail)
    out = tmp_path / "out.g2o"
    with pytest.raises(OSError, match="disk full"):
        write_g2o(random_graph(rng), out)
    assert list(tmp_path.iterdir()) == []
    out.write_text("kept")
    with pytest.raises(OSError, match="disk full"):
        write_g2o(random_graph(rng), out)
    assert [p.name for p in tmp_path.iterdir()] == ["out.g2o"] and out.read_text() == "kept"


# --- initialisation ------------------------------------------------------------------------


def noiseless_graph(rng, dim=3, vertices=40, extra_edges=30) -> tuple[G2oGraph, tuple]:
    """A graph whose measurements are exactly the relative poses of random vertices, and
    those vertices as the group stores them (vertex 0 at the identity)."""
    fw = framework("numpy")
    graph = random_graph(rng, dim, vertices, extra_edges)
    graph.vertex_positions[0] = 0.0
    graph.vertex_rotations[0] = [1, 0, 0, 0] if dim == 3 else 0.0
    problem = make_problem(graph, fw)
    truth = problem.file_poses
    relative = truth[problem.i].inverse() @ truth[problem.j]
    graph.edge_positions, graph.edge_rotations = groups.to_file(fw, relative)
    return graph, truth


@pytest.mark.parametrize("dim", [3, 2])
@pytest.mark.parametrize("initialise", [chordal, chordal_sparse, odometry])
def test_initialisations_recover_noiseless_graph(rng, initialise, dim):
    fw = framework("numpy")
    graph, truth = noiseless_graph(rng, dim)
    poses = initialise(make_problem(graph, fw), fw)
    assert type(poses) is type(truth)
    np.testing.assert_allclose(poses.position, truth.position, atol=1e-9)
    # q and -q are one rotation
    stored = (lambda T: T.quaternion) if dim == 3 else (lambda T: T.unit_complex)
    np.testing.assert_allclose(np.abs((stored(poses) * stored(truth)).sum(-1)), 1.0, atol=1e-12)
    np.testing.assert_allclose(
        poses.rotation().as_matrix(), truth.rotation().as_matrix(), atol=1e-9
    )


# --- the optimum on real graphs, against GTSAM ---------------------------------------------

_GTSAM_BEST = {}


def gtsam_graph(path: Path, is_3d: bool):
    """GTSAM's factor graph of a g2o file with its prior on pose 0 (at the file's pose 0, or
    the identity), and its initial values."""
    gtsam = pytest.importorskip("gtsam")
    graph, initial = gtsam.readG2o(str(path), is_3d)
    if is_3d:
        anchor = initial.atPose3(0) if initial.exists(0) else gtsam.Pose3()
        prior = gtsam.PriorFactorPose3(0, anchor, gtsam.noiseModel.Isotropic.Sigma(6, 1e-4))
    else:
        anchor = initial.atPose2(0) if initial.exists(0) else gtsam.Pose2()
        prior = gtsam.PriorFactorPose2(0, anchor, gtsam.noiseModel.Isotropic.Sigma(3, 1e-4))
    graph.add(prior)
    return graph, initial


def gtsam_chordal_start(path: Path, is_3d: bool):
    """GTSAM's chordal start: InitializePose3 in 3D; in 2D LAGO, which refuses the files'
    full noise models, on the same edges with the diagonals of their information."""
    gtsam = pytest.importorskip("gtsam")
    graph, _ = gtsam_graph(path, is_3d)
    if is_3d:
        return gtsam.InitializePose3.initialize(graph)
    diagonal = gtsam.NonlinearFactorGraph()
    parsed = read_g2o(path)
    for (i, j), (x, y), theta, information in zip(
        parsed.edge_ids, parsed.edge_positions, parsed.edge_rotations, parsed.edge_information
    ):
        noise = gtsam.noiseModel.Diagonal.Precisions(np.diag(information))
        diagonal.add(gtsam.BetweenFactorPose2(int(i), int(j), gtsam.Pose2(x, y, theta), noise))
    first = int(min(parsed.edge_ids.min(), *parsed.vertex_ids[:1]))
    diagonal.add(
        gtsam.PriorFactorPose2(first, gtsam.Pose2(), gtsam.noiseModel.Isotropic.Sigma(3, 1e-4))
    )
    return gtsam.lago.initialize(diagonal)


def gtsam_best(path: Path, is_3d: bool) -> float:
    """The lower of GTSAM's LM errors from the file's vertices (odometry for a file without)
    and from its chordal start (InitializePose3; LAGO in 2D), run to a relative decrease
    of 1e-12."""
    if path not in _GTSAM_BEST:
        gtsam = pytest.importorskip("gtsam")
        graph, initial = gtsam_graph(path, is_3d)
        params = gtsam.LevenbergMarquardtParams()
        params.setRelativeErrorTol(1e-12)
        params.setAbsoluteErrorTol(0.0)
        params.setMaxIterations(1000)
        _GTSAM_BEST[path] = min(
            graph.error(gtsam.LevenbergMarquardtOptimizer(graph, start, params).optimize())
            for start in (initial, gtsam_chordal_start(path, is_3d))
        )
    return _GTSAM_BEST[path]


def gtsam_error_of_file(path: Path, written: Path, is_3d: bool) -> float:
    """GTSAM's error (its prior on the original file's pose 0 included) of the vertices
    written to `written`."""
    gtsam = pytest.importorskip("gtsam")
    graph, _ = gtsam_graph(path, is_3d)
    _, values = gtsam.readG2o(str(written), is_3d)
    return graph.error(values)


@pytest.mark.parametrize("framework_name", ["torch", "jax"])
@pytest.mark.parametrize("name", ["tinyGrid3D", "smallGrid3D", "MIT"])
def test_reaches_gtsam_optimum(tmp_path, name, framework_name):
    """From the chordal start, the written vertices' GTSAM error is at most GTSAM's best
    (1 + 1e-6). On MIT, GTSAM's LM from the file's vertices stops in a local minimum."""
    pytest.importorskip(framework_name)
    path = DATA / f"{name}.g2o"
    is_3d = name != "MIT"
    out = tmp_path / "out.g2o"
    _, _, result, _ = pose_graph.run(path, framework_name, "chordal", out=out, report=None)
    assert result.converged
    error = gtsam_error_of_file(path, out, is_3d)
    assert error <= gtsam_best(path, is_3d) * (1 + 1e-6)
    np.testing.assert_allclose(error, result.chi2 / 2, rtol=1e-8)


def test_the_compiled_solve_reaches_the_eager_solves_optimum():
    """JAX's whole solve as one compiled function (the device back end, traced): the
    eager solve's chi2 and poses (the CPU's sparse back end) on tinyGrid3D, and a second
    call that compiles nothing."""
    pytest.importorskip("jax")
    from posegraph.optimise import compiled_solve, optimise

    fw = framework("jax")
    problem = make_problem(read_g2o(DATA / "tinyGrid3D.g2o"), fw)
    initial = chordal(problem, fw)
    eager = optimise(problem, initial, fw, report=None)
    solve = compiled_solve(problem, fw)
    arguments = (
        element_in(fw, initial),
        element_in(fw, problem.measurements).inverse(),
        array_in(fw, problem.information),
    )
    poses, chi2, iterations = solve(*arguments)
    # the stopping rule's size meets the two back ends' rounding: one step more or less
    assert abs(int(iterations) - eager.iterations) <= 1
    np.testing.assert_allclose(float(chi2), eager.chi2, rtol=1e-9)
    np.testing.assert_allclose(to_numpy(poses.position), eager.poses.position, atol=1e-9)
    np.testing.assert_allclose(
        np.abs((to_numpy(poses.quaternion) * eager.poses.quaternion).sum(-1)), 1.0, atol=1e-12
    )
    assert solve._cache_size() == 1
    solve(*arguments)
    assert solve._cache_size() == 1
    with pytest.raises(ValueError, match="torch runs eagerly"):
        compiled_solve(problem, framework("torch"))
    with pytest.raises(ValueError, match="torch runs eagerly"):
        optimise(problem, initial, framework("torch"), compiled=True)
    with pytest.raises(ValueError, match="solver 'pardiso' is the CPU's"):
        optimise(problem, initial, fw, compiled=True, solver="pardiso")


@pytest.mark.parametrize("dim", [3, 2])
def test_the_dense_chordal_start_is_the_sparse_one(rng, dim):
    """`chordal_dense` (the start's two linear problems solved dense, traceable) against
    `chordal_sparse` (NumPy, a sparse solve) on a random graph whose information spans orders of
    magnitude, on NumPy, on JAX and inside `jax.jit`: the same poses to rounding, vertex 0
    on the anchor. The two solve the same normal equations, one by LU and one by a sparse
    Cholesky, so they agree to the equations' condition number times the rounding, and the
    graph is made for that to stay below the bound: its measurements are the file's
    relative poses with noise, as a real graph's are (drawn at random, the relaxation's
    matrices came out nearly singular at some vertices, smallest singular value ~1e-8,
    where the projection onto the group turned a 1e-11 difference into 1e-5), and its
    information spans four orders (six made the translations' Laplacian ~1e7 conditioned:
    differences of ~2e-9)."""
    jax = pytest.importorskip("jax")
    from posegraph.initial import DENSE_START_UP_TO, chordal_dense

    fw = framework("jax")
    graph = random_graph(rng, dim, vertices=15, extra_edges=12)
    graph.edge_information[::3] *= 1e4
    problem = make_problem(graph, fw)
    group, poses = problem.group, problem.file_poses
    noise = group.exp(0.05 * rng.normal(size=(problem.edges, group.tangent_dim)))
    measured = (poses[problem.i].inverse() @ poses[problem.j] @ noise).to_numpy()
    problem = dataclasses.replace(problem, measurements=measured)
    expected = chordal_sparse(problem, framework("numpy"))

    def start(anchor, measurements, information):
        return chordal_dense(problem, fw, anchor, measurements, information)

    arguments = (element_in(fw, problem.anchor), element_in(fw, problem.measurements),
                 array_in(fw, problem.information))  # fmt: skip
    on_numpy = chordal_dense(problem, framework("numpy"), problem.anchor,
                             problem.measurements, problem.information)  # fmt: skip
    assert problem.edges * problem.unknowns <= DENSE_START_UP_TO  # `chordal` is the dense one
    np.testing.assert_array_equal(chordal(problem, framework("numpy")).position, on_numpy.position)
    for poses in (on_numpy, start(*arguments).to_numpy(), jax.jit(start)(*arguments).to_numpy()):
        np.testing.assert_allclose(poses.position, expected.position, atol=1e-9)
        np.testing.assert_allclose(
            poses.rotation().as_matrix(), expected.rotation().as_matrix(), atol=1e-9
        )
        np.testing.assert_allclose(poses[:1].position, problem.anchor.position, atol=1e-12)


def test_the_start_and_solve_compiled_as_one_call():
    """`run(compiled=True)` from the chordal start: one compiled call per structure for the
    start and the solve (`chordal_and_optimise`), the eager run's start, chi2, iterations
    and poses; a second graph of the same structure compiles nothing; a framework that
    does not compile, or the CPU's solver, is refused by name."""
    pytest.importorskip("jax")
    from posegraph import optimise as optimise_module

    path = DATA / "tinyGrid3D.g2o"
    _, eager_start, eager, _ = pose_graph.run(path, "jax", report=None)
    lines = []
    problem, start, compiled, _ = pose_graph.run(path, "jax", compiled=True, report=lines.append)
    expected_line = f"compiled: the chordal start and {compiled.iterations} iterations in one call"
    assert lines[0] == expected_line
    np.testing.assert_allclose(start.position, eager_start.position, atol=1e-12)
    assert compiled.converged and abs(compiled.iterations - eager.iterations) <= 1
    assert compiled.solves >= compiled.iterations
    np.testing.assert_allclose(compiled.chi2, eager.chi2, rtol=1e-9)
    np.testing.assert_allclose(compiled.poses.position, eager.poses.position, atol=1e-9)
    kept = dict(optimise_module._RUNS)
    other = dataclasses.replace(
        problem, measurements=problem.measurements @ SE3.exp(np.full((problem.edges, 6), 1e-3))
    )
    _, moved = optimise_module.chordal_and_optimise(other, framework("jax"))
    assert moved.converged and moved.chi2 != compiled.chi2
    assert optimise_module._RUNS.keys() == kept.keys()
    with pytest.raises(ValueError, match="torch runs eagerly"):
        optimise_module.chordal_and_optimise(problem, framework("torch"))
    # a kept function holds the structure alone, not the problem's data
    fresh = make_problem(read_g2o(path), framework("jax"))
    function, weak = (
        optimise_module.compiled_run(fresh, framework("jax")),
        weakref.ref(fresh.information),
    )
    del fresh
    gc.collect()
    assert weak() is None and function is not None
    with pytest.raises(ValueError, match="solver 'pardiso' is the CPU's"):
        pose_graph.run(path, "jax", compiled=True, solver="pardiso", report=None)
    assert pose_graph.main([str(path), "--framework", "jax", "--compiled"]) == 0
    larger = make_problem(read_g2o(DATA / "smallGrid3D.g2o"), framework("jax"))  # 744 unknowns
    with pytest.raises(ValueError, match="744 unknowns and .* edges; the start compiles dense"):
        optimise_module.chordal_and_optimise(larger, framework("jax"))
    # few unknowns but many edges (the start's incidence matrices dense): refused; `run`
    # asks `start_compiles` and takes the NumPy start and the kept compiled loop instead
    crowded = dataclasses.replace(
        problem,
        i=np.tile(problem.i, 1400), j=np.tile(problem.j, 1400),
        measurements=groups.concatenate([problem.measurements] * 1400),
        information=np.tile(problem.information, (1400, 1, 1)),
    )  # fmt: skip
    assert crowded.unknowns == 48 and crowded.edges * 48 > 720_000
    assert optimise_module.start_compiles(problem) and not optimise_module.start_compiles(crowded)
    with pytest.raises(ValueError, match="48 unknowns and 15400 edges; the start compiles"):
        optimise_module.chordal_and_optimise(crowded, framework("jax"))
    assert pose_graph.main([str(path), "--framework", "torch", "--compiled"]) == 1


def test_a_jax_solve_compiled_once_per_structure():
    """`optimise(compiled=True)`: the device back end's loop, compiled once per structure
    and kept by the solver: the eager solve's optimum, and a second graph of the same
    sizes (other measurements) compiles nothing."""
    pytest.importorskip("jax")
    from posegraph.optimise import optimise

    from xform.optim import _device

    fw = framework("jax")
    problem = make_problem(read_g2o(DATA / "tinyGrid3D.g2o"), fw)
    initial = chordal(problem, fw)
    eager = optimise(problem, initial, fw, report=None)
    assert eager.history
    lines = []
    compiled = optimise(problem, initial, fw, compiled=True, report=lines.append)
    assert not compiled.history
    assert lines == [f"compiled: {compiled.iterations} iterations in one call, no line for each"]
    np.testing.assert_allclose(compiled.chi2, eager.chi2, rtol=1e-9)
    np.testing.assert_allclose(compiled.poses.position, eager.poses.position, atol=1e-9)
    kept = dict(_device._COMPILED)
    other = dataclasses.replace(
        problem, measurements=problem.measurements @ SE3.exp(np.full((problem.edges, 6), 1e-3))
    )
    moved = optimise(other, initial, fw, compiled=True, report=None)
    assert moved.converged and moved.chi2 != compiled.chi2
    assert _device._COMPILED.keys() == kept.keys()


def test_file_without_vertices_starts_from_odometry(tmp_path):
    """tinyGrid3D with its vertex lines removed: read, started from odometry (also under
    --init file), and optimised to the same optimum."""
    text = (DATA / "tinyGrid3D.g2o").read_text().splitlines()
    path = tmp_path / "edges_only.g2o"
    path.write_text("\n".join(line for line in text if not line.startswith("VERTEX")) + "\n")
    full = pose_graph.run(DATA / "tinyGrid3D.g2o", "torch", "chordal", report=None)[2]
    for init in ("file", "odometry", "chordal"):
        result = pose_graph.run(path, "torch", init, report=None)[2]
        # the example stops at a relative decrease of 1e-5, some 1e-8 above the optimum
        np.testing.assert_allclose(result.chi2, full.chi2, rtol=1e-7)


def test_command_line(tmp_path, capsys):
    """The SPEC's last line, the written file and the plot, on a noiseless random graph."""
    graph, _ = noiseless_graph(np.random.default_rng(0), 3, 15, 10)
    path = tmp_path / "graph.g2o"
    path.write_text(format_g2o(graph))
    out, plot = tmp_path / "out.g2o", tmp_path / "plot.png"
    argv = [str(path), "--init", "odometry", "--out", str(out), "--plot", str(plot)]
    assert pose_graph.main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("final chi2=") and " iterations=" in last and " seconds=" in last
    assert float(last.split()[1].split("=")[1]) < 1e-20
    assert plot.stat().st_size > 0
    written = read_g2o(out)
    np.testing.assert_allclose(written.vertex_positions, graph.vertex_positions, atol=1e-9)


@needs_shared
def test_benchmark_runs_on_the_smallest_graph(tmp_path, monkeypatch):
    """benchmarks/pose_graph.py must not rot: one repeat on tinyGrid3D, in each kind."""
    pytest.importorskip("gtsam")
    monkeypatch.syspath_prepend(str(REPO))
    from benchmarks.pose_graph import main

    rows = main(["--graphs", "tinyGrid3D", "--repeats", "1", "--out", str(tmp_path / "r.json")])
    (row,) = rows
    for name in ("torch", "jax", "jax compiled"):  # tinyGrid3D is small enough for the last
        assert row[name]["within 1e-6 of gtsam best"]
        assert row[name]["seconds"] > 0 and row[name]["iterations"] > 0
    assert row["gtsam"]["iterations"] > 0
    assert (tmp_path / "r.json").stat().st_size > 0


@needs_shared
def test_benchmark_lm_alone_and_the_eager_floor(tmp_path, monkeypatch):
    """`benchmarks.pose_graph --compiled` must not rot either: on tinyGrid3D the compiled JAX
    solve, the eager solves and the hand-written eager floor all reach the eager solve's
    optimum in as many iterations (a floor that stopped short would time less work)."""
    pytest.importorskip("gtsam")
    monkeypatch.syspath_prepend(str(REPO))
    from benchmarks.pose_graph import main

    argv = ["--compiled", "--graphs", "tinyGrid3D", "--repeats", "1"]
    (row,) = main([*argv, "--out", str(tmp_path / "r.json")])
    assert row["graph"] == "tinyGrid3D"
    assert row["torch eager floor iterations"] == row["iterations"] > 0
    assert row["lm seconds"] < row["eager lm seconds"]  # the compiled LM, not a floor's
    for key in ("chi2", "torch eager floor chi2", "numpy eager floor chi2"):
        np.testing.assert_allclose(row[key], row["eager chi2"], rtol=1e-9)
    for key in ("lm seconds", "eager lm seconds", "torch eager lm seconds",
                "torch eager floor seconds", "numpy eager floor seconds",
                "gtsam lm seconds"):  # fmt: skip
        assert row[key] > 0
