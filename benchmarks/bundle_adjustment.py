"""Bundle adjustment: xform.optim (PyTorch, JAX) against GTSAM and jaxls, side by side,
the same number of Levenberg-Marquardt iterations, on BAL Ladybug-49 and on synthetic
problems (`benchmarks/synthetic.py`), on the CPU or a CUDA device.

    python -m benchmarks.bundle_adjustment [--problems ladybug 20x1000 FILE.txt ...]
        [--device cpu|cuda] [--frameworks torch jax] [--solvers default pcg ...]
        [--peers gtsam jaxls] [--jaxls-solvers dense_cholesky] [--iterations 30]
        [--converge REL] [--repeats 2] [--seed 0] [--cache DIR] [--out FILE.json]

A problem is `ladybug` (`data/bal/problem-49-7776-pre.txt`), a BAL file, or
`CAMERASxPOINTS`, the synthetic street of that size (`--seed`; `--cache DIR` keeps it as
`.npz` for the next process, as the GPU script's one process a method does).
- xform: `interop_examples/bundle_adjustment.py`'s problem (SE3 poses, intrinsics and
  points, closed-form Jacobians), points eliminated by a Schur complement, LM from damping
  1e-4 of diag(H), with each of `--solvers`: `default` (optim.solve's choice: the CPU's
  sparse path for CPU arrays) or a named linear solver (`pcg`, `cholesky`, `cudss` run the
  device path, on CPU tensors too, where xform.optim has them).
- GTSAM 4.3 (CPU only): `SfmData.FromBalFile`, `GeneralSFMFactorCal3Bundler` factors, LM
  with `LevenbergMarquardtParams.CeresDefaults()` (its default parameters stall near 27k on
  Ladybug: `../shared/data/bal/README.md`), no gauge prior, `--iterations` (fewer where
  it can lower the cost no more: at the minimum it stops).
- jaxls (not on PyPI; skipped when absent): fetched from github.com/brentyi/jaxls into
  `peers/jaxls` (git-ignored, never committed; `peers/jaxls/COMMIT` names the commit),
  its missing dependencies into `peers/site` (`pip install --target peers/site
  loguru termcolor`); both are put on `sys.path` here. Schur complement (jaxls'
  automatic elimination) and each of `--jaxls-solvers`, `lambda_initial=1e2` (its own
  benchmark's setting), exactly `--iterations` steps, jitted, on the same device.

`--converge REL` stops each method instead where an accepted step lowers the cost by less
than REL of it (xform's `relative_decrease`, GTSAM's relative error tolerance, jaxls'
`cost_tolerance`; their other rules off), at most `--iterations`: the time of a solve.

Every final state is scored by one float64 evaluator (`bundle_adjustment.cost_of`,
`1/2 sum |r|^2` over all observations, points behind a camera included). Times exclude
reading, building and imports; each is the minimum and median of `--repeats` runs after a
first run, the methods interleaved. The first run is reported apart: for JAX (xform's and
jaxls') it holds the compilation, for all the first use of their kernels, so
`first-run overhead` = first - median is the compile and load time. `peak bytes`: the
memory a run adds at its peak (`benchmarks/devices.py`: the resident set on the CPU,
the allocator's peak on CUDA). Thread pools at one thread (GTSAM's wheel is
single-threaded).
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LADYBUG = REPO / "data" / "bal" / "problem-49-7776-pre.txt"
PEERS = REPO / "peers"
sys.path.insert(0, str(REPO / "interop_examples"))
sys.path += [str(PEERS / "jaxls" / "src"), str(PEERS / "site")]

import bundle_adjustment as example  # noqa: E402

from benchmarks import synthetic  # noqa: E402
from benchmarks.devices import (  # noqa: E402
    Peak,
    jax_device,
    machine,
    synchronize,
    use_device,
    with_device,
)
from xform import optim  # noqa: E402
from xform.optim.bal import BalProblem, read_bal, write_bal  # noqa: E402

SYNTHETIC = re.compile(r"^(\d+)x(\d+)$")


def load_problem(spec: str, seed: int, cache: Path | None) -> tuple[str, BalProblem]:
    """(name, problem) of `ladybug`, a BAL file or `CAMERASxPOINTS`."""
    if spec == "ladybug":
        return "Ladybug-49", read_bal(LADYBUG)
    match = SYNTHETIC.match(spec)
    if not match:
        return Path(spec).name, read_bal(spec)
    cameras, points = map(int, match.groups())
    name = f"synthetic {cameras} x {points}"
    kept = cache / f"bal_{cameras}x{points}_seed{seed}.npz" if cache else None
    if kept is not None and kept.exists():
        with np.load(kept) as arrays:
            return name, BalProblem(**{k: arrays[k] for k in arrays.files}, source=name)
    started = time.perf_counter()
    bal = synthetic.bal_problem(cameras, points, seed=seed)
    print(f"{name}: {len(bal.observations):,} observations, made in "
          f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
    if kept is not None:
        kept.parent.mkdir(parents=True, exist_ok=True)
        fields = ("camera_index", "point_index", "observations", "cameras", "points")
        np.savez(kept, **{k: getattr(bal, k) for k in fields})
    return name, bal


def wait(values, device: str) -> None:
    """Wait for the device's work on `values` (JAX's arrays, groups among them, are
    pytrees; PyTorch's CUDA queue is waited on whole)."""
    synchronize(device)
    if "jax" in sys.modules:
        import jax

        jax.block_until_ready(values)


def xform_runner(bal: BalProblem, framework: str, device: str, solver: str | None, stop):
    """A run of xform.optim on the problem (built anew each run, not timed)."""
    iterations, converge = stop
    build = with_device(example.build, device)

    def run() -> dict:
        problem, variables = build(bal, framework)
        with Peak(device, framework) as peak:
            synchronize(device)
            start = time.perf_counter()
            result = optim.solve(
                problem,
                eliminate=variables[2],
                max_iterations=iterations,
                relative_decrease=converge,
                step_norm=0.0,
                damping=1e-4,
                solver=solver,
            )
            wait(result.solution, device)
            seconds = time.perf_counter() - start
        solved = example.to_bal(bal, result, variables)
        return {
            "cost": example.cost_of(bal, solved.cameras, solved.points),
            "iterations": int(result.iterations),
            "solves": int(result.solves),
            "seconds": seconds,
            "peak bytes": peak.bytes,
            "per linearisation": result.timings.per(result.solves + 1),
        }

    return run


def gtsam_runner(bal: BalProblem, stop):
    import gtsam

    iterations, converge = stop
    folder = tempfile.TemporaryDirectory()
    path = Path(folder.name) / "problem.txt"
    write_bal(bal, path)
    data, graph, initial = example.gtsam_problem(path)

    def run() -> dict:
        params = gtsam.LevenbergMarquardtParams.CeresDefaults()
        params.setMaxIterations(iterations)
        params.setRelativeErrorTol(converge)
        params.setAbsoluteErrorTol(0.0)
        params.setErrorTol(0.0)
        with Peak("cpu", None) as peak:
            start = time.perf_counter()
            optimizer = gtsam.LevenbergMarquardtOptimizer(graph, initial, params)
            values = optimizer.optimize()
            seconds = time.perf_counter() - start
        # score with the common evaluator: write BAL through GTSAM (its conventions undone)
        out = gtsam.SfmData()
        for i in range(data.numberCameras()):
            out.addCamera(values.atPinholeCameraCal3Bundler(gtsam.symbol("c", i)))
        for j in range(data.numberTracks()):
            track = data.track(j)
            track.p = values.atPoint3(gtsam.symbol("p", j))
            out.addTrack(track)
        written = Path(folder.name) / "gtsam.txt"
        gtsam.writeBAL(str(written), out)
        solved = read_bal(written)  # cameras and tracks in the problem's order
        return {
            "cost": example.cost_of(bal, solved.cameras, solved.points),
            "gtsam error": graph.error(values),
            "iterations": optimizer.iterations(),
            "seconds": seconds,
            "peak bytes": peak.bytes,
        }

    return run


def jaxls_runner(bal: BalProblem, stop, linear_solver: str):
    """A jitted jaxls solve of the problem on JAX's default device (Schur elimination, as
    jaxls chooses it, then `linear_solver`; lambda_initial 1e2), or None without jaxls."""
    iterations, converge = stop
    try:
        import jax
        import jax.numpy as jnp
        import jaxls
    except ImportError:
        return None

    class Camera(jaxls.Var[jax.Array], default_factory=lambda: jnp.zeros(9)):
        """BAL camera: Rodrigues w, t, f, k1, k2."""

    class Point(jaxls.Var[jax.Array], default_factory=lambda: jnp.zeros(3)):
        """A world point."""

    def project(camera, point):
        w = camera[:3]
        theta = jnp.sqrt(jnp.sum(w * w) + 1e-30)
        axis = w / theta
        rotated = (
            point * jnp.cos(theta)
            + jnp.cross(axis, point) * jnp.sin(theta)
            + axis * jnp.dot(axis, point) * (1.0 - jnp.cos(theta))
        )
        p_camera = rotated + camera[3:6]
        p = -p_camera[:2] / p_camera[2]
        r2 = jnp.sum(p * p)
        return camera[6] * (1.0 + camera[7] * r2 + camera[8] * r2 * r2) * p

    def reprojection(values, camera, point, observed):
        return project(values[camera], values[point]) - observed

    cameras = Camera(jnp.arange(len(bal.cameras)))
    points = Point(jnp.arange(len(bal.points)))
    cost = jaxls.Cost(
        reprojection,
        (
            Camera(jnp.asarray(bal.camera_index)),
            Point(jnp.asarray(bal.point_index)),
            jnp.asarray(bal.observations),
        ),
    )
    problem = jaxls.LeastSquaresProblem(costs=[cost], variables=[cameras, points]).analyze()
    initial = jaxls.VarValues.make(
        [cameras.with_value(jnp.asarray(bal.cameras)), points.with_value(jnp.asarray(bal.points))]
    )
    device = jax_device()
    termination = jaxls.TerminationConfig(
        max_iterations=iterations,
        early_termination=converge > 0,
        cost_tolerance=converge,
        gradient_tolerance=0.0,
        parameter_tolerance=0.0,
    )

    def run() -> dict:
        with Peak(device, "jax") as peak:
            start = time.perf_counter()
            solution, report = problem.solve(
                initial,
                linear_solver=linear_solver,
                termination=termination,
                trust_region=jaxls.TrustRegionConfig(lambda_initial=1e2),
                verbose=False,
                return_summary=True,
            )
            solution = jax.block_until_ready(solution)
            seconds = time.perf_counter() - start
        return {
            "cost": example.cost_of(
                bal, np.asarray(solution[cameras]), np.asarray(solution[points])
            ),
            "iterations": int(report.iterations),
            "seconds": seconds,
            "peak bytes": peak.bytes,
        }

    return run


def runners(bal: BalProblem, args) -> dict:
    found = {}
    stop = (args.iterations, args.converge)
    for framework in args.frameworks:
        for solver in args.solvers:
            name = f"xform {framework}" + ("" if solver == "default" else f" {solver}")
            chosen = None if solver == "default" else solver
            found[name] = xform_runner(bal, framework, args.device, chosen, stop)
    if "gtsam" in args.peers and args.device == "cpu":
        found["gtsam (CeresDefaults)"] = gtsam_runner(bal, stop)
    if "jaxls" in args.peers:
        for linear_solver in args.jaxls_solvers:
            runner = jaxls_runner(bal, stop, linear_solver)
            if runner is None:
                print("jaxls is not installed: skipped (see this module's docstring)")
                break
            found[f"jaxls (Schur + {linear_solver})"] = runner
    return found


def benchmark(bal: BalProblem, args) -> dict:
    methods = runners(bal, args)
    first, runs, failed = {}, {name: [] for name in methods}, {}
    for name, runner in methods.items():  # Warp's kernels, XLA's compilation
        print(f"first run: {name}", flush=True)
        try:
            first[name] = runner()
        except Exception as error:  # a solver a build lacks: recorded, the others go on
            failed[name] = f"{type(error).__name__}: {error}"
            print(f"  failed: {failed[name]}", flush=True)
        else:
            print(f"  {first[name]['seconds']:.3f} s, cost {first[name]['cost']:.6f}", flush=True)
    for repeat in range(args.repeats):
        for name, runner in methods.items():
            if name in failed:
                continue
            row = runner()
            runs[name].append(row)
            print(
                f"  {repeat}: {name}: cost {row['cost']:.6f} after {row['iterations']} "
                f"iterations, {row['seconds']:.3f} s",
                flush=True,
            )
    summary = {name: {"error": message} for name, message in failed.items()}
    for name, rows in runs.items():
        if not rows:
            continue
        median = statistics.median(r["seconds"] for r in rows)
        summary[name] = {
            "cost": rows[-1]["cost"],
            "iterations": rows[-1]["iterations"],
            "seconds min": min(r["seconds"] for r in rows),
            "seconds median": median,
            "first run seconds": first[name]["seconds"],
            "first-run overhead": first[name]["seconds"] - median,
            "peak bytes": max(
                (r["peak bytes"] for r in rows if r["peak bytes"] is not None), default=None
            ),
        }
        for key in ("per linearisation", "gtsam error", "solves"):
            if key in rows[-1]:
                summary[name][key] = rows[-1][key]
    peers = [n for n in summary if not n.startswith("xform") and "seconds median" in summary[n]]
    if peers:
        fastest = min(peers, key=lambda n: summary[n]["seconds median"])
        for row in summary.values():
            if "seconds median" in row:
                row["ratio to fastest peer"] = (
                    row["seconds median"] / summary[fastest]["seconds median"]
                )
        summary["fastest peer"] = fastest
    return summary


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", default=["ladybug"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--frameworks", nargs="*", default=["torch", "jax"])
    parser.add_argument("--solvers", nargs="+", default=["default"])
    parser.add_argument("--peers", nargs="*", default=["gtsam", "jaxls"])
    parser.add_argument("--jaxls-solvers", nargs="+", default=["dense_cholesky"])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument(
        "--converge",
        type=float,
        default=0.0,
        metavar="REL",
        help="stop each method at a relative decrease of REL (at most --iterations)",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, help="keep synthetic problems here (.npz)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    unknown = set(args.frameworks) - {"torch", "jax"}
    if unknown:
        parser.error(f"--frameworks: torch or jax, got {sorted(unknown)}")
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    use_device(args.device)
    load = os.getloadavg()
    results = {"settings": {k: str(v) for k, v in vars(args).items()}, "problems": []}
    for spec in args.problems:
        name, bal = load_problem(spec, args.seed, args.cache)
        print(f"== {name} on {args.device}", flush=True)
        summary = benchmark(bal, args)
        for method, row in summary.items():
            if isinstance(row, dict) and "cost" in row:
                print(
                    f"{method}: cost {row['cost']:.4f}, {row['iterations']} iterations, "
                    f"{row['seconds median']:.3f} s (min {row['seconds min']:.3f}; first run "
                    f"{row['first run seconds']:.2f} s)"
                    + (f", {row['ratio to fastest peer']:.2f}x the fastest peer"
                       if "ratio to fastest peer" in row else "")
                )  # fmt: skip
        results["problems"].append(
            {
                "problem": name,
                "cameras": len(bal.cameras),
                "points": len(bal.points),
                "observations": len(bal.observations),
                "summary": summary,
            }
        )
    results["machine"] = machine(args.device)
    results["machine"]["load average before, after"] = [load, os.getloadavg()]
    if "jaxls" in sys.modules:  # the fetched commit, kept beside its source
        package = Path(sys.modules["jaxls"].__file__).parent
        for commit in (package.parent / "COMMIT", package.parent.parent / "COMMIT"):
            if commit.exists():
                results["machine"]["versions"]["jaxls"] = commit.read_text().strip()[:12]
    if args.out:
        # (numbers the device path keeps as 0-d arrays, written as numbers)
        plain = json.dumps(results, indent=1, default=lambda v: np.asarray(v).tolist())
        args.out.write_text(plain + "\n")
    return results


if __name__ == "__main__":
    main()
