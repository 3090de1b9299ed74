"""Bundle adjustment on BAL Ladybug-49: xform.optim (PyTorch, JAX) against GTSAM and jaxls,
side by side, the same number of Levenberg-Marquardt iterations.

    python -m benchmarks.bundle_adjustment [--file FILE] [--iterations 30] [--repeats 2]
        [--peers gtsam jaxls] [--out FILE.json]

- xform: `interop_examples/bundle_adjustment.py`'s `run` (SE3 poses, intrinsics and points,
  points eliminated by a Schur complement, LM from damping 1e-4 of diag(H)).
- GTSAM 4.3: `SfmData.FromBalFile`, its `GeneralSFMFactorCal3Bundler` factors, LM with
  `LevenbergMarquardtParams.CeresDefaults()` (its default parameters stall near 27k on this
  file: `../shared/data/bal/README.md`), no gauge prior, exactly `--iterations` iterations.
- jaxls (not on PyPI: fetched from github.com/brentyi/jaxls and installed locally; skipped
  when absent): Schur + dense Cholesky, `lambda_initial=1e2` (its own benchmark's setting),
  exactly `--iterations` steps, jitted (compilation not timed: one warm-up run).

Every final state is scored by one float64 evaluator (`bundle_adjustment.cost_of`,
`1/2 sum |r|^2` over all observations, points behind a camera included). Times exclude
reading and imports; each is the minimum and median of `--repeats` runs after a warm-up,
the methods interleaved. Thread pools at one thread for all (GTSAM's wheel is
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
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LADYBUG = REPO.parent / "shared" / "data" / "bal" / "problem-49-7776-pre.txt"
sys.path.insert(0, str(REPO / "interop_examples"))

import bundle_adjustment as example  # noqa: E402

from xform.optim.bal import read_bal  # noqa: E402


def xform_run(path: Path, framework: str, iterations: int) -> dict:
    bal, solved, result, seconds = example.run(path, framework, iterations, report=None)
    return {
        "cost": example.cost_of(bal, solved.cameras, solved.points),
        "iterations": result.iterations,
        "solves": result.solves,
        "seconds": seconds,
        "per linearisation": result.timings.per(result.solves + 1),
    }


def gtsam_run(path: Path, iterations: int) -> dict:
    import gtsam

    data, graph, initial = example.gtsam_problem(path)
    params = gtsam.LevenbergMarquardtParams.CeresDefaults()
    params.setMaxIterations(iterations)
    params.setRelativeErrorTol(0.0)
    params.setAbsoluteErrorTol(0.0)
    params.setErrorTol(0.0)
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
    with tempfile.TemporaryDirectory() as folder:
        written = Path(folder) / "gtsam.txt"
        gtsam.writeBAL(str(written), out)
        solved = read_bal(written)
    bal = read_bal(path)
    # GTSAM writes observations track by track: score its cameras and points on the file's
    return {
        "cost": example.cost_of(bal, solved.cameras, solved.points),
        "gtsam error": graph.error(values),
        "iterations": optimizer.iterations(),
        "seconds": seconds,
    }


def jaxls_runner(path: Path, iterations: int):
    """A jitted jaxls solve of the file (Schur + dense, lambda_initial 1e2), and the cost of
    its result; None when jaxls is not installed."""
    try:
        import jax
        import jax.numpy as jnp
        import jaxls
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    bal = read_bal(path)

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

    def solve():
        return problem.solve(
            initial,
            linear_solver="dense_cholesky",
            termination=jaxls.TerminationConfig(max_iterations=iterations, early_termination=False),
            trust_region=jaxls.TrustRegionConfig(lambda_initial=1e2),
            verbose=False,
        )

    def run() -> dict:
        start = time.perf_counter()
        solution = jax.block_until_ready(solve())
        seconds = time.perf_counter() - start
        cams = np.asarray(solution[cameras])
        pts = np.asarray(solution[points])
        return {
            "cost": example.cost_of(bal, cams, pts),
            "iterations": iterations,
            "seconds": seconds,
        }

    return run


def benchmark(path: Path, iterations: int, repeats: int, peers: list[str]) -> dict:
    runners = {
        "xform torch": lambda: xform_run(path, "torch", iterations),
        "xform jax": lambda: xform_run(path, "jax", iterations),
    }
    if "gtsam" in peers:
        runners["gtsam (CeresDefaults)"] = lambda: gtsam_run(path, iterations)
    if "jaxls" in peers:
        jaxls = jaxls_runner(path, iterations)
        if jaxls is not None:
            runners["jaxls (Schur + dense)"] = jaxls
        else:
            print("jaxls is not installed: skipped")
    runs: dict[str, list] = {name: [] for name in runners}
    for name, runner in runners.items():  # warm-up: Warp's kernels, XLA's compilation
        print(f"warm-up {name}", flush=True)
        first = runner()
        runs[name + " first"] = [first]
    for repeat in range(repeats):
        for name, runner in runners.items():
            row = runner()
            runs[name].append(row)
            print(
                f"  {repeat}: {name}: cost {row['cost']:.6f} after {row['iterations']} "
                f"iterations, {row['seconds']:.3f} s",
                flush=True,
            )
    summary = {}
    for name in runners:
        rows = runs[name]
        summary[name] = {
            "cost": rows[-1]["cost"],
            "iterations": rows[-1]["iterations"],
            "seconds min": min(r["seconds"] for r in rows),
            "seconds median": statistics.median(r["seconds"] for r in rows),
            "first run seconds": runs[name + " first"][0]["seconds"],
            **(
                {"per linearisation": rows[-1]["per linearisation"]}
                if "per linearisation" in rows[-1]
                else {}
            ),
        }
    peers_present = [n for n in summary if not n.startswith("xform")]
    if peers_present:
        fastest = min(peers_present, key=lambda n: summary[n]["seconds median"])
        for name in summary:
            summary[name]["ratio to fastest peer"] = (
                summary[name]["seconds median"] / summary[fastest]["seconds median"]
            )
        summary["fastest peer"] = fastest
    return summary


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=LADYBUG)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--peers", nargs="*", default=["gtsam", "jaxls"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    summary = benchmark(args.file, args.iterations, args.repeats, args.peers)
    for name, row in summary.items():
        if isinstance(row, dict):
            print(
                f"{name}: cost {row['cost']:.4f}, {row['iterations']} iterations, "
                f"{row['seconds median']:.2f} s (min {row['seconds min']:.2f}), "
                f"{row.get('ratio to fastest peer', float('nan')):.2f}x the fastest peer"
            )
    if args.out:
        machine = {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load average before, after": [load, os.getloadavg()],
        }
        args.out.write_text(
            json.dumps({"machine": machine, "file": str(args.file), "summary": summary}, indent=1)
            + "\n"
        )
    return summary


if __name__ == "__main__":
    main()
