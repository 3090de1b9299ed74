"""The launch layer: check an op's operands, then run its forward, VJP or tangent kernels.

`buffers.prepare` checks operands against the op (with `layout.py`'s shapes and
broadcasting); `products.forward`, `vjp` and `jvp` build each product's steps
(`steps.py`: launches of tiles, partial sums added), which run here or are recorded as a
program for a native executor (`program.py`); `repeats.repeat` sends a repeated call
straight to its remembered launch. The kernels are generated in `codegen.py` (with the
element derivatives of `elements.py`; the GPU's VJPs that sum a broadcast gradient in
blocks, in `blocks.py`); Warp's private ABI is in `warp_abi.py`.
"""

from . import (  # noqa: F401 (the layer's rooms, reached as _launch.<room>)
    buffers,
    layout,
    products,
    program,
    repeats,
    runner,
    steps,
    threads,
    tiling,
)
