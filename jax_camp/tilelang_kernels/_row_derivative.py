"""The derivative kernels' tile program: one row sum, then each element's output.

softmax's backward, and log_softmax's backward and tangent (forward mode), are
each a row sum followed by a pass that writes every element from its two
operands and that sum:

    softmax backward:      dx  = y * (g - sum(g * y))
    log_softmax backward:  dx  = g - exp(y) * sum(g)
    log_softmax tangent:   out = t - sum(exp(y) * t)

``reduce_then_write_program`` builds that program once, from the formula of
an element's share of the sum (``term``) and of its output (``output``); the
op modules (softmax.py, log_softmax.py) give the formulas. Both operands are
the forward's output y and the derivative coming in, so nothing of the
forward is recomputed.

The row is covered by the tile ``_rows.row_tile`` picks, as the forwards'
rows are. Pass 1 accumulates the terms element-wise into a float32 fragment
(compensated where the row is streamed, ``_compensated.py``) and reduces it
once per row; pass 2 writes each output, from the registers pass 1 loaded for
a resident row, reading y and g again for a streamed one.
A long float32 row held over a cluster adds its blocks' sums through
distributed shared memory (``_cluster.sum_over_cluster``), and its blocks
take their rows in turn, as the forwards' do.
"""

# No ``from __future__ import annotations`` here: TileLang evaluates a string
# annotation against the names the function's body uses, and the prim_func's
# signature below names m_, n and dtype, which its body does not.
import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels._cluster import start_cluster, sum_over_cluster
from jax_camp.tilelang_kernels._compensated import add_compensated, fold_compensation
from jax_camp.tilelang_kernels._rows import (
    ACCUM, RowTile, column_tiles, row_extents, row_layout, row_tiles, vector_elements,
)


def reduce_then_write_program(name: str, dtype: str, tile: RowTile, term, output) -> tirx.PrimFunc:
    """A derivative kernel ``name``: one row sum of ``term``, then DX from ``output``.

    Yv is the forward's output and G the derivative coming in. ``term(y, g)``
    is an element's share of its row's sum and ``output(y, g, total)`` its
    result, all in float32. Out-of-range elements of a partial tile load as
    0 in both operands, so a term must be 0 where y and g both are: then they
    add nothing to the sum and need no mask. A row held over a cluster adds its
    blocks' sums (``sum_over_cluster``); its blocks take ``tile.row_groups`` rows
    in turn. Those rows' y and g are not staged in shared memory as the forwards'
    x is: in float32, the one dtype held over a cluster here, one part of both
    takes 256 KB, more than a block has.
    """
    rows, cols = tile.rows, tile.cols
    groups, blocks = tile.row_groups, tile.cluster
    vec = vector_elements(dtype)
    m_, n = row_extents(tile)
    layout = row_layout(tile, dtype)

    # One group of ``rows`` rows from row0 on: the row sum, then the outputs. A block of a
    # cluster takes part ``rank`` of the row (its column tile ``rank``) and pools its sum in
    # slot ``slot`` of ``parts``.
    @T.macro
    def derivative_row_group(Yv, G, DX, row0, y, g, acc, lost, dx, total, mine, parts, rank,
                             slot):
        # Pass 1: the row sum, element-wise partials in registers. A resident row (or part)
        # is one tile, whose partials are its terms.
        if tile.resident:
            T.copy(Yv[row0, rank * cols], y)
            T.copy(G[row0, rank * cols], g)
            for i, j in T.Parallel(rows, cols):
                acc[i, j] = term(T.cast(y[i, j], ACCUM), T.cast(g[i, j], ACCUM))
        else:
            T.clear(acc)
            T.clear(lost)
            for kb in T.Serial(column_tiles(tile, n)):
                T.copy(Yv[row0, kb * cols], y)
                T.copy(G[row0, kb * cols], g)
                for i, j in T.Parallel(rows, cols):
                    add_compensated(acc, lost, i, j,
                                    term(T.cast(y[i, j], ACCUM), T.cast(g[i, j], ACCUM)))
            fold_compensation(acc, lost, rows, cols)
        T.reduce_sum(acc, total, dim=1)
        if blocks > 1:
            sum_over_cluster(total, mine, parts, slot, blocks, rank)

        # Pass 2: each element's output from its y, its g and the row's sum;
        # a resident row's y and g are still in registers, a streamed one is read again.
        for kb in T.Serial(column_tiles(tile, n)):
            if not tile.resident:
                T.copy(Yv[row0, kb * cols], y)
                T.copy(G[row0, kb * cols], g)
            for i, j in T.Parallel(rows, cols):
                dx[i, j] = T.cast(
                    output(T.cast(y[i, j], ACCUM), T.cast(g[i, j], ACCUM), total[i]), dtype
                )
            T.copy(dx, DX[row0, (rank + kb) * cols])

    @T.prim_func
    def reduce_then_write(
        Yv: T.Tensor((m_, n), dtype), G: T.Tensor((m_, n), dtype), DX: T.Tensor((m_, n), dtype)
    ):
        with T.Kernel(T.ceildiv(m_, rows * groups) * blocks, threads=tile.threads,
                      cluster_dims=blocks if blocks > 1 else None) as bx:
            if tile.aligned:
                T.assume(n % vec == 0)
            y, g, acc, dx = row_tiles(tile, dtype, dtype, ACCUM, dtype)
            total = T.alloc_fragment((rows,), ACCUM)
            # What a streamed row's running sums round away (_compensated.py).
            lost = None if tile.resident else row_tiles(tile, ACCUM)[0]
            T.annotate_layout({t: layout for t in (y, g, acc, dx, lost) if t is not None})
            mine = parts = None
            if blocks > 1:
                mine = T.alloc_shared((2, 1), ACCUM)
                parts = T.alloc_shared((2, blocks, 1), ACCUM)
                start_cluster(parts)
            # A cluster's blocks take the same rows, a part each.
            first_group, rank = bx // blocks * groups, bx % blocks
            for group in T.serial(groups):
                derivative_row_group(Yv, G, DX, (first_group + group) * rows, y, g, acc, lost,
                                     dx, total, mine, parts, rank, group % 2)

    return reduce_then_write.with_attr("global_symbol", name)
