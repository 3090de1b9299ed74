"""Rigid-body dynamics of Panda, a quadruped (Solo-12) and a humanoid (Talos), xform against
Pinocchio, float64.

    python -m benchmarks.dynamics [--sizes 1 100 10000 1000000] [--robots panda solo12 talos]
        [--functions rnea rnea_derivatives aba crba aba_derivatives] [--device cpu|cuda]
        [--budget 0.5] [--out DIR] [--eigen DIR] [--no-cpp] [--robots-dir DIR] [--stash DIR]

Per robot, function and batch size (configurations): xform's time per call (one op call
on NumPy arrays on the CPU, its launch split over the cores; on `--device cuda`, on torch
CUDA tensors, synchronised), and per configuration; Pinocchio's per-configuration time
from Python (a loop of its bound calls, one thread) and from its own C++ loop (one thread,
`benchmarks/pinocchio_loop.cpp`, built here with g++ against the pip wheels' headers and
library, where a compiler and Eigen's headers are found: `--eigen` or the environment
variable EIGEN_INCLUDE); their difference is the Python binding's overhead per call.

The functions: `rnea` is `Chain.inverse_dynamics` against `pinocchio.rnea`;
`rnea_derivatives` `inverse_dynamics_derivatives` against `computeRNEADerivatives`; `aba`
`forward_dynamics` against `aba`; `crba` `mass_matrix` against `crba`; `aba_derivatives`
`forward_dynamics_derivatives` against `computeABADerivatives`. Panda's finger mimic is
dropped from the URDF for both (Pinocchio's ABA and derivatives take no mimic joint), so
both compute the same 9 coordinates; Solo-12 and Talos float (a free-flyer root).

Sizes whose results would take more than `--memory` bytes are skipped (Talos' partials at
1M configurations are 35 GB), and Pinocchio's Python loop stops at 10,000 configurations
(its time per configuration does not depend on the batch). Writes `results_dynamics.json` to the
output folder and prints a table: ns per configuration and the ratios (Pinocchio's time
over xform's; above 1, xform is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import site
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ROBOTS = {
    "panda": ("panda_description/urdf/panda.urdf", False),
    "solo12": ("solo_description/robots/solo12.urdf", True),
    "talos": ("talos_data/robots/talos_reduced.urdf", True),
}
FUNCTIONS = ["rnea", "rnea_derivatives", "aba", "crba", "aba_derivatives"]
CHAIN_CALLS = {
    "rnea": "inverse_dynamics",
    "rnea_derivatives": "inverse_dynamics_derivatives",
    "aba": "forward_dynamics",
    "crba": "mass_matrix",
    "aba_derivatives": "forward_dynamics_derivatives",
}
SIZES = [1, 100, 10_000, 1_000_000]
PINOCCHIO_PYTHON_CAP = 10_000
ROOT = Path(__file__).resolve().parent


def robots_dir() -> Path:
    for base in site.getsitepackages():
        path = Path(base) / "cmeel.prefix/share/example-robot-data/robots"
        if path.is_dir():
            return path
    raise SystemExit("example-robot-data is not installed (pip install example-robot-data)")


def urdf_text(name: str, folder: Path | None = None) -> tuple[str, bool]:
    """The robot's URDF, its mimic tags dropped (see the module docstring): from
    example-robot-data, or from `folder` (as `--stash` writes it, for a machine without
    example-robot-data)."""
    relative, floating = ROBOTS[name]
    if folder is not None:
        return (folder / f"{name}.urdf").read_text(), floating
    text = (robots_dir() / relative).read_text()
    return re.sub(r"<mimic[^>]*/>", "", text), floating


class Robot:
    """xform's chain and Pinocchio's model of one URDF, and random states in both
    layouts (q, v, a, tau)."""

    def __init__(self, name: str, size: int, rng: np.random.Generator, device="cpu", folder=None):
        from xform.kinematics import Chain

        text, floating = urdf_text(name, folder)
        self.name, self.floating = name, floating
        self.chain = chain = Chain.from_urdf(text, floating_base=floating)
        q = rng.uniform(-1.0, 1.0, (size, chain.nq))
        if floating:
            q[:, 3:7] /= np.linalg.norm(q[:, 3:7], axis=1, keepdims=True)
        self.q, self.v, self.a = (
            q,
            rng.normal(size=(size, chain.nv)),
            rng.normal(size=(size, chain.nv)),
        )
        self.tau = self._torques(device)
        if device != "cpu":  # Pinocchio runs on the CPU only
            return
        import pinocchio as pin

        root = (pin.JointModelFreeFlyer(),) if floating else ()
        self.model = pin.buildModelFromXML(text, *root)
        self.data = self.model.createData()
        # Pinocchio's coordinates: joints by name, a free-flyer's quaternion [x, y, z, w]
        base = 6 if floating else 0
        columns, q_rows = list(range(base)), []
        for joint_name in chain.joint_names:
            joint = self.model.joints[self.model.getJointId(joint_name)]
            assert joint.nq == 1, "a continuous joint: give it (cos, sin)"
            columns.append(joint.idx_v)
            q_rows.append(joint.idx_q)
        self.columns = np.array(columns)
        self.q_rows = np.array(q_rows)

    def _torques(self, device: str) -> np.ndarray:
        """Torques of the first 1000 states (forward dynamics' inputs, cycled)."""
        states = [x[:1000] for x in (self.q, self.v, self.a)]
        if device == "cpu":
            return np.asarray(self.chain.inverse_dynamics(*states))
        import torch

        tensors = [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in states]
        return self.chain.inverse_dynamics(*tensors).cpu().numpy()

    def pinocchio_states(self, count: int):
        """(q, v, a, tau) per configuration in Pinocchio's layout."""
        states = []
        base = 7 if self.floating else 0
        for i in range(count):
            q = np.zeros(self.model.nq)
            q[self.q_rows] = self.q[i, base:]
            if self.floating:
                q[:3] = self.q[i, :3]
                w, x, y, z = self.q[i, 3:7]
                q[3:7] = x, y, z, w
            v, a, tau = (np.zeros(self.model.nv) for _ in range(3))
            v[self.columns], a[self.columns] = self.v[i], self.a[i]
            tau[self.columns] = self.tau[i % len(self.tau)]
            states.append((q, v, a, tau))
        return states


def result_bytes(robot: Robot, function: str) -> int:
    nv = robot.chain.nv
    return {"rnea": nv, "aba": nv, "crba": nv * nv}.get(function, 3 * nv * nv) * 8


def input_bytes(robot: Robot, function: str) -> int:
    return (robot.chain.nq + (0 if function == "crba" else 2 * robot.chain.nv)) * 8


def xform_runner(robot: Robot, function: str, size: int, device: str):
    chain = robot.chain
    call = getattr(chain, CHAIN_CALLS[function])
    third = robot.tau if function.startswith("aba") else robot.a
    take = np.arange(size) % len(third)
    q, v, t = robot.q[:size], robot.v[:size], np.ascontiguousarray(third[take])
    if device == "cpu":
        args = (q,) if function == "crba" else (q, v, t)
        return lambda: call(*args)
    import torch

    tensors = [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in (q, v, t)]
    args = tensors[:1] if function == "crba" else tensors

    def run():
        call(*args)
        torch.cuda.synchronize()

    return run


def pinocchio_python(robot: Robot, function: str, size: int):
    import pinocchio as pin

    model, data = robot.model, robot.data
    states = robot.pinocchio_states(size)
    calls = {
        "rnea": lambda q, v, a, tau: pin.rnea(model, data, q, v, a),
        "rnea_derivatives": lambda q, v, a, tau: pin.computeRNEADerivatives(model, data, q, v, a),
        "aba": lambda q, v, a, tau: pin.aba(model, data, q, v, tau),
        "crba": lambda q, v, a, tau: pin.crba(model, data, q),
        "aba_derivatives": lambda q, v, a, tau: pin.computeABADerivatives(model, data, q, v, tau),
    }
    call = calls[function]

    def run():
        for state in states:
            call(*state)

    return run


def eigen_include(given: str | None) -> Path | None:
    for candidate in (given, os.environ.get("EIGEN_INCLUDE"), "/usr/include/eigen3"):
        if candidate and (Path(candidate) / "Eigen" / "Core").is_file():
            return Path(candidate)
    for base in site.getsitepackages():  # the cmeel-eigen wheel
        path = Path(base) / "cmeel.prefix/include/eigen3"
        if (path / "Eigen" / "Core").is_file():
            return path
    return None


def build_pinocchio_loop(eigen: Path | None, where: Path) -> Path | None:
    """benchmarks/pinocchio_loop.cpp built against the pip wheels' Pinocchio, or None
    (and why, printed) where no g++ or no Eigen headers are found."""
    prefix = next(
        (
            Path(b) / "cmeel.prefix"
            for b in site.getsitepackages()
            if (Path(b) / "cmeel.prefix/include/pinocchio").is_dir()
        ),
        None,
    )
    compiler = shutil.which("g++")
    if prefix is None or compiler is None or eigen is None:
        print(f"no C++ loop: pinocchio headers {prefix}, g++ {compiler}, Eigen {eigen}")
        return None
    binary = where / "pinocchio_loop"
    source = ROOT / "pinocchio_loop.cpp"
    if binary.is_file() and binary.stat().st_mtime > source.stat().st_mtime:
        return binary
    defines = [
        "-DBOOST_MPL_LIMIT_LIST_SIZE=30", "-DBOOST_MPL_LIMIT_VECTOR_SIZE=30",
        "-DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS", "-DBOOST_FUSION_INVOKE_MAX_ARITY=12",
        "-DNDEBUG",
    ]  # fmt: skip
    command = [
        compiler, "-O3", "-march=native", "-std=c++17", *defines, f"-I{eigen}",
        f"-I{prefix / 'include'}",
        str(source), "-o", str(binary), f"-L{prefix / 'lib'}", "-lpinocchio_default",
        f"-Wl,-rpath,{prefix / 'lib'}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print("no C++ loop: g++ failed:", done.stderr[-2000:])
        return None
    return binary


def pinocchio_cpp(binary: Path, robot: Robot, count: int = 1000, repeats: int = 20) -> dict:
    """ns per call of each algorithm in Pinocchio's own C++ loop."""
    with tempfile.TemporaryDirectory() as folder:
        model_file, states_file = Path(folder) / "model.txt", Path(folder) / "states.bin"
        model_file.write_text(model_description(robot.model))
        states = robot.pinocchio_states(count)
        np.concatenate([np.concatenate(s) for s in states]).astype(np.float64).tofile(states_file)
        done = subprocess.run(
            [str(binary), str(model_file), str(states_file), str(count), str(repeats)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    return {line.split()[0]: float(line.split()[1]) for line in done.stdout.splitlines()}


def model_description(model) -> str:
    """The model, one joint a line, as `pinocchio_loop.cpp` reads it: the same joint
    types as Pinocchio's Python model (the free flyer, RX ... PZ, and the unaligned
    revolute and prismatic joints with their axis)."""
    lines = []
    for j in range(1, model.njoints):
        joint, placement, inertia = model.joints[j], model.jointPlacements[j], model.inertias[j]
        name = joint.shortname()
        if name == "JointModelFreeFlyer":
            kind, axis = "FreeFlyer", np.zeros(3)
        elif name[-2:] in ("RX", "RY", "RZ", "PX", "PY", "PZ"):
            kind, axis = name[-2:], np.zeros(3)
        elif name in ("JointModelRevoluteUnaligned", "JointModelPrismaticUnaligned"):
            kind = "Revolute" if "Revolute" in name else "Prismatic"
            axis = np.asarray(joint.extract().axis)  # the variant's concrete joint
        else:
            raise SystemExit(f"pinocchio_loop.cpp takes no {name}")
        numbers = [
            *placement.translation, *placement.rotation.ravel(), *axis,
            inertia.mass, *inertia.lever, *inertia.inertia.ravel(),
        ]  # fmt: skip
        lines.append(f"{kind} {model.parents[j]} " + " ".join(repr(float(x)) for x in numbers))
    return "\n".join(lines) + "\n"


def timed(run, budget: float) -> float:
    """The median of repeated runs (one warm-up), at least one, for about `budget` s."""
    run()
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = [first]
    while sum(times) < budget and len(times) < 50:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure(args) -> list[dict]:
    rng = np.random.default_rng(0)
    largest = max(args.sizes)
    where = Path(tempfile.gettempdir()) / "xform_pinocchio_loop"  # a build, not a result
    where.mkdir(exist_ok=True)
    binary = None
    if args.device == "cpu" and not args.no_cpp:
        binary = build_pinocchio_loop(eigen_include(args.eigen), where)
    measured_here = {}  # on a GPU: Pinocchio's C++ times measured on the CPU, committed
    if args.device != "cpu" and (ROOT / "results_dynamics.json").is_file():
        for r in json.loads((ROOT / "results_dynamics.json").read_text())["records"]:
            measured_here[(r["robot"], r["function"])] = r.get("pinocchio c++ ns per call")
    records = []
    folder = Path(args.robots_dir) if args.robots_dir else None
    for name in args.robots:
        robot = Robot(name, largest, rng, args.device, folder)
        native = pinocchio_cpp(binary, robot) if binary is not None else {}
        if args.device != "cpu":
            native = {f: measured_here.get((name, f)) for f in FUNCTIONS}
        for function in args.functions:
            started = time.perf_counter()
            xform_runner(robot, function, 1, args.device)()  # compiles
            compile_seconds = time.perf_counter() - started
            python_ns = None
            if args.device == "cpu":
                count = min(largest, 1000)
                python_ns = (
                    timed(pinocchio_python(robot, function, count), args.budget) / count * 1e9
                )
            for size in args.sizes:
                if size * result_bytes(robot, function) > args.memory:
                    print(
                        f"{name} {function} {size}: skipped (results over {args.memory:.1e} bytes)"
                    )
                    continue
                seconds = timed(xform_runner(robot, function, size, args.device), args.budget)
                per = seconds / size * 1e9
                moved = (result_bytes(robot, function) + input_bytes(robot, function)) * size
                record = {
                    "robot": name, "nv": robot.chain.nv, "function": function, "size": size,
                    "device": args.device, "xform ns per configuration": per,
                    "xform seconds per call": seconds, "compile seconds": compile_seconds,
                    "bytes moved per call": moved, "GB/s": moved / seconds / 1e9,
                    "pinocchio python ns per call": python_ns,
                    "pinocchio c++ ns per call": native.get(function),
                }  # fmt: skip
                if python_ns is not None:
                    record["ratio python"] = python_ns / per
                if native.get(function):
                    record["ratio c++"] = native[function] / per
                    record["binding overhead ns"] = (python_ns or 0) - native[function]
                records.append(record)
                print(format_row(record), flush=True)
    return records


def format_row(r: dict) -> str:
    cells = [
        f"{r['robot']:7s}", f"{r['function']:17s}", f"{r['size']:>9,}",
        f"{r['xform ns per configuration']:>11.0f}",
    ]  # fmt: skip
    for key in ("pinocchio c++ ns per call", "pinocchio python ns per call"):
        cells.append(f"{r[key]:>9.0f}" if r.get(key) else f"{'-':>9s}")
    for key in ("ratio c++", "ratio python"):
        cells.append(f"{r[key]:>7.2f}x" if r.get(key) else f"{'-':>8s}")
    return " | ".join(cells)


def table(records) -> str:
    head = (
        "| robot (nv) | function | batch | xform ns/config | Pinocchio C++ ns/call | "
        "Pinocchio Python ns/call | vs C++ | vs Python |\n|---|---|---:|---:|---:|---:|---:|---:|\n"
    )

    def number(value, form):
        return form.format(value) if value else "-"

    rows = [
        f"| {r['robot']} ({r['nv']}) | {r['function']} | {r['size']:,} | "
        f"{r['xform ns per configuration']:,.0f} | "
        f"{number(r.get('pinocchio c++ ns per call'), '{:,.0f}')} | "
        f"{number(r.get('pinocchio python ns per call'), '{:,.0f}')} | "
        f"{number(r.get('ratio c++'), '{:.2f}x')} | {number(r.get('ratio python'), '{:.2f}x')} |"
        for r in records
    ]
    return head + "\n".join(rows)


def stash(folder: Path, robots, functions) -> None:
    """The URDFs and the CUDA kernels (NVRTC to sm_90 PTX, here, on the CPU) that a GPU
    machine without example-robot-data needs, so that it compiles nothing."""
    import warp as wp

    from benchmarks.gpu_kernel_cache import compiled
    from xform._op import Product

    (folder / "robots").mkdir(parents=True, exist_ok=True)
    cache = folder / "warpcache" / wp.config.version
    cache.mkdir(parents=True, exist_ok=True)
    for name in robots:
        text, floating = urdf_text(name)
        (folder / "robots" / f"{name}.urdf").write_text(text)
        robot = Robot(name, 1, np.random.default_rng(0))
        for function in [*functions, "rnea"]:  # the GPU runs RNEA for forward dynamics' inputs
            op = robot.chain.dynamics_op(CHAIN_CALLS[function])
            source = compiled(op, Product.FORWARD, wp.float64)
            target = cache / source.name
            target.mkdir(exist_ok=True)
            for f in source.iterdir():
                if f.suffix in (".ptx", ".meta"):
                    shutil.copy2(f, target)
            print(f"{name} {function}: {source.name}")


def machine(device: str) -> str:
    import pinocchio
    import warp as wp

    where = f"{platform.machine()}, {os.cpu_count()} CPU cores"
    if device != "cpu":
        where = f"{wp.get_device(device).name} ({device}), {where}"
    versions = f"warp {wp.config.version}, pinocchio {pinocchio.__version__}"
    return f"{where}, Python {platform.python_version()}, {versions}, float64"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--robots", nargs="+", default=list(ROBOTS), choices=list(ROBOTS))
    parser.add_argument("--functions", nargs="+", default=FUNCTIONS, choices=FUNCTIONS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per measurement")
    parser.add_argument("--memory", type=float, default=2e9, help="largest results, bytes")
    parser.add_argument("--eigen", default=None, help="Eigen's include folder (for the C++ loop)")
    parser.add_argument("--no-cpp", action="store_true", help="skip Pinocchio's C++ loop")
    parser.add_argument("--out", default=str(ROOT))
    parser.add_argument("--robots-dir", default=None, help="URDFs as --stash writes them")
    parser.add_argument(
        "--stash",
        default=None,
        help="write the URDFs (to STASH/robots) and Warp's sm_90 kernels of every robot and "
        "function (to STASH/warpcache, for WARP_CACHE_PATH) for a GPU machine, and exit",
    )
    args = parser.parse_args(argv)
    if args.stash:
        stash(Path(args.stash), args.robots, args.functions)
        return []
    Path(args.out).mkdir(parents=True, exist_ok=True)
    records = measure(args)
    name = "results_dynamics.json" if args.device == "cpu" else "results_dynamics_cuda.json"
    (Path(args.out) / name).write_text(
        json.dumps({"machine": machine(args.device), "records": records}, indent=1) + "\n"
    )
    print(table(records))
    return records


if __name__ == "__main__":
    main()
