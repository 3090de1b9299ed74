"""`torch.export.export` of a module that calls xform ops: the ops are custom ops in the
exported graph, which runs and matches eager mode, and differentiates. TorchScript is not
supported (PyTorch has deprecated it): scripting fails on the functions' signatures, and
tracing, which would record a module returning uninitialised memory, raises."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
xt = pytest.importorskip("xform.backends.torch")


class Poses(torch.nn.Module):
    def forward(self, position, quaternion, points):
        moved = xt.transform_points(position, quaternion, points)
        _, composed = xt.pose_multiply(position, quaternion, position, quaternion)
        return 2 * moved + 1, xt.so3_log(composed)


def _args(rng, count=5):
    return tuple(
        torch.tensor(a)
        for a in (rng.normal(size=3), rng.normal(size=4), rng.normal(size=(count, 3)))
    )


def test_an_exported_module_runs_and_matches(rng):
    args = _args(rng)
    exported = torch.export.export(Poses(), args)
    called = {node.target.name() for node in exported.graph.nodes if node.op == "call_function"
              and hasattr(node.target, "name")}  # fmt: skip
    assert {"xform::transform_points", "xform::pose_multiply", "xform::so3_log"} <= called
    module = exported.module()
    for given in (args, _args(rng)):  # the example inputs, and new ones of their shapes
        for got, want in zip(module(*given), Poses()(*given)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    inputs = [a.clone().requires_grad_() for a in args]
    sum(r.sum() for r in module(*inputs)).backward()
    expected = [a.clone().requires_grad_() for a in args]
    sum(r.sum() for r in Poses()(*expected)).backward()
    for got, want in zip(inputs, expected):
        torch.testing.assert_close(got.grad, want.grad)


def test_torchscript_is_refused(rng):
    args = _args(rng)
    with pytest.raises(RuntimeError, match="TorchScript .* not supported.*torch.export.export"):
        torch.jit.trace(Poses(), args)
    with pytest.raises(Exception, match="variable number of arguments"):
        torch.jit.script(Poses())
    assert np.isfinite(Poses()(*args)[0].numpy()).all()  # eager calls are untouched


def test_an_exported_module_differentiates_twice(rng):
    """The exported graph holds the custom ops alone; their backward is differentiable
    again, and equals eager mode's Hessian-vector product."""
    args = _args(rng)
    module = torch.export.export(Poses(), args).module()
    direction = [torch.from_numpy(rng.normal(size=a.shape)) for a in args]

    def hessian_vector_product(fn):
        inputs = [a.clone().requires_grad_() for a in args]
        loss = sum(r.square().sum() for r in fn(*inputs))
        grads = torch.autograd.grad(loss, inputs, create_graph=True)
        return torch.autograd.grad(sum((g * d).sum() for g, d in zip(grads, direction)), inputs)

    got, want = hessian_vector_product(module), hessian_vector_product(Poses())
    assert max(float(w.abs().max()) for w in want) > 0.1
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_a_saved_program_loads_and_runs_in_a_fresh_process(rng, tmp_path):
    """A program exported and saved here runs in another process that imports the adapter
    and loads it: its custom ops, registered when Dynamo loads (the adapter's import does
    not load Dynamo; `torch.export.load` does, before it reads an op), are found."""
    import subprocess
    import sys
    import textwrap

    args = _args(rng)
    path = tmp_path / "poses.pt2"
    torch.export.save(torch.export.export(Poses(), args), path)
    inputs, expected = tmp_path / "inputs.pt", tmp_path / "expected.pt"
    torch.save(args, inputs)
    torch.save(Poses()(*args), expected)
    code = textwrap.dedent(
        f"""
        import sys, torch
        import xform.backends.torch
        assert "torch._dynamo" not in sys.modules
        module = torch.export.load({str(path)!r}).module()
        got = module(*torch.load({str(inputs)!r}))
        for g, w in zip(got, torch.load({str(expected)!r})):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
