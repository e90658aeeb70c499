"""reduce_sum: Y[r] = sum over c of X[r, c], accumulated in float32.

Each block owns ``tile.rows`` rows (``_rows.py`` picks the tile from the row
length: many short rows a block, one long row a block of more threads, or
rows streamed a tile at a time). A ``T.Serial`` loop walks over the columns one
tile at a time: serial, because every step adds to the same accumulator, and
the steps must happen in order; a resident row is one tile, so one step. Inside
a step ``T.Parallel`` adds the tile element-wise into a float32 fragment of the
tile's shape, so every thread keeps its own partial sums in registers and no
thread waits on another. A streamed row's sums are compensated
(``_compensated.py``), as an element of a long row's fragment takes thousands of
terms: a 16-bit row's tiles are added plainly a few at a time (``compensate_every``)
into a fragment of their own, and that fragment into the running sums with
compensation. Only after
the last column tile does ``T.reduce_sum`` fold the fragment along the row
(within a thread, then across the row's threads), once per row instead of once
per tile.

Out-of-range elements of a partial tile are loaded as 0, the identity of a
sum, so no extra mask is needed. The order of additions is fixed by the
tile shape, so a row's sum is bitwise the same from run to run.
"""

from __future__ import annotations

import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels._compensated import add_compensated, fold_compensation
from jax_camp.tilelang_kernels._rows import (
    ACCUM, ITEMSIZE, RowTile, column_tiles, row_extents, row_layout, row_tiles,
    vector_elements,
)

# A sum of a few tiles rounds away next to nothing, so a streamed 16-bit row compensates once
# for this many: the compensation's four additions and select an element, taken every tile of
# twice a float32 tile's elements, kept the 16-bit tile issuing instructions rather than waiting
# on memory. A float32 tile so chunked holds more of its loads in flight than two blocks an SM
# have registers for, and compensates every tile.
SIXTEEN_BIT_COMPENSATE_EVERY = 8


def compensate_every(dtype: str) -> int:
    """The tiles a streamed row of ``dtype`` adds plainly before each compensated addition."""
    return SIXTEEN_BIT_COMPENSATE_EVERY if ITEMSIZE[dtype] == 2 else 1


def reduce_sum_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """The row-sum kernel for ``dtype`` over an (M, N) buffer of any M, N, by ``tile``."""
    rows, cols = tile.rows, tile.cols
    vec = vector_elements(dtype)
    m, n = row_extents(tile)
    layout = row_layout(tile, dtype)
    every = compensate_every(dtype)

    @T.macro
    def add_tiles(X, x_tile, into, bx, first, count):
        """``into`` += the ``count`` column tiles of block ``bx``'s rows from tile ``first``."""
        for k in T.Serial(count):
            T.copy(X[bx * rows, (first + k) * cols], x_tile)
            for i, j in T.Parallel(rows, cols):
                into[i, j] += T.cast(x_tile[i, j], ACCUM)

    @T.prim_func
    def reduce_sum(X: T.Tensor((m, n), dtype), Y: T.Tensor((m,), dtype)):
        with T.Kernel(T.ceildiv(m, rows), threads=tile.threads) as bx:
            if tile.aligned:
                T.assume(n % vec == 0)
            x_tile, acc = row_tiles(tile, dtype, ACCUM)
            total = T.alloc_fragment((rows,), ACCUM)
            # A streamed row's tiles since the last compensation, and what its running sums
            # round away (_compensated.py); a resident row adds each element once, and rounds
            # nothing away to give back.
            part, lost = (None, None) if tile.resident else row_tiles(tile, ACCUM, ACCUM)
            T.annotate_layout({t: layout for t in (x_tile, acc, part, lost) if t is not None})
            T.clear(acc)
            if tile.resident:
                add_tiles(X, x_tile, acc, bx, 0, 1)
            else:
                T.clear(lost)
                tiles = column_tiles(tile, n)
                for c in T.Serial(T.ceildiv(tiles, every)):
                    T.clear(part)
                    add_tiles(X, x_tile, part, bx, c * every, T.min(every, tiles - c * every))
                    for i, j in T.Parallel(rows, cols):
                        add_compensated(acc, lost, i, j, part[i, j])
                fold_compensation(acc, lost, rows, cols)
            T.reduce_sum(acc, total, dim=1)
            for i in T.Parallel(rows):
                if bx * rows + i < m:
                    Y[bx * rows + i] = T.cast(total[i], dtype)

    return reduce_sum
