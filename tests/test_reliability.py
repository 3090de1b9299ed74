"""What a user can rely on when things go wrong: Ctrl-C and fork never crash, hang or
corrupt memory; byte order is honoured; cuRobo's buffers never alias what autograd
holds; bad input names itself. Crashes and hangs are tested in subprocesses with
timeouts, so that a regression fails a test instead of killing the run. (Ctrl-C inside
JAX's calls: tests/test_jax_ffi.py, which needs no PyTorch.)"""

import sys

import numpy as np
import pytest
from helpers import as_tuple
from interrupts import INTERRUPT, run_script
from reference import random_args

import xform

torch = pytest.importorskip("torch")
xt = pytest.importorskip("xform.backends.torch")


def test_ctrl_c_during_a_large_numpy_call_and_a_torch_backward(tmp_path):
    out = run_script(
        tmp_path,
        INTERRUPT
        + """
import torch, xform
import xform.backends.torch as xt
rng = np.random.default_rng(0)
t, q, p = rng.normal(size=3), rng.normal(size=4), rng.normal(size=(6_000_000, 3))
want = xform.transform_points(t, q, p)
numpy_call = lambda: xform.transform_points(t, q, p)
tensors = [torch.from_numpy(a).requires_grad_() for a in (t, q, p)]
def backward():
    xt.transform_points(*tensors).sum().backward()
outcomes = []
for call in (numpy_call, backward):
    duration = timed(call)
    for fraction in (0.1, 0.5, 0.9):
        outcomes.append(interrupt_during(call, fraction, duration))
        memory_is_intact(p.size)
    surely = interrupt_by_a_worker(call)
    memory_is_intact(p.size)
    assert surely == "interrupted", surely
assert set(outcomes) <= OUTCOMES, outcomes
np.testing.assert_array_equal(xform.transform_points(t, q, p), want)
print("alive", outcomes)
""",
    )
    assert "alive" in out


def test_a_forked_child_runs_large_calls(tmp_path):
    out = run_script(
        tmp_path,
        """
import multiprocessing as mp
import numpy as np
import xform
rng = np.random.default_rng(0)
t, q, p = rng.normal(size=3), rng.normal(size=4), rng.normal(size=(1 << 16, 3))
want = xform.transform_points(t, q, p)  # starts the thread pool

def child(_):
    return xform.transform_points(t, q, p)

with mp.get_context("fork").Pool(2) as pool:
    for got in pool.map_async(child, range(4)).get(timeout=120):
        np.testing.assert_array_equal(got, want)
print("forked ok")
""",
        timeout=240,
    )
    assert "forked ok" in out


# --- byte order ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["transform_points", "pose_multiply", "so3_log", "se3_exp"])
def test_non_native_byte_order_is_read_as_its_values(name, rng):
    op = xform.OPS[name]
    args = random_args(name, [(1,) if o.single else (5,) for o in op.operands], rng)
    swapped = [
        a.astype(a.dtype.newbyteorder(">" if sys.byteorder == "little" else "<")) for a in args
    ]
    for got, want in zip(as_tuple(xform.OPS[name](*swapped)), as_tuple(xform.OPS[name](*args))):
        np.testing.assert_array_equal(got, want)
    cotangents = tuple(rng.normal(size=r.shape) for r in as_tuple(xform.OPS[name](*args)))
    big = tuple(c.astype(">f8") for c in cotangents)
    for got, want in zip(xform.vjp(name, swapped, big), xform.vjp(name, args, cotangents)):
        np.testing.assert_array_equal(got, want)
    tangents = [rng.normal(size=a.shape) for a in args]
    got = as_tuple(xform.jvp(name, swapped, [t.astype(">f8") for t in tangents]))
    for g, w in zip(got, as_tuple(xform.jvp(name, args, tangents))):
        np.testing.assert_array_equal(g, w)


# --- cuRobo's buffers ----------------------------------------------------------------------


def tensors(arrays, requires_grad=False):
    return [torch.from_numpy(np.array(a)).requires_grad_(requires_grad) for a in arrays]


def test_gradient_buffers_that_alias_inputs_change_nothing(rng):
    t, q = tensors(random_args("pose_inverse", [(4,), (4,)], rng), True)
    q_before = q.detach().clone()
    out = xt.pose_inverse(t, q, None, None, None, q.detach())  # adj_quat is q's own memory
    sum(o.sum() for o in out).backward()
    torch.testing.assert_close(q.detach(), q_before, rtol=0, atol=0)
    t2, q2 = (x.detach().clone().requires_grad_() for x in (t, q))
    sum(o.sum() for o in xt.pose_inverse(t2, q2)).backward()
    torch.testing.assert_close(q.grad, q2.grad, rtol=0, atol=0)
    torch.testing.assert_close(t.grad, t2.grad, rtol=0, atol=0)


def test_one_workspace_passed_twice(rng):
    args = tensors(random_args("pose_multiply", [(4,)] * 4, rng), True)
    b3, b4 = torch.zeros(4, 3, dtype=torch.float64), torch.zeros(4, 4, dtype=torch.float64)
    sum(o.sum() for o in xt.pose_multiply(*args, None, None, b3, b4, b3, b4)).backward()
    fresh = [a.detach().clone().requires_grad_() for a in args]
    sum(o.sum() for o in xt.pose_multiply(*fresh)).backward()
    for a, b in zip(args, fresh):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)


def test_a_result_buffer_overlapping_an_argument_is_refused(rng):
    t, q, p = tensors(random_args("transform_points", [(), (), (5,)], rng))
    with pytest.raises(ValueError, match="buffer 'out_points' shares memory with 'points'"):
        xt.transform_points(t, q, p, p)
    with pytest.raises(ValueError, match="buffer 'out_position' shares memory with 'position'"):
        xt.pose_inverse(t, q, t)


def test_curobo_gradient_buffer_shapes_are_accepted(rng):
    t, q, p = tensors(random_args("transform_points", [(), (), (7,)], rng), True)
    out = xt.transform_points(
        t,
        q,
        p,
        None,
        torch.zeros(1, 3, dtype=torch.float64),
        torch.zeros(1, 4, dtype=torch.float64),
    )
    out.sum().backward()
    b, n = 3, 5
    args = tensors(random_args("batch_transform_points", [(b,), (b,), (b, n)], rng), True)
    per_point = [
        torch.zeros(b, n, 3, dtype=torch.float64),
        torch.zeros(b, n, 4, dtype=torch.float64),
    ]
    xt.batch_transform_points(*args, None, *per_point).sum().backward()
    fresh = [a.detach().clone().requires_grad_() for a in args]
    xt.batch_transform_points(*fresh).sum().backward()
    for a, f in zip(args, fresh):
        torch.testing.assert_close(a.grad, f.grad, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"buffer 'out_gq' has shape \(2, 2\), expected"):
        xt.transform_points(t, q, p, None, None, torch.zeros(2, 2, dtype=torch.float64))


def test_the_curobo_training_loop_reuses_its_buffers(rng):
    t, q, p = tensors(random_args("transform_points", [(), (), (6,)], rng), True)
    buffer = torch.empty(6, 3, dtype=torch.float64)
    grads = [torch.empty(3, dtype=torch.float64), torch.empty(4, dtype=torch.float64), None]
    for _ in range(3):
        xt.transform_points(t, q, p, buffer, *grads).sum().backward()
    fresh = [x.detach().clone().requires_grad_() for x in (t, q, p)]
    xt.transform_points(*fresh).sum().backward()
    for x, f in zip((t, q, p), fresh):
        torch.testing.assert_close(x.grad, 3 * f.grad, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(buffer, xt.transform_points(t, q, p).detach(), rtol=0, atol=0)


def test_gradcheck_with_gradient_buffers(rng):
    t, q, p = tensors(random_args("transform_points", [(), (), (4,)], rng), True)
    gp, gq, gpt = (torch.zeros(s, dtype=torch.float64) for s in ((3,), (4,), (4, 3)))
    assert torch.autograd.gradcheck(
        lambda t, q, p: xt.transform_points(t, q, p, None, gp, gq, gpt), (t, q, p)
    )


def test_a_numpy_array_as_a_buffer_is_a_value_error(rng):
    t, q, p = tensors(random_args("transform_points", [(), (), (4,)], rng))
    with pytest.raises(ValueError, match="buffer 'out_points' must be a torch.Tensor or None"):
        xt.transform_points(t, q, p, np.zeros((4, 3)))


# --- meta tensors, huge batches, names --------------------------------------------------------


def test_meta_tensors_must_all_be_meta(rng):
    t, q, p = tensors(random_args("transform_points", [(), (), (4,)], rng))
    with pytest.raises(ValueError, match="is on cpu but 'position' is on meta"):
        xt.transform_points(t.to("meta"), q, p)


def test_backward_through_meta_tensors_gives_meta_gradients(rng):
    t, q, p = (
        x.to("meta").requires_grad_()
        for x in tensors(random_args("transform_points", [(), (), (4,)], rng))
    )
    out = xt.transform_points(t, q, p)
    assert out.device.type == "meta" and out.shape == (4, 3)
    grads = torch.autograd.grad(out.sum(), (t, q, p))
    assert [g.shape for g in grads] == [t.shape, q.shape, p.shape]
    assert all(g.device.type == "meta" for g in grads)


def test_a_batch_over_two_to_the_31_names_the_arguments():
    t = np.broadcast_to(np.zeros(3), (50_000, 1, 3))
    q = np.broadcast_to(np.array([1.0, 0, 0, 0]), (1, 50_000, 4))
    with pytest.raises(
        ValueError, match=r"arguments 'position' \(50000, 1, 3\), 'quaternion' \(1, 50000, 4\)"
    ):
        xform.pose_inverse(t, q)


def test_an_unknown_op_name_lists_the_valid_ones():
    with pytest.raises(
        ValueError, match="no op named 'no_such_op'; the built-in ops are transform_points"
    ):
        xform.vjp("no_such_op", [np.zeros(3)], np.zeros(3))


# --- the PyTorch-in-JAX bridge --------------------------------------------------------------


def test_torch_to_jax_takes_any_number_of_dimensions(rng):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    f = xform.torch_to_jax(lambda q: xt.quaternion_to_matrix(q))
    q = rng.normal(size=(2, 1, 3, 1, 2, 4))
    want = xform.quaternion_to_matrix(q)
    np.testing.assert_array_equal(np.asarray(f(q)), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(q)), want)
    grad = jax.grad(lambda q: f(q).sum())(q)
    np.testing.assert_array_equal(
        np.asarray(grad), xform.vjp("quaternion_to_matrix", [q], np.ones_like(want))[0]
    )


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
