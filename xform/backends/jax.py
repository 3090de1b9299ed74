"""JAX adapter: every op of xform's table as JAX primitives, generated from the table.

Each op is three primitives that run the core's kernels through the XLA FFI, so that
under `jax.jit` they execute inside the compiled program on XLA's own buffers, with no
copy. The FFI targets are xform's own (`jax_native`): a program of recorded launches run
from C, or a Python function, called behind a guard in C, that reads XLA's buffers
straight into the core's (half the per-call cost of building Warp arrays), on CPU and on
CUDA alike (there on XLA's stream), so that CI on a CPU walks the GPU's route. Only where
that library cannot be had does `warp.jax_callable` run the Python function.

- `xform_<op>`: the op. Its JVP rule calls
- `xform_<op>_tangent`: the tangent kernel, linear in the tangents. Its transpose rule
  (what `jax.grad`, `jax.vjp` and `jax.linearize` need) calls
- `xform_<op>_vjp`: the op's VJP kernel (or Warp's adjoint of its kernel).

So forward mode (`jax.jvp`, `jax.jacfwd`) and reverse mode (`jax.grad`, `jax.jacrev`)
both come from the same kernels. Every primitive has a batching rule that moves the
mapped axis to the front and calls the kernel with one more "mapped prefix" dimension:
`jax.vmap` is one launch, never a loop. Second derivatives: the JVP rules of the tangent
and VJP primitives are the tangents of the op's products made ops of their own
(`xform._second_order`), whose primitives have the same rules; where an op has no closed-form
derivatives, and for third derivatives, they raise `xform.HigherDerivativeError`.

`cuda_matrix_to_quaternion` stops gradients: its derivative is zero, as
`jax.lax.stop_gradient` makes it. Shapes and dtypes are checked at trace time with the
SPEC's messages. float32 by default; float64 under `jax_enable_x64`.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from xform import _frameworks, _launch, _second_order
from xform._dispatch import ArrayArguments, numbers_as_arrays
from xform._functions import family_function
from xform._launch.layout import result_shapes, scattered
from xform._op import Op, Product
from xform._random import haar_quaternions, sample_shape
from xform.ops import COMPOSITES, OPS

from ._jax_ffi import _run

__all__ = [*OPS, *COMPOSITES, "random_quaternion"]


# --- the three primitives per op -----------------------------------------------------------


def _check(op: Op, operands, prefix: int):
    _launch.buffers.check_dtypes(op, [np.dtype(x.dtype).name for x in operands])
    return result_shapes(op, [tuple(x.shape) for x in operands], prefix)


def _avals(shapes, dtype, inputs):
    """Abstract results. Under shard_map they vary over every mesh axis that an input
    varies over, as for JAX's own elementwise primitives."""
    varying_inputs = [
        x for x in inputs if getattr(x, "manual_axis_type", None) and x.manual_axis_type.varying
    ]
    if not varying_inputs:
        return [jax.core.ShapedArray(shape, dtype) for shape in shapes]
    first = varying_inputs[0].manual_axis_type
    axis_type = type(first)(
        varying=frozenset().union(*(x.manual_axis_type.varying for x in varying_inputs)),
        unreduced=first.unreduced,
        reduced=first.reduced,
    )
    mesh = varying_inputs[0].sharding.mesh
    return [
        jax.core.ShapedArray(
            shape,
            dtype,
            sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
            manual_axis_type=axis_type,
        )
        for shape in shapes
    ]


def _front(args, dims, size, broadcast):
    """Mapped axis to the front of every argument; an unmapped argument gets a size-1
    axis there (broadcast: False) or is broadcast to the map size (broadcast: True)."""
    out = []
    for x, d in zip(args, dims):
        if d is None:
            x = jnp.expand_dims(x, 0)
            if broadcast:
                x = jnp.broadcast_to(x, (size, *x.shape[1:]))
        else:
            x = jnp.moveaxis(x, d, 0)
        out.append(x)
    return out


def _map_size(args, dims):
    return next(x.shape[d] for x, d in zip(args, dims) if d is not None)


def _jvp_of_tangent(op: Op, tangent: Primitive):
    """The JVP rule of an op's tangent primitive: the tangent of its tangent op
    (`xform._second_order`), which raises where xform cannot give it exactly."""

    def rule(primals, tangents, *, prefix):
        product = _second_order.product_op(op, Product.TANGENT)
        outs = tangent.bind(*primals, prefix=prefix)
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return outs, primitives(product)[1].bind(*primals, *tangents, prefix=prefix)

    return rule


def _jvp_of_vjp(op: Op, vjp: Primitive):
    """The JVP rule of an op's VJP primitive: the tangent of its VJP op, whose results are
    the differentiable operands' gradients (the primitive gives the `needed` ones)."""

    def rule(primals, tangents, *, prefix, needed):
        product = _second_order.product_op(op, Product.VJP)
        outs = vjp.bind(*primals, prefix=prefix, needed=needed)
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        out = primitives(product)[1].bind(*primals, *tangents, prefix=prefix)
        by_operand = dict(zip(scattered(op, Product.VJP), out))
        return outs, [
            by_operand[k] if k in by_operand else jnp.zeros_like(primals[k])
            for k, need in enumerate(needed)
            if need
        ]

    return rule


def _eager(primitive: Primitive):
    """The primitive's eager implementation: its compiled form, cached per parameters (and
    by `jax.jit` per shapes), so that an eager call lowers as a jitted one does, instead
    of building a new FFI call each time."""

    @functools.cache
    def compiled(params):
        return jax.jit(functools.partial(primitive.bind, **dict(params)))

    def impl(*args, **params):
        return compiled(tuple(sorted(params.items())))(*args)

    return impl


def _implement(primitive: Primitive, impl) -> None:
    """Run `impl` eagerly through the primitive's compiled form, and lower it for CPU and
    for the GPU."""
    primitive.def_impl(_eager(primitive))
    mlir.register_lowering(primitive, mlir.lower_fun(impl, multiple_results=True))
    cpu_impl = functools.partial(impl, cpu=True)
    mlir.register_lowering(
        primitive, mlir.lower_fun(cpu_impl, multiple_results=True), platform="cpu"
    )


@functools.cache
def primitives(op: Op):
    """(op, tangent, vjp) primitives of one op, with their rules."""
    n, r = len(op.operands), len(op.results)

    forward = Primitive(f"xform_{op.key}")
    forward.multiple_results = True

    def forward_impl(*operands, prefix, cpu=False):
        return _run(op, Product.FORWARD, prefix, (), operands, _check(op, operands, prefix), cpu)

    def forward_abstract(*operands, prefix):
        return _avals(_check(op, operands, prefix), operands[0].dtype, operands)

    def forward_batch(args, dims, *, prefix):
        # Results like operands get one element per map element: those operands too.
        front = _front(args, dims, _map_size(args, dims), broadcast=op.scatters)
        return forward.bind(*front, prefix=prefix + 1), [0] * r

    forward.def_abstract_eval(forward_abstract)
    _implement(forward, forward_impl)
    batching.primitive_batchers[forward] = forward_batch
    if not op.differentiable:
        return forward, None, None

    tangent = Primitive(f"xform_{op.key}_tangent")
    tangent.multiple_results = True
    vjp = Primitive(f"xform_{op.key}_vjp")
    vjp.multiple_results = True

    def forward_jvp(primals, tangents, *, prefix):
        outs = forward.bind(*primals, prefix=prefix)
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return outs, tangent.bind(*primals, *tangents, prefix=prefix)

    def tangent_impl(*args, prefix, cpu=False):
        operands = args[:n]
        return _run(op, Product.TANGENT, prefix, (), args, _check(op, operands, prefix), cpu)

    def tangent_abstract(*args, prefix):
        return _avals(_check(op, args[:n], prefix), args[0].dtype, args)

    def tangent_transpose(cotangents, *args, prefix):
        operands = args[:n]
        if any(ad.is_undefined_primal(x) for x in operands):
            raise NotImplementedError(f"xform.{op.name}: the tangent is linear in tangents only")
        needed = tuple(ad.is_undefined_primal(t) for t in args[n:])
        dtype = operands[0].dtype
        cotangents = [
            jnp.zeros(s, dtype) if type(c) is ad.Zero else c
            for c, s in zip(cotangents, _check(op, operands, prefix))
        ]
        grads = iter(vjp.bind(*operands, *cotangents, prefix=prefix, needed=needed))
        return [None] * n + [next(grads) if need else None for need in needed]

    def tangent_batch(args, dims, *, prefix):
        front = _front(args, dims, _map_size(args, dims), broadcast=True)
        return tangent.bind(*front, prefix=prefix + 1), [0] * r

    tangent.def_abstract_eval(tangent_abstract)
    _implement(tangent, tangent_impl)
    batching.primitive_batchers[tangent] = tangent_batch
    ad.primitive_transposes[tangent] = tangent_transpose
    ad.primitive_jvps[tangent] = _jvp_of_tangent(op, tangent)

    def vjp_shapes(operands, prefix, needed):
        _check(op, operands, prefix)
        return [tuple(x.shape) for x, need in zip(operands, needed) if need]

    def vjp_impl(*args, prefix, needed, cpu=False):
        operands = args[:n]
        return _run(
            op, Product.VJP, prefix, needed, args, vjp_shapes(operands, prefix, needed), cpu
        )

    def vjp_abstract(*args, prefix, needed):
        return _avals(vjp_shapes(args[:n], prefix, needed), args[0].dtype, args)

    def vjp_batch(args, dims, *, prefix, needed):
        # Unmapped operands are spelled out to the map size: each map element gets its own
        # gradient, which the adjoint must not sum over the map.
        front = _front(args, dims, _map_size(args, dims), broadcast=True)
        return vjp.bind(*front, prefix=prefix + 1, needed=needed), [0] * sum(needed)

    vjp.def_abstract_eval(vjp_abstract)
    _implement(vjp, vjp_impl)
    batching.primitive_batchers[vjp] = vjp_batch
    ad.primitive_jvps[vjp] = _jvp_of_vjp(op, vjp)

    ad.primitive_jvps[forward] = forward_jvp
    return forward, tangent, vjp


# --- the public functions ------------------------------------------------------------------


ARRAYS = ArrayArguments(
    "xform.backends.jax",
    "a JAX or NumPy array",
    lambda x: _frameworks.JAX.owns(x) or _frameworks.NUMPY.owns(x),
)


def _as_array(op: Op, name: str, x):
    ARRAYS.check(op.name, name, x)
    if isinstance(x, np.ndarray) and not x.dtype.isnative:  # JAX takes native byte order
        return x.astype(x.dtype.newbyteorder("="))
    return x


def _strongly_typed(operands: list) -> list:
    """JAX's weak types, as its own arithmetic promotes them: a weakly typed value (a Python
    number traced by jit or grad, whose primal may be a literal with no shape, or an array
    such as jnp.asarray(0.5)) takes the dtype of the strongly typed float arguments, and
    becomes strongly typed. So a number for a scalar operand takes the other arguments'
    dtype under every transform, as it does eagerly (numbers_as_arrays), x64 on or off."""
    # NumPy arrays have no aval: strongly typed, as JAX treats them.
    weak = [getattr(getattr(x, "aval", None), "weak_type", False) for x in operands]
    if not any(weak):
        return operands
    dtypes = [np.dtype(x.dtype) for x in operands]
    strong = [d for d, w in zip(dtypes, weak) if not w and np.issubdtype(d, np.floating)]
    return [
        jax.lax.convert_element_type(x, strong[0] if strong else dtype) if w else x
        for x, dtype, w in zip(operands, dtypes, weak)
    ]


def _make_function(op: Op):
    n = len(op.operands)
    buffers = (*op.result_buffers, *op.gradient_buffers)
    params = [
        inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for o in op.operands
    ]
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in buffers
    ]
    signature = inspect.Signature(params)
    forward = primitives(op)[0]

    def function(*args, **kwargs):
        if len(args) > n:
            raise TypeError(
                f"xform.backends.jax.{op.name} takes {n} arrays; JAX arrays are immutable, so "
                "cuRobo's preallocated output and gradient buffers are not accepted"
            )
        given = [name for name in buffers if kwargs.get(name) is not None]
        if given:
            raise TypeError(
                f"xform.backends.jax.{op.name}: buffer(s) {', '.join(given)} given, but JAX "
                "arrays are immutable: results are always new arrays"
            )
        if kwargs or len(args) != n:  # the common positional call skips binding
            args = [signature.bind(*args, **kwargs).arguments[o.name] for o in op.operands]
        args = numbers_as_arrays(op, args)
        operands = _strongly_typed([_as_array(op, o.name, x) for o, x in zip(op.operands, args)])
        # An operand the op is not differentiable in gets a zero derivative.
        operands = [
            x if o.differentiable else jax.lax.stop_gradient(x)
            for o, x in zip(op.operands, operands)
        ]
        results = forward.bind(*operands, prefix=0)
        return results[0] if len(results) == 1 else tuple(results)

    function.__name__ = function.__qualname__ = op.name
    function.__signature__ = signature
    function.__doc__ = op.docstring("none (its gradient is zero)")
    return function


def function(op: Op):
    """The JAX function of `op`, built-in or made by `xform.define_op`."""
    if "jax" not in op.adapters:
        op.adapters["jax"] = _make_function(op)
    return op.adapters["jax"]


FUNCTIONS = {name: function(op) for name, op in OPS.items()}
FUNCTIONS |= {
    name: family_function(family, lambda op, *arrays: function(op)(*arrays), ARRAYS)
    for name, family in COMPOSITES.items()
}

globals().update(FUNCTIONS)  # every built-in op by name


def random_quaternion(shape, key: jax.Array, dtype=None) -> jax.Array:
    """Unit quaternions [w, x, y, z], uniform over rotations (Haar), shape `shape + (4,)`:
    normalised standard normals drawn with the PRNG `key` (the same key gives the same
    samples; split it for fresh ones). `dtype` defaults to JAX's default float."""
    dims = sample_shape("backends.jax.random_quaternion", shape)
    dtype = None if dtype is None else _frameworks.float_name(dtype)
    return haar_quaternions(_frameworks.JAX, dims, dtype, key)
