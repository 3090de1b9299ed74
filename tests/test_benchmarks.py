"""The benchmark is not a test, but it must not rot: run it at its smallest size."""

import json
from pathlib import Path

import pytest


def test_benchmark_runs_at_the_smallest_size(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    pytest.importorskip("matplotlib")
    from benchmarks.run import OPS, main

    rows = main(["--sizes", "16", "--no-compile", "--out", str(tmp_path)])
    assert {r["op"] for r in rows} == set(OPS)
    assert all(r["torch ratio"] > 0 and r["jax ratio"] > 0 for r in rows)
    saved = json.loads((tmp_path / "results.json").read_text())
    measured = {r["impl"] for r in saved["records"]}
    assert {
        "xform torch",
        "xform jax.jit",
        "xform numpy",
        "torch",
        "warp floor",
        "copy floor",
    } <= measured
    assert all(r["seconds"] > 0 for r in saved["records"])
    assert (tmp_path / "results.png").stat().st_size > 0
