"""torch.compile: the same Functions, reaching the kernels through `torch.library` custom
ops, and marked `allow_in_graph` once Dynamo loads (see `backends/torch.py`)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

import torch

from xform._op import Op

from ._torch_autograd import _backward, _unpack, op_function
from ._torch_kernels import KernelRoute, _fake_results, _forward, _jvp, _vjp


class CustomOps(NamedTuple):
    """An op's three products as functional `torch.library` custom ops, the mapped prefix
    an argument: `xform::<key>`, and for a differentiable op `xform_jvp::<key>` (operands,
    tangents) and `xform_vjp::<key>` (operands, cotangents, needed flags). A namespace per
    product, so that no op's key can meet another's derivative."""

    forward: Callable
    jvp: Callable | None
    vjp: Callable | None


def _register_custom_ops(op: Op) -> CustomOps:
    """The custom ops of `op`, with fake (shape-only) implementations for tracing. While
    compiling, the Function around them differentiates and maps; the forward's own
    autograd serves an exported program, which holds the custom op alone."""
    n, r = len(op.operands), len(op.results)
    # Positional names: an op's own operand names could clash with `prefix` or `needed`.
    operands = ", ".join(f"Tensor operand{k}" for k in range(n))
    tangents = ", ".join(f"Tensor? tangent{k}" for k in range(n))
    cotangents = ", ".join(f"Tensor? cotangent{k}" for k in range(r))
    results = "Tensor" if r == 1 else "(" + ", ".join(["Tensor"] * r) + ")"

    def define(namespace: str, arguments: str, returns: str, kernel, fake):
        library = _library(namespace)
        library.define(
            f"{op.key}({arguments}, int prefix) -> {returns}",
            tags=(torch.Tag.pt2_compliant_tag,),
        )
        overload = _OverloadByName(namespace, op.key)
        if namespace != "xform":  # the forward's autograd is its VJP, registered below
            library.impl(op.key, _underived(overload), "Autograd", with_keyset=True)
        library.impl(op.key, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{op.key}", fake, lib=library)
        return overload

    forward = define(
        "xform",
        operands,
        results,
        lambda *args: _unpack(_forward(op, args[:n], args[n])),
        lambda *args: _unpack(_fake_results(op, args[:n], args[n])),
    )
    if not op.differentiable:
        return CustomOps(forward, None, None)
    jvp = define(
        "xform_jvp",
        f"{operands}, {tangents}",
        results,
        lambda *args: _unpack(_jvp(op, args[:n], args[n : 2 * n], args[2 * n])),
        lambda *args: _unpack(_fake_results(op, args[:n], args[2 * n])),
    )

    def vjp(*args):
        operands, cotangents, needed, prefix = args[:n], args[n : n + r], args[-2], args[-1]
        grads = _vjp(op, operands, cotangents, needed, prefix)
        return [g if g is not None else operands[0].new_empty(0) for g in grads]

    def fake_vjp(*args):
        operands, needed = args[:n], args[-2]
        return [x.new_empty(x.shape if need else (0,)) for x, need in zip(operands, needed)]

    vjp = define("xform_vjp", f"{operands}, {cotangents}, bool[] needed", "Tensor[]", vjp, fake_vjp)

    # A graph that holds the forward custom op without the Function around it (a program
    # from torch.export) differentiates it through the same VJP Function, over the
    # custom ops, so that its backward is differentiable again too.
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:n])
        ctx.prefix = inputs[n]

    def backward(ctx, *grads):
        return _backward(op, ctx.prefix, DISPATCHED, ctx, grads)

    torch.library.register_autograd(
        f"xform::{op.key}", backward, setup_context=setup_context, lib=_library("xform")
    )
    return CustomOps(forward, jvp, vjp)


class _OverloadByName:
    """`torch.ops.<namespace>.<key>.default`, looked up at the first call: the lookup
    builds the op's Python objects (~1 ms), which only a trace needs."""

    def __init__(self, namespace: str, key: str):
        self.namespace, self.key, self.overload = namespace, key, None

    def resolved(self):
        if self.overload is None:
            self.overload = getattr(getattr(torch.ops, self.namespace), self.key).default
        return self.overload

    def __call__(self, *args):
        return self.resolved()(*args)


def _underived(overload: _OverloadByName):
    """The Autograd kernel of a JVP or VJP custom op: the Function around it differentiates
    it (its own backward is the op's next derivative), so called where autograd records,
    it raises, where torch's fallback would warn and drop the gradient; elsewhere it
    passes the call on below autograd. (`torch.library.custom_op` raised here too.)"""

    def kernel(keyset, *args):
        if torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        ):
            raise RuntimeError(
                f"{overload.namespace}::{overload.key} has no derivative of its own: "
                "differentiate the xform op it belongs to (its Function), not this "
                "custom op"
            )
        with torch._C._AutoDispatchBelowAutograd():
            below = keyset & torch._C._after_autograd_keyset
            return overload.resolved().redispatch(below, *args)

    return kernel


# The namespaces' fragments, kept for the life of the process (a Library that is
# collected takes its registrations with it). `torch.library.custom_op` registered the
# same kernels, and more checks around them, at ~1.4 ms a custom op; `define`, `impl` and
# `register_fake` take ~0.35 ms: all of them 1.85 s at Dynamo's import, now ~0.75 s
# (NOTES 52).
_LIBRARIES: dict[str, torch.library.Library] = {}


def _library(namespace: str) -> torch.library.Library:
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return _LIBRARIES[namespace]


# Every op's custom ops. Only a trace calls them (torch.compile, torch.export, loading an
# exported program), and each of those imports torch._dynamo first; registering all 550
# takes most of a second (`_LIBRARIES`), so they wait for that import (`_MarkWhenDynamoLoads`),
# where the marks below wait too, and are made before anything is traced (registering
# inside a region that torch.compile traces would break the trace).
CUSTOM_OPS: dict[Op, CustomOps] = {}
_UNREGISTERED: list[Op] = []
_FAILED: dict[Op, Exception] = {}  # an op whose registration failed at Dynamo's import
_REGISTERING = threading.Lock()  # an op defined on one thread as Dynamo loads on another


def register_custom_ops(op: Op) -> None:
    """`op`'s custom ops now where Dynamo is loaded, else at its import. Its name is
    checked against torch's schema parser now: a name torch refuses fails its
    `define_op`, as it did when the ops were registered at once."""
    torch._C.parse_schema(f"xform::{op.key}(Tensor operand0, int prefix) -> Tensor")
    with _REGISTERING:
        if _DYNAMO in sys.modules:
            CUSTOM_OPS[op] = _register_custom_ops(op)
        else:
            _UNREGISTERED.append(op)


def _register_waiting() -> None:
    """The waiting ops' custom ops (at Dynamo's import). One op that fails is kept with
    its error, raised when a trace reaches it; the others, and torch.compile, still work."""
    with _REGISTERING:
        while _UNREGISTERED:
            op = _UNREGISTERED.pop()
            try:
                CUSTOM_OPS[op] = _register_custom_ops(op)
            except Exception as error:
                _FAILED[op] = error


def _custom_ops(op: Op) -> CustomOps:
    if op in _FAILED:
        raise TypeError(
            f"xform.backends.torch: {op.name} cannot be traced (torch.compile, torch.export): "
            f"its torch.library custom ops failed to register: {_FAILED[op]}"
        ) from _FAILED[op]
    return CUSTOM_OPS[op]


def _as_list(results) -> list[torch.Tensor]:
    return list(results) if isinstance(results, (tuple, list)) else [results]


def _dispatched_forward(op: Op, operands, prefix: int = 0, buffers=()) -> list[torch.Tensor]:
    return _as_list(_custom_ops(op).forward(*operands, prefix))


def _dispatched_vjp(op: Op, operands, cotangents, needed, prefix: int = 0):
    return _custom_ops(op).vjp(*operands, *cotangents, list(needed), prefix)


def _dispatched_jvp(op: Op, operands, tangents, prefix: int = 0) -> list[torch.Tensor]:
    return _as_list(_custom_ops(op).jvp(*operands, *tangents, prefix))


# Traced (torch.compile): the kernels as custom ops, which the trace records as nodes.
DISPATCHED = KernelRoute(_dispatched_forward, _dispatched_vjp, _dispatched_jvp)


def _traced_call(op: Op):
    """What a call of `op` is while torch.compile traces: the op's Function with the
    DISPATCHED route, in a function marked `allow_in_graph`. Dynamo records that call as
    one node instead of inlining the Function (it refuses a Function with a `jvp`, and
    outside its own autograd support it would drop the jvp and vmap rules); AOTAutograd
    then runs the Function under whichever transforms the trace holds (backward,
    `torch.func.grad`, `jvp`, `vmap`, forward AD), so every rule applies as in eager mode,
    and records the custom ops that the Function calls."""
    function = op_function(op, 0, DISPATCHED)

    def call(*operands):
        return function.apply(*operands)

    call.__name__ = call.__qualname__ = op.name
    return _allow_in_graph(call)


# Marking a function `allow_in_graph` imports torch._dynamo, which would double the
# import time of this module (~0.9 s of CPU) for programs that never compile. So the
# marks wait for Dynamo's first import (torch.compile makes it), and are made as soon as
# that import is done, before anything can be traced.
_DYNAMO = "torch._dynamo"
_UNMARKED: list[Callable] = []


def _allow_in_graph(call: Callable) -> Callable:
    if _DYNAMO in sys.modules:
        return torch.compiler.allow_in_graph(call)
    _UNMARKED.append(call)
    return call


class _MarkWhenDynamoLoads(importlib.abc.MetaPathFinder):
    """An import hook that lets torch._dynamo load as usual, then registers the waiting
    custom ops and marks the waiting functions; it removes itself at that import."""

    def find_spec(self, name, path, target=None):
        if name != _DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            try:
                run(module)
            except BaseException:
                sys.meta_path.insert(0, self)  # a later import tries again
                raise
            _register_waiting()
            while _UNMARKED:
                torch.compiler.allow_in_graph(_UNMARKED.pop())

        spec.loader.exec_module = exec_module
        return spec


if _DYNAMO not in sys.modules:
    sys.meta_path.insert(0, _MarkWhenDynamoLoads())
