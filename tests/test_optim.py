"""xform.optim: variables on every group and Euclidean, forward-mode Jacobians against
closed forms, losses, fixed variables, GN and LM, the Schur complement, the framework
(dense, PCG, batched, vmapped) path against the CPU's sparse one, implicit gradients
against central differences of the re-solved problem, and the SPEC's bad input."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from xform import SE2, SE3, SO2, SO3, _frameworks, optim
from xform.groups import GROUPS
from xform.optim._sparse import (
    Pattern,
    available_solvers,
    cholesky_solve,
    cost_pattern,
    make_solver,
)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

FRAMEWORKS = ["torch", "jax"]


def to(framework, x):
    if hasattr(x, "to_torch"):
        return x.to_torch() if framework == "torch" else x.to_jax()
    return torch.from_numpy(np.array(x)) if framework == "torch" else jnp.asarray(x)


def numpy(x):
    return np.asarray(x.detach() if hasattr(x, "detach") else x)


def log_error(t, z):
    """log(Z^-1 T): a prior of T at Z."""
    return (z.inverse() @ t).log()


def between(ti, tj, zinv):
    return (zinv @ (ti.inverse() @ tj)).log()


def random_graph(rng, group, n=8, extra=6, noise=0.05):
    """A chain with loop closures whose measurements are noisy relative poses."""
    i = np.concatenate([np.arange(n - 1), rng.integers(0, n, extra)])
    j = np.concatenate([np.arange(1, n), rng.integers(0, n, extra)])
    j = np.where(i == j, (j + 1) % n, j)
    truth = group.sample_uniform((n,), seed=rng)
    z = (
        truth[i].inverse()
        @ truth[j]
        @ group.exp(noise * rng.normal(size=(len(i), group.tangent_dim)))
    )
    start = truth @ group.exp(0.1 * rng.normal(size=(n, group.tangent_dim)))
    return i, j, truth, z, start


# --- variables on every group ------------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.__name__)
def test_every_group_reaches_its_targets(rng, framework, group):
    """Any registered group (Sim3 too, once it lands) is a variable type with no change:
    a prior on each variable reaches it exactly."""
    target = group.sample_uniform((5,), seed=rng)
    start = group.sample_uniform((5,), seed=rng)
    problem = optim.Problem()
    x = problem.variables(to(framework, start))
    problem.add(log_error, x[:], data=to(framework, target))
    result = optim.solve(problem)
    assert result.converged, result.reason
    assert result.cost < 1e-20
    error = (target.inverse() @ result.values(x).to_numpy()).log()
    np.testing.assert_allclose(error, 0.0, atol=1e-9)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("group", [SE3, SE2], ids=lambda g: g.__name__)
def test_forward_mode_jacobians_match_closed_forms(rng, framework, group):
    """The pose-graph edge's closed-form Jacobians (interop_examples) against xform.optim's
    forward mode: the same optimum, iterate by iterate."""
    i, j, _, z, start = random_graph(rng, group)

    def closed_form(ti, tj, zinv):
        relative = ti.inverse() @ tj
        error = zinv @ relative
        jj = error.jlog()
        return error.log(), [-(jj @ relative.inverse().adjoint()), jj]

    costs = []
    for jacobian_fn in (None, closed_form):
        problem = optim.Problem()
        x = problem.variables(to(framework, start))
        problem.fix(x[0])
        problem.add(between, x[i], x[j], data=to(framework, z.inverse()), jacobian_fn=jacobian_fn)
        result = optim.solve(problem)
        costs.append(result.history)
    np.testing.assert_allclose(costs[0], costs[1], rtol=1e-10)


@pytest.mark.parametrize("batched", [False, True])
def test_reverse_mode_rows_equal_forward_mode_columns(rng, monkeypatch, batched):
    """Eager PyTorch takes a cost's Jacobian by reverse mode (a backward pass per residual
    component), every other case by forward mode: the two agree on a cost over an SE3 and
    a Euclidean variable, one slot fixed, a residual wider than the moving tangents, an
    argument the residual ignores, a batch axis; inside a torch.func transform the
    framework declines (autograd's passes cannot run there) and forward mode is used."""
    from xform.optim import _linearise

    m, lead = 7, ((2, 7) if batched else (7,))
    poses = SE3.exp(to("torch", rng.normal(size=(*lead, 6))))
    points = to("torch", rng.normal(size=(*lead, 3)))
    anchors = SE3.exp(to("torch", rng.normal(size=(*lead, 6))))

    def residual(pose, point, anchor, ignored, scale):
        seen = anchor.inverse() @ (pose @ point)  # 3
        return torch.cat([seen, scale * pose.log(), seen * seen], -1)  # 12 > 6 + 3

    slots = (
        _linearise.Slot(0, 6, True), _linearise.Slot(1, 3, True), _linearise.Slot(2, 6, False),
        _linearise.Slot(3, 3, True),
    )  # fmt: skip
    plan = _linearise.CostPlan(residual, None, None, slots, "test", m)
    gathered = (poses, points, anchors, to("torch", rng.normal(size=(*lead, 3))))
    data = (to("torch", np.array(0.5)),)
    torch_class = type(_frameworks.TORCH)
    real = torch_class.rows_by_reverse_mode
    taken = []
    monkeypatch.setattr(torch_class, "rows_by_reverse_mode",
                        lambda self, *a: taken.append(1) or real(self, *a))  # fmt: skip
    by_rows = _linearise.jacobian_autodiff(plan, gathered, data, "torch", lead)
    assert taken, "eager PyTorch took forward mode"
    monkeypatch.setattr(torch_class, "rows_by_reverse_mode", lambda *a: None)
    by_columns = _linearise.jacobian_autodiff(plan, gathered, data, "torch", lead)
    assert by_rows[1].shape == by_columns[1].shape == (*lead, 12, 12)
    np.testing.assert_allclose(numpy(by_rows[0]), numpy(residual(*gathered, *data)), rtol=1e-14)
    np.testing.assert_allclose(numpy(by_rows[0]), numpy(by_columns[0]), rtol=1e-14)
    np.testing.assert_allclose(numpy(by_rows[1]), numpy(by_columns[1]), rtol=1e-12, atol=1e-13)
    assert not numpy(by_rows[1][..., 9:]).any()  # the ignored argument's columns
    # inside a torch.func transform autograd's passes cannot run: the framework declines
    monkeypatch.setattr(torch_class, "rows_by_reverse_mode", real)
    outcome = []

    def probe(x):
        outcome.append(_frameworks.TORCH.rows_by_reverse_mode(lambda d: 2.0 * d, (x,)))
        return x

    torch.func.vmap(probe)(points)
    assert outcome == [None]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_euclidean_and_group_variables_together(rng, framework):
    """Points seen from poses: the points' Euclidean variables and the poses' SE3 ones, with
    the first pose fixed; noiseless data are fitted exactly and the fixed pose stays."""
    poses = SE3.sample_uniform((3,), seed=rng)
    points = rng.normal(size=(10, 3))
    cam = np.repeat(np.arange(3), 10)
    pt = np.tile(np.arange(10), 3)
    seen = poses[cam].inverse() @ points[pt]

    def observe(pose, point, measured):
        return pose.inverse() @ point - measured

    problem = optim.Problem()
    x = problem.variables(to(framework, poses @ SE3.exp(0.05 * rng.normal(size=(3, 6)))))
    p = problem.variables(to(framework, points + 0.1 * rng.normal(size=points.shape)))
    problem.fix(x[0])
    problem.add(observe, x[cam], p[pt], data=to(framework, seen))
    start = numpy(to(framework, poses @ SE3.exp(0.05 * rng.normal(size=(3, 6)))).position)
    result = optim.solve(problem)
    assert result.converged and result.cost < 1e-18
    held = result.values(x)
    np.testing.assert_array_equal(numpy(held.position[0]), numpy(x.initial.position[0]))
    np.testing.assert_array_equal(numpy(held.quaternion[0]), numpy(x.initial.quaternion[0]))
    del start


# --- losses, methods, solvers --------------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("loss", [optim.Huber(0.5), optim.Cauchy(0.3)], ids=["huber", "cauchy"])
def test_robust_loss_minimises_the_robust_cost(rng, framework, loss):
    """At the solution the gradient of 1/2 sum rho(|r|^2) (by autodiff) vanishes, and an
    outlier moves the estimate less than without the loss."""
    values = rng.normal(size=(20, 2)) * 0.1
    values[0] = [50.0, -40.0]  # an outlier

    def offset(x, y):
        return x - y

    estimates = {}
    for name, chosen in (("robust", loss), ("plain", None)):
        problem = optim.Problem()
        x = problem.variables(to(framework, np.zeros((1, 2))))
        problem.add(offset, x[np.zeros(20, np.int64)], data=to(framework, values), loss=chosen)
        result = optim.solve(problem, relative_decrease=1e-15, max_iterations=500)
        assert result.converged, result.reason
        estimates[name] = numpy(result.values(x))[0]
    xs = estimates["robust"]
    s = ((xs - values) ** 2).sum(-1)
    rho1 = np.asarray(loss.evaluate(s, np)[1])
    terms = rho1[:, None] * (xs - values)
    # zero to the rounding of the cost's comparisons (IRLS converges linearly; a step whose
    # decrease is below the cost's rounding cannot be told from a rise)
    np.testing.assert_allclose(terms.sum(0), 0.0, atol=1e-6 * np.abs(terms).sum())
    assert np.linalg.norm(estimates["robust"]) < 0.1 * np.linalg.norm(estimates["plain"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_gauss_newton_and_lm_agree(rng, framework):
    i, j, _, z, start = random_graph(rng, SE3, noise=0.01)
    results = []
    for method in ("gn", "lm"):
        problem = optim.Problem()
        x = problem.variables(to(framework, start))
        problem.fix(x[0])
        problem.add(between, x[i], x[j], data=to(framework, z.inverse()))
        result = optim.solve(problem, method=method)
        assert result.converged, result.reason
        results.append(result)
    np.testing.assert_allclose(results[0].cost, results[1].cost, rtol=1e-9)


@pytest.mark.parametrize("framework", FRAMEWORKS + ["torch-batch"])
def test_a_tight_solve_goes_past_the_costs_rounding(rng, framework):
    """Near the minimum a step lowers the cost by less than the cost's rounding; LM that
    judged such steps by the cost alone stalled some sqrt(eps) (1e-8) short of it. Two
    starts, stopped by the step norm alone, meet to 1e-11 (the host and the batched loop)."""
    i, j, truth, z, _ = random_graph(rng, SE3, noise=0.3)
    tangent = 0.2 * rng.normal(size=(2, len(truth), 6))
    tangent[:, 0] = 0.0  # the fixed pose
    starts = [truth @ SE3.exp(t) for t in tangent]
    kind = framework.split("-")[0]
    solutions = []
    for start in starts:
        problem = optim.Problem(batch=2 if framework == "torch-batch" else None)
        if framework == "torch-batch":
            start = SE3(np.stack([start.position] * 2), np.stack([start.quaternion] * 2))
        x = problem.variables(to(kind, start))
        problem.fix(x[0])
        problem.add(between, x[i], x[j], data=to(kind, z.inverse()))
        result = optim.solve(problem, relative_decrease=0.0, step_norm=1e-13)
        solutions.append(numpy(result.values(x).log()).reshape(-1, len(truth), 6)[-1])
    np.testing.assert_allclose(solutions[0], solutions[1], rtol=0, atol=1e-11)


def small_bundle(rng, cameras=4, points=30, noise=0.5):
    """A synthetic BAL-like problem: SE3 poses, intrinsics [f, k1, k2], points."""
    truth_poses = SE3.exp(
        np.concatenate([rng.normal(size=(cameras, 3)), 0.1 * rng.normal(size=(cameras, 3))], 1)
    )
    truth_poses = SE3(truth_poses.position + np.array([0, 0, -8.0]), truth_poses.quaternion)
    intrinsics = np.tile([500.0, 0.01, 0.001], (cameras, 1))
    world = rng.normal(size=(points, 3))
    cam = np.repeat(np.arange(cameras), points)
    pt = np.tile(np.arange(points), cameras)
    sys_path_example()
    from bundle_adjustment import reprojection

    observed = reprojection(truth_poses[cam], intrinsics[cam], world[pt], 0.0) + noise * rng.normal(
        size=(len(cam), 2)
    )
    return cam, pt, observed, truth_poses, intrinsics, world


def sys_path_example():
    import sys
    from pathlib import Path

    path = str(Path(__file__).resolve().parents[1] / "interop_examples")
    if path not in sys.path:
        sys.path.insert(0, path)


def bundle_problem(framework, cam, pt, observed, poses, intrinsics, world, fix=False):
    from bundle_adjustment import reprojection

    problem = optim.Problem()
    c = problem.variables(to(framework, poses), name="poses")
    k = problem.variables(to(framework, intrinsics), name="intrinsics")
    p = problem.variables(to(framework, world), name="points")
    if fix:  # the gauge: two cameras fully
        problem.fix(c[:2])
        problem.fix(k[:2])
    problem.add(reprojection, c[cam], k[cam], p[pt], data=to(framework, observed))
    return problem, (c, k, p)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("solver", ["superlu", "dense", None])
def test_schur_complement_matches_the_full_system(rng, framework, solver):
    """The complement formed sparse (a sparse solver named) and dense (the dense Cholesky,
    which the default takes for 36 reduced unknowns) against the whole system's steps."""
    cam, pt, observed, poses, intrinsics, world = small_bundle(rng)
    start = (
        poses @ SE3.exp(0.01 * rng.normal(size=(4, 6))),
        intrinsics,
        world + 0.05 * rng.normal(size=world.shape),
    )
    histories = []
    for eliminate in (False, True):
        problem, (c, k, p) = bundle_problem(framework, cam, pt, observed, *start)
        result = optim.solve(
            problem, eliminate=p if eliminate else None, max_iterations=15,
            solver="superlu" if not eliminate else solver,
        )  # fmt: skip
        histories.append(result.history)
    # At the optimum a step lowers the cost by ~1e-10 of it, the stopping rule's own size,
    # so the two systems' rounding can decide one more (cost-neutral) step for either
    full, reduced = histories
    common = min(len(full), len(reduced))
    assert abs(len(full) - len(reduced)) <= 1, (full, reduced)
    np.testing.assert_allclose(full[:common], reduced[:common], rtol=1e-7)
    np.testing.assert_allclose(full[common - 1 :], reduced[-1], rtol=1e-9)
    np.testing.assert_allclose(reduced[common - 1 :], full[-1], rtol=1e-9)


@pytest.mark.parametrize("k, d", [(1, 1), (1, 3), (2, 3), (3, 3), (6, 2)])
def test_the_cpus_sparse_complement_on_any_pattern(rng, k, d):
    """The CPU's sparse Schur complement (`B C^-1 B^T` summed by eliminated variable in a
    Warp kernel, `_schur_pairs.py`) gives the whole system's step on patterns drawn entry
    by entry: blocks of B with entries no cost makes (read as 0), reduced unknowns no
    eliminated one touches, eliminated variables seen once, none at all, and no reduced
    unknowns (then nothing is left to factorise sparse)."""
    from xform.optim._host_schur import Schur
    from xform.optim._sparse import Pattern

    def step(reduced, eliminated, rows_each, density):
        size = reduced + eliminated * d
        rows = []
        for p in range(eliminated):
            for _ in range(rows_each):
                row = np.zeros(size)
                touched = rng.random(reduced) < density
                row[:reduced][touched] = rng.normal(size=touched.sum())
                row[reduced + p * d : reduced + (p + 1) * d] = rng.normal(size=d)
                rows.append(row)
        rows += [np.where(rng.random(size) < 0.3, rng.normal(size=size), 0.0) * (
            np.arange(size) < reduced) for _ in range(3)]  # fmt: skip
        jacobian = np.array(rows)
        h = jacobian.T @ jacobian + np.eye(size)
        pattern = Pattern(size, *np.nonzero(np.tril(h)))
        columns = np.repeat(np.arange(size), np.diff(pattern.indptr))
        g = rng.normal(size=size)
        schur = Schur(pattern, reduced, d, k, "points", "superlu")
        assert schur.dense == (reduced == 0)
        x = schur(h[pattern.indices, columns], g)
        np.testing.assert_allclose(x, np.linalg.solve(h, -g), rtol=1e-9, atol=1e-12)
        return schur

    padded = [step(4 * k, 12, 3, 0.3).padded, step(3 * k, 6, 1, 1.0).padded]
    # entries missing from B's blocks (where a block has rows to miss), and none
    assert padded == [k > 1, False]
    step(5 * k, 0, 0, 0.3)  # nothing to eliminate
    step(2 * k, 7, 2, 0.0)  # no eliminated variable touches the reduced ones
    step(0, 5, 2, 0.3)  # nothing reduced


def test_schur_complement_with_b_in_single_rows(rng, monkeypatch):
    """The sparse complement where B's rows cannot be taken in blocks (reduced variables
    whose sizes share no divisor: blocks of one row, the pairs' products 1 x 1), as the
    full system's steps."""
    from xform.optim import _host, _host_schur

    monkeypatch.setattr(_host, "_STRUCTURES", _host.Structures())  # no set-up kept from before
    original, blocks = _host_schur.Schur._sparse_init, []

    def single_rows(self, b_rows, b_cols, a_rows, a_cols, block, solver):
        original(self, b_rows, b_cols, a_rows, a_cols, 1, solver)
        blocks.append(self.block)

    monkeypatch.setattr(_host_schur.Schur, "_sparse_init", single_rows)
    test_schur_complement_matches_the_full_system(rng, "torch", "superlu")
    assert blocks and set(blocks) == {1}


def test_a_structure_is_set_up_once_per_structure_and_never_stale(rng, monkeypatch):
    """Solves of one structure (new problems each) share its set-up; a problem with the same
    sizes but other index arrays or other fixed variables gets its own, one in another
    framework shares the structure but gets its own index and mask arrays, and every solve
    equals one from a fresh set-up."""
    from xform.optim import _host

    built = []
    original = _host.Structure

    def counted(*args, **kwargs):
        built.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(_host, "Structure", counted)
    monkeypatch.setattr(_host, "_STRUCTURES", _host.Structures())
    cam, pt, observed, poses, intrinsics, world = small_bundle(rng)
    start = (poses @ SE3.exp(0.01 * rng.normal(size=(4, 6))), intrinsics,
             world + 0.05 * rng.normal(size=world.shape))  # fmt: skip
    shuffled = rng.permutation(len(pt))

    def history(order=slice(None), fix=False, fresh=False, framework="torch"):
        if fresh:
            monkeypatch.setattr(_host, "_STRUCTURES", _host.Structures())
        problem, (_, _, p) = bundle_problem(
            framework, cam[order], pt[order], observed[order], *start, fix=fix
        )
        return optim.solve(problem, eliminate=p, max_iterations=4).history

    first = history()
    assert history() == first and len(built) == 1
    for variant in ({"order": shuffled}, {"fix": True}):
        before = len(built)
        kept = history(**variant)
        assert len(built) == before + 1
        assert kept == history(**variant, fresh=True)
    before = len(built)
    in_jax = history(fix=True, framework="jax")  # the structure kept from torch's solve
    assert len(built) == before
    assert in_jax == history(fix=True, framework="jax", fresh=True)
    assert history(fix=True) == kept  # torch's arrays kept beside JAX's
    monkeypatch.setattr(_host, "_STRUCTURES", _host.Structures())
    assert history() == first


ON_TWO_DEVICES = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
from xform import optim

def solve(device):
    start = jax.device_put(jnp.arange(6.0).reshape(3, 2), jax.devices()[device])
    problem = optim.Problem()
    x = problem.variables(start)
    problem.fix(x[0])
    problem.add(lambda a: a - 1.0, x[np.arange(3)])
    result = optim.solve(problem)
    values = result.values(x)
    assert values.devices() == {jax.devices()[device]}, values.devices()
    return np.asarray(values), float(result.cost)

first, again = solve(0), solve(1)  # one structure, its arrays kept per placement
np.testing.assert_array_equal(first[0], again[0])
assert first[1] == again[1] == 0.5 and first[0][0].tolist() == [0.0, 1.0]
print("ok")
"""


def test_a_structure_kept_on_one_jax_device_serves_another():
    """The CPU back end keeps a structure's index and mask arrays per placement: the same
    structure solved on a second JAX CPU device gets arrays of its own, not the first
    device's (a key by `device`, which calls every CPU device "cpu", gave them back)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", ON_TWO_DEVICES], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.strip().endswith("ok")


@pytest.mark.parametrize("framework", ["numpy", *FRAMEWORKS])
def test_the_normal_matrix_is_assembled_only_for_the_steps_solved(framework, monkeypatch):
    """H's values are assembled from a linearisation's Jacobians only when a step is solved
    from them: once per linear solve, never for the last trial or a rejected one (a step
    rejected leaves the current H to be solved again, damped more)."""
    from xform.optim import _host

    assembled = []
    original = _host.HostSystem.hessian

    def counted(self, normal):
        assembled.append(normal.values is None)
        return original(self, normal)

    monkeypatch.setattr(_host.HostSystem, "hessian", counted)
    xp = {"numpy": np, "torch": torch, "jax": jnp}[framework]

    def residual(x):
        return xp.arctan(x)

    def jacobians(x):
        return xp.arctan(x), [(1.0 / (1.0 + x * x))[..., None]]

    # Gauss-Newton on arctan overshoots from |x| > 1.39 (3 -> -9.5): an undamped first step
    # is rejected, then steps damped more
    start = np.array([[3.0], [-2.5], [0.5]])
    problem = optim.Problem()
    x = problem.variables(start if framework == "numpy" else to(framework, start))
    problem.add(residual, x, jacobian_fn=jacobians)
    result = optim.solve(problem, damping=1e-12, max_iterations=50)
    assert result.converged and float(result.cost) < 1e-20
    assert result.solves > result.iterations + 1  # rejections happened: the test tests them
    assert len(assembled) == result.solves
    # the start's and each accepted trial's, but the last trial's where the loop stopped on
    # accepting it; every linearisation's would be solves + 1
    assert sum(assembled) in (result.iterations, result.iterations + 1)


def test_solves_of_one_structure_in_threads_share_no_state(rng):
    import threading

    cam, pt, observed, poses, intrinsics, world = small_bundle(rng, cameras=6, points=60)
    starts = [
        (poses @ SE3.exp(0.01 * rng.normal(size=(6, 6))), intrinsics,
         world + 0.05 * rng.normal(size=world.shape))
        for _ in range(4)
    ]  # fmt: skip

    from bundle_adjustment import reprojection, reprojection_jacobians

    solver = "pardiso" if "pardiso" in available_solvers() else "superlu"  # a stateful one

    def history(start):
        # closed-form Jacobians: PyTorch's forward AD (torch.func.jvp) keeps its levels
        # per process, not per thread
        problem = optim.Problem()
        c, k, p = (problem.variables(to("torch", x)) for x in start)
        problem.add(reprojection, c[cam], k[cam], p[pt], data=to("torch", observed),
                    jacobian_fn=reprojection_jacobians)  # fmt: skip
        return optim.solve(problem, eliminate=p, max_iterations=6, solver=solver).history

    alone = [history(s) for s in starts]
    together = [None] * len(starts)

    def run(k):
        together[k] = history(starts[k])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(starts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


def test_schur_refuses_a_set_whose_variables_are_joined(rng):
    i, j, _, z, start = random_graph(rng, SE3)
    problem = optim.Problem()
    x = problem.variables(start.to_torch())
    problem.add(between, x[i], x[j], data=z.inverse().to_torch())
    with pytest.raises(ValueError, match="cannot eliminate variables0: a cost joins two"):
        optim.solve(problem, eliminate=x)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("solver", ["cholesky", "pcg"])
def test_framework_solve_matches_cpu_sparse_solve(rng, framework, solver):
    i, j, _, z, start = random_graph(rng, SE3, noise=0.02)
    costs = {}
    for name in (None, solver):
        problem = optim.Problem()
        x = problem.variables(to(framework, start))
        problem.fix(x[0])
        problem.add(between, x[i], x[j], data=to(framework, z.inverse()))
        result = optim.solve(problem, solver=name)
        assert bool(result.converged), result.reason
        costs[name] = float(result.cost)
    np.testing.assert_allclose(costs[solver], costs[None], rtol=1e-8)


def test_torch_batch_axis_matches_separate_solves(rng):
    batch = 3
    graphs = [random_graph(np.random.default_rng(7 + b), SE2) for b in range(batch)]
    i, j = graphs[0][0], graphs[0][1]  # one structure: the same edges
    starts = SE2(
        np.stack([g[4].position for g in graphs]), np.stack([g[4].unit_complex for g in graphs])
    )
    zs = SE2(
        np.stack([g[3].position for g in graphs]), np.stack([g[3].unit_complex for g in graphs])
    )
    problem = optim.Problem(batch=batch)
    x = problem.variables(starts.to_torch())
    problem.fix(x[0])
    problem.add(between, x[i], x[j], data=zs.inverse().to_torch())
    batched = optim.solve(problem)
    assert batched.converged.all()
    for b in range(batch):
        single = optim.Problem()
        y = single.variables(starts[b].to_torch())
        single.fix(y[0])
        single.add(between, y[i], y[j], data=zs[b].inverse().to_torch())
        alone = optim.solve(single)
        np.testing.assert_allclose(float(batched.cost[b]), alone.cost, rtol=1e-8)
        np.testing.assert_allclose(
            numpy(batched.values(x)[b].log()), numpy(alone.values(y).log()), atol=1e-7
        )
    # the problems stop at different iterations: the later steps ran on those still running
    assert len(set(numpy(batched.iterations).tolist())) > 1


def test_jax_vmap_matches_separate_solves(rng):
    batch = 3
    graphs = [random_graph(np.random.default_rng(11 + b), SE3) for b in range(batch)]
    i, j = graphs[0][0], graphs[0][1]
    starts = SE3(
        np.stack([g[4].position for g in graphs]), np.stack([g[4].quaternion for g in graphs])
    )
    zs = SE3(np.stack([g[3].position for g in graphs]), np.stack([g[3].quaternion for g in graphs]))

    def solve(start, zinv):
        problem = optim.Problem()
        x = problem.variables(start)
        problem.fix(x[0])
        problem.add(between, x[i], x[j], data=zinv)
        result = optim.solve(problem)
        return result.cost, result.converged

    costs, converged = jax.jit(jax.vmap(solve))(starts.to_jax(), zs.inverse().to_jax())
    assert bool(converged.all())
    for b in range(batch):
        cost, _ = solve(starts[b].to_jax(), zs[b].inverse().to_jax())
        np.testing.assert_allclose(float(costs[b]), float(cost), rtol=1e-7)


def lower_slots(pattern: Pattern, columns: np.ndarray) -> np.ndarray:
    """The per-entry reference for `cost_pattern`'s slots: entry (p, q) of each instance's
    `J^T J` lands on (columns[p], columns[q]) where that is on or below the diagonal."""
    rows = np.broadcast_to(columns[:, :, None], (*columns.shape, columns.shape[1]))
    return pattern.slots(rows, np.broadcast_to(columns[:, None, :], rows.shape))


def test_sparse_pattern_and_solvers(rng):
    n, k, d = 12, 30, 4
    variables = rng.integers(-1, n, (k, 2))  # two variables per instance; -1: fixed
    columns = np.where(
        variables[:, :, None] >= 0, variables[:, :, None] * d + np.arange(d), -1
    ).reshape(k, -1)
    jac = rng.normal(size=(k, 3, columns.shape[1]))
    blocks = np.swapaxes(jac, 1, 2) @ jac
    rows = np.broadcast_to(columns[:, :, None], blocks.shape)
    cols = np.broadcast_to(columns[:, None, :], blocks.shape)
    pattern = Pattern(n * d, rows, cols)
    values = pattern.assemble(lower_slots(pattern, columns), blocks)
    dense = np.zeros((n * d, n * d))
    for e in range(k):
        for a, ra in enumerate(columns[e]):
            for b, cb in enumerate(columns[e]):
                if ra >= 0 and cb >= 0:
                    dense[ra, cb] += blocks[e, a, b]
    np.testing.assert_allclose(pattern.dense(values), dense, atol=1e-10)
    # worked out per block (the solver's way): the same matrix, a variable read twice by
    # one instance included
    variables[:3, 1] = variables[:3, 0]
    starts = np.where(variables >= 0, variables * d, -1)
    columns = np.where(starts[:, :, None] >= 0, starts[:, :, None] + np.arange(d), -1).reshape(
        k, -1
    )
    blocks = np.swapaxes(jac, 1, 2) @ jac
    by_blocks, (slots,) = cost_pattern(n * d, [(starts, [d, d])])
    dense = np.zeros((n * d, n * d))
    for e in range(k):
        for a, ra in enumerate(columns[e]):
            for b, cb in enumerate(columns[e]):
                if ra >= 0 and cb >= 0:
                    dense[ra, cb] += blocks[e, a, b]
    np.testing.assert_allclose(
        by_blocks.dense(by_blocks.assemble(slots, blocks)), dense, atol=1e-10
    )
    values[pattern.diagonal] += 1.0
    rhs = rng.normal(size=n * d)
    for name in available_solvers():
        x = make_solver(pattern, name)(values, rhs)
        np.testing.assert_allclose(pattern.full_matrix(values) @ x, rhs, atol=1e-8, err_msg=name)
    # an indefinite matrix (one diagonal entry negative) is refused by every Cholesky,
    # never solved quietly (SuperLU, an LU, refuses only a singular one)
    indefinite = values.copy()
    indefinite[pattern.diagonal[5]] = -1.0
    for name in set(available_solvers()) - {"superlu"}:
        with pytest.raises(ArithmeticError):
            make_solver(pattern, name)(indefinite, rhs)


def test_dense_cholesky_solves_and_refuses():
    """LAPACK's Cholesky called directly: the solution of SciPy's, a block of right-hand
    sides, the empty system, and a semidefinite matrix refused; the solver's own copy of
    the matrix is what it overwrites."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=(7, 7))
    spd = a @ a.T + np.eye(7)
    rhs = rng.normal(size=(7, 2))
    kept = spd.copy()
    x = cholesky_solve(np.asfortranarray(spd.copy()), rhs)
    np.testing.assert_allclose(x, np.linalg.solve(kept, rhs), rtol=1e-12)
    x = cholesky_solve(spd, rhs[:, 0])  # C order: LAPACK works on a copy
    np.testing.assert_array_equal(spd, kept)
    np.testing.assert_allclose(x, np.linalg.solve(kept, rhs[:, 0]), rtol=1e-12)
    assert cholesky_solve(np.zeros((0, 0)), np.zeros(0)).shape == (0,)
    singular = a[:, :3] @ a[:, :3].T  # rank 3
    with pytest.raises(ArithmeticError, match="not positive definite"):
        cholesky_solve(np.asfortranarray(singular), rhs)


def test_block_pattern_of_mixed_blocks_and_unread_unknowns(rng):
    """Two costs over blocks of sizes 3 and 2, with unknowns no cost reads between them:
    the per-block pattern equals the per-entry one, every column starts at its diagonal,
    and the assembled matrix is the dense sum."""
    big = np.arange(5) * 3  # five 3-blocks at 0..14, then unknowns 15, 16 unread
    small = 17 + np.arange(4) * 2  # four 2-blocks at 17..24, then 25 unread
    size, k = 26, 40
    costs = [
        (np.stack([rng.choice(big, k), rng.choice(small, k)], 1), [3, 2]),
        (np.stack([rng.choice(small, k), rng.choice(big, k), rng.choice(small, k)], 1), [2, 3, 2]),
    ]
    costs[1][0][:5, 0] = -1  # fixed
    costs[1][0][5:8, 2] = costs[1][0][5:8, 0]  # one variable in two slots of an instance
    pattern, slots = cost_pattern(size, costs)
    dense = np.zeros((size, size))
    rows, cols, contributions = [], [], []
    for (starts, dims), slot in zip(costs, slots):
        columns = np.concatenate(
            [
                np.where(starts[:, [a]] >= 0, starts[:, [a]] + np.arange(d), -1)
                for a, d in enumerate(dims)
            ],
            axis=1,
        )
        jac = rng.normal(size=(k, 4, columns.shape[1]))
        blocks = np.swapaxes(jac, 1, 2) @ jac
        contributions.append((slot, blocks))
        rows.append(np.broadcast_to(columns[:, :, None], blocks.shape).ravel())
        cols.append(np.broadcast_to(columns[:, None, :], blocks.shape).ravel())
        for e in range(k):
            for a, ra in enumerate(columns[e]):
                for b, cb in enumerate(columns[e]):
                    if ra >= 0 and cb >= 0:
                        dense[ra, cb] += blocks[e, a, b]
    by_entries = Pattern(size, np.concatenate(rows), np.concatenate(cols))
    np.testing.assert_array_equal(pattern.indptr, by_entries.indptr)
    np.testing.assert_array_equal(pattern.indices, by_entries.indices)
    np.testing.assert_array_equal(pattern.keys, by_entries.keys)
    np.testing.assert_array_equal(pattern.indices[pattern.diagonal], np.arange(size))
    values = sum(pattern.assemble(slot, blocks) for slot, blocks in contributions)
    np.testing.assert_allclose(pattern.dense(values), dense, atol=1e-10)
    assert pattern.dense(values)[15, 15] == pattern.dense(values)[25, 25] == 0.0
    assert pattern.blocks is None  # blocks of two sizes, and unknowns of their own
    # no unknowns at all: every instance reads fixed variables only
    empty, (dropped,) = cost_pattern(0, [(np.full((4, 2), -1), [3, 2])])
    assert empty.nnz == 0 and np.all(dropped == 0)
    values[pattern.diagonal] += 1.0
    rhs = rng.normal(size=size)
    for name in available_solvers():
        x = make_solver(pattern, name)(values, rhs)
        np.testing.assert_allclose(pattern.full_matrix(values) @ x, rhs, atol=1e-8, err_msg=name)
    # an indefinite matrix (one diagonal entry negative) is refused by every Cholesky,
    # never solved quietly (SuperLU, an LU, refuses only a singular one)
    indefinite = values.copy()
    indefinite[pattern.diagonal[5]] = -1.0
    for name in set(available_solvers()) - {"superlu"}:
        with pytest.raises(ArithmeticError):
            make_solver(pattern, name)(indefinite, rhs)


PARDISO_IMPORT = """
import glob, os, sys
walked = []
def recorded(pattern, *args, recursive=False, **kwargs):
    walked.append(pattern) if recursive else None
    return unwalked(pattern, *args, recursive=recursive, **kwargs)
unwalked, glob.glob = glob.glob, recorded
from xform.optim import _sparse
print(_sparse._PARDISO_TEMPLATE is not None, walked, os.environ.get("PYPARDISO_MKL_RT"))
"""


def test_pardiso_loads_without_walking_the_environment():
    """pypardiso, where `PYPARDISO_MKL_RT` is unset, finds MKL by a recursive glob of the
    whole environment at its import (0.9 s with torch and JAX installed): `xform.optim`
    names the library where MKL's wheel puts it, and the variable is left as it was. A
    user's variable that names no library leaves PARDISO out, without an error."""
    import os
    import subprocess
    import sys

    if "pardiso" not in available_solvers():
        pytest.skip("pypardiso is not installed")
    environment = {k: v for k, v in os.environ.items() if k != "PYPARDISO_MKL_RT"}
    run = subprocess.run([sys.executable, "-c", PARDISO_IMPORT], env=environment,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split("\n")[-2] == "True [] None", run.stdout
    environment["PYPARDISO_MKL_RT"] = "/no/such/libmkl_rt.so"
    run = subprocess.run([sys.executable, "-c", PARDISO_IMPORT], env=environment,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split("\n")[-2].startswith("False"), run.stdout
    assert run.stdout.split("\n")[-2].endswith("/no/such/libmkl_rt.so"), run.stdout


def test_pardiso_orders_the_graph_of_the_blocks(rng):
    """A pattern of whole 3 x 3 blocks records them, and PARDISO orders their graph: the
    solution is the one of PARDISO's own ordering of the entries, the ordering it is given
    is a permutation that keeps each block's unknowns together, and the fill is no worse
    than 15% above the entries' ordering (over 300 random graphs: median 1.00, 99th
    percentile 1.05, worst 1.11; the natural order, which ignores the graph, fills
    1.6-1.9x)."""
    if "pardiso" not in available_solvers():
        pytest.skip("pypardiso is not installed")
    count, k = 60, 150
    ends = np.stack([rng.integers(0, count, k), rng.integers(0, count, k)], 1)
    ends[: count - 1] = np.stack([np.arange(count - 1), np.arange(1, count)], 1)  # connected
    pattern, (slots,) = cost_pattern(3 * count, [(3 * ends, [3, 3])])
    b, block_rows, block_cols = pattern.blocks
    assert b == 3 and np.all(block_rows >= block_cols)
    jac = rng.normal(size=(k, 6, 6))
    values = pattern.assemble(slots, np.swapaxes(jac, 1, 2) @ jac)
    values[pattern.diagonal] += 1e-3
    rhs = rng.normal(size=(pattern.size, 2))
    by_blocks = make_solver(pattern, "pardiso")
    x = by_blocks(values, rhs)
    entries = copy.copy(pattern)
    entries.blocks = None
    by_entries = make_solver(entries, "pardiso")
    np.testing.assert_allclose(x, by_entries(values, rhs), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(pattern.full_matrix(values) @ x, rhs, atol=1e-8)
    given = by_blocks._solver.perm - 1
    np.testing.assert_array_equal(np.sort(given), np.arange(pattern.size))
    kept_together = given.reshape(count, 3)
    np.testing.assert_array_equal(kept_together - kept_together[:, :1], [[0, 1, 2]] * count)
    assert np.all(kept_together[:, 0] % 3 == 0)
    assert by_blocks._solver.iparm[17] <= 1.15 * by_entries._solver.iparm[17]
    # and PARDISO follows it: the blocks in their given order fill in far more
    in_order = make_solver(pattern, "pardiso")
    in_order._block_ordering = lambda size, *_: np.arange(1, size + 1, dtype=np.int32)
    np.testing.assert_allclose(in_order(values, rhs), x, rtol=1e-9, atol=1e-9)
    assert in_order._solver.iparm[17] > 1.3 * by_entries._solver.iparm[17]


# --- implicit gradients --------------------------------------------------------------------


def central_difference(f, x, direction, eps):
    """Fourth order (error eps^4 f^(5) / 30): a step large against each re-solve's
    rounding, and still no truncation at 1e-5."""
    values = [f(x + k * eps * direction) for k in (-2, -1, 1, 2)]
    return (values[0] - 8 * values[1] + 8 * values[2] - values[3]) / (12 * eps)


def check_implicit(framework, build, data, rng, eps=1e-4):
    """d loss(solve(data)) / d data along a random direction against central differences
    of the re-solved problem, to 1e-5 of the gradient's norm: a directional derivative
    (N(0, |g|^2) over directions) can cancel far below the rounding that each re-solve
    leaves in the loss."""

    def loss_numpy(value):
        return float(numpy(build(to(framework, value))))

    direction = rng.normal(size=data.shape)
    expected = central_difference(loss_numpy, data, direction, eps)
    if framework == "torch":
        tensor = torch.from_numpy(data.copy()).requires_grad_(True)
        build(tensor).backward()
        gradient = tensor.grad.numpy()
    else:
        gradient = np.asarray(jax.grad(build)(jnp.asarray(data)))
    actual = float((gradient * direction).sum())
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-5 * np.linalg.norm(gradient))


def test_a_jax_solve_takes_the_custom_vjp_only_when_traced(rng, monkeypatch):
    """Concrete JAX inputs cannot be differentiated: the solve skips the rule (its call
    costs milliseconds); under `jax.grad` it takes it, and the gradient matches the
    re-solves' central differences."""
    from xform._frameworks import FRAMEWORKS as BY_NAME

    i, j, truth, z, start = random_graph(rng, SE3, noise=0.05)
    calls = []
    rule = BY_NAME["jax"].custom_vjp

    def counted(*args, **kwargs):
        calls.append(1)
        return rule(*args, **kwargs)

    monkeypatch.setattr(BY_NAME["jax"], "custom_vjp", counted)

    def build(positions):
        problem = optim.Problem()
        x = problem.variables(to("jax", start))
        problem.fix(x[0])
        problem.add(between, x[i], x[j], data=SE3(positions, to("jax", z.inverse().quaternion)))
        return (optim.solve(problem, step_norm=1e-12).values(x).position ** 2).sum()

    build(jnp.asarray(z.inverse().position))
    assert calls == []
    check_implicit("jax", build, z.inverse().position.copy(), rng)
    assert calls


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_implicit_gradient_of_a_pose_graph(rng, framework):
    i, j, truth, z, _ = random_graph(rng, SE3, noise=0.1)

    def edge(ti, tj, position, quaternion):
        return (SE3(position, quaternion).inverse() @ (ti.inverse() @ tj)).log()

    def build(positions):
        problem = optim.Problem()
        x = problem.variables(to(framework, truth))
        problem.fix(x[0])
        problem.add(edge, x[i], x[j], data=(positions, to(framework, z.quaternion)))
        solution = optim.solve(problem, relative_decrease=0.0, step_norm=1e-13).values(x)
        return (solution.position**2).sum() + solution.quaternion[:, 1].sum()

    check_implicit(framework, build, z.position.copy(), rng)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_implicit_gradient_of_a_bundle_adjustment(rng, framework):
    cam, pt, observed, poses, intrinsics, world = small_bundle(rng, cameras=3, points=12, noise=0.3)

    def build(observations):
        problem, (c, k, p) = bundle_problem(
            framework, cam, pt, numpy(observed), poses, intrinsics, world, fix=True
        )
        problem.costs[0].data = (observations,)
        result = optim.solve(problem, eliminate=p, relative_decrease=0.0, step_norm=1e-12)
        return (result.values(p) ** 2).sum() + result.values(k)[2:, 0].sum() * 1e-3

    check_implicit(framework, build, observed.copy(), rng, eps=3e-2)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_implicit_gradient_of_inverse_kinematics(rng, framework):
    sys_path_example()
    import inverse_kinematics as ik

    path = ik.panda_urdf()
    if path is None:
        pytest.skip("example-robot-data is not installed")
    panda = ik.Panda(path)
    solution, target = panda.targets(1, int(rng.integers(1 << 20)))
    residual, _ = ik.residual_of(panda.chain)
    start = solution + 0.05

    def build(target_position):
        problem = optim.Problem()
        q = problem.variables(to(framework, start))
        goal = SE3(target_position, to(framework, target.quaternion))
        problem.add(residual, q[:], data=(to(framework, np.full((1, 1), ik.FINGER)), goal))
        # a soft pull towards the start makes the redundant arm's solution unique
        problem.add(lambda a, b: 0.1 * (a - b), q[:], data=to(framework, start), name="rest")
        return (optim.solve(problem, relative_decrease=0.0, step_norm=1e-13).values(q) ** 2).sum()

    # Each re-solve leaves a few 1e-8 of noise in the loss, which the quotient divides by
    # eps (seed 2644305381: off by 3e-5 of the gradient at eps = 1e-4, to 1e-9 at 1e-3)
    check_implicit(framework, build, target.position.copy(), rng, eps=1e-3)


# --- bad input -----------------------------------------------------------------------------


def simple_problem(framework="torch"):
    problem = optim.Problem()
    x = problem.variables(to(framework, SE3.identity((3,))), name="poses")
    return problem, x


@pytest.mark.parametrize("wrong", [lambda t: t.log()[..., None], lambda t: t.log().sum()])
def test_wrong_residual_shape_names_the_cost(wrong):
    problem, x = simple_problem()
    problem.add(wrong, x[:], name="prior")
    with pytest.raises(ValueError, match="cost 'prior' returned residuals of shape"):
        optim.solve(problem)


def test_a_residual_that_reads_no_moving_variable_has_zero_jacobians():
    """Differentiated by reverse mode (eager PyTorch), a residual that ignores its only
    moving argument gives zero Jacobians, as forward mode does, not autograd's error."""
    problem, x = simple_problem()
    fixed = problem.variables(to("torch", SE3.exp(np.full((3, 6), 0.1))), name="anchors")
    problem.fix(fixed[:])
    problem.add(lambda t, a: t.log(), x[:], fixed[:], name="prior")
    problem.add(lambda t, a: a.log() * 1.0, x[:], fixed[:], name="ignores the poses")
    result = optim.solve(problem)
    assert result.converged and result.cost == pytest.approx(0.5 * 3 * 6 * 0.01, rel=1e-9)


def test_variable_of_another_problem():
    problem, x = simple_problem()
    other, y = simple_problem()
    with pytest.raises(ValueError, match="poses belongs to another problem"):
        problem.add(lambda t: t.log(), y[:])
    with pytest.raises(ValueError, match="belongs to another problem"):
        problem.fix(y[0])
    problem.add(lambda t: t.log(), x[:])
    with pytest.raises(ValueError, match="belongs to another problem"):
        optim.solve(problem).values(y)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_non_finite_initial_value_names_the_variable(framework):
    values = np.zeros((4, 2))
    values[2, 1] = np.nan
    problem = optim.Problem()
    with pytest.raises(
        ValueError, match=r"points has a non-finite value \(nan\) at index \(2, 1\)"
    ):
        problem.variables(to(framework, values), name="points")


def test_non_finite_residual_names_the_cost_and_instance():
    problem, x = simple_problem()

    def bad(t):
        r = t.log()
        return r / (r * 0.0)  # 0 / 0

    problem.add(bad, x[[0, 2]], name="broken")
    with pytest.raises(
        ValueError, match=r"cost 'broken' has a non-finite residual .*instance 0, of poses\[0\]"
    ):
        optim.solve(problem)


@pytest.mark.parametrize("framework", ["numpy", *FRAMEWORKS])
def test_indefinite_information_is_refused(framework):
    information = np.stack([np.eye(3), np.diag([1.0, -2.0, 1.0])])
    with pytest.raises(ValueError, match=r"information\[1\] is not positive definite"):
        optim.sqrt_information(information if framework == "numpy" else to(framework, information))
    not_finite = np.stack([np.eye(3)] * 3)
    not_finite[2, 1, 1] = np.nan
    with pytest.raises(ValueError, match=r"information\[2\] is not positive definite"):
        optim.sqrt_information(not_finite if framework == "numpy" else to(framework, not_finite))
    asymmetric = np.eye(3)
    asymmetric[0, 1] = 0.5
    with pytest.raises(ValueError, match=r"information\[0\] is not symmetric"):
        optim.sqrt_information(asymmetric[None])


def test_sqrt_information_value_and_derivatives_on_every_path(rng):
    """U^T U = Omega from the NumPy factor where nothing differentiates (float32 kept), and
    the framework's own factor where something does: PyTorch's autograd and forward mode,
    and jax.grad, each against central differences of NumPy's Cholesky."""
    a = rng.normal(size=(4, 3, 3))
    information = a @ np.swapaxes(a, 1, 2) + np.eye(3)
    direction = rng.normal(size=information.shape)
    direction = direction + np.swapaxes(direction, 1, 2)  # symmetric, as Omega moves
    weights = rng.normal(size=information.shape)

    def upper(omega):
        return np.swapaxes(np.linalg.cholesky(omega), 1, 2)

    h = 1e-6
    numeric = (upper(information + h * direction) - upper(information - h * direction)) / (2 * h)
    for x in (information, to("torch", information), to("jax", information)):
        u = numpy(optim.sqrt_information(x))
        np.testing.assert_allclose(np.swapaxes(u, 1, 2) @ u, information, rtol=1e-12)
    single = optim.sqrt_information(torch.from_numpy(information.astype(np.float32)))
    assert single.dtype == torch.float32 and not single.requires_grad
    # contiguous, so that the ops a cost calls on it repeat their launch (a strided
    # operand takes the checked path at every call)
    assert single.is_contiguous() and optim.sqrt_information(information).flags.c_contiguous
    # reverse mode: d<W, U>/dOmega along the direction
    leaf = to("torch", information).requires_grad_(True)
    (optim.sqrt_information(leaf) * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(
        (numpy(leaf.grad) * direction).sum(), (weights * numeric).sum(), rtol=1e-6
    )
    import torch.autograd.forward_ad as forward_ad

    with forward_ad.dual_level():
        dual = forward_ad.make_dual(to("torch", information), to("torch", direction))
        tangent = forward_ad.unpack_dual(optim.sqrt_information(dual)).tangent
    assert tangent is not None
    np.testing.assert_allclose(numpy(tangent), numeric, rtol=1e-6, atol=1e-8)
    gradient = jax.grad(lambda omega: (optim.sqrt_information(omega) * weights).sum())(
        jnp.asarray(information)
    )
    np.testing.assert_allclose(
        (np.asarray(gradient) * direction).sum(), (weights * numeric).sum(), rtol=1e-6
    )


def test_not_converged_is_not_reported_converged(rng):
    i, j, _, z, start = random_graph(rng, SE3, noise=0.3)
    problem = optim.Problem()
    x = problem.variables(start.to_torch())
    problem.fix(x[0])
    problem.add(between, x[i], x[j], data=z.inverse().to_torch())
    result = optim.solve(problem, max_iterations=1)
    assert not result.converged and "iteration limit" in result.reason


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda p, x: optim.solve(p, method="newton"), ValueError, "method must be one of"),
        (lambda p, x: optim.solve(p, solver="magic"), ValueError, "solver must be one of"),
        (lambda p, x: optim.solve(p, damping=-1.0), ValueError, "damping must be >= 0"),
        (lambda p, x: optim.solve(p, eliminate=3), TypeError, "eliminate must be a variable set"),
        (lambda p, x: x[7], IndexError, "index 7 out of range for 3 variables"),
        (lambda p, x: x[1.5], TypeError, "takes an int, a slice or an integer array"),
        (lambda p, x: p.add(lambda t: t.log(), x[:], loss="huber"), TypeError, "loss must be"),
        (lambda p, x: p.add(lambda t: t.log()), ValueError, "reads no variables"),
        (lambda p, x: p.fix(3), TypeError, "expected variables selected"),
        (lambda p, x: p.add(lambda a, b: a.log(), x[[0, 1]], x[[0, 1, 2]]), ValueError, "differ"),
        (lambda p, x: p.variables(jnp.zeros((2, 3))), TypeError, "one framework per problem"),
        (lambda p, x: p.variables(torch.zeros(3)), ValueError, r"expected \(n, d\)"),
        (lambda p, x: p.variables([1.0, 2.0]), TypeError, "expected an xform group batch"),
        (lambda p, x: optim.solve(optim.Problem()), ValueError, "no variables"),
    ],
)
def test_bad_arguments_are_clear_errors(call, error, message):
    problem, x = simple_problem()
    with pytest.raises(error, match=message):
        call(problem, x)


def test_numpy_without_jacobian_fn_is_refused():
    problem = optim.Problem()
    x = problem.variables(np.zeros((2, 2)))
    problem.add(lambda a: a - 1.0, x[:])
    with pytest.raises(TypeError, match="give each cost a jacobian_fn"):
        optim.solve(problem)
    numpy_problem = optim.Problem()
    y = numpy_problem.variables(np.zeros((2, 2)))
    numpy_problem.add(
        lambda a: a - 1.0,
        y[:],
        jacobian_fn=lambda a: (a - 1.0, [np.broadcast_to(np.eye(2), (2, 2, 2))]),
    )
    np.testing.assert_allclose(optim.solve(numpy_problem).values(y), 1.0)


def test_jacobian_fn_of_the_wrong_shape_names_the_cost():
    problem, x = simple_problem()
    problem.add(lambda t: t.log(), x[:], jacobian_fn=lambda t: (t.log(), [t.log()]), name="prior")
    with pytest.raises(ValueError, match="prior's jacobian_fn gave the Jacobian of argument 0"):
        optim.solve(problem)


def test_group_variable_with_bounds_is_refused():
    problem = optim.Problem()
    with pytest.raises(TypeError, match="bounds"):
        problem.variables(SO3.identity((2,)).to_torch(), lower=0.0)


def test_so2_prior_in_numpy_with_jacobian_fn():
    """The CPU path needs no framework when the Jacobians are given."""
    target = SO2.from_angle(np.array([0.3, -2.0]))
    problem = optim.Problem()
    x = problem.variables(SO2.identity((2,)))

    def prior(t, z):
        return (z.inverse() @ t).log()

    problem.add(
        prior, x[:], data=target, jacobian_fn=lambda t, z: (prior(t, z), [np.ones((2, 1, 1))])
    )
    result = optim.solve(problem)
    np.testing.assert_allclose(result.values(x).as_angle(), [0.3, -2.0], atol=1e-12)


# --- the workloads' acceptance on small data --------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", ["dubrovnik-3-7-pre.txt", "5pointExample1.txt"])
def test_bundle_adjustment_of_gtsam_wheel_files_reaches_gtsam(framework, name):
    """The small BAL files the gtsam wheel ships: xform's converged cost at most GTSAM's
    (LM, CeresDefaults, to a relative decrease of 1e-14), both scored as 1/2 sum |r|^2."""
    gtsam = pytest.importorskip("gtsam")
    sys_path_example()
    import bundle_adjustment

    path = gtsam.findExampleDataFile(name)
    reference = bundle_adjustment.gtsam_optimum(path)
    _, solved, result, _ = bundle_adjustment.run(path, framework, report=None)
    assert result.converged, result.reason
    assert result.cost <= reference * (1 + 1e-6) + 1e-9
    np.testing.assert_allclose(
        bundle_adjustment.cost_of(bundle_adjustment.read_bal(path), solved.cameras, solved.points),
        result.cost,
        rtol=1e-9,
        atol=1e-12,
    )


LADYBUG = Path(__file__).resolve().parents[1] / "data" / "bal" / "problem-49-7776-pre.txt"


def test_the_documented_bundle_adjustment_converges_on_ladybug(capsys):
    """`bundle_adjustment.py problem-49-7776-pre.txt` as documented (no --iterations):
    converged, at a cost below both peers' converged costs on this file (GTSAM 13,368.59,
    jaxls 13,358.78: the data's README) and below the 30-iteration target 13,344.54. It
    crawled to the 500-iteration limit and failed, 47 s, the free gauge and the points
    drifting to infinity lowering the cost by 1e-8 an iteration."""
    sys_path_example()
    import bundle_adjustment

    assert bundle_adjustment.main([str(LADYBUG)]) == 0
    final = capsys.readouterr().out.strip().splitlines()[-1]
    cost, iterations = (float(final.split()[k].split("=")[1]) for k in (1, 2))
    assert cost <= 13344.54 and iterations < 100, final


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_inverse_kinematics_reaches_every_target(framework):
    sys_path_example()
    import inverse_kinematics

    if inverse_kinematics.panda_urdf() is None:
        pytest.skip("example-robot-data is not installed")
    reached, position, rotation, _ = inverse_kinematics.run(framework, 40, seed=5, report=None)
    assert reached.all()
    assert position.max() <= 1e-6 and rotation.max() <= 1e-6
