"""softmax, masked or not, and its backward, one block per ROWS rows, two passes per row.

Forward, online softmax. Pass 1 reads the row once, tile by tile, and keeps a
rolling log-sum-exp as two numbers: ``m``, the largest x seen so far, and
``s``, the sum of exp(x - m) over what was seen. When a new x raises the
maximum, the old sum is rescaled by exp(m_old - x) and x adds 1; otherwise x
adds exp(x - m). So one pass gives the normalizer a plain softmax needs two
passes for (max, then sum). Pass 2 reads the row again and writes
y = exp(x - m - log(s)).

Every element of the tile fragment keeps its own (m, s) pair across the
``T.Serial`` loop, so pass 1 needs no communication between threads at all;
the pairs are merged once per row at the end (``T.reduce_max`` for the row
maximum M, then ``T.reduce_sum`` of s * exp(m - M)), as reduce_sum folds its
accumulator once. Merging once per tile instead would cost two block-wide
reductions, with their barriers, per tile.

exp2 and log2 instead of exp and log: the GPU's special function unit
computes 2**t and log2(t) natively, and exp(t) is exp2(t * log2(e)) anyway, so
the kernel works in base 2 throughout. The difference x - m is formed first,
in the units of x, and only then scaled: for logits near 1e3, x * log2(e)
would already have lost the last digits that x - m keeps exactly.

Masking and special values, as jax.nn.softmax: out-of-range columns of a
partial tile load as 0, which is wrong for a maximum (a row of negative logits
would get max 0), so the kernel turns them into -inf and skips them, as it
skips real -inf entries (their term is 0; letting them in would compute
-inf - -inf = NaN). A row of -inf ends with s = 0 and pass 2 computes
-inf - -inf = NaN, jax's answer; a NaN or +inf entry makes s NaN, and the whole
row NaN, as in jax.

softmax(x, where=mask), the kernel ``softmax_masked``, takes a uint8 Mask
beside X, nonzero where an element takes part. Each pass reads the mask's tile
with X's, in X's layout, so a thread holds the mask bytes of its own elements
(on aligned rows in vectors too, of one byte per element of X's vector).
Pass 1 turns a masked-out element into -inf, as it does a column past the row's
end: it enters neither the max nor the sum, and a NaN or +inf there changes
nothing. Pass 2 stores 0 for it, jax's answer, whatever x - m and log2(s) would
give. So the kept elements come out as a row of them alone would (all -inf:
NaN, as in jax), and a fully masked row, which has no kept element and s = 0,
comes out all 0, never NaN.

Backward: dx = y * (g - sum(g * y)) along the row, from the forward's output
y and the incoming cotangent g. Pass 1 accumulates g * y element-wise into a
float32 fragment and reduces it once per row; pass 2 writes dx.

Both tile programs are written once, as builders that take the formulas of
single elements: ``row_softmax_program`` takes what pass 2 writes (and what
a masked-out element gets, for a masked kernel), and
``reduce_then_write_program`` the term pass 1 sums and what pass 2 writes.
log_softmax.py builds its forward and its two derivatives from them. Each
builder also takes the op's name and sets the prim_func's ``global_symbol`` to
it: ``T.prim_func`` would take it from the Python function's name, shared by
every op a builder serves, and TileLang names the CUDA kernel
``<global_symbol>_kernel``, the name the bridge and the tests look for.
"""

# No ``from __future__ import annotations`` here: TileLang evaluates a string
# annotation against the names the function's body uses, and the prim_funcs'
# signatures below name m_, n and dtype, which their bodies do not.
import math

import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels._rows import (
    ACCUM,
    ROWS,
    THREADS,
    columns,
    row_tiles,
    vector_elements,
    warp_per_row_layout,
)

LOG2E = math.log2(math.e)


def row_softmax_program(
    name: str, dtype: str, aligned: bool, write, masked_out: float | None = None
) -> tirx.PrimFunc:
    """The forward kernel ``name``: online softmax over (M, N) rows of any M, N, X to Y.

    Pass 2 stores ``write(shifted, log2_sum)`` for each element: its output
    in float32 from shifted = x - m and log2(s), its row's normalizer in base 2.
    With ``masked_out`` given the kernel is a masked one, X, Mask to Y: Mask is
    uint8, nonzero where an element takes part, and pass 2 stores
    ``masked_out`` for the elements it masks out.
    """
    masked = masked_out is not None
    cols = columns(dtype)
    vec = vector_elements(dtype)
    m_, n = T.dynamic("M N", "int64")
    neg_inf = -T.infinity(ACCUM)
    layout = warp_per_row_layout(dtype)

    # The body of both kernels, masked or not; Mask is None in the one without.
    @T.macro
    def online_softmax(X, Mask, Y):
        with T.Kernel(T.ceildiv(m_, ROWS), threads=THREADS) as bx:
            if aligned:
                T.assume(n % vec == 0)
            tile, x, lane_max, lane_sum, scaled, out = row_tiles(
                cols, dtype, ACCUM, ACCUM, ACCUM, ACCUM, dtype
            )
            row_max = T.alloc_fragment((ROWS,), ACCUM)
            row_sum = T.alloc_fragment((ROWS,), ACCUM)
            log2_sum = T.alloc_fragment((ROWS,), ACCUM)
            per_element = [tile, x, lane_max, lane_sum, scaled, out]
            if masked:
                keep = T.alloc_fragment((ROWS, cols), "uint8")
                per_element.append(keep)
            T.annotate_layout({t: layout for t in per_element})
            T.fill(lane_max, neg_inf)
            T.fill(lane_sum, 0.0)

            # Pass 1: each element's rolling (max, sum) pair, one exp2 per x.
            for kb in T.Serial(T.ceildiv(n, cols)):
                T.copy(X[bx * ROWS, kb * cols], tile)
                if masked:
                    T.copy(Mask[bx * ROWS, kb * cols], keep)
                for i, j in T.Parallel(ROWS, cols):
                    x[i, j] = T.if_then_else(kb * cols + j < n, T.cast(tile[i, j], ACCUM), neg_inf)
                    if masked:
                        # A masked-out element is skipped as a column past the row's end is.
                        x[i, j] = T.if_then_else(keep[i, j] != 0, x[i, j], neg_inf)
                for i, j in T.Parallel(ROWS, cols):
                    lane_sum[i, j] = T.if_then_else(
                        x[i, j] == neg_inf,
                        lane_sum[i, j],
                        T.if_then_else(
                            x[i, j] > lane_max[i, j],
                            lane_sum[i, j] * T.exp2((lane_max[i, j] - x[i, j]) * LOG2E) + 1.0,
                            lane_sum[i, j] + T.exp2((x[i, j] - lane_max[i, j]) * LOG2E),
                        ),
                    )
                    lane_max[i, j] = T.max(lane_max[i, j], x[i, j])

            # Merge the pairs of a row. A pair with s == 0 saw only -inf and
            # adds nothing (its m - M may be -inf - -inf); a NaN s must stay.
            T.reduce_max(lane_max, row_max, dim=1)
            for i, j in T.Parallel(ROWS, cols):
                scaled[i, j] = T.if_then_else(
                    lane_sum[i, j] == 0.0,
                    0.0,
                    lane_sum[i, j] * T.exp2((lane_max[i, j] - row_max[i]) * LOG2E),
                )
            T.reduce_sum(scaled, row_sum, dim=1)
            # A row of -inf ends with sum 0: log2 gives -inf and pass 2 then
            # computes -inf - -inf = NaN, jax's answer for it.
            for i in T.Parallel(ROWS):
                log2_sum[i] = T.log2(row_sum[i])

            # Pass 2: normalize. The second read mostly hits L2.
            for kb in T.Serial(T.ceildiv(n, cols)):
                T.copy(X[bx * ROWS, kb * cols], tile)
                if masked:
                    T.copy(Mask[bx * ROWS, kb * cols], keep)
                for i, j in T.Parallel(ROWS, cols):
                    out[i, j] = T.cast(
                        write(T.cast(tile[i, j], ACCUM) - row_max[i], log2_sum[i]), dtype
                    )
                    if masked:
                        # Whatever write() gave, the NaN of a fully masked row too.
                        out[i, j] = T.if_then_else(
                            keep[i, j] != 0, out[i, j], T.cast(masked_out, dtype)
                        )
                T.copy(out, Y[bx * ROWS, kb * cols])

    # A prim_func's parameters are its Python signature, so the two kernels
    # have a signature each, around the one body.
    if masked:

        @T.prim_func
        def row_softmax(
            X: T.Tensor((m_, n), dtype),
            Mask: T.Tensor((m_, n), "uint8"),
            Y: T.Tensor((m_, n), dtype),
        ):
            online_softmax(X, Mask, Y)

    else:

        @T.prim_func
        def row_softmax(X: T.Tensor((m_, n), dtype), Y: T.Tensor((m_, n), dtype)):
            online_softmax(X, None, Y)

    return row_softmax.with_attr("global_symbol", name)


def reduce_then_write_program(name: str, dtype: str, aligned: bool, term, output) -> tirx.PrimFunc:
    """A derivative kernel ``name``: one row sum of ``term``, then DX from ``output``.

    Yv is the forward's output and G the derivative coming in. ``term(y, g)``
    is an element's share of its row's sum and ``output(y, g, total)`` its
    result, all in float32. Out-of-range elements of a partial tile load as
    0 in both operands, so a term must be 0 where y and g both are: then they
    add nothing to the sum and need no mask.
    """
    cols = columns(dtype)
    vec = vector_elements(dtype)
    m_, n = T.dynamic("M N", "int64")
    layout = warp_per_row_layout(dtype)

    @T.prim_func
    def reduce_then_write(
        Yv: T.Tensor((m_, n), dtype), G: T.Tensor((m_, n), dtype), DX: T.Tensor((m_, n), dtype)
    ):
        with T.Kernel(T.ceildiv(m_, ROWS), threads=THREADS) as bx:
            if aligned:
                T.assume(n % vec == 0)
            y, g, acc, dx = row_tiles(cols, dtype, dtype, ACCUM, dtype)
            dot = T.alloc_fragment((ROWS,), ACCUM)
            T.annotate_layout({t: layout for t in (y, g, acc, dx)})
            T.clear(acc)

            # Pass 1: the row sum, element-wise partials in registers.
            for kb in T.Serial(T.ceildiv(n, cols)):
                T.copy(Yv[bx * ROWS, kb * cols], y)
                T.copy(G[bx * ROWS, kb * cols], g)
                for i, j in T.Parallel(ROWS, cols):
                    acc[i, j] += term(T.cast(y[i, j], ACCUM), T.cast(g[i, j], ACCUM))
            T.reduce_sum(acc, dot, dim=1)

            # Pass 2: each element's output from its y, its g and the row's sum.
            for kb in T.Serial(T.ceildiv(n, cols)):
                T.copy(Yv[bx * ROWS, kb * cols], y)
                T.copy(G[bx * ROWS, kb * cols], g)
                for i, j in T.Parallel(ROWS, cols):
                    dx[i, j] = T.cast(
                        output(T.cast(y[i, j], ACCUM), T.cast(g[i, j], ACCUM), dot[i]), dtype
                    )
                T.copy(dx, DX[bx * ROWS, kb * cols])

    return reduce_then_write.with_attr("global_symbol", name)


def normalized(shifted, log2_sum):
    """softmax's output exp(x - m) / s, from shifted = x - m and log2(s), in base 2."""
    return T.exp2(shifted * LOG2E - log2_sum)


def softmax_program(dtype: str, aligned: bool) -> tirx.PrimFunc:
    """The forward softmax kernel for ``dtype`` over (M, N) rows of any M, N."""
    return row_softmax_program("softmax", dtype, aligned, write=normalized)


def softmax_masked_program(dtype: str, aligned: bool) -> tirx.PrimFunc:
    """softmax(X, where=Mask): Mask is uint8, nonzero where an element takes part.

    The elements it masks out give 0, jax.nn.softmax's answer.
    """
    return row_softmax_program("softmax_masked", dtype, aligned, write=normalized, masked_out=0.0)


def softmax_backward_program(dtype: str, aligned: bool) -> tirx.PrimFunc:
    """The backward kernel: dX = Yv * (G - sum(G * Yv)) per row, from the forward's output Yv."""
    return reduce_then_write_program(
        "softmax_backward", dtype, aligned,
        term=lambda y, g: g * y,
        output=lambda y, g, dot: y * (g - dot),
    )
