"""What a benchmark run prints and records: xform's ratios to the best peer per framework,
their Markdown table, the plot of time against size, and the machine, date and commit a
results file was measured on (shared by every benchmark of this folder)."""

from __future__ import annotations

import datetime
import math
import os
import platform
import subprocess
from pathlib import Path

import jax
import torch
import warp as wp

# The PyTorch peers a torch ratio is taken against: the best of them per row.
TORCH_PEERS = ("torch", "torch.compile", "roma", "pypose")


def ratio_rows(records):
    """Per (op, mode, size): xform's time over the best peer's, per framework."""
    table, traffic = {}, {}
    for r in records:
        table.setdefault((r["op"], r["mode"], r["size"]), {})[r["impl"]] = r["seconds"]
        traffic[r["op"], r["mode"], r["size"]] = r["bytes"]
    rows = []
    for (op, mode, size), times in table.items():
        best_torch = min(
            ((times[k], k) for k in TORCH_PEERS if k in times), default=(math.nan, "-")
        )
        best_jax = min(
            ((t, k) for k, t in times.items() if k.startswith("jax.jit ")), default=(math.nan, "-")
        )
        rows.append(
            {
                "op": op,
                "mode": mode,
                "size": size,
                "xform torch": times["xform torch"],
                "best torch peer": best_torch[1],
                "torch ratio": times["xform torch"] / best_torch[0],
                "xform jax.jit": times["xform jax.jit"],
                "best jax peer": best_jax[1],
                "jax ratio": times["xform jax.jit"] / best_jax[0],
                "jax callback ratio": times.get("xform jax.jit callback", math.nan) / best_jax[0],
                "warp floor": times.get("warp floor", math.nan),
                "copy floor": times["copy floor"],
                "torch / copy": times["xform torch"] / times["copy floor"],
                "torch GB/s": traffic[op, mode, size] / times["xform torch"] / 1e9,
            }
        )
    return rows


COLUMNS = (
    ("op", "op", str),
    ("mode", "mode", str),
    ("size", "size", "{:,}".format),
    ("xform torch µs", "xform torch", lambda s: f"{s * 1e6:,.0f}"),
    ("best torch peer", "best torch peer", str),
    ("ratio", "torch ratio", "{:.2f}".format),
    ("xform jax µs", "xform jax.jit", lambda s: f"{s * 1e6:,.0f}"),
    ("best jax peer", "best jax peer", str),
    ("ratio", "jax ratio", "{:.2f}".format),
    ("callback ratio", "jax callback ratio", "{:.2f}".format),
    ("warp floor µs", "warp floor", lambda s: f"{s * 1e6:,.0f}"),
    ("copy floor µs", "copy floor", lambda s: f"{s * 1e6:,.0f}"),
    ("torch / copy", "torch / copy", "{:.1f}".format),
    ("torch GB/s", "torch GB/s", "{:.1f}".format),
)


def format_loop(loop) -> str:
    """The per-step table of the jitted `lax.fori_loop` (`loop_rows`)."""
    lines = [
        "\nA jitted lax.fori_loop of 1,000 transform_points on 16 points, per step:\n",
        "| implementation | µs per step | ratio to the best jnp |\n|---|---:|---:|",
    ]
    lines += [f"| {r['impl']} | {r['step µs']:.2f} | {r['ratio to best jnp']:.2f} |" for r in loop]
    return "\n".join(lines)


def format_table(rows) -> str:
    """A Markdown table of the ratio rows."""
    lines = [
        "| " + " | ".join(title for title, _, _ in COLUMNS) + " |",
        "|" + "|".join("---" if fmt is str else "---:" for _, _, fmt in COLUMNS) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r[key]) for _, key, fmt in COLUMNS) + " |")
    return "\n".join(lines)


def plot(records, path: Path, ops_order, modes_order) -> None:
    try:
        import matplotlib
    except ImportError:  # a bare GPU machine: the table and results.json are what count
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({r["op"] for r in records}, key=list(ops_order).index)
    modes = [m for m in modes_order if any(r["mode"] == m for r in records)]
    fig, axes = plt.subplots(
        len(modes), len(ops), figsize=(4 * len(ops), 3.5 * len(modes)), squeeze=False
    )
    for i, mode in enumerate(modes):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            for impl in dict.fromkeys(r["impl"] for r in records):
                points = sorted(
                    (r["size"], r["seconds"])
                    for r in records
                    if (r["op"], r["mode"], r["impl"]) == (op, mode, impl)
                )
                if points:
                    style = "-o" if impl.startswith("xform") else "--" if "floor" in impl else ":"
                    ax.plot(*zip(*points), style, label=impl, markersize=3)
            ax.set(
                xscale="log", yscale="log", title=f"{op}\n{mode}", xlabel="size", ylabel="seconds"
            )
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def recorded_at() -> dict:
    """When and on what tree a run was made: the UTC date, and the commit (XFORM_COMMIT
    where the tree travelled without its history, as to a lent GPU)."""
    commit = os.environ.get("XFORM_COMMIT")
    if not commit:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent)  # fmt: skip
        commit = done.stdout.strip() if done.returncode == 0 else "unknown"
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"), "commit": commit}


def machine(device: str) -> str:
    where = f"{platform.machine()}, {os.cpu_count()} CPU cores"
    if device != "cpu":
        where = f"{wp.get_device(device).name} ({device}), {where}"
    return (
        f"{where}, Python {platform.python_version()}, torch {torch.__version__}, "
        f"jax {jax.__version__}, warp {wp.config.version}, float32"
    )
