"""A small solve counted in instructions, not timed: tinyGrid3D's LM through
`xform.optim` (the pose-graph example's `optimise`) and by hand (`pose_graph.eager_floor`:
the same algorithm with the same ops and nothing else), each under valgrind's callgrind.

    python -m benchmarks.instructions [--framework torch] [--graph tinyGrid3D]
        [--solves 10] [--out FILE.json]

This machine's timings move by tens of percent between runs of one commit, more than the
bookkeeping a small solve pays for, while an instruction count repeats: each side runs
five warm solves, then `--solves` more inside `functools.reduce`, the one function whose
instructions callgrind collects (its instrumentation switched on just before). A count is
of the CPU's work alone, not of waiting for memory; a solve's wall time on a quiet machine
follows it (benchmarks/NOTES.md 58). Needs `valgrind` on the PATH; each side takes a few
minutes, most of them importing under valgrind, and the two run side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIDES = ("xform", "floor")


def child(framework_name: str, graph_name: str, side: str, solves: int) -> None:
    """Run inside valgrind: the warm solves, then the counted ones."""
    import functools

    sys.path.insert(0, str(REPO / "interop_examples"))  # the example's package
    from posegraph.initial import chordal
    from posegraph.optimise import optimise

    from benchmarks.pose_graph import DATA, eager_floor, framework, make_problem, read_g2o

    fw = framework(framework_name)
    problem = make_problem(read_g2o(DATA / f"{graph_name}.g2o"), fw)
    start = chordal(problem, framework("numpy"))
    if side == "xform":

        def run():
            return optimise(problem, start, fw, report=None)
    else:

        def run():
            return eager_floor(problem, start, fw)

    for _ in range(5):
        run()
    if shutil.which("callgrind_control"):  # absent: run uncounted (the tests do)
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
    functools.reduce(lambda _, __: run(), range(solves), None)


def count(framework_name: str, graph_name: str, side: str, solves: int, folder: Path):
    """Start one side under callgrind; returns the process and where its log goes."""
    log = folder / f"{side}.log"
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
        "--toggle-collect=functools_reduce", f"--callgrind-out-file={folder / side}.out",
        sys.executable, "-m", "benchmarks.instructions", "--child", side,
        "--framework", framework_name, "--graph", graph_name, "--solves", str(solves),
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=out,
                                   stderr=subprocess.STDOUT)  # fmt: skip
    return process, log


def collected(log: Path) -> int:
    found = re.findall(r"Collected : (\d+)", log.read_text())
    if not found:
        raise RuntimeError(f"callgrind reported no count; its log:\n{log.read_text()[-2000:]}")
    return int(found[-1])


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="torch", choices=("torch", "jax", "numpy"))
    parser.add_argument("--graph", default="tinyGrid3D")
    parser.add_argument("--solves", type=int, default=10)
    parser.add_argument("--out", type=Path, help="write the counts as JSON")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.framework, args.graph, args.child, args.solves)
        return None
    if shutil.which("valgrind") is None:
        raise SystemExit("benchmarks.instructions: needs valgrind on the PATH")
    with tempfile.TemporaryDirectory() as folder:
        started = {
            side: count(args.framework, args.graph, side, args.solves, Path(folder))
            for side in SIDES
        }
        totals = {}
        for side, (process, log) in started.items():
            if process.wait() != 0:
                raise RuntimeError(f"the {side} side failed:\n{log.read_text()[-2000:]}")
            totals[side] = collected(log)
    per_solve = {side: total / args.solves for side, total in totals.items()}
    row = {
        "graph": args.graph,
        "framework": args.framework,
        "solves counted": args.solves,
        "xform instructions counted": totals["xform"],
        "floor instructions counted": totals["floor"],
        "xform instructions per solve": per_solve["xform"],
        "floor instructions per solve": per_solve["floor"],
        "xform / floor": per_solve["xform"] / per_solve["floor"],
    }
    print(
        f"{args.graph} through {args.framework}: xform.optim {per_solve['xform'] / 1e6:.2f} M "
        f"instructions a solve, the floor {per_solve['floor'] / 1e6:.2f} M "
        f"({row['xform / floor']:.2f}x)"
    )
    if args.out:
        machine = {"platform": platform.platform(), "python": platform.python_version()}
        args.out.write_text(json.dumps({"machine": machine, "rows": [row]}, indent=1) + "\n")
    return row


if __name__ == "__main__":
    main()
