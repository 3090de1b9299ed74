"""Fresh random inputs every run, reproducible from the seed printed in the header:
XFORM_TEST_SEED=<seed> pytest ... replays a run.

The op tables (tests parametrized by an op, as `name` or `op`) run in full only where
XFORM_TESTS=full: the GPU check, and before a merge. Elsewhere, as in CI, each run takes
a quarter of the ops, the same in every table, each at one case of each table (one
batch shape, one dtype, one variant), all drawn from the seed: the ops and the cases
rotate from run to run, and a failure replays from the seed. Why: the full tables
compile every op's kernels in both dtypes, both variants and to second order, some 2,000
Warp modules, most of an hour on two cores with a cold kernel cache, and trace every op
through every JAX and PyTorch transform; what is wrong with an op's code shows in any
case of it. Tables whose cases are their point (0-d, empty and broadcast batches, bad
input) carry `pytest.mark.every_case` and keep every case of the ops taken."""

import functools
import math
import os
import secrets
import shutil
import zlib

import numpy as np
import pytest

SEED = int(os.environ.get("XFORM_TEST_SEED") or secrets.randbits(32))
# pytest-xdist's workers inherit the environment: one seed for the whole run.
os.environ["XFORM_TEST_SEED"] = str(SEED)
FULL = os.environ.get("XFORM_TESTS", "sampled").strip().lower() == "full"


def _cache_jax_compilations() -> None:
    """JAX's compilations kept on disk from run to run, as Warp keeps its kernels: the
    suite's JAX side is mostly XLA compiling small programs (tests/test_optim.py's JAX
    tests take 81 s cold, 37 s from the cache). Set through the environment before JAX is
    imported, so that a test's child processes share it (they run while their worker
    waits). A folder per xdist worker, held under a lock for the worker's life: JAX writes
    an entry unlocked unless its cache has a size bound, and with one, every write reads
    the whole folder (the run slowed by half at some 8,000 entries). A folder that another
    run holds leaves this worker without a cache; past 1 GiB (the sampled op tables add
    entries as they rotate) a folder starts again. XFORM_TEST_JAX_CACHE=off runs without
    it, a path puts it there; a JAX_COMPILATION_CACHE_DIR of one's own is left alone."""
    chosen = os.environ.get("XFORM_TEST_JAX_CACHE", "").strip()
    ours = os.environ.get("_XFORM_TEST_JAX_CACHE")
    if chosen.lower() == "off" or ("JAX_COMPILATION_CACHE_DIR" in os.environ and not ours):
        return
    base = ours or chosen or os.path.join(os.path.expanduser("~"), ".cache", "xform", "jax-tests")
    folder = os.path.join(base, os.environ.get("PYTEST_XDIST_WORKER", "main"))
    try:
        import fcntl

        os.makedirs(base, exist_ok=True)
        lock = open(folder + ".lock", "a")  # noqa: SIM115 (held until the process ends)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):  # not POSIX, or another run's worker holds the folder
        os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
        return
    _HELD_LOCKS.append(lock)
    size = sum(e.stat().st_size for e in os.scandir(folder)) if os.path.isdir(folder) else 0
    if size > 1 << 30:
        shutil.rmtree(folder, ignore_errors=True)
    os.environ["_XFORM_TEST_JAX_CACHE"] = base
    os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"


_HELD_LOCKS: list = []
_cache_jax_compilations()
SHARE = 4  # a run takes one op in SHARE
# The parameters along which a table is sampled: one value per op and run.
SAMPLED = ("leadings", "dtype", "which")


def pytest_report_header(config):
    tables = (
        "every op, every case"
        if FULL
        else f"one op in {SHARE}, one case each (XFORM_TESTS=full runs every case)"
    )
    return [f"xform test seed: XFORM_TEST_SEED={SEED}", f"xform op tables: {tables}"]


def _draw(*parts) -> int:
    return zlib.crc32(repr((SEED, *parts)).encode())


def taken(op: str) -> bool:
    """Whether this run takes the op named `op` through the op tables: all where
    XFORM_TESTS=full; else the ops whose draw is among the least 1/SHARE of xform.OPS's
    (a product op, named after its op, by the same draw threshold). Tests that loop over
    the ops in one test, rather than a table, loop over these."""
    if FULL:
        return True
    return _draw(op) <= _threshold(SEED)


@functools.cache
def _threshold(seed: int) -> int:
    import xform

    draws = sorted(_draw(name) for name in xform.OPS)
    return draws[math.ceil(len(draws) / SHARE) - 1]


def pytest_collection_modifyitems(config, items):
    """Outside XFORM_TESTS=full: of each op table, the ops `taken`, and of each of those,
    for each sampled parameter, the value whose draw (from the seed, the op and the
    value, not the table) is least. An op gets the same dtype and variant in every
    table, so that it compiles one set of kernels."""
    if FULL:
        return
    tables = dict(_tables(items))  # id(item) -> (table, op, sampled parameters)
    values: dict[tuple, set] = {}  # (table, op, parameter) -> the values it takes
    for table, op, sampled in tables.values():
        for p, value in sampled:
            values.setdefault((table, op, p), set()).add(value)
    chosen = {k: min(v, key=lambda value: _draw(*k[1:], value)) for k, v in values.items()}

    def kept(item) -> bool:
        if id(item) not in tables:
            return True
        table, op, sampled = tables[id(item)]
        every_case = item.get_closest_marker("every_case") is not None
        return taken(op) and (
            every_case or all(value == chosen[table, op, p] for p, value in sampled)
        )

    keep = [kept(item) for item in items]
    if not all(keep):
        config.hook.pytest_deselected(items=[i for i, k in zip(items, keep) if not k])
        items[:] = [i for i, k in zip(items, keep) if k]


def _tables(items):
    """(id(item), (table, op name, [(parameter, value as a string)])) for each item of
    an op table."""
    import xform

    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        op = params.get("op")
        name = getattr(op, "name", None) if op is not None else params.get("name")
        if isinstance(name, str) and (name in xform.OPS or op is not None):
            sampled = [(p, _key(params[p])) for p in SAMPLED if p in params]
            yield id(item), (item.nodeid.split("[", 1)[0], name, sampled)


def _key(value) -> str:
    """A parameter's value as a stable string (dtypes are classes; shapes are tuples)."""
    return getattr(value, "__name__", None) or repr(value)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator per test, drawn from the run's seed and the test's id."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])
