"""What the CUDA code of xform's kernels does, read from the code itself, with no GPU.

    python -m benchmarks.cuda_code [--ops NAME ...] [--panda] [--scalar float32]
                                   [--out DIR] [--keep]

Each op's forward, tangent and VJP kernels are compiled by Warp's NVRTC for sm_90 at
Warp's own CUDA optimisation level (-O3) into PTX under `--out`, and the PTX of each kernel
is counted: global loads and stores by width (a vectorised `.v2`/`.v4` moves 8 or 16 bytes
in one instruction), atomics, warp shuffles and `match`, shared-memory traffic and
barriers, local memory (spills and addressed arrays), integer divisions by width (a 64-bit
division is a ~70-instruction subroutine on the GPU, a 32-bit one ~20) and fp64
instructions. Where a `ptxas` is on PATH, it assembles the PTX for sm_90 with `-v`: the
registers per thread, spills and stack of each kernel. (NVRTC's PTX may be newer than that
ptxas reads: the version line is lowered, which changes nothing the counts rely on.)

The counts are static: an instruction in a loop counts once, and Warp's grid-stride loop
holds each kernel's body twice (for launches with and without a coordinate multiplier),
so a per-thread figure is half a body's count. benchmarks/NOTES.md (44) reads them.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import warp as wp

import xform
from xform._launch import blocks, codegen, source
from xform._op import Product

ARCH = 90
# The ops of issue 47's table, and one that runs at the bandwidth for contrast.
OPS = [
    "quaternion_to_matrix",
    "transform_points",
    "batch_transform_points",
    "so3_exp",
    "pose_multiply",
]
PRODUCTS = (Product.FORWARD, Product.TANGENT, Product.VJP, "vjp_blocks")

# (name, pattern over one PTX instruction line)
CLASSES = [
    ("ld.global", r"^ld\.global(\.nc)?\.(?!v)"),
    ("ld.global.v2", r"^ld\.global(\.nc)?\.v2"),
    ("ld.global.v4", r"^ld\.global(\.nc)?\.v4"),
    ("st.global", r"^st\.global\.(?!v)"),
    ("st.global.v2", r"^st\.global\.v2"),
    ("st.global.v4", r"^st\.global\.v4"),
    ("atomics", r"^(atom|red)\.(?!shared)"),  # global or generic: not shared memory
    ("shfl", r"^shfl\."),
    ("match", r"^match\."),
    ("ld/st.shared", r"^(ld|st)\.shared"),
    ("bar", r"^(bar|barrier)\."),
    ("ld/st.local", r"^(ld|st)\.local"),
    ("div/rem.32", r"^(div|rem)\.[su]32"),
    ("div/rem.64", r"^(div|rem)\.[su]64"),
    ("f64", r"\.f64\b"),
]


def compile_ptx(module: str, out: Path) -> Path:
    """Compile one generated Warp module for sm_90 to PTX under `out`; the PTX file."""
    wp.set_module_options({"optimization_level": None}, module=module)
    (path,) = wp.compile_aot_module(module, arch=ARCH, use_ptx=True, module_dir=str(out))
    return Path(path)


def entries(ptx: str) -> dict[str, list[str]]:
    """Each kernel (`.entry`) of a PTX text: its instruction lines, labels and comments out."""
    bodies, name, body = {}, None, []
    for line in ptx.replace("\0", "").splitlines():
        text = line.strip()
        found = re.match(r"\.visible \.entry (\w+)\(", text)
        if found:
            name, body = found.group(1), []
            continue
        if name is None:
            continue
        if text == "}" and body is not None and line.startswith("}"):
            bodies[name] = body
            name = None
            continue
        if text and not text.startswith(("//", ".", "{", "}", "$", ")")):
            body.append(re.sub(r"^@!?%p\d+\s+", "", text))
    return bodies


def count(lines: list[str]) -> dict[str, int]:
    counts = Counter()
    for line in lines:
        for cls, pattern in CLASSES:
            if re.search(pattern, line):
                counts[cls] += 1
    return {cls: counts[cls] for cls, _ in CLASSES}


def ptxas_info(ptx_path: Path) -> dict[str, dict[str, int]]:
    """Registers, spill bytes and stack bytes per kernel from `ptxas -v` (empty without
    a ptxas)."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return {}
    text = ptx_path.read_text().replace("\0", "")
    text = re.sub(r"^\.version \d+\.\d+", ".version 9.0", text, count=1, flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        lowered = Path(tmp) / "kernel.ptx"
        lowered.write_text(text)
        done = subprocess.run(
            [ptxas, f"-arch=sm_{ARCH}", "-v", str(lowered), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True, text=True,
        )  # fmt: skip
    info, name = {}, None
    for line in done.stderr.splitlines():
        found = re.search(r"Compiling entry function '(\w+)'", line)
        if found:
            name = found.group(1)
            info[name] = {}
            continue
        if name is None:
            continue
        for key, pattern in (
            ("stack", r"(\d+) bytes stack frame"),
            ("spill stores", r"(\d+) bytes spill stores"),
            ("spill loads", r"(\d+) bytes spill loads"),
            ("registers", r"Used (\d+) registers"),
            ("smem", r"(\d+) bytes smem"),
        ):
            found = re.search(pattern, line)
            if found:
                info[name][key] = int(found.group(1))
    return info


def ops_of(names: list[str], panda: bool) -> list[xform.Op]:
    ops = [xform.OPS[name] for name in names]
    if panda:
        from benchmarks.kinematics import panda_urdf

        chain = xform.kinematics.Chain.from_urdf(panda_urdf())
        ops += [chain.forward_kinematics_op, chain.jacobian_op]
    return ops


def report(ops, scalar, out: Path) -> list[dict]:
    """One row per kernel of each product of each op: the counts and ptxas's figures."""
    rows = []
    for op in ops:
        for product in PRODUCTS:
            if product != Product.FORWARD and not op.differentiable:
                continue
            if product == "vjp_blocks":  # the GPU's VJP of broadcast operands (blocks.py)
                blocks.kernels(op, scalar)
            else:
                codegen.kernels(op, product, scalar)
            module = source.module_name(op, product, scalar)
            path = compile_ptx(module, out)
            bodies = entries(path.read_text())
            info = ptxas_info(path)
            for entry, lines in bodies.items():
                kind = re.sub(r"_[0-9a-f]{8}_cuda_kernel_forward$", "", entry)
                if kind.startswith("adjoint_anchor"):
                    continue  # never launched
                rows.append({"op": op.name, "product": str(product), "kernel": kind,
                             "instructions": len(lines), **count(lines),
                             **info.get(entry, {})})  # fmt: skip
    return rows


def format_rows(rows: list[dict]) -> str:
    keys = ["op", "product", "kernel", "instructions", *(c for c, _ in CLASSES)]
    keys += ["registers", "spill stores", "stack"]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(k, "")) for k in keys) + " |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=OPS, choices=sorted(xform.OPS))
    parser.add_argument("--panda", action="store_true", help="Panda's FK and Jacobian too")
    parser.add_argument("--scalar", default="float32", choices=["float32", "float64"])
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "xform_ptx")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    args.out.mkdir(parents=True, exist_ok=True)
    rows = report(ops_of(args.ops, args.panda), getattr(wp, args.scalar), args.out)
    print(format_rows(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
