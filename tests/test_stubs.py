"""The typed stubs of the generated functions (`xform/_stubs.py`): current with the op
table, and a type checker flags a misspelt op or a wrong number of arguments."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from xform import _stubs

ROOT = _stubs.ROOT


def test_the_stubs_are_current():
    assert _stubs.main(check=True) == 0, "run `python -m xform._stubs` and commit the stubs"


def _installed_layout(tmp_path):
    """The package as installed: a link to the checkout's `xform/`, alone on MYPYPATH."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "xform").symlink_to(ROOT / "xform")
    return site


def test_a_type_checker_flags_misspelt_ops_and_wrong_arity(tmp_path):
    pytest.importorskip("mypy")
    site = _installed_layout(tmp_path)
    program = tmp_path / "user.py"
    program.write_text(
        textwrap.dedent(
            """
            import numpy as np
            import xform
            import xform.backends.jax as xj
            import xform.backends.torch as xt

            q = np.zeros(4)
            xform.quaternion_to_matrix(q)
            xform.pose_multiply(q, q, q, q)[1]
            xform.quaternion_to_matrx(q)  # line 10: misspelt
            xform.quaternion_multiply(q)  # line 11: one argument short
            xt.so3_exp(q, q)  # line 12: one too many
            xj.se3_lgo(q)  # line 13: misspelt
            xt.transform_points(q, q, q, out_points=None)
            """
        )
    )
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=skip", "--ignore-missing-imports",
         "--no-incremental", "--cache-dir=/dev/null", "--no-error-summary", str(program)],
        capture_output=True, text=True, cwd=tmp_path, env={"MYPYPATH": str(site), "PATH": ""},
    )  # fmt: skip
    flagged = {int(line.split(":")[1]) for line in found.stdout.splitlines() if ": error:" in line}
    assert flagged == {10, 11, 12, 13}, found.stdout + found.stderr
