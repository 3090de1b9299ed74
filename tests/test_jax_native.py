"""The native XLA FFI handler on CPU (`xform/backends/jax_native`): the same bits as the Python
callback for every op and product (jit, jvp, grad, vmap, broadcast gradients split over
threads, sums over points), errors inside the handler as Python errors, the fallback
when the self-test fails, and a build with no compiler on PATH."""

import contextlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from reference import leading_cases, random_args

import xform

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

xj = pytest.importorskip("xform.backends.jax")
from xform._launch import program as _program  # noqa: E402
from xform.backends import jax_native  # noqa: E402

if jax_native.mode() == "callback":
    pytest.skip("XFORM_JAX_CPU=callback", allow_module_level=True)
LIBRARY = jax_native.library()
if LIBRARY is None:
    pytest.skip("the native handler is unavailable here", allow_module_level=True)

OPS = sorted(xform.OPS)


@contextlib.contextmanager
def callback_path():
    """Trace and run through the Python FFI callback instead, in this process."""
    jax.clear_caches()
    try:
        with jax_native.forced("callback"):
            yield
    finally:
        jax.clear_caches()


def both_paths(compute):
    """compute() through the native handler, then through the callback, as NumPy."""
    jax.clear_caches()
    native = [np.asarray(x) for x in jax.tree_util.tree_leaves(compute())]
    with callback_path():
        callback = [np.asarray(x) for x in jax.tree_util.tree_leaves(compute())]
    return native, callback


def assert_same_bits(native, callback):
    assert len(native) == len(callback)
    for a, b in zip(native, callback):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert a.tobytes() == b.tobytes(), np.abs(a - b).max()


def products(name, args, rng):
    """Forward, jvp, vjp and vmap of op `name` at `args`, jitted."""
    function = getattr(xj, name)
    op = xform.OPS[name]

    def compute():
        out = [jax.jit(function)(*args)]
        if op.differentiable:
            tangents = tuple(rng_like(a, 1) for a in args)
            out.append(jax.jit(lambda *a: jax.jvp(function, a, tangents))(*args))
            primal, pullback = jax.vjp(jax.jit(function), *args)
            out.append(pullback(jax.tree_util.tree_map(lambda r: rng_like(r, 2), primal)))
        stacked = [jnp.stack([a, 2 * a]) for a in args]
        out.append(jax.jit(jax.vmap(function))(*stacked))
        return out

    return compute


def rng_like(x, seed):
    return jnp.asarray(np.random.default_rng(seed).normal(size=np.shape(x)), x.dtype)


CASES = [(n, c) for n in OPS for c in leading_cases(n)[::4]]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("name", "leadings"), CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_native_and_callback_agree_bit_for_bit(name, leadings, dtype, rng):
    args = [jnp.asarray(a) for a in random_args(name, leadings, rng, dtype)]
    assert_same_bits(*both_paths(products(name, args, rng)))


def test_broadcast_gradients_split_over_threads_agree(rng):
    """A shared pose's gradient over 200k points: per-thread partials, then their sum."""
    t, q = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=4))
    p = jnp.asarray(rng.normal(size=(200_000, 3)))
    t2 = jnp.asarray(rng.normal(size=(1, 3)))
    q2 = jnp.asarray(rng.normal(size=(200_000, 4)))

    def compute():
        loss = lambda t, q, p: (xj.transform_points(t, q, p) ** 2).sum()  # noqa: E731
        pose = lambda a, b: sum(x.sum() for x in xj.pose_multiply(a, b, t2, q2))  # noqa: E731
        grad_pose = jax.jit(jax.grad(pose, argnums=(0, 1)))
        return [
            jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(t, q, p),
            grad_pose(jnp.broadcast_to(t, (1, 3)), jnp.broadcast_to(q, (1, 4))),
        ]

    native, callback = both_paths(compute)
    assert_same_bits(native, callback)
    args = tuple(np.asarray(x) for x in (t, q, p))
    want = xform.vjp("transform_points", args, 2 * xform.transform_points(*args))
    np.testing.assert_allclose(native[0], want[0], rtol=1e-12)


def test_partial_sums_over_many_threads_agree(rng, monkeypatch):
    """A scalar t shared by 100k slerps, its gradient summed over 16 thread tiles (as on a
    16-core machine): the partials added tile after tile on both paths. (NumPy's sum over
    the tiles would add a single column pairwise, and differ in the last bit.)"""
    from xform import _launch

    monkeypatch.setattr(_launch.threads, "THREADS", 16)
    q1, q2 = (jnp.asarray(rng.normal(size=(100_000, 4))) for _ in range(2))
    t = jnp.asarray(0.3)

    def compute():
        slerp = lambda q1, q2, t: xj.quaternion_slerp(q1, q2, t).sum()  # noqa: E731
        return jax.jit(jax.grad(slerp, argnums=(0, 1, 2)))(q1, q2, t)

    native, callback = both_paths(compute)
    assert_same_bits(native, callback)
    args = tuple(np.asarray(x) for x in (q1, q2, t))
    want = xform.vjp("quaternion_slerp", args, np.ones((100_000, 4)))
    np.testing.assert_allclose(native[2], want[2], rtol=1e-9)


def test_forced_paths_override_the_environment(monkeypatch):
    monkeypatch.setenv("XFORM_JAX_CPU", "callback")
    assert jax_native.library() is None
    with jax_native.forced("native"):
        assert jax_native.library() is LIBRARY
    monkeypatch.setenv("XFORM_JAX_CPU", "native")
    with jax_native.forced("callback"):
        assert jax_native.library() is None
    with pytest.raises(ValueError, match="'fast'"), jax_native.forced("fast"):
        pass


@pytest.mark.parametrize("weighted", [False, True])
def test_registration_sums_agree(weighted, rng):
    """Sums over 30k points per set: partial sums per chunk, then their sum."""
    points = jnp.asarray(rng.normal(size=(3, 30_000, 3)))
    targets = jnp.asarray(rng.normal(size=(3, 30_000, 3)))
    weights = jnp.asarray(rng.uniform(size=(3, 30_000))) if weighted else None

    def compute():
        fit = jax.jit(lambda p, y: xj.rigid_registration(p, y, weights, scale=True))
        return [fit(points, targets), jax.grad(lambda p: fit(p, targets)[0].sum())(points)]

    assert_same_bits(*both_paths(compute))


def call_program(key, x):
    call = jax.ffi.ffi_call(jax_native.TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype))
    return call(x, program=np.int64(key))


def test_an_error_inside_the_handler_is_a_python_error_and_the_process_goes_on(rng):
    x = jnp.zeros(4)
    failing = _program.failing_program([32], [32])
    key = 0x5EED_F00D_1234
    assert LIBRARY.register(key, failing.ctypes.data)
    with pytest.raises(Exception, match="FAIL step"):
        np.asarray(jax.jit(lambda x: call_program(key, x))(x))
    with pytest.raises(Exception, match="never recorded in this process"):
        np.asarray(jax.jit(lambda x: call_program(key + 1, x))(x))
    with pytest.raises(Exception, match="size does not match"):  # 5 doubles, not 4
        np.asarray(jax.jit(lambda x: call_program(key, x))(jnp.zeros(5)))
    t, q, p = rng.normal(size=3), rng.normal(size=4), rng.normal(size=(9, 3))
    np.testing.assert_array_equal(
        np.asarray(jax.jit(xj.transform_points)(t, q, p)), xform.transform_points(t, q, p)
    )


def test_the_mode_is_read_from_the_environment(monkeypatch):
    for value, want in (("native", "native"), ("Callback", "callback"), ("", "auto")):
        monkeypatch.setenv("XFORM_JAX_CPU", value)
        assert jax_native.mode() == want
    monkeypatch.setenv("XFORM_JAX_CPU", "fast")
    with pytest.raises(ValueError, match="XFORM_JAX_CPU='fast'"):
        jax_native.mode()


SCRIPT = """
import warnings, numpy as np, jax, xform
import xform.backends.jax as xj
from xform.backends import jax_native
rng = np.random.default_rng(0)
t, q, p = rng.normal(size=3), rng.normal(size=4), rng.normal(size=(5, 3))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = np.asarray(jax.jit(xj.transform_points)(t, q, p))
np.testing.assert_allclose(got, xform.transform_points(t, q, p), rtol=1e-6)
print("path:", "native" if jax_native.library() else "callback")
print("warnings:", [str(w.message) for w in caught])
"""


def run(env, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    # (JAX's compilation cache off: an entry another run left half-written would warn.)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_COMPILATION_CACHE": "false", **env}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith(("path:", "warnings:"))]


def test_a_failing_self_test_falls_back_with_one_warning(tmp_path):
    path, warned = run({"XFORM_JAX_NATIVE_SELF_TEST": "fail"}, tmp_path)
    assert path == "path: callback"
    assert warned.count("self-test failed") == 1, warned
    out = run({"XFORM_JAX_NATIVE_SELF_TEST": "fail", "XFORM_JAX_CPU": "callback"}, tmp_path)
    assert out == ["path: callback", "warnings: []"]


def test_it_builds_with_no_compiler_on_path(tmp_path):
    """A fresh object cache, and PATH holding nothing but this Python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {"PATH": str(bin_dir), "XFORM_NATIVE_CACHE": str(tmp_path / "cache"),
           "XFORM_JAX_CPU": "native"}  # fmt: skip
    out = run(env, tmp_path)
    assert out == ["path: native", "warnings: []"]
    assert list((tmp_path / "cache").glob("jax_native_*.o"))


def test_the_registry_keeps_every_program_through_its_growth():
    """Past the first table's 512 programs the registry grows; every key still finds its
    program (a FAIL program, each under its own key), and a key registered again takes
    the newer program."""
    failing = _program.failing_program([32], [32])
    x = jnp.zeros(4)
    keys = [0x7A11_0000 + 7919 * k for k in range(1500)]
    for key in keys:
        assert LIBRARY.register(key, failing.ctypes.data)
    for key in (keys[0], keys[700], keys[-1]):
        with pytest.raises(Exception, match="FAIL step"):
            np.asarray(jax.jit(lambda x, key=key: call_program(key, x))(x))


PERSISTENT = """
import jax, jax.numpy as jnp, numpy as np, os, sys, time
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
import xform.backends.jax as xj
from xform.backends import jax_native
assert jax_native.library() is not None
f = jax.jit(lambda t, q, p: xj.transform_points(t, q, xj.transform_points(t, q, p)).sum())
t, q, p = jnp.asarray([0.1, 0.2, 0.3]), jnp.asarray([1.0, 0, 0, 0]), jnp.ones((7, 3))
print(float(f(t, q, p)), len(os.listdir(sys.argv[1])))
"""


def test_a_persistent_compilation_cache_entry_runs_in_another_process(tmp_path):
    """An executable that JAX's persistent cache wrote in one process runs in the next:
    its calls name their programs by keys that process registers when it traces them
    (an address, as before, made every entry useless in another process)."""
    runs = [
        subprocess.run([sys.executable, "-c", PERSISTENT, str(tmp_path)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    first, second = (run.stdout.strip().splitlines()[-1].split() for run in runs)
    assert first[0] == second[0]  # the same value, from the cached executable
    assert int(first[1]) > 0 and int(second[1]) == int(first[1])  # read, not written again
