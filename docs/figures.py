"""Every measured number the site shows, drawn from the benchmark results when it is built.

A page asks for a figure or a table by name, on a line of its own:

    <!-- measured: kinematics_speed -->

and the build (docs/hooks.py) puts there what the function registered under that name
drew from its results file in `benchmarks/`, then a line with the machine and versions
that file records and a link to the file itself (copied into the site). Nothing measured
is typed into a page: a new run of a benchmark redraws every figure and table it feeds,
and tests/test_docs.py fails on a time or a ratio in a page's prose that no results file
holds.

To add one: a function of the results (the parsed JSON) that returns Markdown (a table)
or a matplotlib figure, registered with `@measured(name, results file, command)`.

`python docs/figures.py` draws them all into docs/generated/ (git-ignored); the build
does when the results or this file changed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks"
OUT = DOCS / "generated"
COPIES = OUT / "results"  # the results files, served by the site
DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)<!-- measured: (?P<name>[\w-]+) -->[ \t]*$", re.M
)


@dataclass(frozen=True)
class Measured:
    name: str
    source: str  # a results file of benchmarks/
    command: str  # what re-measures it
    draw: Callable[[dict], object]  # -> Markdown (str) or a matplotlib figure

    @property
    def summary(self) -> str:
        return " ".join(
            (self.draw.__doc__ or self.name).strip().split("\n\n")[0].split()
        )


REGISTRY: dict[str, Measured] = {}


def measured(name: str, source: str, command: str):
    """Register `draw(results) -> Markdown or figure` as the measured item `name`."""

    def register(draw: Callable[[dict], object]) -> Callable[[dict], object]:
        if name in REGISTRY:
            raise ValueError(f"docs/figures.py: {name!r} is registered twice")
        REGISTRY[name] = Measured(name, source, command, draw)
        return draw

    return register


def load(source: str) -> dict:
    return json.loads((RESULTS / source).read_text())


# --- where and how it was measured ---------------------------------------------------------


def machine(results: dict) -> str:
    """The machine and versions a results file records, in words."""
    recorded = results.get("machine", "")
    if isinstance(recorded, str):
        parts, loads = [recorded], results.get("load average before, after")
    else:
        parts = [recorded.get("platform", ""), f"{recorded.get('cpus', '?')} CPU cores"]
        versions = recorded.get("versions")
        if versions:
            parts.append(
                ", ".join(f"{name} {version}" for name, version in versions.items())
            )
        else:
            parts.append("versions not recorded by this run")
        loads = recorded.get("load average before, after")
    if loads:
        before, after = (f"{sample[0]:.1f}" for sample in loads)
        parts.append(f"load average {before} before, {after} after (1 minute)")
    return ", ".join(p for p in parts if p)


def when(results: dict) -> str:
    """When and at which commit a results file was measured, where it records them."""
    parts = [f"on {results['date']}" if "date" in results else ""]
    parts.append(f"at commit {results['commit']}" if "commit" in results else "")
    return " ".join(p for p in parts if p)


def caption(item: Measured, prefix: str) -> str:
    results = load(item.source)
    link = f"[`benchmarks/{item.source}`]({prefix}generated/results/{item.source})"
    dated = f", {when(results)}" if when(results) else ""
    note = f" ({results['note']})" if "note" in results else ""
    return f"*Measured on {machine(results)}{dated}{note}. Data: {link}, from `{item.command}`.*"


# --- numbers as a page prints them ----------------------------------------------------------


def microseconds(seconds: float) -> str:
    value = seconds * 1e6
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def milliseconds(seconds: float) -> str:
    value = seconds * 1e3
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def seconds_text(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


def ratio(value: float) -> str:
    return f"{value:.2f}"


def span(values: list[float], form: Callable[[float], str]) -> str:
    low, high = min(values), max(values)
    return form(low) if form(low) == form(high) else f"{form(low)}-{form(high)}"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or "-" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 11, "legend.fontsize": 9})
    return plt


# --- the op benchmark (`python -m benchmarks`) ---------------------------------------------

LATEST_CPU = "results_cheaper_vjps.json"  # the latest run of every op on the CPU
SIZES_CPU = "results_sizes.json"  # the latest run of every size, for the first five ops
LATEST_CUDA = (
    "results_cuda.json"  # the latest GPU run (benchmarks/roofline.py --install)
)
OP_COMMAND = "python -m benchmarks"
ENDS = (16, 1_048_576)
MODES = ("forward", "forward+backward")
FRAMEWORKS = (
    ("torch", "xform torch", "torch ratio"),
    ("jax.jit", "xform jax.jit", "jax ratio"),
)


@measured("op_ratios", LATEST_CPU, OP_COMMAND)
def op_ratios(results: dict):
    """xform's time over the best peer's in the same framework, per op (below 1: faster)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    plt = _pyplot()
    rows = results["ratios"]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    figure, axes = plt.subplots(
        len(ENDS),
        len(MODES),
        figsize=(12, 0.42 * len(ops) * len(ENDS) + 2),
        sharey=True,
    )
    axes[0][0].invert_yaxis()  # the first op on top (the axes share it: once)
    ticks = [0.03, 0.1, 0.3, 1, 3, 10]
    for i, size in enumerate(ENDS):
        for j, mode in enumerate(MODES):
            ax = axes[i][j]
            chosen = {
                r["op"]: r for r in rows if r["size"] == size and r["mode"] == mode
            }
            for k, (label, _, key) in enumerate(FRAMEWORKS):
                values = [
                    chosen[op][key] if op in chosen else float("nan") for op in ops
                ]
                ax.barh(
                    [y + 0.4 * k for y in range(len(ops))],
                    values,
                    height=0.4,
                    label=label,
                )
            ax.axvline(1.0, color="k", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_xlim(ticks[0], ticks[-1])
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.set_title(f"{mode}, {size:,} points")
            ax.set_yticks([y + 0.2 for y in range(len(ops))], ops)
            ax.grid(True, axis="x", alpha=0.3)
            if i == len(ENDS) - 1:
                ax.set_xlabel("xform's time / the best peer's")
    axes[0][0].legend(loc="lower right")
    figure.tight_layout()
    return figure


@measured("op_summary", LATEST_CPU, OP_COMMAND)
def op_summary(results: dict) -> str:
    """Per framework, size and mode: xform's time per call and its ratio to the best peer,
    lowest to highest over the ops, and how many ops are faster than every peer."""
    rows = []
    for label, time_key, ratio_key in FRAMEWORKS:
        for size in ENDS:
            for mode in MODES:
                chosen = [
                    r
                    for r in results["ratios"]
                    if r["size"] == size and r["mode"] == mode
                ]
                faster = sum(r[ratio_key] < 1 for r in chosen)
                rows.append(
                    [
                        label,
                        f"{size:,}",
                        mode,
                        span([r[time_key] for r in chosen], microseconds),
                        span([r[ratio_key] for r in chosen], ratio),
                        f"{faster} of {len(chosen)}",
                    ]
                )
    header = [
        "xform through",
        "points",
        "mode",
        "µs a call",
        "/ best peer",
        "ops below 1",
    ]
    return table(header, rows, "--lrrr")


# The columns of an op benchmark's rows: header -> (alignment, cell).
OP_COLUMNS = {
    "op": ("-", lambda r: r["op"]),
    "mode": ("-", lambda r: r["mode"]),
    "points": ("r", lambda r: f"{r['size']:,}"),
    "torch µs": ("r", lambda r: microseconds(r["xform torch"])),
    "best torch peer": ("-", lambda r: r["best torch peer"]),
    "torch ratio": ("r", lambda r: ratio(r["torch ratio"])),
    "jax.jit µs": ("r", lambda r: microseconds(r["xform jax.jit"])),
    "best jnp peer": ("-", lambda r: r["best jax peer"]),
    "jax.jit ratio": ("r", lambda r: ratio(r["jax ratio"])),
    "torch GB/s": ("r", lambda r: f"{r['torch GB/s']:.3g}"),
}


def op_table(results: dict, columns: list[str]) -> str:
    """The rows at 16 and 1,048,576 points, in `columns` (of OP_COLUMNS)."""
    rows = [
        [OP_COLUMNS[c][1](r) for c in columns]
        for r in results["ratios"]
        if r["size"] in ENDS
    ]
    return table(columns, rows, "".join(OP_COLUMNS[c][0] for c in columns))


@measured("op_latest_run", LATEST_CPU, OP_COMMAND)
def op_latest_run(results: dict) -> str:
    """Every op at 16 and 1,048,576 points: µs per call and the ratio to the best peer."""
    columns = ["op", "mode", "points", "torch µs", "best torch peer", "torch ratio"]
    return op_table(results, columns + ["jax.jit µs", "best jnp peer", "jax.jit ratio"])


@measured("op_backward_over_forward", LATEST_CPU, OP_COMMAND)
def op_backward_over_forward(results: dict) -> str:
    """Forward + backward over forward at 1,048,576 points, per op, lowest first."""
    times = {
        (r["op"], r["mode"]): r for r in results["ratios"] if r["size"] == ENDS[-1]
    }
    ops = dict.fromkeys(op for op, _ in times)
    rows = []
    for label, key, _ in FRAMEWORKS:
        pairs = sorted(
            (times[op, MODES[1]][key] / times[op, MODES[0]][key], op)
            for op in ops
            if (op, MODES[1]) in times and (op, MODES[0]) in times
        )
        rows.append(
            [f"`{label}`", ", ".join(f"{op} {value:.2f}" for value, op in pairs)]
        )
    return table(["", "forward + backward / forward"], rows, "--")


@measured("op_loop", LATEST_CPU, OP_COMMAND)
def op_loop(results: dict) -> str:
    """A step of a jitted `lax.fori_loop` around `transform_points` on 16 points."""
    rows = [
        [f"`{r['impl']}`", f"{r['step µs']:.3g}", ratio(r["ratio to best jnp"])]
        for r in results.get("loop", [])
    ]
    return table(["implementation", "µs a step", "/ best jnp"], rows)


def _size_figure(results: dict, implementations: list[str] | None = None):
    """Time against size, one panel per op and mode, a line per implementation."""
    plt = _pyplot()
    records = results["records"]
    ops = list(dict.fromkeys(r["op"] for r in records))
    impls = implementations or list(dict.fromkeys(r["impl"] for r in records))
    figure, axes = plt.subplots(
        len(ops), len(MODES), figsize=(12, 3.1 * len(ops)), sharex=True, squeeze=False
    )
    for i, op in enumerate(ops):
        for j, mode in enumerate(MODES):
            ax = axes[i][j]
            for impl in impls:
                points = sorted(
                    (r["size"], r["seconds"] * 1e6)
                    for r in records
                    if r["op"] == op and r["mode"] == mode and r["impl"] == impl
                )
                if points:
                    style = "-" if impl.startswith("xform") else "--"
                    width = 2.2 if impl.startswith("xform") else 1.2
                    ax.plot(
                        *zip(*points), style, marker="o", ms=3, lw=width, label=impl
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{op}, {mode}")
            ax.grid(True, which="major", alpha=0.3)
            if j == 0:
                ax.set_ylabel("µs a call")
            if i == len(ops) - 1:
                ax.set_xlabel("points")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", ncol=5, frameon=False)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.5 / len(ops) / 3.1 * 2))
    return figure


@measured(
    "op_sizes",
    SIZES_CPU,
    f"{OP_COMMAND} --no-compile --ops transform_points batch_transform_points "
    "pose_multiply quaternion_to_matrix matrix_to_quaternion",
)
def op_sizes(results: dict):
    """Time against size on the CPU, 16 to 1,048,576 points: xform (solid) and its peers
    (dashed), log-log."""
    return _size_figure(results)


@measured("cuda_sizes", LATEST_CUDA, f"{OP_COMMAND} --device cuda")
def cuda_sizes(results: dict):
    """Time against size on the GPU: xform (solid) and its peers (dashed), log-log."""
    return _size_figure(results)


@measured("cuda_table", LATEST_CUDA, f"{OP_COMMAND} --device cuda")
def cuda_table(results: dict) -> str:
    """The GPU run at 16 and 1,048,576 points: µs per call, ratio to the best peer, and the
    bandwidth xform through torch reaches on the least traffic the op needs."""
    columns = ["op", "mode", "points", "torch µs", "best torch peer", "torch ratio"]
    return op_table(results, columns + ["jax.jit µs", "jax.jit ratio", "torch GB/s"])


# --- kinematics (`python -m benchmarks.kinematics`) -----------------------------------------


@measured(
    "kinematics_speed", "results_kinematics.json", "python -m benchmarks.kinematics"
)
def kinematics_speed(results: dict) -> str:
    """Panda's forward kinematics, all 13 links: ns per configuration, by batch size. "—":
    not measured (the peers are capped at 10,000 configurations)."""
    records = results["records"]
    sizes = sorted({r["size"] for r in records})
    rows = []
    for mode in MODES:
        impls = dict.fromkeys(r["impl"] for r in records if r["mode"] == mode)
        for impl in impls:
            cells = []
            for size in sizes:
                found = [
                    r
                    for r in records
                    if (r["mode"], r["impl"], r["size"]) == (mode, impl, size)
                ]
                cells.append(
                    f"{found[0]['ns per configuration']:,.0f}" if found else "—"
                )
            rows.append([mode, impl, *cells])
    header = ["mode", "implementation", *(f"batch {s:,}" for s in sizes)]
    return table(header, rows, "--" + "r" * len(sizes))


# --- dynamics (`python -m benchmarks.dynamics`) ----------------------------------------------


@measured("dynamics_speed", "results_dynamics.json", "python -m benchmarks.dynamics")
def dynamics_speed(results: dict) -> str:
    """Panda, Solo-12 and Talos: xform's ns per configuration by batch size, and
    Pinocchio's per call (its C++ loop where it was built, its Python calls), float64."""
    rows = []
    for r in results["records"]:
        cpp = r.get("pinocchio c++ ns per call")
        python = r.get("pinocchio python ns per call")
        rows.append([
            f"{r['robot']} ({r['nv']})", r["function"], f"{r['size']:,}",
            f"{r['xform ns per configuration']:,.0f}",
            f"{cpp:,.0f}" if cpp else "—", f"{python:,.0f}" if python else "—",
            f"{cpp / r['xform ns per configuration']:.2f}x" if cpp else "—",
            f"{python / r['xform ns per configuration']:.2f}x" if python else "—",
        ])  # fmt: skip
    header = ["robot (nv)", "function", "batch", "xform ns", "Pinocchio C++ ns",
              "Pinocchio Python ns", "C++ / xform", "Python / xform"]  # fmt: skip
    return table(header, rows, "--rrrrrr")


# --- pose graphs (`python -m benchmarks.pose_graph`) -----------------------------------------

POSE_GRAPHS = "results_pose_graph.json"  # every graph (PARDISO, a quiet machine)
# The latest run, with the shipped default solver (PARDISO), on the three largest graphs.
POSE_GRAPHS_LATEST = "results_pose_graph_pardiso.json"
POSE_GRAPH_COMMAND = "python -m benchmarks.pose_graph"
POSE_GRAPH_LATEST_COMMAND = (
    f"{POSE_GRAPH_COMMAND} --graphs sphere2500 parking-garage manhattan --repeats 9"
)


@measured("pose_graph_accuracy", POSE_GRAPHS, POSE_GRAPH_COMMAND)
def pose_graph_accuracy(results: dict) -> str:
    """Every graph from the chordal start: GTSAM's error (chi2 / 2, its prior on pose 0
    included) of the vertices xform wrote, against GTSAM's best and GTSAM as a user runs
    it (chordal start, LM with default parameters); iterations after each."""
    rows = []
    for row in results["rows"]:
        best = row["gtsam best error"]
        cells = [row["graph"], f"{best:.10g}"]
        for framework in ("torch", "jax"):
            run = row[framework]
            error = run["gtsam error of written vertices"]
            cells.append(f"{error:.10g}, {run['iterations']}")
        gtsam = row["gtsam"]
        cells.append(f"{gtsam['error']:.10g}, {gtsam['iterations']}")
        rows.append(cells)
    header = [
        "graph",
        "GTSAM's best",
        "xform torch",
        "xform JAX",
        "GTSAM, chordal + LM",
    ]
    return table(header, rows, "-rrrr")


@measured("pose_graph_time", POSE_GRAPHS_LATEST, POSE_GRAPH_LATEST_COMMAND)
def pose_graph_time(results: dict) -> str:
    """Seconds from the chordal start to the optimum (initialisation and optimisation, the
    median of the repeats after a warm-up run), and xform's time over GTSAM's."""
    rows = []
    for row in results["rows"]:
        gtsam = row["gtsam"]["seconds"]
        torch, jax = row["torch"]["seconds"], row["jax"]["seconds"]
        rows.append(
            [
                row["graph"],
                f"{seconds_text(gtsam)}",
                f"{seconds_text(torch)}",
                f"{seconds_text(jax)}",
                f"{ratio(torch / gtsam)}, {ratio(jax / gtsam)}",
                ", ".join(
                    _per_round(row[fw]["gtsam ratio per round"])
                    for fw in ("torch", "jax")
                ),
            ]
        )
    header = [
        "graph",
        "GTSAM",
        "xform torch",
        "xform JAX",
        "xform / GTSAM (torch, JAX)",
        "per round: median (range)",
    ]
    return table(header, rows)


def _per_round(ratios: list[float]) -> str:
    return f"{ratio(statistics.median(ratios))} ({min(ratios):.2f}-{max(ratios):.2f})"


@measured("pose_graph_split", POSE_GRAPHS_LATEST, POSE_GRAPH_LATEST_COMMAND)
def pose_graph_split(results: dict) -> str:
    """Milliseconds per linearisation (torch, JAX): residuals and Jacobians (xform's ops),
    the assembly of the normal equations, the sparse solve, and the rest."""
    rows = []
    for row in results["rows"]:
        parts = [row[f]["per linearisation"] for f in ("torch", "jax")]
        rows.append(
            [row["graph"]]
            + [
                f"{milliseconds(a[k])}, {milliseconds(b[k])}"
                for a, b in [parts]
                for k in a
            ]
        )
    keys = list(results["rows"][0]["torch"]["per linearisation"])
    return table(["graph", *keys], rows)


@measured("pose_graph_edges", POSE_GRAPHS_LATEST, POSE_GRAPH_LATEST_COMMAND)
def pose_graph_edges(results: dict) -> str:
    """Milliseconds for the whitened residuals and Jacobians of every edge at the chordal
    start: by the groups' methods and by the example's one kernel (torch eager, JAX
    jitted)."""
    rows = [
        [row["graph"]]
        + [
            milliseconds(row[f][k])
            for f in ("torch", "jax")
            for k in ("methods", "one kernel")
        ]
        for row in results.get("edges", [])
    ]
    header = [
        "graph",
        "torch: methods",
        "torch: one kernel",
        "JAX: methods",
        "JAX: one kernel",
    ]
    return table(header, rows)


@measured("pose_graph_solvers", POSE_GRAPHS_LATEST, POSE_GRAPH_LATEST_COMMAND)
def pose_graph_solvers(results: dict) -> str:
    """The damped normal equations at the chordal start, one thread: milliseconds for the
    first solve (with the ordering) / the median of the next ones."""
    solvers = list(
        dict.fromkeys(
            k
            for row in results["solvers"]
            for k, v in row.items()
            if isinstance(v, dict)
        )
    )
    rows = [
        [f"{row['graph']} ({row['unknowns']:,})"]
        + [
            f"{milliseconds(row[s]['first'])} / {milliseconds(row[s]['next'])}"
            if s in row
            else "—"
            for s in solvers
        ]
        for row in results["solvers"]
    ]
    return table(["graph (unknowns)", *solvers], rows)


@measured(
    "pose_graph_compiled_start",
    "results_pose_graph_compiled_start.json",
    "python -m benchmarks.pose_graph --graphs tinyGrid3D smallGrid3D --repeats 30 "
    "--out benchmarks/results_pose_graph_compiled_start.json",
)
def pose_graph_compiled_start(results: dict) -> str:
    """Per solve, the chordal start included, against GTSAM's start and LM: PyTorch and JAX
    as the example runs them, and JAX with the start and the solve compiled as one call
    (graphs of at most 600 unknowns); the first run's time apart."""
    rows = []
    for row in results["rows"]:
        gtsam = row["gtsam"]["seconds"]
        for kind in ("torch", "jax", "jax compiled"):
            if kind not in row:
                continue
            r = row[kind]
            rows.append(
                [
                    row["graph"],
                    kind,
                    milliseconds(r["seconds"]),
                    milliseconds(gtsam),
                    _per_round(r["gtsam ratio per round"]),
                    seconds_text(r["first run seconds"]),
                ]
            )
    header = [
        "graph",
        "xform",
        "per solve (ms)",
        "GTSAM (ms)",
        "/ GTSAM per round",
        "first run",
    ]
    return table(header, rows, "--rrrr")


def _torch_floor(results: dict) -> str:
    """Per solve, interleaved in one process: a plain-torch solve written for the fewest
    calls, xform through PyTorch (when run beside it) and GTSAM; the start and the LM apart
    where timed apart; each one's final cost as it computes it."""
    (row,) = results["rows"]
    rows = []
    for kind in ("plain torch", "xform torch", "gtsam"):
        if kind not in row:
            continue
        r = row[kind]
        parts = (
            f"{r['start']['median'] * 1e3:.2f} + {r['lm']['median'] * 1e3:.2f}"
            if "start" in r
            else "-"
        )
        rows.append(
            [
                kind,
                f"{r['median'] * 1e3:.2f}",
                f"{r['min'] * 1e3:.2f}",
                parts,
                ratio(r["over gtsam per round"]),
                f"{r['cost']:.9f}",
                str(r["iterations"]),
            ]
        )
    header = ["solve", "median (ms)", "min (ms)", "start + LM (ms)", "/ GTSAM per round",
              "its own final cost", "iterations"]  # fmt: skip
    calls = row["torch calls"]
    lm_alone = row["plain torch"].get("lm over gtsam lm per round")
    note = (
        (
            f"\n\nThe plain solve's LM alone: {ratio(lm_alone)}x GTSAM's LM per round."
            if lm_alone
            else ""
        )
        + f"\n\nThe plain solve's torch calls: {calls['start']['aten dispatches']} aten "
        f"dispatches for the start, {calls['linearisation']['aten dispatches']} a "
        f"linearisation, {calls['retraction']['aten dispatches']} a retraction, "
        f"{calls['whole LM']['aten dispatches']} for the whole LM."
    )
    return table(header, rows, "-rrrrrr") + note


measured(
    "pose_graph_torch_floor",
    "results_pose_graph_torch_floor.json",
    "python -m benchmarks.pose_graph_torch_floor --repeats 200 "
    "--out benchmarks/results_pose_graph_torch_floor.json",
)(_torch_floor)
measured(
    "pose_graph_torch_floor_alone",
    "results_pose_graph_torch_floor_alone.json",
    "python -m benchmarks.pose_graph_torch_floor --repeats 200 --without-xform "
    "--out benchmarks/results_pose_graph_torch_floor_alone.json",
)(_torch_floor)


@measured(
    "pose_graph_instructions",
    "results_instructions.json",
    "python -m benchmarks.instructions",
)
def pose_graph_instructions(results: dict) -> str:
    """A small graph's solve counted in instructions (valgrind's callgrind, the solves
    alone): `xform.optim`'s, and the same algorithm by hand with the same ops."""
    rows = [
        [
            f"{row['graph']}, {row['framework']}",
            f"{row['xform instructions per solve'] / 1e6:.2f} M",
            f"{row['floor instructions per solve'] / 1e6:.2f} M",
            f"{row['xform / floor']:.2f}",
        ]
        for row in results["rows"]
    ]
    return table(
        ["graph, framework", "xform.optim", "by hand (the floor)", "ratio"], rows
    )


# --- inverse kinematics and bundle adjustment ------------------------------------------------


@measured(
    "inverse_kinematics",
    "results_inverse_kinematics.json",
    "python -m benchmarks.inverse_kinematics",
)
def inverse_kinematics(results: dict) -> str:
    """1,000 Panda targets: how many each method reached (1e-6 m and 1e-6 rad) and in what
    time (one timed run after a warm-up)."""
    rows = [
        [
            name,
            f"{run['reached']}/{run['targets']}",
            seconds_text(run["seconds median"]),
        ]
        for name, run in results["summary"].items()
    ]
    return table(["method", "reached", "time"], rows, "-rr")


BAL = "results_bundle_adjustment.json"
BAL_COMMAND = "python -m benchmarks.bundle_adjustment"


def _methods(summary: dict, per_iteration: bool = False) -> list[list[str]]:
    """A row per method that ran (a cost, its iterations, the median time with the fastest
    in brackets, over the faster peer), and one naming the error of each that failed."""
    rows = []
    for name, run in summary.items():
        if not isinstance(run, dict):
            continue
        if "cost" not in run:
            width = 8 if per_iteration else 5
            rows.append(
                [name, "failed: " + run.get("error", "?")[:60]] + [""] * (width - 2)
            )
            continue
        row = [
            name,
            f"{run['cost']:,.3f}",
            str(run["iterations"]),
            f"{seconds_text(run['seconds median'])} ({seconds_text(run['seconds min'])})",
        ]
        if per_iteration:
            row.append(milliseconds(run["seconds median"] / max(run["iterations"], 1)))
            row.append(seconds_text(run["first run seconds"]))
            peak = run.get("peak bytes")
            row.append("" if peak is None else f"{max(peak, 0) / 2**20:,.0f}")
        row.append(
            ratio(run["ratio to fastest peer"])
            if "ratio to fastest peer" in run
            else ""
        )
        rows.append(row)
    return rows


@measured("bundle_adjustment", BAL, BAL_COMMAND)
def bundle_adjustment(results: dict) -> str:
    """Ladybug-49, the same number of Levenberg–Marquardt iterations each: the cost every
    method reached (one evaluator for all) and its time (median of the repeats; the
    fastest in brackets), over the faster peer's."""
    header = ["method", "cost", "iterations", "time", "/ the faster peer"]
    return table(header, _methods(results["problems"][0]["summary"]))


@measured("bundle_adjustment_split", BAL, BAL_COMMAND)
def bundle_adjustment_split(results: dict) -> str:
    """Milliseconds per linearisation, xform through PyTorch and through JAX."""
    summary = results["problems"][0]["summary"]
    runs = {n: r for n, r in summary.items() if "per linearisation" in r}
    parts = list(next(iter(runs.values()))["per linearisation"])
    rows = [
        [part, *(milliseconds(run["per linearisation"][part]) for run in runs.values())]
        for part in parts
    ]
    return table(["part", *runs], rows)


BAL_SYNTHETIC = "results_bundle_adjustment_synthetic.json"
BAL_SYNTHETIC_COMMAND = "python -m benchmarks.bundle_adjustment --problems 8x200 20x1000 100x5000 --repeats 3"


@measured("bundle_adjustment_synthetic", BAL_SYNTHETIC, BAL_SYNTHETIC_COMMAND)
def bundle_adjustment_synthetic(results: dict) -> str:
    """Synthetic streets (`benchmarks/synthetic.py`), 30 Levenberg–Marquardt iterations
    asked of each on the CPU, one thread: the cost reached (one evaluator), the time of
    the runs after the first (median; fastest in brackets) and per iteration, the first
    run's (with JAX's compilation and the kernels' loading), the peak memory a run adds
    (MiB, resident set), and the time over the faster peer's."""
    header = ["problem", "method", "cost", "iterations", "time", "per iteration, ms",
              "first run", "peak MiB", "/ the faster peer"]  # fmt: skip
    rows = []
    for problem in results["problems"]:
        label = (
            f"{problem['cameras']} cameras, {problem['observations']:,} observations"
        )
        for row in _methods(problem["summary"], per_iteration=True):
            rows.append([label, *row])
            label = ""
    return table(header, rows, "--" + "r" * 7)


BAL_CONVERGE = "results_bundle_adjustment_converge.json"


@measured(
    "bundle_adjustment_converge", BAL_CONVERGE,
    f"{BAL_SYNTHETIC_COMMAND} --peers gtsam --converge 1e-10 --iterations 100",
)  # fmt: skip
def bundle_adjustment_converge(results: dict) -> str:
    """The same problems solved to a relative decrease of 1e-10 (each method's own
    iterations): the time of a solve."""
    return bundle_adjustment_synthetic(results)


LIETORCH = "results_lietorch.json"
LIETORCH_COMMAND = "python -m benchmarks.lietorch"


def _lietorch_rows(rows: list[dict]) -> str:
    def pair(r: dict, part: str) -> str:
        xform, peer = r[f"{part}_xform_s"], r[f"{part}_lietorch_s"]
        return f"{milliseconds(xform)} / {milliseconds(peer)} (**{ratio(r[f'{part}_ratio'])}**)"

    body = [
        [r["group"], r["op"], f"{r['n']:,}", f"{r['max_difference']:.1e}", pair(r, "forward"),
         pair(r, "backward")]
        for r in rows
    ]  # fmt: skip
    header = ["group", "op", "batch", "max difference (f64)", "forward, ms",
              "forward + backward, ms"]  # fmt: skip
    return table(header, body, "--rrrr")


@measured("lietorch_largest", LIETORCH, LIETORCH_COMMAND)
def lietorch_largest(results: dict) -> str:
    """xform.lietorch / LieTorch's CPU kernels at the largest batch, float64: the largest
    difference of the values, and the times (ratio below 1: xform faster)."""
    largest = max(r["n"] for r in results["rows"])
    return _lietorch_rows([r for r in results["rows"] if r["n"] == largest])


@measured("lietorch_batches", LIETORCH, LIETORCH_COMMAND)
def lietorch_batches(results: dict) -> str:
    """The same at every batch size."""
    return _lietorch_rows(results["rows"])


@measured("lietorch_float32", LIETORCH, LIETORCH_COMMAND)
def lietorch_float32(results: dict) -> str:
    """float32 near the identity: relative errors against float64 at 256 tangents of each
    norm, xform / LieTorch (exp: the worst of its data's parts, each relative to its own
    size; log: of the float32 data, against the exact log of that data; exp's gradient)."""
    body = [
        [r["group"], f"{r['norm']:.0e}",
         *(f"{r[f'{k}_xform']:.1e} / {r[f'{k}_lietorch']:.1e}" for k in ("exp", "log", "exp_grad"))]
        for r in results["float32"]
    ]  # fmt: skip
    header = ["group", "norm of the tangent", "exp", "log", "exp's gradient"]
    return table(header, body, "-rrrr")


# --- drawing ---------------------------------------------------------------------------------


def _digest() -> str:
    parts = [Path(__file__).read_bytes()]
    parts += [
        (RESULTS / s).read_bytes()
        for s in sorted({m.source for m in REGISTRY.values()})
    ]
    return hashlib.sha256(b"".join(parts)).hexdigest()


def draw() -> None:
    """Draw every registered item into docs/generated/ and copy its results file there."""
    if OUT.exists():
        shutil.rmtree(OUT)
    COPIES.mkdir(parents=True)
    for item in REGISTRY.values():
        shutil.copyfile(RESULTS / item.source, COPIES / item.source)
        drawn = item.draw(load(item.source))
        if isinstance(drawn, str):
            (OUT / f"{item.name}.md").write_text(drawn.rstrip() + "\n")
        else:
            drawn.savefig(OUT / f"{item.name}.png", dpi=110)
            import matplotlib.pyplot as plt

            plt.close(drawn)
    (OUT / "stamp").write_text(_digest())


def draw_stale() -> None:
    """Draw unless the outputs were made from these inputs (so that `mkdocs serve`, which
    rebuilds when docs/ changes, does not rebuild for ever)."""
    stamp = OUT / "stamp"
    if not stamp.exists() or stamp.read_text() != _digest():
        draw()


def expand(markdown: str, page: str) -> str:
    """`markdown` (of the page at `page`, relative to docs/) with each directive replaced by
    its item and caption, indented as the directive was (inside an admonition, say)."""
    prefix = "../" * page.count("/")

    def item_text(match: re.Match) -> str:
        name = match["name"]
        if name not in REGISTRY:
            raise ValueError(
                f"{page}: no measured item {name!r} (docs/figures.py has "
                f"{', '.join(sorted(REGISTRY))})"
            )
        item = REGISTRY[name]
        if (OUT / f"{name}.md").exists():
            body = (OUT / f"{name}.md").read_text().rstrip()
        else:
            body = f"![{item.summary}]({prefix}generated/{name}.png)"
        text = f"{body}\n\n{item.summary} {caption(item, prefix)}"
        return "\n".join(
            match["indent"] + line if line else "" for line in text.split("\n")
        )

    return DIRECTIVE.sub(item_text, markdown)


def used_sources(text: str) -> set[str]:
    """The results files whose items a page shows."""
    return {
        REGISTRY[m["name"]].source
        for m in DIRECTIVE.finditer(text)
        if m["name"] in REGISTRY
    }


if __name__ == "__main__":
    draw()
    print(f"wrote {OUT}", file=sys.stderr)
