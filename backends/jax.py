"""JAX adapter: every op of xform's table as JAX primitives, generated from the table.

Each op is three primitives that run the core's kernels through the XLA FFI, so that
under `jax.jit` they execute inside the compiled program on XLA's own buffers, with no
copy. On CPU the FFI target is xform's own (a ctypes callback that reads XLA's call frame
straight into the core's buffers: half the per-call cost of building Warp arrays); on
CUDA it is `warp.jax_callable`, which also finds XLA's stream.

- `xform_<op>`: the op. Its JVP rule calls
- `xform_<op>_tangent`: the tangent kernel, linear in the tangents. Its transpose rule
  (what `jax.grad`, `jax.vjp` and `jax.linearize` need) calls
- `xform_<op>_vjp`: the op's VJP kernel (or Warp's adjoint of its kernel).

So forward mode (`jax.jvp`, `jax.jacfwd`) and reverse mode (`jax.grad`, `jax.jacrev`)
both come from the same kernels. Every primitive has a batching rule that moves the
mapped axis to the front and calls the kernel with one more "mapped prefix" dimension:
`jax.vmap` is one launch, never a loop. Second derivatives: the JVP rules of the tangent
and VJP primitives are the tangents of the op's products made ops of their own
(`xform._products`), whose primitives have the same rules; where an op has no closed-form
derivatives, and for third derivatives, they raise `xform.HigherDerivativeError`.

`cuda_matrix_to_quaternion` stops gradients: its derivative is zero, as
`jax.lax.stop_gradient` makes it. Shapes and dtypes are checked at trace time with the
SPEC's messages. float32 by default; float64 under `jax_enable_x64`.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from xform import _launch, _products
from xform._api import ArrayArguments, numbers_as_arrays
from xform._functions import family_function
from xform._launch.layout import result_shapes, scattered
from xform._launch.runner import run_product
from xform._op import Op, Product
from xform._random import sample_shape
from xform.ops import COMPOSITES, OPS

from . import jax_native

try:  # the XLA FFI call frame as ctypes structures: Warp's, which are not public API
    from warp._src.jax import xla_ffi
except ImportError:  # then Warp's own FFI path serves CPU calls too
    xla_ffi = None

__all__ = [*OPS, *COMPOSITES, "random_quaternion"]


# --- running the core's launches inside an FFI call --------------------------------------


@functools.cache
def _callback(op: Op, product: str, prefix: int, needed: tuple[bool, ...]):
    """The function a `warp.jax_callable` runs: Warp arrays in (views of XLA's buffers,
    inputs then outputs)."""
    run = run_product(op, product, prefix, needed)
    count = _result_count(op, product, needed)

    def callback(*arrays):
        try:
            run(arrays[: len(arrays) - count], [(a.ptr, a.zero_) for a in arrays[-count:]])
        except KeyboardInterrupt as exc:  # Warp's FFI wrapper turns Exceptions into XLA errors
            raise RuntimeError(f"xform.{op.name}: interrupted") from exc

    return callback


# --- xform's own CPU FFI target ----------------------------------------------------------

if xla_ffi is not None:
    _FFI_DTYPES = {xla_ffi.XLA_FFI_DataType.F32: "float32", xla_ffi.XLA_FFI_DataType.F64: "float64"}
    _FFI_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(xla_ffi.XLA_FFI_CallFrame))
    _FFI_BUFFERS = ctypes.POINTER(ctypes.POINTER(xla_ffi.XLA_FFI_Buffer))
_cpu_callbacks = {}  # the ctypes callbacks XLA holds pointers to, kept alive


def _ffi_buffers(pointers, count: int) -> list[_launch.buffers.Buffer]:
    """The core's Buffers over XLA buffers (a call frame's arguments or results)."""
    pointers = ctypes.cast(pointers, _FFI_BUFFERS)
    buffers = []
    for k in range(count):
        b = pointers[k].contents
        buffers.append(
            _launch.buffers.Buffer(
                b.data or 0, tuple(b.dims[: b.rank]), _FFI_DTYPES[b.dtype], "cpu", None
            )
        )
    return buffers


def _zero_fill(buffer: _launch.buffers.Buffer) -> None:
    ctypes.memset(buffer.ptr, 0, np.dtype(buffer.dtype).itemsize * math.prod(buffer.shape))


@functools.cache
def _cpu_target(op: Op, product: str, prefix: int, needed: tuple[bool, ...]) -> str:
    """The name of a CPU FFI target that runs one product of `op`, registered once."""
    name = f"xform_cpu_{op.key}_{product}_{prefix}_" + "".join("1" if x else "0" for x in needed)
    run = run_product(op, product, prefix, needed)

    def callback(frame_pointer):
        frame = frame_pointer.contents
        try:
            if frame.extension_start:  # XLA's first call asks for the API version
                extension = frame.extension_start.contents
                if extension.type == xla_ffi.XLA_FFI_Extension_Type.Metadata:
                    metadata = ctypes.cast(
                        frame.extension_start, ctypes.POINTER(xla_ffi.XLA_FFI_Metadata_Extension)
                    ).contents.metadata.contents
                    metadata.api_version.major_version = 0
                    metadata.api_version.minor_version = 1
                    return None
            outputs = _ffi_buffers(frame.rets.rets, frame.rets.size)
            inputs = _ffi_buffers(frame.args.args, frame.args.size)
            run(inputs, [(b.ptr, functools.partial(_zero_fill, b)) for b in outputs])
            return None
        except BaseException as exc:  # nothing may unwind through XLA's C frames, Ctrl-C
            # included (the launch has waited for all its threads): it becomes an XLA error
            code = xla_ffi.XLA_FFI_Error_Code.INTERNAL
            if isinstance(exc, KeyboardInterrupt):
                code = xla_ffi.XLA_FFI_Error_Code.CANCELLED
            return xla_ffi.create_ffi_error(frame.api, code, f"{name}: {exc!r}")

    c_callback = _cpu_callbacks[name] = _FFI_CALLBACK(callback)
    capsule = jax.ffi.pycapsule(ctypes.cast(c_callback, ctypes.c_void_p).value)
    jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    return name


def _result_count(op: Op, product: str, needed) -> int:
    """The outputs of an FFI call: the product's results, and partial sums per result of
    an op that sums over groups (see `_run`)."""
    if product == Product.VJP:
        return sum(needed)
    return len(op.results) * (2 if op.reduced else 1)


@functools.cache
def ffi_callable(run, name: str, signature: tuple, num_outputs: int, vmap_method=None):
    """`make_ffi_callable`, made once per op product (a bounded set: `run` is one of
    `_callback`'s, one per op, product and mapped prefix)."""
    return make_ffi_callable(run, name, signature, num_outputs, vmap_method)


def make_ffi_callable(run, name: str, signature: tuple, num_outputs: int, vmap_method=None):
    """A `warp.jax_callable` running `run(*warp_arrays)` inside an XLA FFI call, for one
    signature: a (Warp scalar type, rank) pair per input, then per output. `run` gets
    views of XLA's buffers (inputs, then outputs to fill) on XLA's stream. `vmap_method`
    is JAX's, for callers without a batching rule of their own. Each registers an FFI
    target with XLA, for the process's life: callers keyed on user functions bound
    their caches."""
    names = [f"arg{i}" for i in range(len(signature))]

    def call(*arrays):
        run(*arrays)

    call.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
    )
    call.__annotations__ = {
        n: wp.array(dtype=scalar, ndim=rank) for n, (scalar, rank) in zip(names, signature)
    }
    call.__name__ = call.__qualname__ = name
    return wp.jax_callable(
        call,
        num_outputs=num_outputs,
        graph_mode=wp.JaxCallableGraphMode.NONE,
        vmap_method=vmap_method,
    )


def call_ffi(callable_, inputs, out_shapes):
    """Call an `ffi_callable` on JAX inputs, with the given output shapes."""
    first = len(inputs)
    names = [f"arg{i}" for i in range(first, first + len(out_shapes))]
    return list(callable_(*inputs, output_dims=dict(zip(names, out_shapes))))


def _run(op: Op, product: str, prefix: int, needed, inputs, out_shapes, cpu=False):
    """Run one product through the FFI (xform's own CPU target where `cpu`), or without a
    launch when nothing is to compute."""
    dtype = inputs[0].dtype
    if not out_shapes:
        return []
    if any(0 in shape for shape in out_shapes) or any(
        x.size == 0 for x in inputs[: len(op.operands)]
    ):  # nothing to compute, or sums over no summands
        return [jnp.zeros(shape, dtype) for shape in out_shapes]
    # An op that sums over groups takes its partial sums as further outputs, dropped here:
    # XLA owns their memory, in order on its stream.
    count = len(out_shapes)
    operand_shapes = [x.shape for x in inputs[: len(op.operands)]]
    out_shapes = [*out_shapes, *_launch.tiling.scratch_shapes(op, product, operand_shapes, prefix)]
    results = [jax.ShapeDtypeStruct(shape, dtype) for shape in out_shapes]
    native = jax_native.library() if cpu else jax_native.cuda_library()
    if native is not None:  # a program of the launches, run with no Python per call
        program = jax_native.program(
            op, product, prefix, needed, tuple(tuple(x.shape) for x in inputs),
            tuple(map(tuple, out_shapes)), np.dtype(dtype), "cpu" if cpu else "cuda:0",
        )  # fmt: skip
        if program is not None:
            call = jax.ffi.ffi_call(jax_native.TARGET if cpu else jax_native.TARGET_CUDA, results)
            outputs = call(*inputs, program=np.int64(program.ctypes.data),
                           token=np.int64(native.token))  # fmt: skip
            return list(outputs)[:count]
    if cpu:
        target = _cpu_target(op, product, prefix, needed)
        return list(jax.ffi.ffi_call(target, results)(*inputs))[:count]
    scalar = wp.dtype_from_numpy(np.dtype(dtype))
    ranks = [x.ndim for x in inputs] + [len(s) for s in out_shapes]
    callable_ = ffi_callable(
        _callback(op, product, prefix, needed),
        f"xform_{op.key}_{product}",
        tuple((scalar, rank) for rank in ranks),
        len(out_shapes),
    )
    return call_ffi(callable_, inputs, out_shapes)[:count]


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
    (`xform._products`), which raises where xform cannot give it exactly."""

    def rule(primals, tangents, *, prefix):
        product = _products.product_op(op, Product.TANGENT)
        outs = tangent.bind(*primals, prefix=prefix)
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return outs, primitives(product)[1].bind(*primals, *tangents, prefix=prefix)

    return rule


def _jvp_of_vjp(op: Op, vjp: Primitive):
    """The JVP rule of an op's VJP primitive: the tangent of its VJP op, whose results are
    the differentiable operands' gradients (the primitive gives the `needed` ones)."""

    def rule(primals, tangents, *, prefix, needed):
        product = _products.product_op(op, Product.VJP)
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
    """Run `impl` eagerly through the primitive's compiled form, and lower it through
    xform's own FFI target on CPU, through Warp's elsewhere."""
    primitive.def_impl(_eager(primitive))
    mlir.register_lowering(primitive, mlir.lower_fun(impl, multiple_results=True))
    if xla_ffi is None:
        return
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
    lambda x: isinstance(x, (jax.Array, np.ndarray, jax.core.Tracer)),
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
    normals = jax.random.normal(key, (*dims, 4), dtype=dtype or jnp.zeros(0).dtype)
    return FUNCTIONS["quaternion_normalize"](normals)
