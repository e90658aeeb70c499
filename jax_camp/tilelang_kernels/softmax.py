"""softmax, masked or not, and its backward: a row held in registers, or streamed twice.

Each kernel is built for one tile (``_rows.py``), picked from the row length
when a call is traced, and its code takes one of two shapes:

Resident rows (16-byte aligned, up to 32768 elements for the forwards,
softmax's backward and log_softmax's 16-bit backward, but log_softmax's 16-bit
masked forward, 16384 for the others: ``_rows.resident_limit``). The block's
tile is as wide as the row, so one ``T.copy`` brings the whole row into
registers, and everything after reads it there: ``T.reduce_max`` for the row
maximum m, ``T.reduce_sum`` of e = exp(x - m) for s, then each element's
y = e * (1/s) written back, from the e that pass 1 summed and kept. x is read
from memory once and y written once, the least any softmax can move, with one
exponential a value. A short row leaves a block room for several rows (8 rows
of 128), so that no thread is idle.

Row groups. A resident tile of 1024 threads (float32 rows of 16384, rows of
32768) fills its SM's registers alone, so while it reduces a row nothing on
that SM is loading: memory sits idle. Where a call has rows enough, such a
block takes 16 rows in turn in a ``T.Pipelined`` loop, each copied into shared
memory first: TileLang's software pipeline turns that copy into cp.async and
issues the next row's (the next two, where two fit) before the block works on
the current one, so the loads of one row overlap the reductions of the last.
``_rows.row_tile`` says which kernels gain, and from how many rows.

Rows held over a cluster (softmax's and log_softmax's aligned rows of up to
262144, with where= too but for log_softmax's in float32, on GPUs with
thread-block clusters; the mask's part loads beside x's). A row too long for
one block is split into parts of 32768 columns, one a block of a cluster, each
held as a resident tile: its own max m and sum s, exchanged with the cluster's
other blocks through distributed shared memory (``share_over_cluster``), give
every block the row's M and S, and its exponentials are rescaled by
exp(m - M). x is read once. The cluster's blocks take their rows in turn, each
block's part of the next row loading while the cluster pools this one's: as
many rows as make the grid one wave of the clusters the GPU holds at once,
since a cluster that starts only when another ends leaves SMs idle.

Streamed rows (longer, or short and unaligned), online softmax. Pass 1 reads
the row tile by tile and keeps a rolling log-sum-exp as two numbers: ``m``,
the largest x seen so far, and ``s``, the sum of exp(x - m) over what was seen.
When a new x raises the maximum, the old sum is rescaled by exp(m_old - x) and
x adds 1; otherwise x adds exp(x - m). Both factors are exp(-|x - m|), so one
exponential serves either case. So one pass gives the normalizer a plain
softmax needs two passes for (max, then sum). Pass 2 reads the row again and
writes y = exp(x - m) * (1/s).

Every element of the tile fragment keeps its own (m, s) pair across the
``T.Serial`` loop (s compensated, ``_compensated.py``: over a row of millions
an element's s takes thousands of terms), so pass 1 needs no communication
between threads at all;
the pairs are merged once per row at the end (``T.reduce_max`` for the row
maximum M, then ``T.reduce_sum`` of s * exp(m - M)), as reduce_sum folds its
accumulator once. Merging once per tile instead would cost two block-wide
reductions, with their barriers, per tile.

One fast exponential a value. The GPU's special function unit computes 2**t
natively (MUFU.EX2), and e**t is 2**(t * log2(e)): ``exp`` below is CUDA's
__expf, that one multiply and one ex2.approx, where an accurate expf takes
about ten instructions. For 16-bit inputs a softmax moves so few bytes a
value that a second exponential, or a slow one, costs as much time as the
memory does, so each value gets exactly one: pass 1's e is kept for pass 2
where the row stays in registers, and the log and the reciprocal of s are
taken once a row. The difference x - m is formed first, in the units of x,
and only then scaled: for logits near 1e3, x * log2(e) would already have
lost the last digits that x - m keeps exactly. x - m <= 0, so e never
overflows; an e below float32's normal range (x - m < -87) flushes to 0,
where the output would be below 1e-38 anyway.

Masking and special values, as jax.nn.softmax: out-of-range columns of a
partial tile load as 0, which is wrong for a maximum (a row of negative logits
would get max 0), so the kernel turns them into -inf and skips them, as it
skips real -inf entries (their term is 0; letting them in would compute
-inf - -inf = NaN). A row of -inf ends with s = 0 (streamed) or NaN
(resident: its maximum is -inf, and exp(-inf - -inf) is NaN), and pass 2
computes -inf - -inf = NaN, jax's answer; a NaN or +inf entry makes s NaN, and
the whole row NaN, as in jax.

softmax(x, where=mask), the kernel ``softmax_masked``, takes a bool Mask
beside X, true where an element takes part: JAX's own mask, one byte an element,
with no conversion pass before the kernel. Each pass reads the mask's tile
with X's, in X's layout, so a thread holds the mask bytes of its own elements
(on aligned rows in vectors too, of one byte per element of X's vector).
Pass 1 turns a masked-out element into -inf, as it does a column past the row's
end: it enters neither the max nor the sum, and a NaN or +inf there changes
nothing. It does so by arithmetic, x = min(x, +inf or -inf) with the bound
made from the mask byte, not by a select: a select compiles to one compare an
element, each holding one of a thread's seven predicate registers, and where a
thread holds more values than that, ptxas waits on each mask load to free
them before it issues the next load, so a row came in over several round
trips to memory. (min(NaN, +inf) is +inf, so a kept NaN becomes +inf: either
makes the whole row NaN, as in jax.) Pass 2 stores 0 for a masked-out element,
jax's answer, whatever e / s would give (a resident tile whose threads hold
many values reads the mask again there rather than hold a byte a value through
pass 1). So the kept elements come out as a row of them alone would (all -inf:
NaN, as in jax), and a fully masked row, which has no kept element and s = 0,
comes out all 0, never NaN.

Backward: dx = y * (g - sum(g * y)) along the row, from the forward's output
y and the incoming cotangent g: one row sum of g * y, then each element's dx,
by the derivative kernels' tile program (``reduce_then_write_program`` in
_row_derivative.py), given those two formulas.

The forward's tile program is written once, as a builder that takes the
formulas of single elements: ``row_softmax_program`` takes what pass 2 writes
(and what a masked-out element gets, for a masked kernel). log_softmax.py
builds its forward from it, and its two derivatives from
``reduce_then_write_program``. Each builder also takes the op's name and sets
the prim_func's ``global_symbol`` to it: ``T.prim_func`` would take it from the
Python function's name, shared by every op a builder serves, and TileLang names
the CUDA kernel ``<global_symbol>_kernel``, the name the bridge and the tests
look for.
"""

# No ``from __future__ import annotations`` here: TileLang evaluates a string
# annotation against the names the function's body uses, and the prim_funcs'
# signatures below name m_, n and dtype, which their bodies do not.
import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels._cluster import gather_over_cluster, start_cluster
from jax_camp.tilelang_kernels._compensated import add_compensated, fold_compensation
from jax_camp.tilelang_kernels._row_derivative import reduce_then_write_program
from jax_camp.tilelang_kernels._rows import (
    ACCUM, RowTile, column_tiles, prefetch_stages, row_extents, row_layout, row_tiles,
    vector_elements,
)


def exp(t):
    """e**t on the special function unit: CUDA's __expf, 2**(t * log2(e)) by ex2.approx."""
    return T.__exp(t)


LOWEST_FLOAT32 = -3.4028234663852886e38


@T.macro
def share_over_cluster(row_max, row_sum, rescale, mine, parts, slot, blocks, rank):
    """Pools the (max, sum) pair of each block's part of a row over the cluster.

    In: this block's part's ``row_max`` m and ``row_sum`` s = sum(exp(x - m)). Out: the
    whole row's M and S in them, and in ``rescale`` exp(m - M), which turns this part's
    exponentials into the row's (pass 2 takes it in with 1/S). The pairs travel through
    slot ``slot`` of every block's ``parts`` (``_cluster.gather_over_cluster``). A part of only
    -inf (or wholly past the row's end) comes with m the lowest float and s = 0, and adds
    nothing; a row of only -inf ends with S = 0, so 1/S is inf against exponentials of 0,
    and its outputs are NaN, jax's answer. The row's pair lives in these fragments, not
    in local variables: TileLang's pipeliner drops a loop body's local bindings from the
    last iteration it peels off.
    """
    mine[slot, 0] = row_max[0]  # every thread stores the same pair
    mine[slot, 1] = row_sum[0]
    gather_over_cluster(mine, parts, slot, blocks, rank, 2)
    for i in T.Parallel(1):
        rescale[i] = row_max[i]
        row_max[i] = -T.infinity(ACCUM)
        row_sum[i] = 0.0
    for b in T.serial(blocks):
        for i in T.Parallel(1):
            row_max[i] = T.max(row_max[i], parts[slot, b, 0])
    for b in T.serial(blocks):
        for i in T.Parallel(1):
            row_sum[i] += parts[slot, b, 1] * exp(parts[slot, b, 0] - row_max[i])
    for i in T.Parallel(1):
        rescale[i] = exp(rescale[i] - row_max[i])


@T.macro
def copy_in(source, fragment, shared):
    """A tile from memory into registers, through ``shared`` unless it is None: a tile
    taking row groups in turn stages its rows there, and its software pipeline makes that
    copy asynchronous."""
    if shared is None:
        T.copy(source, fragment)
    else:
        T.copy(source, shared)
        T.copy(shared, fragment)


# The most values a thread of a resident tile holds through pass 1 for a pass 2 that needs
# them again: x for log_softmax, the mask for a masked kernel. Past it (16-bit rows of 8192
# and more, rows of 32768: 32 values a thread) holding them beside pass 1's exponentials
# takes so many registers that fewer blocks fit an SM, and pass 2 reads them again instead,
# from L2, where pass 1 has just read them (``reads_again_for_pass_2``).
MAX_VALUES_HELD_FOR_PASS_2 = 16


def reads_again_for_pass_2(tile: RowTile) -> bool:
    """Whether a resident tile's pass 2 reads x (log_softmax) and the mask again rather than
    hold them through pass 1: where a thread has more than MAX_VALUES_HELD_FOR_PASS_2 values
    of a row, unless the tile takes row groups. Those are the tiles of 32768 columns alone on
    their SM whatever they hold (the 16-bit resident ones, and those held over a cluster), and
    holding ran faster there, where the float32 tile of 32768 without row groups ran slower
    holding x (docs/tilelang_design.md)."""
    return tile.values_per_thread > MAX_VALUES_HELD_FOR_PASS_2 and tile.row_groups == 1


def row_softmax_program(
    name: str, dtype: str, tile: RowTile, write, masked_out: float | None = None,
    write_needs_x: bool = False,
) -> tirx.PrimFunc:
    """The forward kernel ``name``: softmax over (M, N) rows of any M, N, X to Y, by ``tile``.

    Pass 2 stores ``write(shifted, e, log_sum, inv_sum)`` for each element:
    its output in float32 from shifted = x - m, e = exp(x - m), and its row's
    log(s) and 1/s (over a cluster, e is exp(x - m) of the block's part and
    1/s comes as exp(m_part - m) / s, their product the same e / s). A
    formula that ignores e costs no exponential; one that
    reads shifted says so with ``write_needs_x``, and a resident tile then
    holds x for it or reads it again (``reads_again_for_pass_2``), as it does
    a masked kernel's mask.
    With ``masked_out`` given the kernel is a masked one, X, Mask to Y: Mask is
    bool, true where an element takes part, and pass 2 stores
    ``masked_out`` for the elements it masks out.
    """
    masked = masked_out is not None
    rows, cols = tile.rows, tile.cols
    reads_again = reads_again_for_pass_2(tile)
    reread_resident_row = write_needs_x and reads_again
    reread_mask = masked and reads_again
    groups = tile.row_groups
    vec = vector_elements(dtype)
    m_, n = row_extents(tile)
    neg_inf = -T.infinity(ACCUM)
    layout = row_layout(tile, dtype)

    # Tile kb of the rows from row0 on into x_tile (and keep), through shared memory where
    # given, and into x in float32, with -inf where an element is to be skipped: a column
    # past the row's end, whose 0 would be wrong for a maximum, or a masked-out element.
    @T.macro
    def load(X, Mask, row0, kb, x_tile, keep, x, x_shared=None, keep_shared=None):
        copy_in(X[row0, kb * cols], x_tile, x_shared)
        if masked:
            copy_in(Mask[row0, kb * cols], keep, keep_shared)
        for i, j in T.Parallel(rows, cols):
            x[i, j] = T.if_then_else(kb * cols + j < n, T.cast(x_tile[i, j], ACCUM), neg_inf)
            if masked:
                # +inf for a kept element, -inf for a masked-out one: no compare (docstring).
                bound = (2.0 * T.cast(keep[i, j], ACCUM) - 1.0) * T.infinity(ACCUM)
                x[i, j] = T.min(x[i, j], bound)

    # Pass 2 on tile kb, loaded into x (and keep): each element's output, stored to Y. A
    # resident row passes the exponentials pass 1 kept in ``kept_exp``; a streamed one None.
    @T.macro
    def normalize(Y, row0, kb, x, kept_exp, keep, row_max, log_sum, inv_sum, out):
        for i, j in T.Parallel(rows, cols):
            if kept_exp is None:
                out[i, j] = T.cast(
                    write(x[i, j] - row_max[i], exp(x[i, j] - row_max[i]), log_sum[i], inv_sum[i]),
                    dtype,
                )
            else:
                out[i, j] = T.cast(
                    write(x[i, j] - row_max[i], kept_exp[i, j], log_sum[i], inv_sum[i]), dtype
                )
            if masked:
                # Whatever write() gave, the NaN of a fully masked row too.
                out[i, j] = T.if_then_else(keep[i, j] != 0, out[i, j], T.cast(masked_out, dtype))
        T.copy(out, Y[row0, kb * cols])

    # One group of ``rows`` rows from row0 on, the whole row: its statistics, then its outputs.
    # x_shared (and keep_shared) are where a tile taking row groups in turn stages its loads.
    # A block of a cluster holds part ``rank`` of the row (its tile ``rank``) and pools its
    # statistics in slot ``slot`` of ``parts``.
    @T.macro
    def softmax_row_group(X, Mask, Y, row0, x_tile, x, scaled, out, lane_max, lane_sum,
                          lane_lost, keep,
                          row_max, row_sum, log_sum, inv_sum, rescale, mine, parts,
                          x_shared, keep_shared, rank, slot):
        if tile.resident:
            # The row (or the block's part of it) is one tile: its maximum, then the sum of
            # exp(x - max), whose terms stay in ``scaled`` for pass 2.
            load(X, Mask, row0, rank, x_tile, keep, x, x_shared, keep_shared)
            T.reduce_max(x, row_max, dim=1)
            if tile.cluster > 1:
                # A part of only -inf takes the lowest float as its max, so that its
                # exponentials are 0, not exp(-inf + inf) = NaN.
                for i in T.Parallel(rows):
                    row_max[i] = T.max(row_max[i], LOWEST_FLOAT32)
            for i, j in T.Parallel(rows, cols):
                scaled[i, j] = exp(x[i, j] - row_max[i])
            T.reduce_sum(scaled, row_sum, dim=1)
            if tile.cluster > 1:
                share_over_cluster(row_max, row_sum, rescale, mine, parts, slot, tile.cluster,
                                   rank)
        else:
            # Pass 1: each element's rolling (max, sum) pair, the sum compensated
            # (_compensated.py). Either update takes exp(-|x - m|), so one exponential a
            # value serves both: a larger x rescales the sum to itself and adds its own
            # exp, 1; a smaller one adds its exp; -inf adds nothing.
            T.fill(lane_max, neg_inf)
            T.clear(lane_sum)
            T.clear(lane_lost)
            for kb in T.Serial(column_tiles(tile, n)):
                load(X, Mask, row0, kb, x_tile, keep, x)
                for i, j in T.Parallel(rows, cols):
                    scaled[i, j] = exp(-T.abs(x[i, j] - lane_max[i, j]))
                    grows = x[i, j] > lane_max[i, j]
                    factor = T.if_then_else(grows, scaled[i, j], 1.0)
                    lane_sum[i, j] = lane_sum[i, j] * factor
                    lane_lost[i, j] = lane_lost[i, j] * factor
                    add_compensated(lane_sum, lane_lost, i, j, T.if_then_else(
                        x[i, j] == neg_inf, 0.0, T.if_then_else(grows, 1.0, scaled[i, j])))
                    lane_max[i, j] = T.max(lane_max[i, j], x[i, j])
            fold_compensation(lane_sum, lane_lost, rows, cols)
            # Merge the pairs of a row. A pair with s == 0 saw only -inf and
            # adds nothing (its m - M may be -inf - -inf); a NaN s must stay.
            T.reduce_max(lane_max, row_max, dim=1)
            for i, j in T.Parallel(rows, cols):
                scaled[i, j] = T.if_then_else(
                    lane_sum[i, j] == 0.0,
                    0.0,
                    lane_sum[i, j] * exp(lane_max[i, j] - row_max[i]),
                )
            T.reduce_sum(scaled, row_sum, dim=1)
        # A row of -inf ends with sum 0 (or, resident, NaN): pass 2 then computes
        # -inf - -inf = NaN, jax's answer for it.
        for i in T.Parallel(rows):
            log_sum[i] = T.log(row_sum[i])
            # Over a cluster the exponentials are the part's, exp(x - m): 1/S takes the rescale
            # exp(m - M) in, so that e * inv_sum is the row's exp(x - M) / S all the same.
            inv_sum[i] = (rescale[i] if tile.cluster > 1 else 1.0) / row_sum[i]

        if tile.resident:
            # What pass 2 reads again comes from memory (L2), where pass 1 has just read it.
            if reread_resident_row:
                load(X, Mask, row0, rank, x_tile, keep, x)
            elif reread_mask:
                T.copy(Mask[row0, rank * cols], keep)
            normalize(Y, row0, rank, x, scaled, keep, row_max, log_sum, inv_sum, out)
        else:
            # Pass 2 reads the row again.
            for kb in T.Serial(column_tiles(tile, n)):
                load(X, Mask, row0, kb, x_tile, keep, x)
                normalize(Y, row0, kb, x, None, keep, row_max, log_sum, inv_sum, out)

    # The body of both kernels, masked or not; Mask is None in the one without.
    @T.macro
    def softmax_rows(X, Mask, Y):
        blocks = tile.cluster
        with T.Kernel(T.ceildiv(m_, rows * groups) * blocks, threads=tile.threads,
                      cluster_dims=blocks if blocks > 1 else None) as bx:
            if tile.blocks_per_sm > 1:
                T.annotate_min_blocks_per_sm(tile.blocks_per_sm)
            if tile.aligned:
                T.assume(n % vec == 0)
            x_tile, x, scaled, out = row_tiles(tile, dtype, ACCUM, ACCUM, dtype)
            row_max = T.alloc_fragment((rows,), ACCUM)
            row_sum = T.alloc_fragment((rows,), ACCUM)
            log_sum = T.alloc_fragment((rows,), ACCUM)
            inv_sum = T.alloc_fragment((rows,), ACCUM)
            per_element = [x_tile, x, scaled, out]
            lane_max = lane_sum = lane_lost = None
            if not tile.resident:
                # The streamed rows' per-element (max, sum) pairs, and what the sums round away.
                lane_max, lane_sum, lane_lost = row_tiles(tile, ACCUM, ACCUM, ACCUM)
                per_element += [lane_max, lane_sum, lane_lost]
            keep = None
            if masked:
                (keep,) = row_tiles(tile, "uint8")
                per_element.append(keep)
            T.annotate_layout({t: layout for t in per_element})
            rescale = mine = parts = None
            if blocks > 1:
                # Each block's (max, sum) pair, and the cluster's, in two slots by row parity.
                rescale = T.alloc_fragment((rows,), ACCUM)
                mine = T.alloc_shared((2, 2), ACCUM)
                parts = T.alloc_shared((2, blocks, 2), ACCUM)
                start_cluster(parts)
            state = (x_tile, x, scaled, out, lane_max, lane_sum, lane_lost, keep,
                     row_max, row_sum, log_sum, inv_sum, rescale, mine, parts)
            # A cluster's blocks take the same rows, a part each.
            first_group = (bx // blocks if blocks > 1 else bx) * groups
            rank = bx % blocks if blocks > 1 else 0

            if groups == 1:
                softmax_row_group(X, Mask, Y, first_group * rows, *state, None, None, rank, 0)
            else:
                # The block's row groups in turn, each group's rows copied into shared memory
                # (cp.async) while the block works on the group before.
                x_shared = T.alloc_shared((rows, cols), dtype)
                keep_shared = T.alloc_shared((rows, cols), "uint8") if masked else None
                stages = prefetch_stages(tile, dtype, name)
                for group in T.Pipelined(groups, num_stages=stages):
                    softmax_row_group(X, Mask, Y, (first_group + group) * rows, *state,
                                      x_shared, keep_shared, rank, group % 2)

    # A prim_func's parameters are its Python signature, so the two kernels
    # have a signature each, around the one body. The mask is declared bool, so that
    # the argument check takes JAX's bool array, and read through a uint8 view of its
    # bytes: TileLang's CUDA code has vectors of 8 bytes, but none of 8 bools.
    if masked:

        @T.prim_func
        def row_softmax(
            X: T.Tensor((m_, n), dtype),
            Mask: T.Tensor((m_, n), "bool"),
            Y: T.Tensor((m_, n), dtype),
        ):
            softmax_rows(X, T.view(Mask, dtype="uint8"), Y)

    else:

        @T.prim_func
        def row_softmax(X: T.Tensor((m_, n), dtype), Y: T.Tensor((m_, n), dtype)):
            softmax_rows(X, None, Y)

    return row_softmax.with_attr("global_symbol", name)


def normalized(shifted, e, log_sum, inv_sum):
    """softmax's output exp(x - m) / s: e times the row's 1/s."""
    return e * inv_sum


def softmax_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """The forward softmax kernel for ``dtype`` over (M, N) rows of any M, N."""
    return row_softmax_program("softmax", dtype, tile, write=normalized)


def softmax_masked_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """softmax(X, where=Mask): Mask is bool, true where an element takes part.

    The elements it masks out give 0, jax.nn.softmax's answer.
    """
    return row_softmax_program("softmax_masked", dtype, tile, write=normalized, masked_out=0.0)


def softmax_backward_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """The backward kernel: dX = Yv * (G - sum(G * Yv)) per row, from the forward's output Yv."""
    return reduce_then_write_program(
        "softmax_backward", dtype, tile,
        term=lambda y, g: g * y,
        output=lambda y, g, dot: y * (g - dot),
    )
