"""The Python parts of `benchmarks/gpu_solver.sh`, the solver's device check, each runnable
on the CPU at tiny sizes (`--device cpu`), as CI cannot lend a GPU.

    python -m benchmarks.gpu_solver pose-graph GRAPH [--framework torch|jax]
        [--device cpu|cuda] [--init chordal|odometry|file] [--repeats N] --out FILE.json
    python -m benchmarks.gpu_solver verdict DIR [--small]

- `pose-graph`: GRAPH is a g2o file or `synthetic:N`, `benchmarks/synthetic.py`'s helix of
  N poses (written to a temporary g2o file, its vertices the odometry). It runs
  `interop_examples/pose_graph.py`'s `run` (initialisation and Levenberg-Marquardt, on
  the device when `run` takes `device=`) once (the first run: kernels loaded, JAX
  compiled) and `--repeats` times, and writes the seconds (the example's: initialisation
  and optimisation), the error (chi2 / 2), iterations, whether it converged and the
  peak memory a run adds, with GTSAM's best error where `results_pose_graph.json`
  records one for the graph.
- `verdict`: reads the results files that gpu_solver.sh wrote into DIR and prints each
  target of the device check against them, pass or fail (`--small`: the CPU's tiny
  run, whose times are not held to the GPU's targets).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "interop_examples"))

from benchmarks import synthetic  # noqa: E402
from benchmarks.devices import Peak, machine, synchronize, use_device, with_device  # noqa: E402

# The device check's targets: Ladybug-49 after 30 iterations, sphere2500 at GTSAM's best.
LADYBUG_COST, LADYBUG_SECONDS, SPHERE_SECONDS = 13_344.54, 0.08, 0.1
POSE_GRAPH_RESULTS = REPO / "benchmarks" / "results_pose_graph.json"


def gtsam_best(graph: str) -> float | None:
    """GTSAM's best error (chi2 / 2) on a named graph, as the pose-graph benchmark found it."""
    rows = json.loads(POSE_GRAPH_RESULTS.read_text())["rows"]
    return next((r["gtsam best error"] for r in rows if r["graph"] == graph), None)


def pose_graph_file(spec: str, folder: Path) -> Path:
    if not spec.startswith("synthetic:"):
        return Path(spec)
    from xform.optim.g2o import write_g2o

    poses = int(spec.split(":", 1)[1])
    started = time.perf_counter()
    path = folder / f"helix_{poses}.g2o"
    write_g2o(synthetic.pose_graph(poses), path)
    print(f"{path.name}: made and written in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def pose_graph_runs(args) -> dict:
    import pose_graph

    use_device(args.device)
    run = with_device(pose_graph.run, args.device)
    with tempfile.TemporaryDirectory() as folder:
        path = pose_graph_file(args.graph, Path(folder))
        rows = []
        for attempt in range(1 + args.repeats):
            with Peak(args.device, args.framework) as peak:
                _, _, result, seconds = run(path, args.framework, args.init, report=None)
                synchronize(args.device)
            rows.append(
                {
                    "seconds": seconds,
                    "error": result.chi2 / 2,
                    "iterations": result.iterations,
                    "converged": bool(result.converged),
                    "peak bytes": peak.bytes,
                }
            )
            print(f"  {'first run' if attempt == 0 else attempt}: {rows[-1]}", flush=True)
    name = Path(args.graph).stem if not args.graph.startswith("synthetic:") else args.graph
    timed = rows[1:] or rows
    best = gtsam_best(name)
    error, median = timed[-1]["error"], statistics.median(r["seconds"] for r in timed)
    summary = {
        "graph": name,
        "framework": args.framework,
        "init": args.init,
        "error": error,
        "gtsam best error": best,
        "within 1e-6 of gtsam best": None if best is None else error <= best * (1 + 1e-6),
        "iterations": timed[-1]["iterations"],
        "converged": timed[-1]["converged"],
        "seconds median": median,
        "seconds min": min(r["seconds"] for r in timed),
        "first run seconds": rows[0]["seconds"],
        "first-run overhead": rows[0]["seconds"] - median,
        "peak bytes": max((r["peak bytes"] or 0 for r in timed), default=None),
    }
    print(
        f"final {name} ({args.framework}): error {error:.10g} (GTSAM's best {best}), "
        f"{summary['iterations']} iterations, {median:.4f} s, first run "
        f"{rows[0]['seconds']:.2f} s, converged {summary['converged']}"
    )
    return {"machine": machine(args.device), "runs": rows, "summary": summary}


# --- the verdict ---------------------------------------------------------------------------


def _rows(folder: Path, pattern: str) -> dict:
    """method -> summary row, over the bundle-adjustment results files matching pattern."""
    found = {}
    for path in sorted(folder.glob(pattern)):
        for problem in json.loads(path.read_text())["problems"]:
            for name, row in problem["summary"].items():
                if isinstance(row, dict):
                    found[name] = row
    return found


def _line(ok: bool | None, text: str) -> str:
    return f"{'PASS' if ok else 'n/a ' if ok is None else 'FAIL'}  {text}"


def _gigabytes(count) -> str:
    return "n/a" if count is None else f"{count / 2**30:.2f} GiB"


def verdict(folder: Path, small: bool) -> list[str]:
    lines = []
    timed = not small  # the CPU's tiny run is held to no time target
    for label, pattern, cost_target in (
        ("Ladybug-49", "ladybug_*.json", None if small else LADYBUG_COST),
        ("the large synthetic problem", "bal_large_*.json", None),
    ):
        rows = _rows(folder, pattern)
        jaxls = next((r for n, r in rows.items() if n.startswith("jaxls") and "cost" in r), None)
        if not rows:
            lines.append(_line(False, f"{label}: no results"))
        for name, row in rows.items():
            if "error" in row:
                lines.append(_line(False, f"{label}, {name}: {row['error']}"))
                continue
            text = (
                f"{label}, {name}: cost {row['cost']:,.4f}, {row['seconds median']:.4f} s (first"
                f" run {row['first run seconds']:.2f} s), peak {_gigabytes(row['peak bytes'])}"
            )
            checks = []
            if cost_target is not None:
                checks.append(row["cost"] <= cost_target)
                text += f"; cost <= {cost_target:,}"
            if name.startswith("xform") and jaxls is not None:
                ratio = row["seconds median"] / jaxls["seconds median"]
                text += f"; {ratio:.2f}x jaxls"
                checks.append(ratio <= 1.0 or not timed)
            if label == "Ladybug-49" and name.startswith("xform") and timed:
                checks.append(row["seconds median"] <= LADYBUG_SECONDS)
                text += f"; <= {LADYBUG_SECONDS} s"
            lines.append(_line(all(checks) if checks else None, text))
    for path in sorted(folder.glob("pose_graph_*.json")):
        row = json.loads(path.read_text())["summary"]
        text = (
            f"{row['graph']} ({row['framework']}, {row['init']} start): error "
            f"{row['error']:.10g}, {row['iterations']} iterations, converged "
            f"{row['converged']}, {row['seconds median']:.4f} s (first run "
            f"{row['first run seconds']:.2f} s), peak {_gigabytes(row['peak bytes'])}"
        )
        checks = [row["converged"]]
        if row["gtsam best error"] is not None:
            checks.append(row["within 1e-6 of gtsam best"])
            text += f"; GTSAM's best {row['gtsam best error']:.10g}"
        if row["graph"] == "sphere2500" and timed:
            checks.append(row["seconds median"] <= SPHERE_SECONDS)
            text += f"; <= {SPHERE_SECONDS} s"
        lines.append(_line(all(checks), text))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    graph = steps.add_parser("pose-graph", help="a pose graph, solved and timed")
    graph.add_argument("graph", help="a g2o file or synthetic:N")
    graph.add_argument("--framework", choices=["torch", "jax"], default="torch")
    graph.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    graph.add_argument("--init", choices=["chordal", "odometry", "file"], default="chordal")
    graph.add_argument("--repeats", type=int, default=3)
    graph.add_argument("--out", type=Path, required=True)
    judge = steps.add_parser("verdict", help="the targets against the results")
    judge.add_argument("folder", type=Path)
    judge.add_argument("--small", action="store_true")
    args = parser.parse_args(argv)
    if args.step == "pose-graph":
        document = pose_graph_runs(args)
        args.out.write_text(json.dumps(document, indent=1) + "\n")
        return document
    lines = verdict(args.folder, args.small)
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
