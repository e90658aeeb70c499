"""How the row kernels (reduce_sum, softmax, log_softmax) cover their rows: one RowTile a compile.

A block owns ``rows`` rows and takes them ``cols`` columns, one tile, at a time. The bridge
picks the tile from the row length N when it traces a call (``row_tile``), so each tile shape
is one compile, which serves every N it is picked for:

- **Resident** rows, N up to the kernel's resident limit on 16-byte aligned rows: the tile is
  as wide as the row (the power of two at or above N, at least MIN_RESIDENT_COLS), so a block
  reads a row from memory once and keeps it in registers for every pass a kernel makes. Each
  thread holds a few 16-byte vectors of it: short rows give a block up to 8 rows, long ones
  more threads, up to MAX_THREADS, and past that more vectors a thread.
- **Row groups**: a resident tile of MAX_THREADS threads has its SM to itself, and with
  rows enough (ROW_GROUPS x ROW_GROUPS_MIN_BLOCKS) a block takes ROW_GROUPS rows in turn,
  loading the next through shared memory while it works on the current one, in the kernels
  that gain by it (ROW_GROUP_KERNELS).
- **Long** rows, past the resident limit: a block of LONG_ROW_THREADS threads a row, walked in
  tiles of 2 vectors of 16 bytes a thread, or 1 (``long_row_vectors``), some compiled for two
  blocks an SM (``long_row_blocks_per_sm``); a kernel that needs a second pass reads the row
  again.
- **Held over a cluster**, long aligned rows in the kernels that gain (CLUSTER_KERNELS), on a
  GPU with thread-block clusters: the fewest blocks (``cluster_blocks``) of a resident tile of
  CLUSTER_PART_COLS columns each hold a part of the row, read once, and pool their parts'
  (max, sum) through distributed shared memory; each block takes its rows in turn, as
  resident tiles do, as many as make the grid one wave of the clusters the GPU keeps resident
  (``wave_row_groups``). Only where the parts are mostly full.
- **Short unaligned** rows: 4 rows a block of 128 threads, a warp a row, walked in tiles of a
  warp's 32 lanes x 2 vectors, with element-wise loads.
- **Exact width**: a resident tile as wide as its rows, or a cluster whose parts end where its
  rows do, is compiled for that width (``with_exact_width``, ``row_extents``). Any other tile
  takes N as a TileLang dynamic size, so one compile serves every N it is picked for, and
  checks each column against the row's end: a compare and a select a value, which TileLang
  drops where it knows N.

The resident limit (``resident_limit``) is RESIDENT_LIMIT for most kernels. The unmasked
forwards, softmax and log_softmax, hold nothing of a row beside its values, so rows of up to
WIDE_RESIDENT_LIMIT still fit one block's registers without a spill, at 32 values a thread;
reading such a row once outweighs the one block an SM that leaves. So does softmax's masked
forward (whose tile reads the mask again for pass 2 unless it takes row groups), and
log_softmax's in float32 (reading x and the mask again for pass 2, yet faster than the
long-row tile), and the backward kernels, whose y and g held spill a little but are
read once rather than twice, softmax's in every dtype and log_softmax's in the 16-bit ones
(WIDE_RESIDENT_KERNELS). The other kernels that hold a mask or a second operand beside a row
spill more, or ran slower than the long-row tile there, and reduce_sum reads a row once either
way.

``aligned`` is a compile-time promise that every row starts on a 16-byte boundary
(N * itemsize % 16 == 0), made through ``T.assume``: with it TileLang masks whole vectors at
the row end and loads 128 bits at a time; without it a dynamic N could put a row start
anywhere, so it loads element by element (still coalesced). The bridge knows N when it traces
the call, so the promise is never broken.
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple

from jax_camp import registration

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
ACCUM = "float32"

MIN_RESIDENT_COLS = 128
RESIDENT_LIMIT = 16384
WIDE_RESIDENT_LIMIT = 32768
# The kernels that hold rows of up to WIDE_RESIDENT_LIMIT, and the dtypes they do it in.
WIDE_RESIDENT_KERNELS = {"softmax": tuple(ITEMSIZE), "log_softmax": tuple(ITEMSIZE),
                         "softmax_masked": tuple(ITEMSIZE),
                         "log_softmax_masked": ("float32",),
                         "softmax_backward": tuple(ITEMSIZE),
                         "log_softmax_backward": ("bfloat16", "float16")}
LONG_ROW_THREADS = 512
# Long 16-bit rows in these kernels take one vector a thread a tile, not two: the tile takes
# fewer registers, so two blocks share an SM (three in softmax's backward) and hide more of the
# memory's latency. But for rows of ROW_BYTES_KEPT_IN_L2 bytes (more than the first, at most
# the second), where the rows in flight of one block an SM stay in L2 for pass 2's re-read and
# those of two blocks do not. reduce_sum reads a row once, so nothing of it is read again from
# L2, and its 16-bit tile, which holds the tiles added since its last compensation beside its
# running sums, takes one vector at every length (READ_ONCE_KERNELS): with two, one block an SM.
# The float32 tiles and the other kernels keep two vectors.
ONE_VECTOR_KERNELS = ("softmax", "log_softmax", "softmax_backward", "reduce_sum")
READ_ONCE_KERNELS = ("reduce_sum",)
ROW_BYTES_KEPT_IN_L2 = (96 * 1024, 192 * 1024)
# Long aligned 16-bit rows in these kernels keep two vectors a thread a tile, but ptxas is asked
# to fit two blocks an SM (RowTile.blocks_per_sm): left alone it gives their tile a few registers
# a thread past the 64 at which two blocks of 512 threads share an SM's 65536, so one block an SM.
# Held to 64, the tile spills a little since the streamed sums are compensated
# (docs/tilelang_design_long_rows.md). But for rows of ROW_BYTES_KEPT_IN_L2 bytes, as above.
TWO_BLOCK_KERNELS = ("softmax_masked", "log_softmax_masked")
SHORT_ROWS, SHORT_ROW_THREADS = 4, 128

# How a resident tile spreads its rows over threads: each thread holds up to
# VECTORS_PER_THREAD 16-byte vectors of a row (MORE_VECTORS_PER_THREAD from
# MORE_VECTORS_FROM_COLS columns on, so that a long row takes fewer threads), a block
# has MIN_THREADS to MAX_THREADS threads (a thread holds more vectors of a row that would
# need more) and holds at most MAX_ROWS rows.
VECTORS_PER_THREAD = 2
MORE_VECTORS_PER_THREAD, MORE_VECTORS_FROM_COLS = 4, 8192
MIN_THREADS, MAX_THREADS = 128, 1024
MAX_ROWS = 8
# Row groups (RowTile.row_groups): a resident tile of MAX_THREADS threads fills its SM's
# registers alone, so nothing else there overlaps its loads with its reductions; a block of
# such a tile takes ROW_GROUPS groups of rows in turn, loading the next into shared memory
# (SHARED_MEMORY_BYTES of it at most, under the H200's 227 KB a block with room for the
# reductions' scratch) while it works on the current one. Only where a call has rows enough
# for ROW_GROUPS_MIN_BLOCKS such blocks: fewer rows go one group a block, over more SMs. The
# kernels that take them (the forwards), by the fewest groups in flight at which they gain:
# softmax with one; the others, with one in flight, ran no faster than a row a block.
ROW_GROUPS, ROW_GROUPS_MIN_BLOCKS = 16, 128
SHARED_MEMORY_BYTES = 192 * 1024
ROW_GROUP_KERNELS = {"softmax": 1, "log_softmax": 2, "softmax_masked": 2, "log_softmax_masked": 2}
# Long aligned rows held over a thread-block cluster: up to MAX_CLUSTER blocks, each holding
# CLUSTER_PART_COLS columns as a resident tile, so the row is read once.
# Its blocks take their rows in turn, the next row's part loading while the cluster pools
# the current one's (max, sum), as many rows as make its grid one wave of resident clusters,
# rounded up to WAVE_GROUPS_BITS significant bits so that one compile serves row counts a few
# percent apart; a grid of more clusters would run a last, partial wave. With parts less than
# CLUSTER_MIN_FILL full on average, a cluster is slower than a block streaming its row. The
# kernels that gain, by dtype: softmax's backward in float32 only, since in 16-bit types its
# cluster tile ran slower than the streamed one (docs/tilelang.md); log_softmax's masked
# forward in the 16-bit types only, since its float32 part held beside the mask spills more
# than softmax's and ran slower than the streamed tile over 8 blocks.
CLUSTER_PART_COLS = 32768
# The threads of a block holding a part: a float32 part takes MAX_THREADS, 32 values a thread;
# a 16-bit one half as many, 64 values a thread. Each block is alone on its SM either way, and
# every thread of it takes part in each row's block-wide reductions and in pooling the
# cluster's (max, sum) pairs, so half the threads do that work once for twice the values.
CLUSTER_PART_THREADS = {"float32": MAX_THREADS, "bfloat16": MAX_THREADS // 2,
                        "float16": MAX_THREADS // 2}
CLUSTER_SIZES = (2, 4, 8)
MAX_CLUSTER = CLUSTER_SIZES[-1]
CLUSTER_MIN_FILL = 0.75
WAVE_GROUPS_BITS = 6
CLUSTER_KERNELS = {"softmax": tuple(ITEMSIZE), "log_softmax": tuple(ITEMSIZE),
                   "softmax_masked": tuple(ITEMSIZE),
                   "log_softmax_masked": ("bfloat16", "float16"),
                   "softmax_backward": ("float32",)}


def vector_elements(dtype: str) -> int:
    """Elements in one 16-byte vector."""
    return 16 // ITEMSIZE[dtype]


def is_aligned(n: int, dtype: str) -> bool:
    """Whether rows of n elements all start on a 16-byte boundary."""
    return n % vector_elements(dtype) == 0


class RowTile(NamedTuple):
    """One configuration of a row kernel: its block covers ``rows`` x ``cols`` at a time."""

    rows: int
    cols: int
    threads: int
    resident: bool  # a row is one tile: read once, kept in registers
    aligned: bool   # rows start on 16-byte boundaries
    # A block takes this many groups of ``rows`` rows in turn, each loaded into shared
    # memory while it works on the group before (resident tiles only).
    row_groups: int = 1
    # A cluster of this many blocks holds each row, ``cols`` columns a block (resident only).
    cluster: int = 1
    # ptxas caps a thread's registers so that this many blocks fit an SM (streamed only).
    blocks_per_sm: int = 1
    # Every row is exactly ``cols`` x ``cluster`` wide, a width compiled into the kernel, so that
    # no column is checked against the row's end (resident only; ``with_exact_width``).
    exact: bool = False

    @property
    def name(self) -> str:
        """The configuration in an FFI target's name, e.g. "resident_8x128_128t"."""
        kind = "resident" if self.resident else "streamed"
        alignment = "" if self.resident or not self.aligned else "_aligned"
        groups = f"_{self.row_groups}groups" if self.row_groups > 1 else ""
        cluster = f"_cluster{self.cluster}" if self.cluster > 1 else ""
        per_sm = f"_{self.blocks_per_sm}blocks_per_sm" if self.blocks_per_sm > 1 else ""
        exact = "_exact" if self.exact else ""
        return (f"{kind}_{self.rows}x{self.cols}_{self.threads}t{alignment}{cluster}{groups}"
                f"{per_sm}{exact}")

    @property
    def values_per_thread(self) -> int:
        """The elements of a tile each thread holds (``row_layout`` deals them evenly)."""
        return self.rows * self.cols // self.threads


def streamed_tile(dtype: str, aligned: bool, threads: int, rows: int,
                  vectors: int = 2) -> RowTile:
    """Rows walked a tile at a time, each thread ``vectors`` vectors of 16 bytes a tile."""
    cols = threads // rows * vectors * vector_elements(dtype)
    return RowTile(rows, cols, threads, False, aligned)


def takes_clusters(op: str, dtype: str) -> bool:
    """Whether ``op``'s kernel holds some long rows of ``dtype`` over a cluster
    (CLUSTER_KERNELS)."""
    return dtype in CLUSTER_KERNELS.get(op, ())


def takes_one_vector(op: str, dtype: str) -> bool:
    """Whether ``op``'s kernel walks some long rows of ``dtype`` one vector a thread a tile."""
    return op in ONE_VECTOR_KERNELS and ITEMSIZE[dtype] == 2


def takes_two_blocks(op: str, dtype: str) -> bool:
    """Whether ``op``'s kernel compiles some long aligned rows of ``dtype`` for two blocks an SM."""
    return op in TWO_BLOCK_KERNELS and ITEMSIZE[dtype] == 2


def kept_in_l2(n: int, dtype: str) -> bool:
    """Whether a row of ``n`` elements of ``dtype`` is of ROW_BYTES_KEPT_IN_L2 bytes."""
    low, high = ROW_BYTES_KEPT_IN_L2
    return low < n * ITEMSIZE[dtype] <= high


def long_row_vectors(n: int, dtype: str, op: str) -> int:
    """The vectors a thread takes a tile of a long row of ``n`` elements in ``op``'s kernel:
    one where ``takes_one_vector`` and the row is outside ROW_BYTES_KEPT_IN_L2 or read once
    (READ_ONCE_KERNELS), else two."""
    read_again_from_l2 = kept_in_l2(n, dtype) and op not in READ_ONCE_KERNELS
    return 1 if takes_one_vector(op, dtype) and not read_again_from_l2 else 2


def long_row_vector_counts(op: str, dtype: str) -> tuple[int, ...]:
    """Every count ``long_row_vectors`` gives ``op``'s kernel in ``dtype``."""
    if not takes_one_vector(op, dtype):
        return (2,)
    return (1,) if op in READ_ONCE_KERNELS else (2, 1)


def long_row_blocks_per_sm(n: int, dtype: str, op: str) -> int:
    """The blocks an SM that ``op``'s tile of a long row of ``n`` elements is compiled for: two
    where ``takes_two_blocks``, the row is aligned and outside ROW_BYTES_KEPT_IN_L2, else one."""
    two = takes_two_blocks(op, dtype) and is_aligned(n, dtype) and not kept_in_l2(n, dtype)
    return 2 if two else 1


def long_row_tile(dtype: str, aligned: bool, vectors: int = 2, blocks_per_sm: int = 1) -> RowTile:
    """A row past the resident limit: a block a row, ``vectors`` vectors a thread a tile,
    compiled for ``blocks_per_sm`` blocks an SM."""
    tile = streamed_tile(dtype, aligned, LONG_ROW_THREADS, 1, vectors)
    return tile._replace(blocks_per_sm=blocks_per_sm)


def short_unaligned_tile(dtype: str) -> RowTile:
    """Short rows that do not start on 16-byte boundaries: a warp a row."""
    return streamed_tile(dtype, False, SHORT_ROW_THREADS, SHORT_ROWS)


def resident_tile(cols: int, dtype: str) -> RowTile:
    """Rows of up to ``cols`` (a power of two) of ``dtype`` held in registers."""
    row_vectors = cols // vector_elements(dtype)
    per_thread = MORE_VECTORS_PER_THREAD if cols >= MORE_VECTORS_FROM_COLS else VECTORS_PER_THREAD
    per_thread = max(per_thread, row_vectors // MAX_THREADS)
    threads = max(MIN_THREADS, row_vectors // per_thread)
    rows = min(MAX_ROWS, max(1, threads * per_thread // row_vectors))
    return RowTile(rows, cols, threads, True, True)


def resident_limit(op: str, dtype: str) -> int:
    """The widest row of ``dtype`` that ``op``'s kernel holds in registers: WIDE_RESIDENT_LIMIT
    where WIDE_RESIDENT_KERNELS says so, else RESIDENT_LIMIT."""
    wide = dtype in WIDE_RESIDENT_KERNELS.get(op, ())
    return WIDE_RESIDENT_LIMIT if wide else RESIDENT_LIMIT


def resident_widths(op: str, dtype: str) -> tuple[int, ...]:
    """Every resident tile width of ``op``'s kernel in ``dtype``, MIN_RESIDENT_COLS to its
    resident limit."""
    widths, cols = [], MIN_RESIDENT_COLS
    while cols <= resident_limit(op, dtype):
        widths.append(cols)
        cols *= 2
    return tuple(widths)


def prefetch_stages(tile: RowTile, dtype: str, op: str) -> int:
    """The row groups ``op``'s kernel keeps in flight by ``tile``: as many groups of what it
    stages (its operands, a mask a byte an element) as fit SHARED_MEMORY_BYTES, two at most;
    0 where not one does."""
    spec = registration.SPECS[op]
    staged_bytes = ITEMSIZE[dtype] * (spec.arity - spec.mask_operand) + spec.mask_operand
    return min(2, SHARED_MEMORY_BYTES // (tile.rows * tile.cols * staged_bytes))


def with_row_groups(tile: RowTile, dtype: str, op: str) -> RowTile | None:
    """``tile`` taking ROW_GROUPS row groups a block in ``op``'s kernel, where it gains
    (ROW_GROUP_KERNELS); None elsewhere."""
    if not tile.resident or tile.threads < MAX_THREADS or op not in ROW_GROUP_KERNELS:
        return None
    if prefetch_stages(tile, dtype, op) < ROW_GROUP_KERNELS[op]:
        return None
    return tile._replace(row_groups=ROW_GROUPS)


def cluster_blocks(n: int) -> int:
    """The fewest blocks, a power of two, whose parts of CLUSTER_PART_COLS columns cover n."""
    return 1 << (math.ceil(n / CLUSTER_PART_COLS) - 1).bit_length()


def held_over_cluster(n: int, dtype: str, op: str, resident: int) -> bool:
    """Whether ``op``'s kernel holds rows of ``n`` elements of ``dtype`` over a cluster, on a
    GPU that keeps ``resident`` such clusters at once: long aligned rows of at most MAX_CLUSTER
    parts, at least CLUSTER_MIN_FILL of the parts' columns used, in CLUSTER_KERNELS' dtypes."""
    if not (takes_clusters(op, dtype) and is_aligned(n, dtype)
            and resident_limit(op, dtype) < n <= MAX_CLUSTER * CLUSTER_PART_COLS):
        return False
    return resident > 0 and n >= CLUSTER_MIN_FILL * cluster_blocks(n) * CLUSTER_PART_COLS


def wave_row_groups(row_count: int, resident: int) -> int:
    """The rows each cluster takes in turn so that ``row_count`` rows make one wave of the
    ``resident`` clusters a GPU holds at once: ceil(row_count / resident), rounded up to
    WAVE_GROUPS_BITS significant bits. A cluster's time follows the most rows any cluster
    takes, so a second, partial wave would cost as much as a full one. At least one."""
    groups = max(1, -(-row_count // resident))
    step = 1 << max(0, groups.bit_length() - WAVE_GROUPS_BITS)
    return -(-groups // step) * step


def cluster_tile(dtype: str, blocks: int, row_groups: int = ROW_GROUPS) -> RowTile:
    """A row held over ``blocks`` blocks of CLUSTER_PART_COLS columns and CLUSTER_PART_THREADS
    threads, ``row_groups`` rows a block in turn."""
    return resident_tile(CLUSTER_PART_COLS, dtype)._replace(
        threads=CLUSTER_PART_THREADS[dtype], cluster=blocks, row_groups=row_groups)


def with_exact_width(tile: RowTile, n: int) -> RowTile:
    """``tile`` compiled for rows of exactly ``n`` elements where they fill it: a resident
    tile as wide as the row, or a cluster's parts covering it to its last column."""
    return tile._replace(exact=True) if tile.resident and n == tile.cols * tile.cluster else tile


def row_tile(n: int, dtype: str, op: str, row_count: int = 1,
             clusters: Mapping[int, int] | None = None) -> RowTile:
    """The tile of ``op``'s kernel for ``row_count`` rows of ``n`` elements of ``dtype``:
    resident where it can be, taking row groups where it gains and the rows fill the blocks;
    held over a cluster where it gains, on a GPU with clusters: ``clusters`` maps a cluster
    size to how many such clusters the GPU keeps resident (None: a GPU without clusters)."""
    aligned = is_aligned(n, dtype)
    blocks = cluster_blocks(n)
    resident = (clusters or {}).get(blocks, 0)
    if held_over_cluster(n, dtype, op, resident):
        held = cluster_tile(dtype, blocks, wave_row_groups(row_count, resident))
        return with_exact_width(held, n)
    if n > resident_limit(op, dtype):
        return long_row_tile(dtype, aligned, long_row_vectors(n, dtype, op),
                             long_row_blocks_per_sm(n, dtype, op))
    if not aligned:
        return short_unaligned_tile(dtype)
    tile = resident_tile(max(MIN_RESIDENT_COLS, 1 << (n - 1).bit_length()), dtype)
    grouped = with_row_groups(tile, dtype, op)
    if grouped is not None and row_count >= tile.rows * ROW_GROUPS * ROW_GROUPS_MIN_BLOCKS:
        tile = grouped
    return with_exact_width(tile, n)


def all_tiles(dtype: str, op: str) -> tuple[RowTile, ...]:
    """Every tile ``row_tile`` can pick for ``op``'s kernel in ``dtype``: what a compile of
    every configuration compiles."""
    resident = [resident_tile(cols, dtype) for cols in resident_widths(op, dtype)]
    grouped = [with_row_groups(tile, dtype, op) for tile in resident]
    long = [long_row_tile(dtype, aligned, v) for v in long_row_vector_counts(op, dtype)
            for aligned in (False, True)]
    long += [long_row_tile(dtype, True, blocks_per_sm=2)] if takes_two_blocks(op, dtype) else []
    # A cluster tile comes in every row-group count: one group, a program without a pipeline,
    # and ROW_GROUPS, which stands for every count of more.
    held = [cluster_tile(dtype, blocks, groups) for blocks in CLUSTER_SIZES
            for groups in (1, ROW_GROUPS) if takes_clusters(op, dtype)]
    whole = [*resident, *(tile for tile in grouped if tile is not None), *held]
    return (short_unaligned_tile(dtype), *long, *whole,
            *(tile._replace(exact=True) for tile in whole))


def row_extents(tile: RowTile) -> tuple:
    """A row kernel's (M, N) by ``tile``: TileLang dynamic sizes, so that one compile serves
    every row count and length the tile is picked for, but N where the tile is exact, the
    width of its rows, with which TileLang proves every column inside the row and checks none."""
    import tilelang.language as T

    m = T.dynamic("M", "int64")
    return m, tile.cols * tile.cluster if tile.exact else T.dynamic("N", "int64")


def column_tiles(tile: RowTile, n):
    """How many tiles a row of ``n`` (a TileLang dynamic size) takes: one, if it is resident."""
    import tilelang.language as T

    return 1 if tile.resident else T.ceildiv(n, tile.cols)


def row_tiles(tile: RowTile, *dtypes: str) -> tuple:
    """A (rows, cols) fragment of each of ``dtypes``, in order: a row kernel's tiles, one
    value of each an element, allocated inside its tile program (which lays them out by
    ``row_layout``)."""
    import tilelang.language as T

    shape = (tile.rows, tile.cols)
    return tuple(T.alloc_fragment(shape, dtype) for dtype in dtypes)


def row_layout(tile: RowTile, dtype: str):
    """Tile fragment layout: each row spread over a group of neighbouring threads in 16-byte runs.

    A row's vectors (runs of 16 bytes) are dealt round-robin to the threads of its group:
    a warp's 32 lanes where the row has that many vectors, fewer for a short row, and more
    where a block has fewer rows than warps (a block's threads for one long resident row).
    Several groups cover several rows at once, and a thread holds the same columns of every
    ``groups``-th row. So a group reads its row with coalesced 128-bit loads, and folding a
    row stays within its group: a warp shuffle, or for a row wider than a warp, TileLang's
    block-wide reduction. The row kernels annotate their tiles with it: left to itself,
    layout inference gives their element-wise row state a layout with one thread per row.
    """
    import tilelang.language as T

    return T.Fragment(
        (tile.rows, tile.cols), forward_fn=lambda i, j: thread_and_slot(tile, dtype, i, j)
    )


def thread_and_slot(tile: RowTile, dtype: str, i, j):
    """``row_layout``'s map: the thread holding element (i, j) of a tile, and its slot
    among that thread's registers (Python ints or TileLang index expressions alike)."""
    vec = vector_elements(dtype)
    row_vectors = tile.cols // vec
    lanes = max(min(32, row_vectors), tile.threads // tile.rows)
    groups = tile.threads // lanes
    vectors_per_lane = row_vectors // lanes
    vector = j // vec
    thread = (i % groups) * lanes + vector % lanes
    slot = ((i // groups) * vectors_per_lane + vector // lanes) * vec + j % vec
    return thread, slot
