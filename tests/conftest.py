"""Fresh random inputs every run, reproducible from the seed printed in the header:
XFORM_TEST_SEED=<seed> pytest ... replays a run."""

import os
import secrets
import zlib

import numpy as np
import pytest

SEED = int(os.environ.get("XFORM_TEST_SEED") or secrets.randbits(32))
# pytest-xdist's workers inherit the environment: one seed for the whole run.
os.environ["XFORM_TEST_SEED"] = str(SEED)


def pytest_report_header(config):
    return f"xform test seed: XFORM_TEST_SEED={SEED}"


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator per test, drawn from the run's seed and the test's id."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])
