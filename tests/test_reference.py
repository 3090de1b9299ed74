"""The reference is complete: every public name has an entry in the built site.

The public API is found, not listed: every module of `xform` and `xform.backends` whose
dotted name has no part starting with `_` (save those in `DOCUMENTED_ELSEWHERE`), its
names (`__all__`, else the classes and functions it defines), and of each class its
public methods, properties and attributes, inherited ones included (from xform's own
bases: not `object`'s or `torch.autograd.Function`'s). A new module, group or method is
therefore checked the day it is added, with no list here to edit.

An entry is an element of the built site (`site/`, as `mkdocs build` writes it) whose
`id` is one of the name's paths: `xform.SE3.inverse`, `xform.groups.SE3.inverse` and
`xform.groups.se3.SE3.inverse` all name one method, and one entry serves them all. The ops are
documented once for their three front ends by `docs/api.md`, each under the id of its name.

Each function, class, method and property also has a docstring of its own (mkdocstrings
shows an inherited method with its base's docstring, an override with its own), and the
examples in those docstrings run and print what they show (doctest).
"""

from __future__ import annotations

import doctest
import functools
import importlib
import importlib.util
import inspect
import pkgutil
import re
import subprocess
import sys
import types
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import xform
import xform.backends
from xform.ops import COMPOSITES

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
# Modules whose names another page documents as a whole.
DOCUMENTED_ELSEWHERE = {
    "xform.ops": "the op table: docs/api.md has every op, generated from it",
    "xform.backends.jax_native": "the native XLA handler behind xform.backends.jax",
}
# The op front ends: their ops are docs/api.md's sections.
OP_FRONT_ENDS = ("xform", "xform.backends.torch", "xform.backends.jax")


def public_modules() -> list[str]:
    found = ["xform", *(m.name for m in pkgutil.walk_packages(xform.__path__, "xform."))]
    return sorted(
        name
        for name in dict.fromkeys(found)
        if not any(part.startswith("_") for part in name.split("."))
        and not any(name == m or name.startswith(m + ".") for m in DOCUMENTED_ELSEWHERE)
    )


def _ours(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "xform"


def module_names(module: types.ModuleType) -> list[str]:
    """A module's public names: its `__all__`, else what it defines (not what it imports)."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    ]


def members(cls: type) -> dict[str, tuple[type, object]]:
    """A class's public members, inherited included: name -> (the class that defines it,
    the raw attribute), for those defined by xform's classes. A member that a foreign base
    also has (`forward` and `backward` of a `torch.autograd.Function`) implements that
    base's protocol, which its library documents."""
    found = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owners = [k for k in cls.__mro__ if name in vars(k)]
        if owners and all(_ours(k) for k in owners):
            found[name] = (owners[0], vars(owners[0])[name])
    return found


def is_implementation_file(module: types.ModuleType) -> bool:
    """A module whose every public name its package re-exports (`xform/groups/se3.py`):
    its names are documented under the package's, the file itself is not an API."""
    package = sys.modules.get(module.__name__.rpartition(".")[0])
    names = module_names(module)
    return (
        package is not None
        and bool(names)
        and all(getattr(package, name, None) is getattr(module, name) for name in names)
    )


def _is_op(module: str, name: str) -> bool:
    return module in OP_FRONT_ENDS and (name in xform.OPS or name in COMPOSITES)


@functools.cache
def public_api() -> tuple[dict[str, set[str]], dict[str, object]]:
    """Every public name -> the ids that may document it; and each name's object."""
    paths: dict[int, set[str]] = defaultdict(set)
    names: dict[str, object] = {}
    classes: list[tuple[str, type]] = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        paths[id(module)].add(module_name)
        if not is_implementation_file(module):
            names[module_name] = module
        for name in module_names(module):
            value = getattr(module, name)
            path = f"{module_name}.{name}"
            if _is_op(module_name, name):
                names[path] = value
                continue
            names[path] = value
            key = id(value) if (inspect.isclass(value) or callable(value)) else path
            paths[key].add(path)
            if inspect.isclass(value) and _ours(value):
                classes.append((path, value))
    for path, cls in classes:
        canonical = f"{cls.__module__}.{cls.__qualname__}"
        paths[id(cls)].add(canonical)
        for member, (_, raw) in members(cls).items():
            names[f"{path}.{member}"] = raw
    ids: dict[str, set[str]] = {}
    for path, value in names.items():
        module_name, _, name = path.rpartition(".")
        if _is_op(module_name, name):
            ids[path] = {name}  # its section of api.md
            continue
        owner_path, _, member = path.rpartition(".")
        owner = names.get(owner_path)
        if inspect.isclass(owner):  # a member: under each path of its class
            accepted = {f"{p}.{member}" for p in paths[id(owner)]}
        else:
            key = id(value) if (inspect.isclass(value) or callable(value)) else path
            accepted = set(paths[key]) | {path}
        ids[path] = accepted
    return ids, names


# --- the built site ----------------------------------------------------------------------


def _load_hooks():
    spec = importlib.util.spec_from_file_location("xform_docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


@pytest.fixture(scope="session")
def site() -> Path:
    """The site as `mkdocs build` makes it: `site/` where it was built from the sources
    as they are (CI builds it before the tests), else built now."""
    hooks = _load_hooks()
    if hooks.site_is_current(SITE):
        return SITE
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"],
        cwd=ROOT,
        check=True,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert hooks.site_is_current(SITE)
    return SITE


ID = re.compile(r'\bid="([^"]+)"')


def site_ids(site: Path) -> dict[str, list[str]]:
    """Every element id of the site -> the pages that have it."""
    found: dict[str, list[str]] = defaultdict(list)
    for page in site.rglob("*.html"):
        for identifier in ID.findall(page.read_text()):
            found[identifier].append(str(page.relative_to(site)))
    return found


def missing(ids: dict[str, set[str]], present) -> list[str]:
    return sorted(path for path, accepted in ids.items() if not accepted & present.keys())


def test_every_public_name_has_an_entry_in_the_site(site):
    ids, _ = public_api()
    absent = missing(ids, site_ids(site))
    assert not absent, (
        f"{len(absent)} public names have no entry in the built site: {absent[:40]}. Give a "
        "module a `::: <module>` on the page of its feature (its classes, functions and their "
        "members follow), a name `::: <module>.<name>`; an op comes from the op table "
        "(`python docs/generate.py`)"
    )


def test_the_api_is_found_not_listed():
    ids, _ = public_api()
    for name in (
        "xform.SE3.inverse",  # an override
        "xform.SE3.identity",  # inherited from LieGroup
        "xform.SE2.to_torch",
        "xform.groups.LieGroup.interpolate",
        "xform.kinematics.Chain.jacobian",
        "xform.optim.Problem.add",
        "xform.optim.g2o.read_g2o",
        "xform.backends.torch.TransformPoint",
        "xform.backends.bridges.jax_to_torch",
        "xform.manifold.rplus",
    ):
        assert name in ids, name
    for name in ("xform.groups.se3", "xform.backends.torch.TransformPoint.backward"):
        assert name not in ids, name
    assert ids["xform.backends.jax.so3_exp"] == {"so3_exp"}
    assert "xform.groups.se3.SE3.inverse" in ids["xform.SE3.inverse"]
    assert not any(name.startswith(("xform.ops.", "xform._")) for name in ids)


def test_a_name_without_an_entry_is_missing():
    ids, _ = public_api()
    present = {i: [] for accepted in ids.values() for i in accepted}
    assert missing(ids, present) == []
    del present["xform.SE3.inverse"], present["xform.groups.SE3.inverse"]
    assert missing(ids, present) == []  # a third path still names it
    for path in ids["xform.SE3.inverse"]:
        present.pop(path, None)
    assert "xform.SE3.inverse" in missing(ids, present)


def test_no_page_has_an_id_twice(site):
    """An object rendered twice on a page (`::: xform.kinematics` and again `::: xform.
    kinematics.Chain`) makes links to it ambiguous."""
    repeated = []
    for page in site.rglob("*.html"):
        seen = ID.findall(page.read_text())
        repeated += [f"{page.relative_to(site)}: {i}" for i in set(seen) if seen.count(i) > 1]
    assert not repeated, repeated[:20]


# --- docstrings ----------------------------------------------------------------------------


def documented_objects():
    """(path, function or class or property) for every public callable and property."""
    _, names = public_api()
    for path, value in sorted(names.items()):
        raw = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        raw = raw.fget if isinstance(raw, property) else raw
        raw = raw.func if isinstance(raw, functools.cached_property) else raw
        if isinstance(raw, types.ModuleType) or inspect.isclass(raw) or inspect.isroutine(raw):
            yield path, raw


def test_every_function_class_and_method_has_a_summary():
    undocumented = [path for path, obj in documented_objects() if not (obj.__doc__ or "").strip()]
    assert not undocumented, (
        f"{len(undocumented)} public objects without a docstring of their own (the reference "
        f"shows them with none): {undocumented}"
    )


def _examples():
    import jax
    import torch

    finder = doctest.DocTestFinder(recurse=False)
    namespace = {"np": np, "xform": xform, "torch": torch, "jax": jax}
    seen = set()
    for path, obj in documented_objects():
        if id(obj) in seen or not _ours(obj):
            continue
        seen.add(id(obj))
        for test in finder.find(obj, path, globs=dict(namespace)):
            if test.examples:
                yield pytest.param(test, id=path)


@pytest.mark.parametrize("example", list(_examples()))
def test_docstring_examples_print_what_they_show(example):
    from test_docs import isolated_state

    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    with isolated_state():
        runner.run(example, out=lambda text: pytest.fail(text, pytrace=False))
    assert runner.failures == 0
