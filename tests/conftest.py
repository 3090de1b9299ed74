"""Fresh random inputs every run, reproducible from the seed printed in the header:
XFORM_TEST_SEED=<seed> pytest ... replays a run.

The op tables (tests parametrized by an op's `name` and its operands' `leadings`) run in
full only where XFORM_TESTS=full (the GPU check, and before a merge). Otherwise, as in
CI, each table runs every op once: one batch shape, one dtype and one variant per op,
drawn from the seed. Every op goes through every table on every run, the cases rotate
from run to run, and a failure replays from the seed. Why: the full tables compile
every op's kernels in both dtypes and both variants, some 2,000 Warp modules, which on
two cores with a cold kernel cache takes most of an hour; one case per op and table
compiles a fifth of them and catches what is wrong with an op's code, as opposed to
one shape of it (the shapes have tables of their own: test_edge_cases, test_errors)."""

import os
import secrets
import zlib

import numpy as np
import pytest

SEED = int(os.environ.get("XFORM_TEST_SEED") or secrets.randbits(32))
# pytest-xdist's workers inherit the environment: one seed for the whole run.
os.environ["XFORM_TEST_SEED"] = str(SEED)
FULL = os.environ.get("XFORM_TESTS", "sampled").strip().lower() == "full"
# The parameters along which a table is sampled: one value per op and run.
SAMPLED = ("leadings", "dtype", "which")


def pytest_report_header(config):
    tables = "every case" if FULL else "one case per op (XFORM_TESTS=full runs every case)"
    return [f"xform test seed: XFORM_TEST_SEED={SEED}", f"xform op tables: {tables}"]


def _draw(*parts) -> int:
    return zlib.crc32(repr((SEED, *parts)).encode())


def pytest_collection_modifyitems(config, items):
    """Outside XFORM_TESTS=full, keep one case per op of each op table: for each sampled
    parameter, the value whose draw (from the seed, the op and the value, not the test)
    is least. The same op gets the same dtype and variant in every table, so that it
    compiles one set of kernels."""
    if FULL:
        return
    values: dict[tuple, set] = {}  # (table, op, parameter) -> the values it takes
    for item, params in _tables(items):
        for p in SAMPLED:
            if p in params:
                values.setdefault((_table(item), params["name"], p), set()).add(_key(params[p]))
    chosen = {k: min(v, key=lambda value: _draw(*k[1:], value)) for k, v in values.items()}
    keep = {
        id(item)
        for item, params in _tables(items)
        if all(_key(v) == chosen[_table(item), params["name"], p] for p, v in _sampled(params))
    }
    tables = {id(item) for item, _ in _tables(items)}
    kept = [item for item in items if id(item) not in tables or id(item) in keep]
    dropped = [item for item in items if id(item) in tables and id(item) not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _tables(items):
    """(item, its parameters) for each item of an op table."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "name" in params and "leadings" in params:
            yield item, params


def _sampled(params: dict):
    return [(p, params[p]) for p in SAMPLED if p in params]


def _table(item) -> str:
    return item.nodeid.split("[", 1)[0]


def _key(value) -> str:
    """A parameter's value as a stable string (dtypes are classes; shapes are tuples)."""
    return getattr(value, "__name__", None) or repr(value)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator per test, drawn from the run's seed and the test's id."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])
