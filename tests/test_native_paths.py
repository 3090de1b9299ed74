"""The native paths (the JAX handler's programs, the CPU entry points called with a struct
built here): their state across forks and threads, their thread counts, the version
gate that keeps them to the warp-lang they were tested with, and the self-test's
comparison where atomics sum."""

from __future__ import annotations

import numpy as np
import pytest

import xform


def test_the_native_paths_lock_is_fresh_after_fork():
    """A thread of the parent may hold the lock when another forks: the child must not
    inherit it held (it would wait forever for the handler)."""
    import os

    pytest.importorskip("jax")
    from xform.backends import jax_native

    with jax_native._lock:
        pid = os.fork()
        if pid == 0:  # the child: the lock must be free
            os._exit(0 if jax_native._lock.acquire(blocking=False) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_forcing_a_path_holds_in_its_own_thread_only():
    import threading

    pytest.importorskip("jax")
    from xform.backends import jax_native

    seen = []
    with jax_native.forced("callback"):
        assert jax_native.library() is None
        thread = threading.Thread(target=lambda: seen.append(jax_native._forced.get()))
        thread.start()
        thread.join()
    assert seen == [None]


def test_native_programs_are_kept_per_thread_count(monkeypatch):
    pytest.importorskip("jax")
    from xform import _launch
    from xform.backends import jax_native

    op = xform.OPS["transform_points"]
    big = _launch.tiling.PARALLEL_MIN_ELEMENTS
    shapes = ((3,), (4,), (big, 3))
    args = (op, "forward", 0, (), shapes, ((big, 3),), np.dtype(np.float64), "cpu")
    monkeypatch.setattr(_launch.threads, "THREADS", 1)
    one = jax_native.program(*args)
    monkeypatch.setattr(_launch.threads, "THREADS", 2)
    two = jax_native.program(*args)
    assert one is not None and two is not None and one is not two


def test_untested_warp_versions_keep_to_warps_own_paths(monkeypatch, rng):
    """The plain CPU path calls Warp's compiled entry points through a struct built here,
    and the JAX handler (CPU and CUDA) leans on Warp's internals: on a version they were
    not tested with, Warp's own launch runs, and the handler is refused by name."""
    import warp as wp

    from xform import _launch
    from xform._op import Product

    monkeypatch.setattr(wp.config, "version", "9.99.0")
    assert not _launch.warp_abi.warp_tested()
    monkeypatch.setattr(_launch.kernels._local, "launches", None, raising=False)  # new ones
    args = [rng.normal(size=(3,)), rng.normal(size=(4,)), rng.normal(size=(5, 3))]
    op = xform.OPS["transform_points"]
    operands = _launch.buffers.prepare(op, args)
    (tile,) = _launch.tiling.tiles(operands.plan, 1)
    recorded = _launch.kernels.record(op, Product.FORWARD, operands.scalar, "cpu", tile)
    launch = _launch.warp_abi.Reusable(recorded)
    assert launch.args is None  # Warp's Launch.launch, not the entry point
    np.testing.assert_allclose(
        xform.transform_points(*args),
        xform.quaternion_rotate(args[1], args[2]) + args[0],
        atol=1e-12,
    )
    pytest.importorskip("jax")
    from xform.backends import jax_native

    with pytest.raises(jax_native.NativeUnavailable, match="9.99.0 is not a version"):
        jax_native._load()
    monkeypatch.setenv("XFORM_JAX_CUDA", "native")
    monkeypatch.setitem(jax_native._state, "cuda", None)
    del jax_native._state["cuda"]
    with pytest.warns(RuntimeWarning, match="9.99.0 is not a version it was tested with"):
        assert jax_native.cuda_library() is None
    jax_native._state.pop("cuda", None)


def test_the_self_test_compares_to_rounding_where_atomics_sum():
    pytest.importorskip("jax")
    from xform.backends import jax_native

    want = np.array([1.0, 2.0, 3.0])
    reordered = want + np.array([0.0, 4.4e-16, 0.0])  # a last bit, as a sum's order gives
    assert not jax_native.agree(want, reordered, "cpu")  # CPU sums run in a fixed order
    assert jax_native.agree(want, reordered, "cuda:0")
    assert not jax_native.agree(want, want + 1e-6, "cuda:0")
    assert not jax_native.agree(want, np.full(3, np.nan), "cuda:0")
