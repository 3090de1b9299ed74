"""Pose-graph optimisation on real data (g2o files), in PyTorch or JAX, on xform's groups.

    python interop_examples/pose_graph.py FILE.g2o [--framework torch|jax] [--device cpu|cuda]
        [--init chordal|odometry|file] [--out OUT.g2o] [--plot OUT.png] [--solver NAME]
        [--compiled]

Reads the graph (SE(3) or SE(2)), initialises (chordal by default), runs Levenberg-Marquardt
with the residuals r = log(Z^-1 T_i^-1 T_j) and their analytic Jacobians of all edges in
one batched call per op and a sparse Cholesky solve, prints one line per iteration and
last `final chi2=<float> iterations=<int> seconds=<float>` (seconds: initialisation and
optimisation). With --out it writes the graph with the optimised vertices (full float64
precision; nothing is written if anything fails), with --plot the trajectory before and
after. With `--device cuda` the poses, measurements and the solve are on the GPU (the
chordal start on the CPU): the normal equations block-sparse on the device, solved there.

With no arguments (as CI runs every example), it optimises smallGrid3D in both frameworks
from the graphs shipped in `data/pose_graphs/`, and checks that both reach the optimum
(GTSAM's, recorded below) and agree.
"""

from __future__ import annotations

import os

# Each iteration works on thousands of 6 x 6 blocks: thread pools cost more than they give
# there (PyTorch's batched products ran 3-10x slower with its pool on 2 shared cores), and
# GTSAM, the peer, runs on one thread. Set before NumPy, PyTorch or OpenBLAS load.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from posegraph.framework import framework  # noqa: E402
from posegraph.initial import INITIALISATIONS  # noqa: E402
from posegraph.optimise import chordal_and_optimise, optimise, start_compiles  # noqa: E402
from posegraph.problem import make_problem, with_poses  # noqa: E402

from xform.optim._installed import MODULES as HOST_SOLVERS  # noqa: E402
from xform.optim.g2o import read_g2o, write_g2o  # noqa: E402

# The small graphs shipped with the repository (data/pose_graphs/README.md).
DATA = Path(__file__).resolve().parents[1] / "data" / "pose_graphs"

# GTSAM 4.3.0's lowest error (chi2 / 2) on smallGrid3D: LM from the file's vertices and from
# its chordal start, to a relative decrease of 1e-12 (tests/test_pose_graph.py computes it
# afresh; benchmarks/results_pose_graph.json).
SMALL_GRID_GTSAM_ERROR = 517.9253323603242


def run(
    path,
    framework_name: str = "torch",
    init: str = "chordal",
    out=None,
    plot=None,
    solver: str | None = None,
    report=print,
    device: str = "cpu",
    compiled: bool = False,
):
    """Read, initialise, optimise, and write / plot if asked. Returns (problem, initial
    poses, result, seconds)."""
    fw = framework(framework_name)
    graph = read_g2o(path)
    if report and graph.skipped:
        skipped = ", ".join(f"{tag} x{count}" for tag, count in sorted(graph.skipped.items()))
        report(f"skipped lines with other tags: {skipped}")
    problem = make_problem(graph, fw)
    if init == "file" and problem.file_poses is None:
        if report:
            report("the file has no vertices: starting from odometry")
        init = "odometry"
    start = time.perf_counter()
    if compiled and init == "chordal" and start_compiles(problem):
        # the start compiled with the solve: one call (benchmarks/NOTES.md 62)
        initial, result = chordal_and_optimise(problem, fw, device=device, solver=solver)
        if report:
            report(f"compiled: the chordal start and {result.iterations} iterations in one call")
    else:
        # The start reads NumPy, solves on the CPU (dense on a small graph, else the host's
        # sparse solver, not a device one) and returns NumPy: its few group operations run
        # there too, on NumPy arrays, whatever framework optimises (through torch or JAX
        # their conversions cost ~1 ms a solve in torch and a few in JAX on a small graph;
        # benchmarks/NOTES.md 53).
        initial = INITIALISATIONS[init](
            problem, framework("numpy"), solver if solver in HOST_SOLVERS else None
        )
        result = optimise(
            problem, initial, fw, device=device, solver=solver, compiled=compiled, report=report
        )
    seconds = time.perf_counter() - start
    if report:
        report(f"final chi2={result.chi2!r} iterations={result.iterations} seconds={seconds:.6f}")
    if not result.converged:
        raise RuntimeError(f"{path}: Levenberg-Marquardt did not converge")
    if out is not None:
        write_g2o(with_poses(problem, result.poses, fw), out)
    if plot is not None:
        from posegraph.plot import plot_trajectories

        labels = (  # a compiled solve keeps no history
            f"{init} start" + (f": chi2 = {result.history[0]:.6g}" if result.history else ""),
            f"optimised: chi2 = {result.chi2:.10g}",
        )
        plot_trajectories(problem, initial, result.poses, plot, f"{Path(path).name}", labels)
    return problem, initial, result, seconds


def self_check() -> int:
    """The run CI makes: smallGrid3D in both frameworks, against GTSAM's optimum."""
    path = DATA / "smallGrid3D.g2o"
    failures = 0
    chi2 = {}
    for name in ("torch", "jax"):
        print(f"== {path.name}, {name}")
        _, _, result, _ = run(path, name)
        chi2[name] = result.chi2
        if not result.chi2 / 2 <= SMALL_GRID_GTSAM_ERROR * (1 + 1e-6):
            print(f"{name}: error {result.chi2 / 2} is above GTSAM's {SMALL_GRID_GTSAM_ERROR}")
            failures += 1
    if abs(chi2["torch"] - chi2["jax"]) > 1e-9 * chi2["torch"]:
        print(f"the frameworks disagree: {chi2}")
        failures += 1
    print("ok" if not failures else "FAILED")
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a g2o file (SE(3) or SE(2))")
    parser.add_argument("--framework", choices=["torch", "jax"], default="torch")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--init", choices=sorted(INITIALISATIONS), default="chordal")
    parser.add_argument("--out", type=Path, help="write the optimised graph here (g2o)")
    parser.add_argument("--plot", type=Path, help="plot the trajectory before and after (PNG)")
    parser.add_argument(
        "--solver",
        help="linear solver: on the CPU a sparse one (default: the fastest installed); "
        "on a device cholesky, cudss or pcg (default: by size)",
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="JAX: the solve compiled once per structure (with --init chordal on a graph of "
        "at most 600 unknowns and 720,000 edges times unknowns, the start too: one call); "
        "pays where a small graph is solved many times",
    )
    args = parser.parse_args(argv)
    try:
        run(args.file, args.framework, args.init, args.out, args.plot, args.solver,
            device=args.device, compiled=args.compiled)  # fmt: skip
    except (ValueError, RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main() if len(sys.argv) > 1 else self_check())
