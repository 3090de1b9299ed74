"""The core (`xform/`) and the adapters (`xform/backends/`) import one way, down: no circle.

Imports are read with `ast`, at every level: a function's own import is a dependency
too, and so is an import under `if TYPE_CHECKING:` (a type names what it depends on).
The core finds the adapters by their module names (`xform._frameworks`), imported on
first use: it does not depend on their code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"xform": ROOT / "xform"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, whether it is a package's __init__)."""
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            modules[".".join([package, *parts])] = (path, path.name == "__init__.py")
    return modules


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                target = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:  # `from package import module` names the module
                    child = f"{target}.{alias.name}"
                    edges.add(child if child in modules else target)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    graph = import_graph()
    found = circles(graph)
    detail = "; ".join(" ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)
    assert not found, f"import circles: {detail}"


def test_the_check_finds_a_circle():
    graph = import_graph()
    assert "xform._op" in graph["xform._second_order"]
    graph["xform._op"] = graph["xform._op"] | {"xform._second_order"}  # a made-up import back
    assert any({"xform._op", "xform._second_order"} <= set(c) for c in circles(graph))


def test_type_only_imports_count(tmp_path, monkeypatch):
    """An import under `if TYPE_CHECKING:` is an edge of the graph, so a circle that only
    types close is found."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    monkeypatch.setitem(PACKAGES, "pkg", package)
    monkeypatch.delitem(PACKAGES, "xform")
    assert circles(import_graph()) == [["pkg.a", "pkg.b"]]


def test_the_op_record_imports_nothing_of_xform():
    """The record at the bottom: calling an op reaches the dispatch through a hook."""
    assert not import_graph()["xform._op"]


@pytest.mark.parametrize(
    "module", ["xform._launch.layout", "xform._launch.codegen", "xform._registry"]
)
def test_the_bottom_of_the_core_imports_no_op_module(module):
    assert not {"xform._define", "xform._dispatch", "xform.ops"} & import_graph()[module]


# A room (module) of the core or the adapters holds one job; past this it is doing several.
ROOM_LINES = 600


def test_no_room_is_over_the_limit():
    long = {
        str(path.relative_to(ROOT)): lines
        for path, _ in _modules().values()
        if (lines := len(path.read_text().splitlines())) > ROOM_LINES
    }
    assert not long, f"rooms over {ROOM_LINES} lines: {long}"


# --- one framework object, used everywhere -------------------------------------------------

FRAMEWORK_NAMES = {"numpy", "warp", "torch", "jax"}
# Where a framework may be named: its object (xform/_frameworks/) and its adapter.
NAMING_FRAMEWORKS = ("xform/_frameworks/", "xform/backends/")
# The solver's own tests of frameworks are the solver's to move (its loop is one for both).
NOT_YET: tuple[str, ...] = ()


def framework_tests(source: str) -> list[int]:
    """The lines of `source` that compare a value with a framework's name (`kind ==
    "torch"`, `"jax" in kinds`, `name in ("torch", "jax")`): each such test is a branch
    on the framework that belongs in its `Framework` object."""

    def names_a_framework(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in FRAMEWORK_NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_a_framework(e) for e in node.elts)
        return False

    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare)
        and any(names_a_framework(side) for side in (node.left, *node.comparators))
    )


def test_no_framework_is_branched_on_outside_its_object():
    found = []
    for folder in ("xform", "interop_examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where.startswith(NAMING_FRAMEWORKS + NOT_YET):
                continue
            found += [f"{where}:{line}" for line in framework_tests(path.read_text())]
    assert not found, "framework tests outside xform/_frameworks/:\n" + "\n".join(found)


def test_the_framework_check_finds_each_spelling():
    source = (
        'if kind == "torch": pass\n'
        'x = "jax" in kinds\n'
        'y = name not in ("numpy", "warp")\n'
        'z = kind == "cuda"\n'
    )
    assert framework_tests(source) == [1, 2, 3]
