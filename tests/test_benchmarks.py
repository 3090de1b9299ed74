"""The benchmark is not a test, but it must not rot: run it at its smallest size."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warp as wp
from conftest import taken

cuda = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="needs a CUDA device")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_benchmark_runs_at_the_smallest_size(device, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    pytest.importorskip("matplotlib")
    from benchmarks.run import OPS, TORCH, main

    ops = [op for op in OPS if taken(op)] or list(OPS)[:1]  # this run's share of the ops
    args = ["--device", device, "--sizes", "16", "--no-compile", "--out", str(tmp_path)]
    rows = main([*args, "--ops", *ops])
    assert {r["op"] for r in rows} == set(ops)
    assert all(r["torch ratio"] > 0 and r["jax ratio"] > 0 for r in rows)
    saved = json.loads((tmp_path / "results.json").read_text())
    measured = {r["impl"] for r in saved["records"]}
    expected = {
        "xform torch",
        "xform jax.jit",
        "xform numpy" if device == "cpu" else "xform warp",
        "warp floor",
        "copy floor",
    }
    # the PyTorch formulas, where this run's share has one (se3_log's peer is PyPose alone)
    peers = {name for op in ops for name in TORCH.get(op, {})}
    assert expected | peers <= measured
    assert all(r["seconds"] > 0 and r["bytes"] > 0 for r in saved["records"])
    assert (tmp_path / "results.png").stat().st_size > 0


def test_the_gpu_check_runs_dry_on_the_cpu(tmp_path, monkeypatch):
    """benchmarks/gpu_roofline.sh --dry-run: every Python step of issue 47's check on a
    lent GPU, on the CPU at tiny sizes, and its acceptance table from the files they
    write; then those files installed where the docs read them."""
    for module in ("torch", "jax", "matplotlib"):
        pytest.importorskip(module)
    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root))
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    environment = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable,
                   "XFORM_BENCHMARK_BUDGET": "0", "PYTHONPATH": path}  # fmt: skip
    script = root / "benchmarks" / "gpu_roofline.sh"
    done = subprocess.run(["bash", str(script), "--dry-run"], env=environment,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    summary = (tmp_path / "summary.txt").read_text()
    for step in ("hbm_16M", "roofline", "jax_calls", "sizes", "acceptance"):
        assert f"{step}: rc=0" in summary, summary + done.stdout[-3000:] + done.stderr[-3000:]
    saved = json.loads((tmp_path / "roofline" / "roofline.json").read_text())
    assert [r["scalars per element"] for r in saved["stores"]] == [3, 4, 7, 9, 16]
    assert all(r["staged store correct"] for r in saved["stores"])
    assert len(saved["sums"]) == 4 and all(r["five runs the same bits"] for r in saved["sums"])
    acceptance = (tmp_path / "acceptance.md").read_text()
    assert "batch_transform_points | forward+backward" in acceptance
    from benchmarks.acceptance import install

    (tmp_path / "installed").mkdir()
    written = install(tmp_path, tmp_path / "installed", figures=False)
    assert "results_cuda.json" in written and len(written) == 4


def test_kinematics_benchmark_runs_at_the_smallest_size(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    for module in ("torch", "jax", "pinocchio", "pytorch_kinematics"):
        pytest.importorskip(module)
    from benchmarks.kinematics import main

    records = main(["--sizes", "1", "--no-compile", "--budget", "0", "--out", str(tmp_path)])
    measured = {(r["mode"], r["impl"]) for r in records}
    for mode in ("forward", "forward+backward"):
        for impl in ("xform torch", "xform jax.jit", "xform numpy", "pytorch_kinematics",
                     "jax.jit jnp", "pinocchio loop"):  # fmt: skip
            assert (mode, impl) in measured
    assert ("forward+backward", "pinocchio gradient") in measured
    assert ("forward", "pinocchio gradient") not in measured
    assert all(r["seconds"] > 0 and r["bytes per configuration"] > 0 for r in records)
    saved = json.loads((tmp_path / "kinematics.json").read_text())
    assert len(saved["records"]) == len(records)


def test_pinocchio_gradient_peer_computes_xforms_gradient(monkeypatch):
    """The benchmark's Pinocchio forward + backward does the work xform's does: its
    gradient of random cotangents on every link's position and rotation matrix equals
    xform's (through torch, the quaternions turned into matrices by xform's op), float64,
    the mimic finger's two Pinocchio coordinates folded into its master."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    for module in ("torch", "pinocchio"):
        pytest.importorskip(module)
    import numpy as np
    import torch

    import xform
    import xform.backends.torch as xt
    from benchmarks.kinematics import PinocchioGradient, panda_urdf, with_mimic_finger

    path = panda_urdf()
    chain = xform.kinematics.Chain.from_urdf(path)
    rng = np.random.default_rng()
    q = rng.uniform(-2.0, 2.0, (4, chain.dof))
    g_position = rng.normal(size=(4, chain.n_links, 3))
    g_rotation = rng.normal(size=(4, chain.n_links, 3, 3))

    q_torch = torch.tensor(q, requires_grad=True)
    poses = chain.forward_kinematics(q_torch)
    rotation = xt.quaternion_to_matrix(poses.quaternion)
    loss = (poses.position * torch.tensor(g_position)).sum()
    loss = loss + (rotation * torch.tensor(g_rotation)).sum()
    (expected,) = torch.autograd.grad(loss, q_torch)

    gradient = PinocchioGradient(path, chain.link_names)
    got = gradient(list(with_mimic_finger(q)), g_position, g_rotation)
    assert got.shape == (4, gradient.model.nv) == (4, chain.dof + 1)
    got = np.concatenate([got[:, :-2], got[:, -2:].sum(-1, keepdims=True)], -1)
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-12)


def test_second_order_benchmark_runs_at_a_small_size(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    from benchmarks import second_order

    rows = second_order.main(["--size", "16", "--budget", "0", "--out", str(tmp_path)])
    assert {(r["op"], r["framework"]) for r in rows} == {
        (op, framework) for op in second_order.OPS for framework in ("jax", "torch")
    }
    assert all(r["xform hvp ms"] > 0 and r["byte floor hvp / forward"] > 1 for r in rows)
    saved = json.loads((tmp_path / "results_second_order.json").read_text())
    assert len(saved["rows"]) == len(rows)


def test_the_jnp_se3_log_peer_is_xforms_se3_log(monkeypatch):
    """The per-call JAX benchmark's jnp formula for se3_log computes xform's (float64),
    at the identity, tiny angles and half turns included."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    import numpy as np

    import xform
    from benchmarks.peers import jnp_se3_log

    rng = np.random.default_rng(0)
    q = rng.normal(size=(500, 4))
    q[:5] = [[1, 0, 0, 0], [1, 1e-9, 0, 0], [0, 1, 0, 0], [1e-9, 0, 0, 1], [-0.5, 0.5, 0.5, 0.5]]
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    t = rng.normal(size=(500, 3))
    with jax.enable_x64(True):
        got = np.asarray(jnp_se3_log(t, q))
    np.testing.assert_allclose(got, xform.se3_log(t, q), rtol=1e-12, atol=1e-12)


def test_jax_calls_benchmark_runs_at_the_smallest_size(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    from benchmarks.jax_calls import main

    ops = ["transform_points", "se3_log"]
    args = ["--device", "cpu", "--sizes", "16", "--ops", *ops, "--out", str(tmp_path)]
    rows = main(args)
    assert {(r["op"], r["mode"]) for r in rows} == {
        (op, mode) for op in ops for mode in ("forward", "forward+backward")
    }
    assert all(r["native ratio"] > 0 and r["callback ratio"] > 0 for r in rows)
    saved = json.loads((tmp_path / "jax_calls.json").read_text())
    assert saved["native path available"] and saved["loop"]


def test_the_solver_device_checks_python_parts_run_on_the_cpu(tmp_path, monkeypatch):
    """benchmarks/gpu_solver.sh's steps at tiny sizes on the CPU (the lent GPU is not CI's):
    a synthetic bundle adjustment through xform, a pose graph against GTSAM's recorded
    best, and the verdict that reads them."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    from benchmarks import bundle_adjustment, gpu_solver

    out = tmp_path / "ladybug_xform.json"
    common = ["--device", "cpu", "--frameworks", "torch", "--peers", "--repeats", "1"]
    bundle_adjustment.main(["--problems", "5x60", "--iterations", "3", *common, "--out", str(out)])
    (problem,) = json.loads(out.read_text())["problems"]
    row = problem["summary"]["xform torch"]
    assert problem["cameras"] == 5 and row["iterations"] == 3 and row["cost"] > 0
    assert row["first run seconds"] > 0 and row["peak bytes"] is not None
    graph = Path(__file__).resolve().parents[1] / "data" / "pose_graphs" / "tinyGrid3D.g2o"
    args = ["pose-graph", str(graph), "--device", "cpu", "--repeats", "1"]
    gpu_solver.main([*args, "--out", str(tmp_path / "pose_graph_tiny.json")])
    lines = gpu_solver.verdict(tmp_path, small=True)
    assert any(line.startswith("PASS  tinyGrid3D (torch, chordal start)") for line in lines)
    assert any("Ladybug-49, xform torch: cost" in line for line in lines)
    assert any(line.startswith("FAIL  the large synthetic problem: no results") for line in lines)


def test_dynamics_benchmark_runs_at_the_smallest_size(tmp_path, monkeypatch):
    """benchmarks/dynamics.py on one robot and one function at batch 1 (without the C++
    loop, whose build takes minutes), and its --stash's URDFs."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("pinocchio")
    from benchmarks.dynamics import main, urdf_text

    args = ["--sizes", "1", "2", "--robots", "panda", "--functions", "rnea", "--budget", "0"]
    records = main([*args, "--no-cpp", "--out", str(tmp_path)])
    assert [(r["robot"], r["function"], r["size"]) for r in records] == [
        ("panda", "rnea", 1), ("panda", "rnea", 2)
    ]  # fmt: skip
    assert all(r["xform ns per configuration"] > 0 and r["ratio python"] > 0 for r in records)
    saved = json.loads((tmp_path / "results_dynamics.json").read_text())
    assert len(saved["records"]) == 2
    text, floating = urdf_text("panda")
    assert "<mimic" not in text and not floating


def test_the_instruction_count_runs_its_solves_uncounted(tmp_path, monkeypatch):
    """benchmarks/instructions.py's two sides, as valgrind would run them (here uncounted:
    valgrind is for a benchmark run, minutes long), and the count read from a log."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    monkeypatch.setattr("shutil.which", lambda name: None)  # no callgrind_control to call
    from benchmarks import instructions

    for side in instructions.SIDES:
        instructions.child("torch", "tinyGrid3D", side, 1)
    log = tmp_path / "xform.log"
    log.write_text("==1== Events    : Ir\n==1== Collected : 101253315\n==1== I   refs: 1\n")
    assert instructions.collected(log) == 101253315
    log.write_text("==1== Callgrind, a call-graph generating cache profiler\n")  # it died
    with pytest.raises(RuntimeError, match="no count"):
        instructions.collected(log)


def test_the_plain_torch_floor_solves_the_graph_exactly(monkeypatch):
    """benchmarks/pose_graph_torch_floor.py, whose time is the claim that no eager PyTorch
    solve of tinyGrid3D reaches GTSAM's: its inverse right Jacobian (a series in theta^2)
    against the inverse of Jr = sum (-ad)^k / (k + 1)! (60 terms, float64)
    from 0 to 1.99 rad, its step's exponential against SciPy's `expm`, and and its solve at
    GTSAM's optimum."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    pytest.importorskip("gtsam")
    import math

    import numpy as np
    import torch
    from scipy.linalg import expm

    from benchmarks.pose_graph import DATA, gtsam_best
    from benchmarks.pose_graph_torch_floor import PlainTorchSolve

    path = DATA / "tinyGrid3D.g2o"
    solve = PlainTorchSolve(path)
    rng = np.random.default_rng()

    # The Jacobian's even part through the floor's own code path: a graph state whose
    # residuals are chosen twists, read back as (minus) the Jacobian of vertex j.
    angles = np.concatenate([[0.0, 1e-9, 1e-4], rng.uniform(0.0, 1.99, solve.m - 3)])
    axes = rng.normal(size=(solve.m, 3))
    twists = np.concatenate(
        [axes / np.linalg.norm(axes, axis=1, keepdims=True) * angles[:, None],
         rng.normal(size=(solve.m, 3))], 1,
    )  # fmt: skip
    ad = np.zeros((solve.m, 6, 6))
    hats = np.einsum("ek,kab->eab", twists[:, :3], solve.hat.numpy())
    ad[:, :3, :3] = ad[:, 3:, 3:] = hats
    ad[:, 3:, :3] = np.einsum("ek,kab->eab", twists[:, 3:], solve.hat.numpy())
    jr = sum(np.linalg.matrix_power(-ad, k) / math.factorial(k + 1) for k in range(60))
    expected = np.linalg.inv(jr)
    e = torch.as_tensor(twists)
    m = solve.m
    half_ad = torch.mm(e, solve.minus_half_ad).view(m, 6, 6)
    square = torch.as_tensor((angles / math.pi) ** 2)[:, None]
    coefficients = torch.addmm(
        solve.series_first, torch.cumprod(square.expand(m, len(solve.series_rest)), 1),
        solve.series_rest,
    )  # fmt: skip
    alpha, beta = coefficients.view(m, 2, 1, 1).unbind(1)
    half_ad2 = torch.bmm(half_ad, half_ad)
    even = torch.baddbmm(solve.eye6, half_ad2, torch.addcmul(alpha * solve.eye6, beta, half_ad2))
    got = (even - half_ad).numpy()  # Jr^-1 = even + ad / 2
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10)

    # The step's exponential: identity poses moved by random twists, against expm.
    state = torch.eye(4, dtype=torch.float64).repeat(2 * solve.n, 1, 1)
    step = torch.as_tensor(rng.normal(size=(6 * (solve.n - 1), 1)) * 0.6)
    moved = solve.retracted(state, step).numpy()
    for p in range(1, solve.n):
        xi = step[6 * (p - 1) : 6 * p, 0].numpy()
        hat = np.zeros((4, 4))
        hat[:3, :3] = np.einsum("k,kab->ab", xi[:3], solve.hat.numpy())
        hat[:3, 3] = xi[3:]
        np.testing.assert_allclose(moved[2 * p], expm(hat), rtol=0, atol=1e-12)
        np.testing.assert_allclose(moved[2 * p + 1], np.linalg.inv(expm(hat)).T, atol=1e-12)

    # Its solve, read by GTSAM (its poses moved to the file's vertex 0, which GTSAM's prior
    # holds): at GTSAM's default rule within 1e-6 of GTSAM's best, as the benchmark asks of
    # every solve; run to a decrease of 1e-13, at GTSAM's best to 1e-9.
    import gtsam

    from benchmarks.pose_graph import gtsam_graph

    graph, initial = gtsam_graph(path, True)
    anchor = initial.atPose3(0).matrix() if initial.exists(0) else np.eye(4)

    def gtsam_error(state):
        values = gtsam.Values()
        for k, pose in enumerate(state[0::2].numpy()):
            values.insert(k, gtsam.Pose3(anchor @ pose))
        return graph.error(values)

    best = gtsam_best(path, True)
    state, _, iterations = solve.levenberg_marquardt(solve.chordal(), solve.prepared())
    solve.check_angles(state, solve.prepared())  # within the series' range
    assert iterations == 4
    assert best * (1 - 1e-12) <= gtsam_error(state) <= best * (1 + 1e-6)
    state, _, _ = solve.levenberg_marquardt(solve.chordal(), solve.prepared(), tolerance=1e-13)
    assert gtsam_error(state) == pytest.approx(best, rel=1e-9)
