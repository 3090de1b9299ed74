"""Pose-graph optimisation on the standard graphs: xform (PyTorch, JAX) against GTSAM.

    python -m benchmarks.pose_graph [--graphs NAME ...] [--repeats N] [--out FILE.json]
    python -m benchmarks.pose_graph --compiled --graphs tinyGrid3D smallGrid3D [--out ...]

For every graph (default: all of `../shared/data/pose_graphs`), from the chordal start:
- xform through PyTorch and through JAX (interop_examples/pose_graph.py's `run`): chi2,
  iterations, seconds (initialisation + optimisation), the solve alone against GTSAM's LM,
  and per linearisation the split into residuals and Jacobians (xform's ops), assembly
  (NumPy) and solve (sparse Cholesky);
- GTSAM 4.3.0: its chordal start (InitializePose3; in 2D LAGO, on the edges with the
  diagonals of their information, since it refuses full noise models) and LM with its
  default parameters, as a user runs it (it stops at a relative decrease of 1e-5), and the
  same with the SPEC's 1e-10;
- GTSAM's error of the vertices xform writes, against GTSAM's best (the lower of LM from
  the file's vertices and from its chordal start, to a relative decrease of 1e-12);
- for the 3D graphs, SE-Sync's objective at xform's solution against its certified f*.

With `--compiled`: the LM alone against GTSAM's LM (`compiled_comparison`): JAX with the
whole solve compiled as one function (no Python between iterations), the eager solves in
JAX and torch, and on a graph small enough for a dense solve the eager floor through torch
and on NumPy (`eager_floor`: the same algorithm by hand with the same ops and nothing
else).

Each timing is the median of `--repeats` runs after one untimed warm-up run (which loads
Warp's kernels and compiles JAX's functions; that first run's time is reported too, and
its overhead over the median, the compilation and loading, apart), the frameworks and
GTSAM interleaved. Thread pools are limited to one thread for all (GTSAM's
wheel is single-threaded; the per-edge arrays are too small for PyTorch's pool to help).
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "pose_graphs"
sys.path.insert(0, str(REPO / "interop_examples"))

import pose_graph  # noqa: E402
from posegraph.framework import array_in, element_in, framework, indices_in  # noqa: E402
from posegraph.optimise import start_compiles  # noqa: E402
from posegraph.problem import make_problem  # noqa: E402

from benchmarks.run import median_time  # noqa: E402
from xform.optim._installed import DENSE_BELOW  # noqa: E402
from xform.optim._sparse import available_solvers  # noqa: E402
from xform.optim.g2o import read_g2o  # noqa: E402

# SE-Sync's certified optima (Rosen et al., IJRR 2019, Table 2), from the data's README.
F_STAR = {"sphere2500": 1.687e3, "parking-garage": 1.263e0}
GRAPHS = [
    "tinyGrid3D",
    "smallGrid3D",
    "sphere2500",
    "parking-garage",
    "intel",
    "MIT",
    "manhattan",
    "CSAIL",
]


# --- GTSAM -----------------------------------------------------------------------------


def gtsam_graph(path: Path, is_3d: bool):
    import gtsam

    graph, initial = gtsam.readG2o(str(path), is_3d)
    if is_3d:
        anchor = initial.atPose3(0) if initial.exists(0) else gtsam.Pose3()
        graph.add(gtsam.PriorFactorPose3(0, anchor, gtsam.noiseModel.Isotropic.Sigma(6, 1e-4)))
    else:
        anchor = initial.atPose2(0) if initial.exists(0) else gtsam.Pose2()
        graph.add(gtsam.PriorFactorPose2(0, anchor, gtsam.noiseModel.Isotropic.Sigma(3, 1e-4)))
    return graph, initial


def lago_graph(path: Path):
    """The 2D graph with diagonal noise models (the information matrices' diagonals), which
    GTSAM's LAGO accepts."""
    import gtsam

    parsed = read_g2o(path)
    graph = gtsam.NonlinearFactorGraph()
    for (i, j), (x, y), theta, information in zip(
        parsed.edge_ids, parsed.edge_positions, parsed.edge_rotations, parsed.edge_information
    ):
        noise = gtsam.noiseModel.Diagonal.Precisions(np.diag(information))
        graph.add(gtsam.BetweenFactorPose2(int(i), int(j), gtsam.Pose2(x, y, theta), noise))
    graph.add(gtsam.PriorFactorPose2(0, gtsam.Pose2(), gtsam.noiseModel.Isotropic.Sigma(3, 1e-4)))
    return graph


def lm_params(relative_tolerance: float | None):
    import gtsam

    params = gtsam.LevenbergMarquardtParams()
    if relative_tolerance is not None:
        params.setRelativeErrorTol(relative_tolerance)
        params.setAbsoluteErrorTol(0.0)
        params.setMaxIterations(1000)
    return params


def gtsam_run(path: Path, is_3d: bool, relative_tolerance: float | None) -> dict:
    """GTSAM's chordal start and LM, timed (not the reading)."""
    import gtsam

    graph, _ = gtsam_graph(path, is_3d)
    start_graph = graph if is_3d else lago_graph(path)
    start = time.perf_counter()
    if is_3d:
        initial = gtsam.InitializePose3.initialize(start_graph)
    else:
        initial = gtsam.lago.initialize(start_graph)
    started = time.perf_counter()
    optimizer = gtsam.LevenbergMarquardtOptimizer(graph, initial, lm_params(relative_tolerance))
    result = optimizer.optimize()
    end = time.perf_counter()
    return {
        "error": graph.error(result),
        "iterations": optimizer.iterations(),
        "seconds": end - start,
        "init seconds": started - start,
        "lm seconds": end - started,
    }


def gtsam_best(path: Path, is_3d: bool) -> float:
    """The lower of GTSAM's LM errors from the file's vertices and from its chordal start,
    to a relative decrease of 1e-12."""
    import gtsam

    graph, initial = gtsam_graph(path, is_3d)
    if is_3d:
        chordal = gtsam.InitializePose3.initialize(graph)
    else:
        chordal = gtsam.lago.initialize(lago_graph(path))
    return min(
        graph.error(gtsam.LevenbergMarquardtOptimizer(graph, start, lm_params(1e-12)).optimize())
        for start in (initial, chordal)
    )


def gtsam_error_of_file(path: Path, written: Path, is_3d: bool) -> float:
    import gtsam

    graph, _ = gtsam_graph(path, is_3d)
    return graph.error(gtsam.readG2o(str(written), is_3d)[1])


# --- SE-Sync's objective ---------------------------------------------------------------


def se_sync_objective(problem, poses) -> float:
    """sum kappa |R_j - R_i R_ij|_F^2 + tau |t_j - t_i - R_i t_ij|^2, with tau = 3 / tr of the
    inverse translation block of the information and kappa = 3 / (2 tr) of the inverse
    rotation block (SE-Sync's reading of g2o files)."""
    information = problem.information
    tau = 3.0 / np.trace(np.linalg.inv(information[:, :3, :3]), axis1=1, axis2=2)
    kappa = 3.0 / (2.0 * np.trace(np.linalg.inv(information[:, 3:, 3:]), axis1=1, axis2=2))
    rotations = poses.rotation().as_matrix()
    measured = problem.measurements.rotation().as_matrix()
    i, j = problem.i, problem.j
    rotation_terms = ((rotations[j] - rotations[i] @ measured) ** 2).sum(axis=(1, 2))
    predicted = np.einsum("eab,eb->ea", rotations[i], problem.measurements.position)
    translation_terms = ((poses.position[j] - poses.position[i] - predicted) ** 2).sum(axis=1)
    return float((kappa * rotation_terms + tau * translation_terms).sum())


# --- xform -----------------------------------------------------------------------------


# The kinds of xform run per graph: PyTorch and JAX as the example runs them, and on the
# graphs small enough for a dense solve, JAX with the start and the solve compiled as one
# call (`posegraph.optimise.chordal_and_optimise`; its first call compiles, reported apart).
KINDS = {"torch": ("torch", False), "jax": ("jax", False), "jax compiled": ("jax", True)}


def xform_run(path: Path, kind: str, out: Path | None = None) -> dict:
    framework_name, compile_asked = KINDS[kind]
    problem, _, result, seconds = pose_graph.run(
        path, framework_name, "chordal", out=out, report=None, compiled=compile_asked
    )
    linearisations = result.solves + 1
    compiled = not result.history  # one compiled call: its parts are not timed apart
    timings = {} if compiled else {k: v / linearisations for k, v in vars(result.timings).items()}
    return {
        "init seconds": seconds - result.seconds,
        "lm seconds": result.seconds,
        "compiled": compiled,
        "chi2": result.chi2,
        "error": result.chi2 / 2,
        "iterations": result.iterations,
        "solves": result.solves,
        "seconds": seconds,
        "per linearisation": timings,
        "poses": result.poses,
        "problem": problem,
    }


def solver_comparison(name: str, repeats: int) -> dict:
    """Each installed sparse solver on the damped normal equations of the graph at its
    chordal start: the first solve (ordering and symbolic analysis included) and the median
    of the next ones (a numeric factorisation and solve where the solver keeps the
    analysis)."""
    from posegraph.initial import chordal
    from posegraph.optimise import edge_residuals_and_jacobians

    from xform.optim._sparse import block_pattern, make_solver

    fw = framework("numpy")
    problem = make_problem(read_g2o(DATA / f"{name}.g2o"), fw)
    poses = chordal(problem, fw)
    r, j_i, j_j = edge_residuals_and_jacobians(
        poses[problem.i], poses[problem.j], problem.measurements.inverse()
    )
    omega = problem.information
    jt_i, jt_j = np.swapaxes(j_i, 1, 2), np.swapaxes(j_j, 1, 2)
    pattern, slots = block_pattern(
        problem.vertices - 1, problem.group.tangent_dim, problem.i - 1, problem.j - 1
    )
    blocks = [jt_i @ omega @ j_i, jt_i @ omega @ j_j, jt_j @ omega @ j_j]
    values = pattern.assemble(slots, np.concatenate([b.ravel() for b in blocks]))
    values[pattern.diagonal] *= 1 + 1e-10
    d = problem.group.tangent_dim
    g = np.zeros((problem.vertices, d))
    np.add.at(g, problem.i, (jt_i @ omega @ r[..., None])[..., 0])
    np.add.at(g, problem.j, (jt_j @ omega @ r[..., None])[..., 0])
    rhs = -g[1:].ravel()
    timings = {}
    for solver_name in [name for name in available_solvers() if name != "dense"]:
        solve = make_solver(pattern, solver_name)
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            solution = solve(values, rhs)
            times.append(time.perf_counter() - start)
        residual = np.abs(pattern.full_matrix(values) @ solution - rhs).max() / np.abs(rhs).max()
        timings[solver_name] = {
            "first": times[0],
            "next": statistics.median(times[1:]),
            "relative residual": float(residual),
        }
        print(
            f"  {name} {solver_name}: first solve {1e3 * times[0]:.1f} ms, then "
            f"{1e3 * timings[solver_name]['next']:.1f} ms (relative residual {residual:.1e})"
        )
    return {"graph": name, "unknowns": pattern.size, "stored entries": pattern.nnz, **timings}


def edge_comparison(name: str, repeats: int) -> dict:
    """The whitened residuals and Jacobians of every edge at the chordal start, per
    framework: the groups' methods (`edge_residuals_and_jacobians`, then U times each) and
    the example's one kernel (`edge_jacobians`), the median of `10 * repeats` calls after two
    (under `jax.jit` in JAX, as the solver calls them)."""
    from posegraph.initial import chordal
    from posegraph.optimise import edge_jacobians, edge_residuals_and_jacobians

    from xform import optim

    row = {"graph": name}
    for framework_name in ("torch", "jax"):
        fw = framework(framework_name)
        problem = make_problem(read_g2o(DATA / f"{name}.g2o"), fw)
        poses = element_in(fw, chordal(problem, fw))
        arguments = (
            poses[indices_in(fw, problem.i)],
            poses[indices_in(fw, problem.j)],
            element_in(fw, problem.measurements).inverse(),
            optim.sqrt_information(array_in(fw, problem.information)),
        )

        def by_methods(poses_i, poses_j, measurements_inverse, whitening):
            parts = edge_residuals_and_jacobians(poses_i, poses_j, measurements_inverse)
            return [(whitening @ parts[0][..., None])[..., 0]] + [whitening @ j for j in parts[1:]]

        def seconds(function, fw=fw, arguments=arguments):
            call = fw.jit(function)
            return median_time(
                lambda: fw.ready(call(*arguments)), budget=0.0, min_repeats=10 * repeats
            )

        row[framework_name] = {
            "methods": seconds(by_methods),
            "one kernel": seconds(edge_jacobians),
        }
        print(
            f"  {name} {framework_name}: edges by the methods "
            f"{1e3 * row[framework_name]['methods']:.2f} ms, by one kernel "
            f"{1e3 * row[framework_name]['one kernel']:.2f} ms"
        )
    return row


def eager_floor(problem, start_poses, fw):
    """The least an eager Levenberg-Marquardt solve of a small graph costs in `fw`: the
    solver's algorithm (the damping from 1e-10 of diag(H), a third smaller after a good step
    and ten times larger after a rejected one, where the solver follows Nielsen's rule: the
    small graphs reject no step; the example's stopping rule) written out by hand with the
    same ops and nothing else: per linearisation the gathers of the edges' poses and the
    example's one edge kernel, the normal equations dense by two `bincount`s, a dense
    Cholesky, and per step `exp`, a product and a normalisation. No problem, layout,
    pattern, bounds, masks or timings: what `xform.optim` adds to this is its generality.
    Returns `(poses, chi2, iterations)`, the poses read into NumPy as `optimise` gives them;
    meant for graphs below `DENSE_BELOW` unknowns."""
    from posegraph.edges import whitened_edges
    from posegraph.optimise import INITIAL_DAMPING, MAX_ITERATIONS, RELATIVE_DECREASE

    from xform import optim, to_numpy
    from xform.optim._sparse import cholesky_solve  # LAPACK's, called directly

    n, d = problem.vertices, problem.group.tangent_dim
    group = problem.group
    i, j = indices_in(fw, problem.i), indices_in(fw, problem.j)
    measurements_inverse = element_in(fw, problem.measurements).inverse()
    whitening = optim.sqrt_information(array_in(fw, problem.information))
    rows_i = problem.i[:, None] * d + np.arange(d)
    rows_j = problem.j[:, None] * d + np.arange(d)

    def entries(a, b):
        return (a[:, :, None] * (n * d) + b[:, None, :]).ravel()

    hessian_slots = np.concatenate(
        [entries(rows_i, rows_i), entries(rows_i, rows_j), entries(rows_j, rows_i),
         entries(rows_j, rows_j)]
    )  # fmt: skip
    gradient_slots = np.concatenate([rows_i.ravel(), rows_j.ravel()])

    def linearise(poses):
        r, j_i, j_j = (
            to_numpy(x)
            for x in whitened_edges(poses[i], poses[j], measurements_inverse, whitening)
        )
        return r, j_i, j_j, 0.5 * float(np.sum(r * r))

    poses = element_in(fw, start_poses)
    r, j_i, j_j, cost = linearise(poses)
    damping, iterations = INITIAL_DAMPING, 0
    for _ in range(MAX_ITERATIONS):
        jt_i, jt_j = np.swapaxes(j_i, 1, 2), np.swapaxes(j_j, 1, 2)
        blocks = [jt_i @ j_i, jt_i @ j_j, jt_j @ j_i, jt_j @ j_j]
        hessian = np.bincount(
            hessian_slots, np.concatenate([b.ravel() for b in blocks]), minlength=(n * d) ** 2
        ).reshape(n * d, n * d)[d:, d:]  # vertex 0 fixed
        gradient = np.bincount(
            gradient_slots,
            np.concatenate([(jt_i @ r[..., None]).ravel(), (jt_j @ r[..., None]).ravel()]),
            minlength=n * d,
        )[d:]
        hessian[np.diag_indices_from(hessian)] *= 1.0 + damping
        step = np.concatenate([np.zeros(d), cholesky_solve(np.asfortranarray(hessian), -gradient)])
        trial = (poses @ group.exp(array_in(fw, step.reshape(n, d)))).normalize()
        trial_r, trial_j_i, trial_j_j, trial_cost = linearise(trial)
        if trial_cost < cost:
            decrease = (cost - trial_cost) / cost
            poses, r, j_i, j_j, cost = trial, trial_r, trial_j_i, trial_j_j, trial_cost
            iterations += 1
            damping /= 3.0
            if decrease < RELATIVE_DECREASE:
                break
        else:
            damping *= 10.0
    return poses.to_numpy(), 2.0 * cost, iterations


def compiled_comparison(name: str, repeats: int) -> dict:
    """JAX with the whole Levenberg-Marquardt solve compiled as one function
    (`posegraph.optimise.compiled_solve`), from xform's chordal start, against GTSAM's LM
    from its own (both with their default stopping rules, as in `benchmark`): the first
    call (compilation, or loading it from JAX's cache on disk) and the median warm call,
    the LM alone (the starts are not timed), interleaved with GTSAM's."""
    from posegraph.initial import chordal
    from posegraph.optimise import compiled_solve, optimise

    path = DATA / f"{name}.g2o"
    graph = read_g2o(path)
    is_3d = graph.dim == 3
    problems = {kind: make_problem(graph, framework(kind)) for kind in ("jax", "torch", "numpy")}
    fw, problem = framework("jax"), problems["jax"]
    start_poses = chordal(problem, framework("numpy"))  # as the example starts
    arguments = (
        element_in(fw, start_poses),
        element_in(fw, problem.measurements).inverse(),
        array_in(fw, problem.information),
    )
    solve = compiled_solve(problem, fw)
    start = time.perf_counter()
    _, chi2, iterations = fw.ready(solve(*arguments))
    first = time.perf_counter() - start
    compiled, gtsam_lm = [], []
    for _ in range(repeats):
        compiled.append(median_time(lambda: fw.ready(solve(*arguments)), budget=0.0))
        gtsam_lm.append(gtsam_run(path, is_3d, None)["lm seconds"])
    seconds, gtsam_seconds = statistics.median(compiled), statistics.median(gtsam_lm)
    # the eager solve's LM alone, timed as the compiled one is (wall, from the same start);
    # its chi2 from the timed runs themselves
    eager = []
    eager_lm = median_time(
        lambda: eager.append(optimise(problem, start_poses, fw, report=None)),
        budget=0.0,
        min_repeats=10 * repeats,
    )
    eager_chi2 = eager[-1].chi2
    # the same compiled loop as `optim.solve` keeps it per structure, called as the eager
    # solve is: the start moved into JAX and the problem made at every call
    kept = []
    kept_lm = median_time(
        lambda: kept.append(optimise(problem, start_poses, fw, compiled=True, report=None)),
        budget=0.0,
        min_repeats=10 * repeats,
    )
    # the same in torch, and the eager floor there (`eager_floor`), where it is dense
    torch_lm = median_time(
        lambda: optimise(problems["torch"], start_poses, framework("torch"), report=None),
        budget=0.0,
        min_repeats=10 * repeats,
    )
    unknowns = problem.unknowns
    floors = {}  # by framework: (seconds, chi2, iterations); NumPy: xform's ops called directly
    for floor_name in ("torch", "numpy") if unknowns < DENSE_BELOW else ():
        runs = []
        floor_seconds = median_time(
            lambda runs=runs, name=floor_name: runs.append(
                eager_floor(problems[name], start_poses, framework(name))
            ),
            budget=0.0,
            min_repeats=10 * repeats,
        )
        floors[floor_name] = (floor_seconds, runs[-1][1], runs[-1][2])
    floor, floor_chi2, floor_iterations = floors.get("torch", (None, None, None))
    numpy_floor, numpy_floor_chi2, _ = floors.get("numpy", (None, None, None))
    row = {
        "graph": name,
        "unknowns": unknowns,
        "chi2": float(chi2),
        "eager chi2": eager_chi2,
        "iterations": int(iterations),
        "first call seconds": first,
        "lm seconds": seconds,
        "eager lm seconds": eager_lm,
        "kept compiled lm seconds": kept_lm,
        "kept compiled chi2": kept[-1].chi2,
        "torch eager lm seconds": torch_lm,
        "torch eager floor seconds": floor,
        "torch eager floor chi2": floor_chi2,
        "torch eager floor iterations": floor_iterations,
        "numpy eager floor seconds": numpy_floor,
        "numpy eager floor chi2": numpy_floor_chi2,
        "gtsam lm seconds": gtsam_seconds,
        "gtsam lm ratio": seconds / gtsam_seconds,
        "gtsam lm ratio per round": [x / g for x, g in zip(compiled, gtsam_lm)],
    }
    print(
        f"  {name} ({row['unknowns']} unknowns): JAX compiled LM {1e3 * seconds:.3f} ms "
        f"({row['gtsam lm ratio']:.2f}x GTSAM's LM, {1e3 * gtsam_seconds:.3f} ms; eager "
        f"{1e3 * row['eager lm seconds']:.2f} ms), first call {first:.2f} s, chi2 "
        f"{row['chi2']:.12g} (eager {row['eager chi2']:.12g}), {row['iterations']} iterations"
    )
    print(
        f"  {name}: the compiled loop as optim.solve keeps it, called as the eager solve is "
        f"(arrays into JAX, the problem made) {1e3 * kept_lm:.2f} ms "
        f"({kept_lm / gtsam_seconds:.2f}x GTSAM's LM), chi2 {kept[-1].chi2:.12g}"
    )
    print(
        f"  {name}: torch eager LM {1e3 * torch_lm:.2f} ms"
        + (
            f", its eager floor {1e3 * floor:.2f} ms (chi2 {floor_chi2:.12g}, "
            f"{floor_iterations} iterations), on NumPy {1e3 * numpy_floor:.2f} ms"
            if floor is not None
            else ""
        )
    )
    return row


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def benchmark(names: list[str], repeats: int) -> list[dict]:
    rows = []
    for name in names:
        path = DATA / f"{name}.g2o"
        graph = read_g2o(path)
        is_3d = graph.dim == 3
        print(f"== {name}", flush=True)
        row = {"graph": name, "dim": 3 if is_3d else 2, "solver": available_solvers()[0]}
        compiles = start_compiles(make_problem(graph, framework("numpy")))
        kinds = [k for k in KINDS if k != "jax compiled" or compiles]
        runs = {**{k: [] for k in kinds}, "gtsam": [], "gtsam 1e-10": []}
        first = {}
        with tempfile.TemporaryDirectory() as folder:
            written = {fw: Path(folder) / f"{fw}.g2o" for fw in kinds}
            for fw in kinds:
                first[fw] = xform_run(path, fw, out=written[fw])
            first["gtsam"] = gtsam_run(path, is_3d, None)
            for _ in range(repeats):
                for fw in kinds:
                    runs[fw].append(xform_run(path, fw))
                runs["gtsam"].append(gtsam_run(path, is_3d, None))
                runs["gtsam 1e-10"].append(gtsam_run(path, is_3d, 1e-10))
            best = gtsam_best(path, is_3d)
            row["gtsam best error"] = best
            for fw in kinds:
                last = runs[fw][-1]
                error = gtsam_error_of_file(path, written[fw], is_3d)
                row[fw] = {
                    "gtsam error of written vertices": error,
                    "within 1e-6 of gtsam best": bool(error <= best * (1 + 1e-6)),
                    "chi2": last["chi2"],
                    "iterations": last["iterations"],
                    "solves": last["solves"],
                    "seconds": median_of(runs[fw], "seconds"),
                    "seconds min": min(r["seconds"] for r in runs[fw]),
                    "first run seconds": first[fw]["seconds"],
                    "first-run overhead": first[fw]["seconds"] - median_of(runs[fw], "seconds"),
                    # each round's run over GTSAM's of the same round: the machine's speed
                    # drifts by tens of percent over a benchmark, alike for neighbours
                    "gtsam ratio per round": [
                        r["seconds"] / g["seconds"] for r, g in zip(runs[fw], runs["gtsam"])
                    ],
                    "init seconds": median_of(runs[fw], "init seconds"),
                    # the solve, from the start moved into the framework to the poses read
                    # back, against GTSAM's LM
                    "lm seconds": median_of(runs[fw], "lm seconds"),
                    "lm ratio to gtsam lm": median_of(runs[fw], "lm seconds")
                    / median_of(runs["gtsam"], "lm seconds"),
                    "compiled": last["compiled"],
                    "per linearisation": {
                        k: statistics.median(r["per linearisation"][k] for r in runs[fw])
                        for k in last["per linearisation"]
                    },
                }
                if is_3d and name in F_STAR:
                    objective = se_sync_objective(last["problem"], last["poses"])
                    row[fw]["se-sync objective"] = objective
                    row[fw]["se-sync ratio to f*"] = objective / F_STAR[name]
            for key in ("gtsam", "gtsam 1e-10"):
                last = runs[key][-1]
                row[key] = {
                    "error": last["error"],
                    "iterations": last["iterations"],
                    "seconds": median_of(runs[key], "seconds"),
                    "seconds min": min(r["seconds"] for r in runs[key]),
                    "init seconds": median_of(runs[key], "init seconds"),
                    "lm seconds": median_of(runs[key], "lm seconds"),
                }
        report_row(row)
        rows.append(row)
    return rows


def report_row(row: dict) -> None:
    g = row["gtsam"]
    print(
        f"  gtsam (default LM): error {g['error']:.10g}, {g['iterations']} iterations, "
        f"{g['seconds']:.3f} s (init {g['init seconds']:.3f} + LM {g['lm seconds']:.3f}); "
        f"to 1e-10: {row['gtsam 1e-10']['iterations']} iterations, "
        f"{row['gtsam 1e-10']['seconds']:.3f} s; best error {row['gtsam best error']:.10g}"
    )
    for fw in [k for k in KINDS if k in row]:
        r = row[fw]
        split = r["per linearisation"]
        text = (
            f"  xform {fw}: error {r['gtsam error of written vertices']:.10g} "
            f"(<= best (1 + 1e-6): {r['within 1e-6 of gtsam best']}), {r['iterations']} "
            f"iterations, {r['seconds']:.3f} s (init {r['init seconds']:.3f}; "
            f"{r['seconds'] / g['seconds']:.2f}x GTSAM, per round "
            f"{statistics.median(r['gtsam ratio per round']):.2f}x "
            f"({min(r['gtsam ratio per round']):.2f}-{max(r['gtsam ratio per round']):.2f}); "
            f"first run {r['first run seconds']:.3f} s, compilation and loading "
            f"{r['first-run overhead']:.3f} s); the solve {1e3 * r['lm seconds']:.2f} ms "
            f"({r['lm ratio to gtsam lm']:.2f}x GTSAM's LM)"
            + (
                ", compiled: one call (the start's time is in it: init ~0)"
                if r["compiled"]
                else f"; per linearisation: residuals + Jacobians "
                f"{1e3 * split['residuals']:.2f} ms, assembly {1e3 * split['assembly']:.2f} ms, "
                f"solve {1e3 * split['solve']:.2f} ms, other {1e3 * split['other']:.2f} ms"
            )
        )
        if "se-sync objective" in r:
            objective, ratio = r["se-sync objective"], r["se-sync ratio to f*"]
            text += f"; SE-Sync objective {objective:.6g} = {ratio:.4f} f*"
        print(text)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", default=GRAPHS, choices=GRAPHS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="only JAX's whole solve compiled as one function against GTSAM's LM",
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()

    def write(**parts) -> None:
        if args.out:
            machine = {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "load average before, after": [load, os.getloadavg()],
            }
            args.out.write_text(json.dumps({"machine": machine, **parts}, indent=1) + "\n")

    if args.compiled:
        print("== JAX, the whole solve compiled")
        rows = [compiled_comparison(name, args.repeats) for name in args.graphs]
        write(compiled=rows)
        return rows
    rows = benchmark(args.graphs, args.repeats)
    print("== sparse solvers")
    timed = [name for name in ("sphere2500", "parking-garage", "manhattan") if name in args.graphs]
    solvers = [solver_comparison(name, args.repeats) for name in timed]
    print("== the edges' whitened residuals and Jacobians")
    edges = [edge_comparison(name, args.repeats) for name in timed]
    write(rows=rows, solvers=solvers, edges=edges)
    return rows


if __name__ == "__main__":
    main()
