"""reduce_sum: Y[r] = sum over c of X[r, c], accumulated in float32.

Each block owns ``tile.rows`` rows (``_rows.py`` picks the tile from the row
length: many short rows a block, one long row a block of more threads, or
rows streamed a tile at a time). A ``T.Serial`` loop walks over the columns one
tile at a time: serial, because every step adds to the same accumulator, and
the steps must happen in order; a resident row is one tile, so one step. Inside
a step ``T.Parallel`` adds the tile element-wise into a float32 fragment of the
tile's shape, so every thread keeps its own partial sums in registers and no
thread waits on another; a streamed row's sums are compensated
(``_compensated.py``), as an element of a long row's fragment takes thousands of
terms. Only after the last
column tile does ``T.reduce_sum`` fold the fragment along the row (within a
thread, then across the row's threads), once per row instead of once per tile.

Out-of-range elements of a partial tile are loaded as 0, the identity of a
sum, so no extra mask is needed. The order of additions is fixed by the
tile shape, so a row's sum is bitwise the same from run to run.
"""

from __future__ import annotations

import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels._compensated import add_compensated, fold_compensation
from jax_camp.tilelang_kernels._rows import (
    ACCUM, RowTile, column_tiles, row_layout, row_tiles, vector_elements,
)


def reduce_sum_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """The row-sum kernel for ``dtype`` over an (M, N) buffer of any M, N, by ``tile``."""
    rows, cols = tile.rows, tile.cols
    vec = vector_elements(dtype)
    m, n = T.dynamic("M N", "int64")
    layout = row_layout(tile, dtype)

    @T.prim_func
    def reduce_sum(X: T.Tensor((m, n), dtype), Y: T.Tensor((m,), dtype)):
        with T.Kernel(T.ceildiv(m, rows), threads=tile.threads) as bx:
            if tile.aligned:
                T.assume(n % vec == 0)
            x_tile, acc = row_tiles(tile, dtype, ACCUM)
            total = T.alloc_fragment((rows,), ACCUM)
            # What a streamed row's running sums round away (_compensated.py); a resident row
            # adds each element once, and rounds nothing away to give back.
            lost = None if tile.resident else row_tiles(tile, ACCUM)[0]
            T.annotate_layout({t: layout for t in (x_tile, acc, lost) if t is not None})
            T.clear(acc)
            if not tile.resident:
                T.clear(lost)
            for kb in T.Serial(column_tiles(tile, n)):
                T.copy(X[bx * rows, kb * cols], x_tile)
                for i, j in T.Parallel(rows, cols):
                    if tile.resident:
                        acc[i, j] += T.cast(x_tile[i, j], ACCUM)
                    else:
                        add_compensated(acc, lost, i, j, T.cast(x_tile[i, j], ACCUM))
            if not tile.resident:
                fold_compensation(acc, lost, rows, cols)
            T.reduce_sum(acc, total, dim=1)
            for i in T.Parallel(rows):
                if bx * rows + i < m:
                    Y[bx * rows + i] = T.cast(total[i], dtype)

    return reduce_sum
