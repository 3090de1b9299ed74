"""`import xform` needs neither PyTorch nor JAX, and loads neither."""

import subprocess
import sys
import textwrap

BLOCK_FRAMEWORKS = textwrap.dedent(
    """
    import importlib.abc, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "jax", "jaxlib"):
                raise ImportError(f"{name} is blocked for this test")
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_import_without_torch_or_jax():
    result = run(
        BLOCK_FRAMEWORKS
        + textwrap.dedent(
            """
            import numpy as np
            import xform
            out = xform.transform_points(np.zeros(3), np.array([1.0, 0, 0, 0]), np.ones((2, 3)))
            assert np.array_equal(out, np.ones((2, 3)))
            print("ok")
            """
        )
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_import_loads_no_framework():
    result = run(
        "import sys, xform, xform.backends\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'jax')))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_blocker_really_blocks():
    """Guard against a vacuous pass: the blocker must make framework imports fail."""
    result = run(BLOCK_FRAMEWORKS + "import torch")
    assert result.returncode != 0


def test_a_framework_imported_after_the_first_elements_holds_them_as_pytrees():
    """Elements made before PyTorch and JAX are imported register the groups with NumPy
    alone; each framework imported later still has them as pytrees at its first element
    (the registration is checked at every element, skipped while no module is imported)."""
    result = run(
        textwrap.dedent(
            """
            import numpy as np
            import xform
            for _ in range(3):
                xform.SE3.identity((2,))
            import torch
            import torch.utils._pytree as torch_tree
            element = xform.SE3.identity((2,)).to_torch()
            assert len(torch_tree.tree_leaves(element)) == 2, torch_tree.tree_leaves(element)
            import jax
            element = xform.SE3.identity((2,)).to_jax()
            assert len(jax.tree_util.tree_leaves(element)) == 2
            print("ok")
            """
        )
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
