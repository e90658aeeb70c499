"""copy: Y = X, one tile of BLOCK elements per thread block.

The tile program moves data twice with ``T.copy``: global memory to a
register fragment, fragment back to global memory. No loop is written by hand;
TileLang spreads the tile over the block's threads and picks the widest vector
access the layout allows.

Why the ``if``: N is dynamic (``T.dynamic``), so one compile serves every
size, but then TileLang cannot prove a tile lies inside the buffer and masks
every element, and a masked element-by-element access cannot be vectorized.
Inside ``if (bx + 1) * BLOCK <= N`` the bound is a known fact, the masks fold
away and each thread moves its bytes with 128-bit loads and stores. Only the
grid's last tile takes the masked ``else`` path.

Sizes are int64 so that buffers of 2**31 elements or more index correctly.
"""

from __future__ import annotations

import tilelang.language as T
from tvm import tirx

THREADS = 256
# Each thread moves two 16-byte vectors per tile: two loads in flight hide
# more of the memory latency than one, at no cost in registers.
VECTORS_PER_THREAD = 2


def block_elements(dtype: str) -> int:
    """Elements per tile: THREADS threads x VECTORS_PER_THREAD x 16 bytes."""
    itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
    return THREADS * VECTORS_PER_THREAD * (16 // itemsize)


def copy_program(dtype: str) -> tirx.PrimFunc:
    """The copy kernel for ``dtype`` over a flat buffer of any length N."""
    block = block_elements(dtype)
    n = T.dynamic("N", "int64")

    @T.prim_func
    def copy(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=THREADS) as bx:
            tile = T.alloc_fragment((block,), dtype)
            if (bx + 1) * block <= n:
                T.copy(X[bx * block : (bx + 1) * block], tile)
                T.copy(tile, Y[bx * block : (bx + 1) * block])
            else:
                T.copy(X[bx * block : (bx + 1) * block], tile)
                T.copy(tile, Y[bx * block : (bx + 1) * block])

    return copy
