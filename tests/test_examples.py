"""Every script in interop_examples/ runs as a user runs it (`python interop_examples/X.py`,
no arguments: each checks its own result and exits non-zero on a failure), in a child
process, so that pytest-xdist spreads them among the other tests."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "interop_examples").glob("*.py"))


def test_every_example_is_found():
    assert len(EXAMPLES) >= 10, EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_runs_and_checks_itself(example):
    done = subprocess.run(
        [sys.executable, str(example)], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    output = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, output
    assert "FAILED" not in done.stdout, output
