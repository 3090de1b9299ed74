"""Defects found in review (issue 21), each with the test that failed before its fix:
functions over ops in `xform.vjp` and `xform.jvp`, process state (fork, the forced
path, thread counts), version gates, tolerant comparisons where atomics sum, and bounded
caches of user functions."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import as_tuple

import xform

STEP = 1e-6


def _directional(fn, args, direction, k):
    """d/dt fn(args with args[k] + t direction) at 0, by central differences."""
    plus, minus = list(args), list(args)
    plus[k] = args[k] + STEP * direction
    minus[k] = args[k] - STEP * direction
    return [(a - b) / (2 * STEP) for a, b in zip(as_tuple(fn(*plus)), as_tuple(fn(*minus)))]


def _point_sets(rng, batch=2, count=7):
    points = rng.normal(size=(batch, count, 3))
    rotation = xform.quaternion_to_matrix(xform.random_quaternion((batch,), 5))
    targets = np.einsum("bij,bnj->bni", rotation, points) + 0.01 * rng.normal(size=points.shape)
    return points, targets


@pytest.mark.parametrize(
    ("name", "statics"), [("quaternion_to_euler", ("ZYX",)), ("rigid_registration", (None, True))]
)
def test_vjp_and_jvp_take_functions_over_ops(name, statics, rng):
    """The README's `xform.vjp(name, ...)` for every function of the toolkit table: the
    chain rule through the ops it calls, against central differences."""
    registration = name == "rigid_registration"
    arrays = list(_point_sets(rng)) if registration else [rng.normal(size=(3, 4))]
    args = (*arrays, *statics)
    fn = getattr(xform, name)
    results = as_tuple(fn(*args))
    cotangents = tuple(rng.normal(size=r.shape) for r in results)
    grads = xform.vjp(name, args, cotangents)
    assert len(grads) == len(args) and all(g is None for g in grads[len(arrays) :])
    tangents = [rng.normal(size=a.shape) for a in arrays]
    pushed = as_tuple(xform.jvp(name, args, [*tangents, *[None] * len(statics)]))
    for k, direction in enumerate(tangents):
        expected = _directional(lambda *a: fn(*a, *statics), arrays, direction, k)
        got = float((grads[k] * direction).sum())
        want = sum(float((c * e).sum()) for c, e in zip(cotangents, expected))
        assert got == pytest.approx(want, rel=1e-6, abs=1e-8)
    # The tangent with every array moving at once, against differences along them all.
    plus = fn(*[a + STEP * t for a, t in zip(arrays, tangents)], *statics)
    minus = fn(*[a - STEP * t for a, t in zip(arrays, tangents)], *statics)
    for p, a, b in zip(pushed, as_tuple(plus), as_tuple(minus)):
        np.testing.assert_allclose(p, (a - b) / (2 * STEP), atol=1e-7)


# --- process state ------------------------------------------------------------------------


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
    from xform.backends import jax_native

    from xform import _launch

    op = xform.OPS["transform_points"]
    big = _launch.tiling.PARALLEL_MIN_ELEMENTS
    shapes = ((3,), (4,), (big, 3))
    args = (op, "forward", 0, (), shapes, ((big, 3),), np.dtype(np.float64), "cpu")
    monkeypatch.setattr(_launch.threads, "THREADS", 1)
    one = jax_native.program(*args)
    monkeypatch.setattr(_launch.threads, "THREADS", 2)
    two = jax_native.program(*args)
    assert one is not None and two is not None and one is not two


def test_threads_follow_the_affinity_mask_and_the_cgroup_quota(monkeypatch, tmp_path):
    import os

    from xform import _launch

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert _launch.threads.available_cpus(str(tmp_path)) == 4  # no cgroup file: the mask
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _launch.threads.available_cpus(str(tmp_path)) == 4  # no quota
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert _launch.threads.available_cpus(str(tmp_path)) == 2  # 1.5 CPUs, rounded up
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert _launch.threads.available_cpus(str(tmp_path)) == 1


# --- version gates, comparisons, caches -----------------------------------------------------


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


def test_bridges_keep_bounded_caches_of_user_functions():
    """Each user function given to torch_to_jax costs a cache entry holding it and two
    FFI targets: the cache is bounded, and the op products' cache does not grow."""
    pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    from xform.backends import bridges
    from xform.backends import jax as xj

    assert bridges._differentiable_call.cache_info().maxsize is not None
    before = xj.ffi_callable.cache_info().currsize
    doubled = xform.torch_to_jax(lambda x: 2 * x)
    np.testing.assert_allclose(doubled(jax.numpy.ones(3)), 2.0)
    assert xj.ffi_callable.cache_info().currsize == before
