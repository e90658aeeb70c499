"""vector_add: Z = X + Y elementwise, one tile of BLOCK elements per block.

The tile program copies a tile of X and of Y into register fragments, adds
them in a ``T.Parallel`` loop and copies the sum out. ``T.Parallel`` says the
iterations are independent (no one reads what another writes), so TileLang
may hand them to any thread in any order and vectorize them; a ``T.Serial``
loop would promise an order and carry state from one iteration to the next.

The sum is formed in float32 and rounded once to the storage dtype, as XLA
does for bfloat16 and float16 adds. As in ``copy``, full tiles take an
unmasked path that TileLang turns into 128-bit loads and stores; only the last
tile is masked.
"""

from __future__ import annotations

import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels.copy import THREADS, block_elements

ACCUM = "float32"


def vector_add_program(dtype: str) -> tirx.PrimFunc:
    """The add kernel for ``dtype`` over flat buffers of any length N."""
    block = block_elements(dtype)
    n = T.dynamic("N", "int64")

    @T.prim_func
    def vector_add(
        X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype), Z: T.Tensor((n,), dtype)
    ):
        with T.Kernel(T.ceildiv(n, block), threads=THREADS) as bx:
            x = T.alloc_fragment((block,), dtype)
            y = T.alloc_fragment((block,), dtype)
            z = T.alloc_fragment((block,), dtype)
            if (bx + 1) * block <= n:
                T.copy(X[bx * block : (bx + 1) * block], x)
                T.copy(Y[bx * block : (bx + 1) * block], y)
                for i in T.Parallel(block):
                    z[i] = T.cast(T.cast(x[i], ACCUM) + T.cast(y[i], ACCUM), dtype)
                T.copy(z, Z[bx * block : (bx + 1) * block])
            else:
                T.copy(X[bx * block : (bx + 1) * block], x)
                T.copy(Y[bx * block : (bx + 1) * block], y)
                for i in T.Parallel(block):
                    z[i] = T.cast(T.cast(x[i], ACCUM) + T.cast(y[i], ACCUM), dtype)
                T.copy(z, Z[bx * block : (bx + 1) * block])

    return vector_add
