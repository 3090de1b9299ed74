"""Running one product of an op on memory that a caller owns: what an FFI call does.

JAX's FFI targets (`backends/jax.py`) run it on XLA's buffers, and the native executor
(`backends/jax_native.py`) records its launches once per launch plan.
"""

from __future__ import annotations

import functools
import math

import warp as wp

from .._op import Op, Product
from . import products
from .buffers import prepare


@functools.cache
def run_product(op: Op, product: Product, prefix: int, needed: tuple[bool, ...]):
    """What an FFI call runs: `run(inputs, outputs)`, with the inputs as arrays the core
    reads (Warp arrays or Buffers over XLA's memory) and each output as (pointer, a
    function that zero-fills it), which the core's launch writes: `product` (the VJP with
    the `needed` gradients) of `op`, `prefix` leading dimensions mapped by a vectorising
    transform."""
    n = len(op.operands)

    def run(inputs, outputs):
        queue = iter(outputs)

        def allocate(shape, scalar, device):
            return None, next(queue)[0]

        def allocate_zeros(shape, scalar, device):
            ptr, zero = next(queue)
            zero()
            return None, ptr

        def scratch_zeros(shape, scalar, device):
            # Flat, as Warp has no 0-d arrays and none of more than 4 dimensions (a mapped
            # operand's can have more): the core keeps `shape`, and reads the memory.
            array = wp.zeros(max(math.prod(shape), 1), dtype=scalar, device=device)
            return array, array.ptr

        operands = prepare(op, inputs[:n], prefix)
        if product == Product.FORWARD:
            products.forward(operands, allocate, allocate_zeros)
        elif product == Product.TANGENT:
            # Every tangent is given, but the op's non-differentiable operands' count as
            # zero: those zeros are scratch, not outputs.
            products.jvp(operands, inputs[n : 2 * n], allocate, allocate_zeros, scratch_zeros)
        else:
            cotangents = inputs[n : n + len(op.results)]
            products.vjp(operands, cotangents, allocate_zeros, needed, allocate)

    return run
