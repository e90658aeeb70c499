"""reduce_sum: Y[r] = sum over c of X[r, c], accumulated in float32.

Each block owns ROWS rows. A ``T.Serial`` loop walks over the columns one
tile at a time: serial, because every step adds to the same accumulator, and
the steps must happen in order. Inside a step ``T.Parallel`` adds the tile
element-wise into a float32 fragment of the tile's shape, so every thread keeps
its own partial sums in registers and no thread waits on another. Only after
the last column tile does ``T.reduce_sum`` fold the fragment along the row
(within a thread, then across the warp), once per row instead of once per tile.

Out-of-range elements of a partial tile are loaded as 0, the identity of a
sum, so no extra mask is needed. The order of additions is fixed by the
tile shape, so a row's sum is bitwise the same from run to run.
"""

from __future__ import annotations

import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels._rows import ACCUM, ROWS, THREADS, columns, vector_elements


def reduce_sum_program(dtype: str, aligned: bool) -> tirx.PrimFunc:
    """The row-sum kernel for ``dtype`` over an (M, N) buffer of any M, N."""
    cols = columns(dtype)
    vec = vector_elements(dtype)
    m, n = T.dynamic("M N", "int64")

    @T.prim_func
    def reduce_sum(X: T.Tensor((m, n), dtype), Y: T.Tensor((m,), dtype)):
        with T.Kernel(T.ceildiv(m, ROWS), threads=THREADS) as bx:
            if aligned:
                T.assume(n % vec == 0)
            tile = T.alloc_fragment((ROWS, cols), dtype)
            acc = T.alloc_fragment((ROWS, cols), ACCUM)
            total = T.alloc_fragment((ROWS,), ACCUM)
            T.clear(acc)
            for kb in T.Serial(T.ceildiv(n, cols)):
                T.copy(X[bx * ROWS, kb * cols], tile)
                for i, j in T.Parallel(ROWS, cols):
                    acc[i, j] += T.cast(tile[i, j], ACCUM)
            T.reduce_sum(acc, total, dim=1)
            for i in T.Parallel(ROWS):
                if bx * ROWS + i < m:
                    Y[bx * ROWS + i] = T.cast(total[i], dtype)

    return reduce_sum
