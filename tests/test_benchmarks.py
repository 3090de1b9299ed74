"""The benchmark is not a test, but it must not rot: run it at its smallest size."""

import json

import pytest


def test_benchmark_runs_at_the_smallest_size(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    pytest.importorskip("matplotlib")
    from benchmarks.run import OPS, main

    rows = main(["--sizes", "16", "--no-compile", "--out", str(tmp_path)])
    assert {r["op"] for r in rows} == set(OPS)
    assert all(r["torch ratio"] > 0 and r["jax ratio"] > 0 for r in rows)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved["records"]) >= len(rows) * 8
    assert (tmp_path / "results.png").stat().st_size > 0
