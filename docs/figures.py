"""The performance page's figures and table, from the committed benchmark results:
`python docs/figures.py` (the site's build runs it when its inputs changed).

Writes into docs/generated/ (git-ignored):
- `ratios.png`: xform's time over the best peer's, per op, from the latest whole run;
- `latest_run.md`: that run's times and ratios as a table;
- `sizes.png`: the benchmark's own plot of time against size (`benchmarks/results.png`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "generated"
# The latest run of the whole benchmark (benchmarks/RESULTS.md, its last section).
LATEST_RUN = ROOT / "benchmarks" / "results_cheaper_vjps.json"
SIZE_PLOT = ROOT / "benchmarks" / "results.png"
SIZES = (16, 1_048_576)
MODES = ("forward", "forward+backward")


def _digest() -> str:
    parts = (LATEST_RUN.read_bytes(), SIZE_PLOT.read_bytes(), Path(__file__).read_bytes())
    return hashlib.sha256(b"".join(parts)).hexdigest()


def _rows() -> list[dict]:
    return json.loads(LATEST_RUN.read_text())["ratios"]


def table() -> str:
    """The latest run as a Markdown table: µs per call and the ratio to the best peer."""
    run = json.loads(LATEST_RUN.read_text())
    lines = [
        f"Measured on {run['machine']} (`{LATEST_RUN.relative_to(ROOT)}`). Ratio: xform's "
        "time over the best peer's in the same framework; below 1, xform is faster.",
        "",
        "| op | mode | points | torch µs | best torch peer | ratio | jax.jit µs "
        "| best jnp peer | ratio |",
        "|---|---|---:|---:|---|---:|---:|---|---:|",
    ]
    for r in _rows():
        if r["size"] not in SIZES:
            continue
        lines.append(
            f"| {r['op']} | {r['mode']} | {r['size']:,} | {r['xform torch'] * 1e6:,.0f} "
            f"| {r['best torch peer']} | {r['torch ratio']:.2f} "
            f"| {r['xform jax.jit'] * 1e6:,.0f} | {r['best jax peer']} | {r['jax ratio']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def ratio_figure(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows()
    ops = list(dict.fromkeys(r["op"] for r in rows))
    from matplotlib.ticker import FixedLocator, NullLocator

    figure, axes = plt.subplots(
        len(SIZES),
        len(MODES),
        figsize=(11, 0.3 * len(ops) * len(SIZES) + 1.5),
        sharex=True,
        sharey=True,
    )
    axes[0][0].invert_yaxis()  # the first op on top (the axes share it: once)
    for i, size in enumerate(SIZES):
        for j, mode in enumerate(MODES):
            ax = axes[i][j]
            chosen = {r["op"]: r for r in rows if r["size"] == size and r["mode"] == mode}
            for k, (key, label) in enumerate((("torch ratio", "torch"), ("jax ratio", "jax.jit"))):
                values = [chosen[op][key] if op in chosen else float("nan") for op in ops]
                ax.barh([y + 0.4 * k for y in range(len(ops))], values, height=0.4, label=label)
            ax.axvline(1.0, color="k", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_xlim(0.03, 3)
            ticks = [0.03, 0.1, 0.3, 1, 3]
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.set_title(f"{mode}, {size:,} points", fontsize=10)
            ax.set_yticks([y + 0.2 for y in range(len(ops))], ops, fontsize=8)
            ax.grid(True, axis="x", alpha=0.3)
            if i == len(SIZES) - 1:
                ax.set_xlabel("xform's time / the best peer's (below 1: xform is faster)")
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def draw() -> None:
    OUT.mkdir(exist_ok=True)
    ratio_figure(OUT / "ratios.png")
    (OUT / "latest_run.md").write_text(table())
    shutil.copyfile(SIZE_PLOT, OUT / "sizes.png")
    (OUT / "stamp").write_text(_digest())


def draw_stale() -> None:
    """Draw unless the outputs were made from these inputs (so that `mkdocs serve`, which
    rebuilds when docs/ changes, does not rebuild for ever)."""
    stamp = OUT / "stamp"
    if not stamp.exists() or stamp.read_text() != _digest():
        draw()


if __name__ == "__main__":
    draw()
    print(f"wrote {OUT}", file=sys.stderr)
