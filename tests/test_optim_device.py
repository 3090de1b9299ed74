"""The device back end of `xform.optim` (block-sparse normal equations, the Schur complement
and the linear solves in the framework's own arrays), run on the CPU through the very code
a GPU runs: against the CPU's sparse back end on real data, its solvers against each other,
its memory against N x N, batches and JAX's transforms and sharding, implicit gradients,
and a base install (no SciPy)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from xform import SE3, optim
from xform.optim import _loop
from xform.optim.bal import read_bal

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
LADYBUG = ROOT / "data" / "bal" / "problem-49-7776-pre.txt"
SHARED = ROOT.parent / "shared" / "data" / "pose_graphs"


def example(name: str):
    path = str(ROOT / "interop_examples")
    if path not in sys.path:
        sys.path.insert(0, path)
    return __import__(name)


def costs_of(result) -> list[float]:
    return [float(c) for c in result.history]


# --- the device path against the CPU's sparse path, on real data -----------------------------


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_ladybug_first_iterations_equal_the_sparse_path(framework):
    """Ladybug-49 (49 cameras, 7,776 points, 31,843 observations), points eliminated: the
    first 5 LM iterations of the device back end (block-sparse, Schur on the device, the
    reduced camera system by a dense Cholesky) give the CPU sparse path's costs to 1e-9."""
    ba = example("bundle_adjustment")
    bal = read_bal(LADYBUG)
    results = {}
    for solver in (None, "cholesky"):
        problem, variables = ba.build(bal, framework)
        results[solver] = optim.solve(
            problem, eliminate=variables[2], max_iterations=5, relative_decrease=0.0,
            step_norm=0.0, solver=solver,
        )  # fmt: skip
    host, device = results[None], results["cholesky"]
    assert int(device.iterations) == host.iterations == 5
    assert int(device.solves) == host.solves
    np.testing.assert_allclose(float(device.cost), host.cost, rtol=1e-9)
    if framework == "torch":  # the loop runs in Python there: every iteration's cost
        np.testing.assert_allclose(costs_of(device), costs_of(host), rtol=1e-9)


def _bundle(framework: str, cameras: int = 12):
    """A small BAL problem: the first cameras of Ladybug-49 and the points they see."""
    bal = read_bal(LADYBUG)
    keep = bal.camera_index < cameras
    points = np.unique(bal.point_index[keep])
    renumber = np.full(len(bal.points), -1)
    renumber[points] = np.arange(len(points))
    import dataclasses

    small = dataclasses.replace(
        bal, cameras=bal.cameras[:cameras], points=bal.points[points],
        camera_index=bal.camera_index[keep], point_index=renumber[bal.point_index[keep]],
        observations=bal.observations[keep],
    )  # fmt: skip
    return example("bundle_adjustment").build(small, framework)


def test_pcg_reaches_the_direct_solve_at_every_iteration():
    """Block-Jacobi PCG on the reduced camera system, against its dense Cholesky: the same
    cost at each of 15 iterations, near the optimum too, where LM's damping is small and a
    free gauge leaves the system ill-conditioned."""
    histories = {}
    for solver in ("cholesky", "pcg"):
        problem, variables = _bundle("torch")
        result = optim.solve(problem, eliminate=variables[2], max_iterations=15,
                             relative_decrease=0.0, step_norm=0.0, solver=solver)  # fmt: skip
        histories[solver] = costs_of(result)
    assert len(histories["pcg"]) == len(histories["cholesky"]) == 16
    np.testing.assert_allclose(histories["pcg"], histories["cholesky"], rtol=1e-9)


def _pose_graph(framework: str, poses: int = 30, seed: int = 0):
    """A noisy pose graph: a chain and loop closures, the start perturbed."""
    rng = np.random.default_rng(seed)
    i = np.concatenate([np.arange(poses - 1), rng.integers(0, poses, poses // 2)])
    j = np.concatenate([np.arange(1, poses), rng.integers(0, poses, poses // 2)])
    j = np.where(i == j, (j + 1) % poses, j)
    truth = SE3.sample_uniform((poses,), seed=rng)
    z = truth[i].inverse() @ truth[j] @ SE3.exp(0.05 * rng.normal(size=(len(i), 6)))
    start = truth @ SE3.exp(0.2 * rng.normal(size=(poses, 6)))
    move = (lambda e: e.to_torch()) if framework == "torch" else (lambda e: e.to_jax())
    problem = optim.Problem()
    x = problem.variables(move(start))
    problem.fix(x[0])
    problem.add(lambda a, b, m: (m @ (a.inverse() @ b)).log(), x[i], x[j],
                data=(move(z.inverse()),))  # fmt: skip
    return problem


def test_a_structure_is_worked_out_once_and_holds_no_values(monkeypatch):
    """A sliding window's next problem (other values and data, the same index arrays)
    takes the structure the last one made: the same object and index tables, the same
    steps as one made afresh; other edges or another fixed variable make another. What
    is kept holds none of a problem's arrays."""
    import gc
    import weakref

    from xform.optim import _device
    from xform.optim._kept import Kept

    monkeypatch.setattr(_device, "_STRUCTURES", Kept(size=4, largest=1 << 16))

    def system(problem):
        return _device.DeviceSystem(problem, _loop.Settings(solver="cholesky"), None,
                                    optim.Timings())  # fmt: skip

    first = _pose_graph("torch", seed=0)
    kept = system(first).kept
    again = _pose_graph("torch", seed=0)  # the same edges, other arrays
    assert system(again).kept is kept
    tables = system(again).index_tables()
    assert kept.tables[True] is tables and system(first).index_tables() is tables
    assert all(not t.flags.writeable for t in tables.values())
    assert system(_pose_graph("torch", seed=1)).kept is not kept  # other loop closures
    refixed = _pose_graph("torch", seed=0)
    refixed.fix(refixed.variable_sets[0][1])
    assert system(refixed).kept is not kept
    monkeypatch.setattr(_device, "_STRUCTURES", Kept(size=4, largest=1 << 16))
    fresh = optim.solve(_pose_graph("torch", seed=0), solver="cholesky", max_iterations=5)
    reused = optim.solve(_pose_graph("torch", seed=0), solver="cholesky", max_iterations=5)
    assert costs_of(reused) == costs_of(fresh)
    initial = first.variable_sets[0].initial.quaternion
    watch = weakref.ref(initial)
    del first, again, refixed, initial
    gc.collect()
    assert watch() is None


def test_pcg_on_a_whole_pose_graph_equals_the_dense_solve():
    """No set eliminated: PCG on the whole block-sparse system (180 unknowns, blocks of 6)
    takes the dense Cholesky's steps, to the optimum."""
    costs = {}
    for solver in ("cholesky", "pcg"):
        result = optim.solve(_pose_graph("torch"), solver=solver, relative_decrease=0.0,
                             step_norm=1e-12)  # fmt: skip
        assert bool(result.converged), result.reason
        costs[solver] = costs_of(result)
    np.testing.assert_allclose(costs["pcg"], costs["cholesky"], rtol=1e-9)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize(("solver", "batch"), [(None, None), (None, 2), ("cholesky", None),
                                               ("pcg", 2)])  # fmt: skip
def test_bounds_hold_on_every_path(framework, solver, batch):
    """A vector variable with bounds (NumPy's on one side, the framework's on the other,
    one unbounded entry each) whose cost pulls part of it past them: on the CPU's sparse
    path (one problem, no device solver) and the device back end's (a batch, or a device
    solver), the solution is the target clipped to the bounds."""
    rng = np.random.default_rng(3)
    shape = (5, 3) if batch is None else (batch, 5, 3)
    target = rng.normal(0.0, 2.0, shape)
    lower, upper = np.full((5, 3), -1.0), np.full((5, 3), 1.0)
    lower[0, 0], upper[4, 2] = -np.inf, np.inf
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        to = jnp.asarray
    else:
        import torch

        to = torch.from_numpy
    problem = optim.Problem(batch=batch)
    x = problem.variables(to(np.zeros(shape)), lower=lower, upper=to(upper))
    problem.add(lambda x, t: x - t, x[:], data=(to(target),), name="pull")
    result = optim.solve(problem, solver=solver, max_iterations=50)
    solved = np.asarray(result.values(x))
    np.testing.assert_allclose(solved, np.clip(target, lower, upper), atol=1e-9)
    assert np.all(np.asarray(result.converged))
    # float32 values, float64 bounds of both kinds: the values stay float32 (a float64
    # bound of the framework's own made them float64, silently, on every path)
    problem = optim.Problem(batch=batch)
    x = problem.variables(to(np.zeros(shape, np.float32)), lower=lower, upper=to(upper))
    problem.add(lambda x, t: x - t, x[:], data=(to(target.astype(np.float32)),))
    result = optim.solve(problem, solver=solver, max_iterations=50)
    assert str(result.values(x).dtype).endswith("float32")
    # float32's cost resolves a decrease of ~1e-7 of it: the free entries stop ~1e-4 short
    np.testing.assert_allclose(np.asarray(result.values(x)), np.clip(target, lower, upper),
                               atol=1e-3)  # fmt: skip


def _pulled_to_zero(v):  # one function for both problems: one structure, one compilation
    return v - 0.0


def _pulled_to(v, target):
    return v - target


def test_a_compiled_loop_takes_each_problems_bounds(monkeypatch):
    """JAX's loop is compiled once per structure and reused by the next problem of that
    structure: its bounds are that problem's own, not the first one's (they were baked
    into the first trace, and the second problem stopped at the first's bound), as NumPy,
    lists or JAX arrays, in the values' dtype whatever theirs; and what the compiled loop
    keeps holds none of a problem's arrays, its values or its data."""
    import gc
    import weakref

    from xform.optim import _device

    monkeypatch.setattr(_device, "_COMPILED", {})

    def solve(lower, dtype=np.float64):
        problem = optim.Problem()
        x = problem.variables(jax.numpy.full((3, 2), 5.0, dtype), lower=lower)
        problem.add(_pulled_to_zero, x[np.arange(3)])
        result = optim.solve(problem, solver="cholesky", max_iterations=50)
        assert result.values(x).dtype == dtype
        return np.asarray(result.values(x))

    np.testing.assert_allclose(solve(np.full((3, 2), 1.0)), 1.0)
    np.testing.assert_allclose(solve(np.full((3, 2), 2.0)), 2.0)
    np.testing.assert_allclose(solve(np.array([[0.5, 3.0]] * 3)), [[0.5, 3.0]] * 3)
    np.testing.assert_allclose(solve([0.25, 1.5]), [[0.25, 1.5]] * 3)  # a list, broadcast
    np.testing.assert_allclose(solve(jax.numpy.full((3, 2), 0.75)), 0.75)
    assert len(_device._COMPILED) == 1
    # float32 values, float64 bounds (NumPy and JAX): the loop keeps float32
    np.testing.assert_allclose(solve(np.full((3, 2), 1.0), np.float32), 1.0)
    np.testing.assert_allclose(solve(jax.numpy.full((3, 2), 2.0), np.float32), 2.0)
    assert len(_device._COMPILED) == 2

    target = jax.numpy.full((3, 2), 0.25)
    problem = optim.Problem()
    x = problem.variables(jax.numpy.full((3, 2), 5.0), lower=np.zeros((3, 2)))
    problem.add(_pulled_to, x[np.arange(3)], data=(target,))
    result = optim.solve(problem, solver="cholesky", max_iterations=50)
    np.testing.assert_allclose(np.asarray(result.values(x)), 0.25)
    watched = [weakref.ref(target), weakref.ref(problem.variable_sets[0].initial)]
    del problem, x, result, target
    gc.collect()
    assert [w() for w in watched] == [None, None]


@pytest.mark.skipif(not (SHARED / "sphere2500.g2o").is_file(), reason="no ../shared data")
def test_sphere2500_reaches_gtsams_optimum_on_the_device_path():
    """sphere2500 (2,500 poses, 14,994 unknowns: PCG, no N x N) through the device back end
    on the CPU reaches GTSAM's best (the benchmark's recorded error) to 1 + 1e-6."""
    import json

    pose_graph = example("pose_graph")
    results = json.loads((ROOT / "benchmarks" / "results_pose_graph.json").read_text())
    best = min(r["gtsam best error"] for r in results["rows"] if r["graph"] == "sphere2500")
    _, _, result, _ = pose_graph.run(SHARED / "sphere2500.g2o", "torch", solver="pcg",
                                     report=None)  # fmt: skip
    assert result.chi2 / 2 <= best * (1 + 1e-6)


# --- memory: blocks, never N x N ----------------------------------------------------------------

MEMORY_PROBE = textwrap.dedent(
    """
    import sys
    import numpy as np, torch
    from xform import SE3, optim

    def graph(poses):
        rng = np.random.default_rng(0)
        steps = np.concatenate([rng.normal(0, 0.1, (poses, 3)) + [1.0, 0, 0],
                                rng.normal(0, 0.05, (poses, 3))], 1)
        i = np.concatenate([np.arange(poses - 1), rng.integers(0, poses, poses // 10)])
        j = np.concatenate([np.arange(1, poses), rng.integers(0, poses, poses // 10)])
        truth = SE3.exp(np.cumsum(steps, 0))  # a drifting trajectory
        measured = (truth[i].inverse() @ truth[j]) @ SE3.exp(rng.normal(0, 0.01, (len(i), 6)))
        start = (truth @ SE3.exp(rng.normal(0, 0.05, (poses, 6)))).to_torch()
        problem = optim.Problem()
        x = problem.variables(start)
        problem.fix(x[0])
        problem.add(edge, x[i], x[j], data=(measured.inverse().to_torch(),), jacobian_fn=both)
        return problem

    def edge(a, b, z):
        return (z @ (a.inverse() @ b)).log()

    def both(a, b, z):  # r = log(Z^-1 A^-1 B), its Jacobians in right perturbations of A, B
        relative = a.inverse() @ b
        error = z @ relative
        right = error.jlog()
        return error.log(), [-(right @ relative.inverse().adjoint()), right]

    poses, planted = int(sys.argv[1]), int(sys.argv[2])
    # a small one first: the kernels it compiles and loads are not the solve's arrays
    optim.solve(graph(50), solver="pcg", max_iterations=1, damping=1.0)
    problem = graph(poses)
    import threading, time

    def resident():  # MB, now (the peak of the process's life would hide the solve's)
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    peak, done = [resident()], threading.Event()

    def watch():
        while not done.is_set():
            peak.append(resident())
            time.sleep(0.002)

    before = resident()
    watcher = threading.Thread(target=watch)
    watcher.start()
    if planted:  # what an N x N array of the planted size costs: the probe must see it
        np.ones((planted, planted)).sum()
    # a well-damped step: PCG converges in a few dozen products, the memory is the point
    result = optim.solve(problem, solver="pcg", max_iterations=1, damping=1.0)
    done.set()
    watcher.join()
    assert np.isfinite(float(result.cost))
    print(max(peak) - before)
    """
)


def _solve_memory(poses: int, planted: int = 0) -> float:
    """MB the device path's solve adds to the peak of a process (a fresh one)."""
    run = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(poses), str(planted)],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return float(run.stdout.strip().splitlines()[-1])


def test_a_20k_pose_graph_solves_without_an_n_by_n_array():
    """120,000 unknowns: H as N x N would be 115 GB; its blocks are ~20 MB. The solve adds
    under 200 MB to the process's peak, and the probe sees a 6,000 x 6,000 array (288
    MB) where one is made."""
    assert _solve_memory(20_000) < 200
    assert _solve_memory(200, planted=6000) > 200


# --- a base install: no SciPy, no PyTorch, no JAX ---------------------------------------------

BLOCKED = textwrap.dedent(
    """
    import importlib.abc, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("scipy", "torch", "jax", "jaxlib", "pypardiso",
                                      "sksparse", "cvxopt", "cholespy", "nvmath"):
                raise ImportError(f"{name} is blocked for this test")
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def test_optim_imports_and_solves_on_a_base_install():
    """warp-lang and NumPy only: `from xform import optim` works, and a NumPy problem (with
    its Jacobians given) solves on the device back end on the CPU, to the fit's truth."""
    code = BLOCKED + textwrap.dedent(
        """
        import numpy as np
        from xform import optim
        rng = np.random.default_rng(0)
        t = np.linspace(0, 1, 50)
        y = 2.0 * np.exp(-1.5 * t) + 0.3

        def residual(p, t, y):
            return p[..., :1] * np.exp(p[..., 1:2] * t) + p[..., 2:3] - y

        def jacobian(p, t, y):  # (..., 50, 1, 3)
            e = np.exp(p[..., 1:2] * t)
            return residual(p, t, y), [np.stack([e, p[..., :1] * t * e, np.ones_like(e)], -1)]

        problem = optim.Problem()
        p = problem.variables(np.array([[1.0, -1.0, 0.0]]))
        problem.add(residual, p[np.zeros(50, int)], data=(t[:, None], y[:, None]),
                    jacobian_fn=jacobian)
        result = optim.solve(problem)
        assert result.converged, result.reason
        np.testing.assert_allclose(result.values(p)[0], [2.0, -1.5, 0.3], atol=1e-8)
        assert "scipy" not in sys.modules
        print("ok")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("ok")


# --- batches: many problems of one structure ---------------------------------------------------


def _windows(count: int, cameras: int = 4, seed: int = 0):
    """`count` small bundle adjustments of one structure (sliding windows: the same
    observations' pattern, other values): Ladybug-49's first cameras, each window's
    cameras and points perturbed."""
    problem, variables = _bundle("torch", cameras)
    rng = np.random.default_rng(seed)
    poses, intrinsics, points = (problem.variable_sets[k].initial for k in range(3))
    cost = problem.costs[0]
    values = []
    for _ in range(count):
        values.append((
            poses @ SE3.exp(torch.from_numpy(rng.normal(0, 1e-3, (len(poses), 6)))),
            intrinsics.clone(),
            points + torch.from_numpy(rng.normal(0, 1e-2, points.shape)),
        ))  # fmt: skip
    return cost, values


def _batched(cost, values):
    problem = optim.Problem(batch=len(values))
    sets = [
        problem.variables(SE3(torch.stack([v[0].position for v in values]),
                              torch.stack([v[0].quaternion for v in values]))),  # fmt: skip
        problem.variables(torch.stack([v[1] for v in values])),
        problem.variables(torch.stack([v[2] for v in values])),
    ]
    data = torch.stack([cost.data[0]] * len(values))
    problem.add(cost.residual_fn, *(s[i] for s, i in zip(sets, cost.instance_indices)),
                data=data, jacobian_fn=cost.jacobian_fn)  # fmt: skip
    return problem, sets


def test_a_batch_of_bundle_adjustments_eliminates_points_per_problem():
    """`Problem(batch=B)` with `eliminate=`: the batched Schur path, each problem's cost
    and solution those of its own solve."""
    cost, values = _windows(3)
    problem, sets = _batched(cost, values)
    batched = optim.solve(problem, eliminate=sets[2], max_iterations=8)
    assert tuple(batched.cost.shape) == (3,)
    for k, (poses, intrinsics, points) in enumerate(values):
        alone = optim.Problem()
        s = [alone.variables(poses), alone.variables(intrinsics), alone.variables(points)]
        alone.add(cost.residual_fn, *(x[i] for x, i in zip(s, cost.instance_indices)),
                  data=cost.data, jacobian_fn=cost.jacobian_fn)  # fmt: skip
        single = optim.solve(alone, eliminate=s[2], max_iterations=8, solver="cholesky")
        np.testing.assert_allclose(float(batched.cost[k]), float(single.cost), rtol=1e-9)
        np.testing.assert_allclose(batched.values(sets[2])[k].numpy(),
                                   single.values(s[2]).numpy(), rtol=1e-7, atol=1e-9)  # fmt: skip


def test_jax_vmap_of_a_solve_with_a_schur_complement():
    """`jax.vmap` of `optim.solve(..., eliminate=points)`: each problem of the map as its
    own solve; the compiled loop kept per structure (a second batch compiles nothing)."""
    import jax.numpy as jnp

    ba = example("bundle_adjustment")
    problem, variables = _bundle("jax", 3)
    cost = problem.costs[0]
    poses0, intrinsics0, points0 = (variables[k] for k in range(3))
    rng = np.random.default_rng(1)
    noise = jnp.asarray(rng.normal(0, 1e-2, (2, *problem.variable_sets[2].initial.shape)))

    def solve(points):
        p = optim.Problem()
        s = [p.variables(problem.variable_sets[0].initial),
             p.variables(problem.variable_sets[1].initial), p.variables(points)]  # fmt: skip
        p.add(ba.reprojection, *(x[i] for x, i in zip(s, cost.instance_indices)),
              data=cost.data, jacobian_fn=cost.jacobian_fn)  # fmt: skip
        result = optim.solve(p, eliminate=s[2], max_iterations=5, relative_decrease=0.0,
                             step_norm=0.0)  # fmt: skip
        return result.cost

    start = problem.variable_sets[2].initial
    mapped = jax.jit(jax.vmap(solve))(start[None] + noise)
    for k in range(2):
        np.testing.assert_allclose(float(mapped[k]), float(solve(start + noise[k])), rtol=1e-9)
    del poses0, intrinsics0, points0


# --- implicit gradients through the device path -------------------------------------------------


def test_a_jitted_solve_returns_its_counts():
    """Every number of a result leaves a `jax.jit` as an array: `solves` too (it was the
    trace's own value, left inside the implicit-gradient rule: an UnexpectedTracerError),
    equal to the same solve's outside the trace, with rejected steps among them."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    targets = jax.numpy.asarray([4.0, 9.0, 0.25, 100.0])

    def solve(start):
        problem = optim.Problem()
        x = problem.variables(start, name="x")
        problem.add(lambda x, t: x * x * x - t, x[np.arange(4)], data=(targets[:, None],))
        result = optim.solve(problem, solver="cholesky", damping=1e-6)
        return result.cost, result.iterations, result.solves, result.converged

    start = jax.numpy.full((4, 1), 0.3)
    eager, jitted = solve(start), jax.jit(solve)(start)
    assert int(jitted[2]) == int(eager[2]) > int(eager[1]) == int(jitted[1])
    assert bool(jitted[3]) and bool(eager[3])
    np.testing.assert_allclose(float(jitted[0]), float(eager[0]), atol=1e-20)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_implicit_gradients_on_the_device_path_equal_the_sparse_paths(framework):
    """d loss(solution) / d data through a pose graph solved on the device back end (its
    Hessian block-sparse, its solve PCG or dense) equals the CPU sparse path's."""
    rng = np.random.default_rng(3)
    n = 8
    i = np.concatenate([np.arange(n - 1), [0, 2, 5]])
    j = np.concatenate([np.arange(1, n), [4, 7, 1]])
    truth = SE3.sample_uniform((n,), seed=rng)
    z = truth[i].inverse() @ truth[j] @ SE3.exp(0.05 * rng.normal(size=(len(i), 6)))
    convert = {"torch": lambda a: torch.from_numpy(np.array(a)),
               "jax": jax.numpy.asarray}[framework]  # fmt: skip
    start = truth.to_torch() if framework == "torch" else truth.to_jax()

    def edge(ti, tj, position, quaternion):
        return (SE3(position, quaternion).inverse() @ (ti.inverse() @ tj)).log()

    def loss(positions, solver):
        problem = optim.Problem()
        x = problem.variables(start)
        problem.fix(x[0])
        problem.add(edge, x[i], x[j], data=(positions, convert(z.quaternion)))
        solution = optim.solve(problem, relative_decrease=0.0, step_norm=1e-13,
                               solver=solver).values(x)  # fmt: skip
        return (solution.position**2).sum() + solution.quaternion[:, 1].sum()

    gradients = {}
    for solver in (None, "cholesky", "pcg"):
        if framework == "torch":
            positions = convert(z.position).requires_grad_(True)
            loss(positions, solver).backward()
            gradients[solver] = positions.grad.numpy()
        else:
            gradients[solver] = np.asarray(jax.grad(loss)(convert(z.position), solver))
    for solver in ("cholesky", "pcg"):
        np.testing.assert_allclose(gradients[solver], gradients[None], rtol=1e-7, atol=1e-9)


# --- JAX: sharding a batch of problems across devices ------------------------------------

SHARDED = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    jax.config.update("jax_enable_x64", True)
    from xform import SE3, optim

    rng = np.random.default_rng(0)
    targets = SE3.exp(rng.normal(size=(16, 3, 6))).to_jax()  # 16 problems, 3 priors each
    starts = SE3.exp(0.1 * rng.normal(size=(16, 1, 6))).to_jax()

    def solve(start, target):
        problem = optim.Problem()
        x = problem.variables(start)
        problem.add(lambda a, z: (z.inverse() @ a).log(), x[np.zeros(3, int)], data=(target,))
        result = optim.solve(problem, max_iterations=20)
        return result.values(x).log()[0], result.cost

    mesh = Mesh(np.array(jax.devices()), ("problems",))
    sharded = jax.jit(jax.shard_map(jax.vmap(solve), mesh=mesh, in_specs=P("problems"),
                                    out_specs=P("problems")))
    place = NamedSharding(mesh, P("problems"))
    tangents, costs = sharded(jax.device_put(starts, place), jax.device_put(targets, place))
    assert len(jax.devices()) == 8 and costs.shape == (16,)
    assert len(costs.sharding.device_set) == 8, costs.sharding
    alone = jax.jit(jax.vmap(solve))(starts, targets)
    np.testing.assert_allclose(np.asarray(tangents), np.asarray(alone[0]), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(costs), np.asarray(alone[1]), rtol=1e-9, atol=1e-12)
    # the mean of 3 poses minimises the sum of squared logs: each problem converged there
    print("ok")
    """
)


def test_a_batch_of_problems_shards_across_eight_devices():
    """`jax.shard_map` of `jax.vmap(optim.solve)` over 8 host devices: each device solves its
    share of 16 problems, the results sharded as the inputs, equal to one device's."""
    run = subprocess.run([sys.executable, "-c", SHARDED], capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.strip().endswith("ok")


# --- the examples on `--device cpu` -------------------------------------------------------


SMALL_GRID = str(ROOT / "data" / "pose_graphs" / "smallGrid3D.g2o")


@pytest.mark.parametrize(
    ("arguments", "framework"),
    [
        (["pose_graph.py", SMALL_GRID], "torch"),
        (["pose_graph.py", SMALL_GRID, "--solver", "cholesky"], "torch"),
        (["pose_graph.py", SMALL_GRID, "--solver", "cholesky"], "jax"),
        (["bundle_adjustment.py", "DUBROVNIK", "--iterations", "8"], "jax"),
        (["inverse_kinematics.py", "--targets", "20"], "torch"),
    ],
    ids=["pose_graph-torch", "pose_graph_device_solver-torch", "pose_graph_device_solver-jax",
         "bundle_adjustment-jax", "inverse_kinematics-torch"],  # fmt: skip
)
def test_the_examples_take_a_device(arguments, framework, capsys):
    """Each example with `--device cpu` (the flag a GPU's run takes as `--device cuda`)
    runs to its final line; the pose graph also through the device back end's solver, in
    both frameworks (the flag is parsed by the same code in either). Through each
    example's `main`, in this process: tests/test_examples.py runs each example as a user
    does, in a process of its own, and its imports (5 s) need not be paid again here."""
    if arguments[1] == "DUBROVNIK":
        gtsam = pytest.importorskip("gtsam")
        arguments = [arguments[0], gtsam.findExampleDataFile("dubrovnik-3-7-pre.txt"),
                     *arguments[2:]]  # fmt: skip
    main = example(arguments[0].removesuffix(".py")).main
    code = main([*arguments[1:], "--framework", framework, "--device", "cpu"])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-3000:]
    final = printed.out.strip().splitlines()[-1]
    assert final.startswith("final ") and " seconds=" in final, final
    if arguments[0] == "pose_graph.py":  # GTSAM's optimum, whichever the solver
        chi2 = float(final.split()[1].split("=")[1])
        assert chi2 / 2 <= example("pose_graph").SMALL_GRID_GTSAM_ERROR * (1 + 1e-6)
