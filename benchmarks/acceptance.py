"""Issue 47's acceptance list from the files of a lent GPU's run, and those files installed.

    python -m benchmarks.acceptance --summary DIR   # writes DIR/acceptance.md, prints it
    python -m benchmarks.acceptance --install DIR   # the run's results into benchmarks/

DIR is the folder `benchmarks/gpu_roofline.sh` writes ($OUT): `roofline/roofline.json`
(`python -m benchmarks.roofline`), `hbm_16M/results.json` (`python -m benchmarks` at 16M
points), `jax_calls.json` (`python -m benchmarks.jax_calls`) and `sizes/results.json`
(16 to 1M points, the docs' CUDA figure). `--install` copies them into benchmarks/ as
`results_cuda.json` (what docs/figures.py draws the CUDA figure and table from),
`results_cuda_16M.json`, `results_jax_calls_cuda.json` and `results_roofline_cuda.json`,
then redraws the docs' figures (`python docs/figures.py`). Only files are read: no GPU,
no framework imported.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Nominal HBM bandwidth, bytes/s, by device name.
PEAK = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}


# Issue 47's targets: a forward at 70% of the peak or more, forward + backward at 50%.
FORWARD_SHARE, BACKWARD_SHARE = 0.70, 0.50


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def summary(folder: Path) -> str:
    """Issue 47's acceptance list, item by item, from a GPU run's folder."""
    roofline = _load(folder / "roofline" / "roofline.json") or {}
    ops = _load(folder / "hbm_16M" / "results.json")
    calls = _load(folder / "jax_calls.json")
    peak = roofline.get("peak bytes/s") or PEAK["H200"]
    lines = [f"# Issue 47's acceptance, measured\n\n{roofline.get('machine', '')}\n"]
    if "copy" in roofline:
        copy = roofline["copy"]
        lines.append(f"A device copy: {copy['GB/s']:,.0f} GB/s, {copy['GB/s'] * 1e9 / peak:.0%} "
                     f"of the nominal {peak / 1e12:.2f} TB/s.\n")  # fmt: skip
    if ops:
        size = ops["ratios"][0]["size"] if ops["ratios"] else 0
        lines += [f"## Every op at {size:,} points (through torch; least traffic)\n",
                  "| op | mode | GB/s | share of peak | target | met | x eager torch | "
                  "xform jax / best jnp |", "|---|---|---:|---:|---:|---|---:|---:|"]  # fmt: skip
        for r in ops["ratios"]:
            share = r["torch GB/s"] * 1e9 / peak
            target = FORWARD_SHARE if r["mode"] == "forward" else BACKWARD_SHARE
            lines.append(
                f"| {r['op']} | {r['mode']} | {r['torch GB/s']:,.0f} | {share:.0%} | "
                f"{target:.0%} | {'yes' if share >= target else 'no'} | "
                f"{r['torch ratio']:.2f} | {r['jax ratio']:.2f} |"
            )
        batch = [r for r in ops["ratios"] if r["op"] == "batch_transform_points"
                 and r["mode"] == "forward+backward"]  # fmt: skip
        for r in batch:
            lines.append(f"\nbatch_transform_points forward + backward: {r['torch ratio']:.2f}x "
                         f"eager torch (target 0.5x), {r['jax ratio']:.2f}x the best jnp "
                         "(target 1.0x).")  # fmt: skip
        for r in ops["ratios"]:
            if r["op"] == "quaternion_to_matrix" and r["mode"] == "forward":
                lines.append(f"quaternion_to_matrix through JAX: {r['jax ratio']:.2f}x jnp "
                             "(target 1.0x).\n")  # fmt: skip
    if calls:
        over = [r for r in calls["ratios"] if r["native ratio"] > 1.2]
        lines += [f"## Per jitted JAX call: {len(calls['ratios']) - len(over)} of "
                  f"{len(calls['ratios'])} cells at most 1.2x the best jnp\n"]  # fmt: skip
        lines += [f"- over: {r['op']} {r['mode']} at {r['size']:,}: {r['native ratio']:.2f}x"
                  for r in over]  # fmt: skip
    for r in roofline.get("kinematics", []):
        share = r.get("share of peak", float("nan"))
        lines.append(f"- Panda {r['op']} {r['mode']} at {r['configurations']:,}: "
                     f"{r['ns per configuration']:.2f} ns, {share:.0%} of the peak "
                     "(target 50%)")  # fmt: skip
    if roofline.get("stores"):
        lines += ["\n## Stores of one N-float element a thread (NOTES 44)\n",
                  "| N | plain µs | staged µs | one float a thread µs | staged correct |",
                  "|---:|---:|---:|---:|---|"]  # fmt: skip
        for r in roofline["stores"]:
            times = [r[f"{k} s"] * 1e6 for k in ("plain", "staged", "one scalar per thread")]
            lines.append(f"| {r['scalars per element']} | "
                         + " | ".join(f"{t:,.1f}" for t in times)
                         + f" | {r['staged store correct']} |")  # fmt: skip
        lines.append("")
    for r in roofline.get("sums", []):
        lines.append(f"- {r['op']} forward + backward, {'blocks' if r['in blocks'] else 'atomics'}:"
                     f" {r['seconds'] * 1e6:,.0f} µs, five runs the same bits: "
                     f"{r['five runs the same bits']}")  # fmt: skip
    text = "\n".join(lines) + "\n"
    (folder / "acceptance.md").write_text(text)
    return text


def install(folder: Path, into: Path = ROOT / "benchmarks", figures: bool = True) -> list[str]:
    """A GPU run's results into benchmarks/ (`into`), and the docs' figures redrawn from
    them; the names written."""
    copies = {
        folder / "sizes" / "results.json": "results_cuda.json",
        folder / "hbm_16M" / "results.json": "results_cuda_16M.json",
        folder / "jax_calls.json": "results_jax_calls_cuda.json",
        folder / "roofline" / "roofline.json": "results_roofline_cuda.json",
    }
    written = []
    for source, name in copies.items():
        if source.is_file():
            shutil.copy(source, into / name)
            written.append(name)
            print(f"{source} -> {into / name}")
    if figures:
        subprocess.run([sys.executable, str(ROOT / "docs" / "figures.py")], check=True)
    return written


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--summary", type=Path, help="a GPU run's folder: its acceptance table")
    group.add_argument("--install", type=Path, help="a GPU run's folder: into benchmarks/")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
    else:
        install(args.install)


if __name__ == "__main__":
    main()
