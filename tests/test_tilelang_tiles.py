"""Which tile the TileLang bridge picks for a row kernel, by the row length, the dtype and the
rows of a call (``_rows.row_tile``): the policy of docs/tilelang.md's table, checked without a
GPU and without TileLang (``_rows`` needs neither). tests/test_tilelang_compile.py compiles
every tile this policy can pick.
"""

from __future__ import annotations

import math

import pytest

from helpers import H200_RESIDENT_CLUSTERS
from jax_camp import registration
from jax_camp.ops._spec import SUPPORTED_DTYPES
from jax_camp.tilelang_kernels._rows import (
    CLUSTER_KERNELS, ITEMSIZE, MAX_THREADS, MIN_RESIDENT_COLS, ROW_GROUPS, SHARED_MEMORY_BYTES,
    RowTile, all_tiles, cluster_tile, is_aligned, long_row_blocks_per_sm, long_row_tile,
    long_row_vectors, prefetch_stages, resident_limit, resident_tile, row_tile,
    short_unaligned_tile, thread_and_slot, vector_elements, wave_row_groups, with_exact_width,
)

DTYPES = tuple(dtype.name for dtype in SUPPORTED_DTYPES)
ROW_OPS = tuple(name for name, spec in registration.SPECS.items() if spec.along_rows)
MASKED_OPS = tuple(name for name, spec in registration.SPECS.items() if spec.mask_operand)


def _streamed(n: int, dtype: str, op: str) -> RowTile:
    """The streamed tile of a long row of ``n`` in ``op``'s kernel, of the vectors a thread and
    blocks an SM that test_long_16_bit_rows_take_two_blocks_an_sm_unless_l2_keeps_them checks."""
    return long_row_tile(dtype, is_aligned(n, dtype), long_row_vectors(n, dtype, op),
                         long_row_blocks_per_sm(n, dtype, op))


def test_the_forwards_take_row_groups_where_they_gain() -> None:
    """Row groups go to the forwards' one-block resident tiles of MAX_THREADS threads, where the
    groups in flight that each kernel gains with fit in shared memory: docs/tilelang.md's table.
    Every cluster tile takes them too, as
    test_long_aligned_rows_are_held_over_a_cluster_where_it_gains checks."""
    grouped = {(op, dtype, tile.cols) for op in ROW_OPS for dtype in DTYPES
               for tile in all_tiles(dtype, op) if tile.row_groups > 1 and tile.cluster == 1}
    assert grouped == {
        ("softmax", "float32", 16384), ("softmax", "float32", 32768),
        ("log_softmax", "float32", 16384), ("softmax_masked", "float32", 16384),
        ("log_softmax_masked", "float32", 16384),
        *((op, dtype, 32768) for op in ("softmax", "log_softmax", "softmax_masked")
          for dtype in ("bfloat16", "float16")),
    }


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_groups_need_rows_to_fill_the_blocks(dtype: str, op: str) -> None:
    """A row length whose tile can take row groups gets them from ROW_GROUPS x 128 rows on
    (a block of each ROW_GROUPS rows, 128 blocks), and its one-group tile below; the groups in
    flight fit SHARED_MEMORY_BYTES."""
    tiles = all_tiles(dtype, op)
    staged = ITEMSIZE[dtype] + (1 if op in MASKED_OPS else 0)
    for cols in (2 ** k for k in range(7, 16)):
        single = resident_tile(cols, dtype)
        if cols > resident_limit(op, dtype):
            break
        grouped = single._replace(row_groups=ROW_GROUPS)
        if grouped not in tiles:
            assert row_tile(cols - 8, dtype, op, 1 << 20) == single
            continue
        assert single.threads == MAX_THREADS and single.rows == 1
        assert prefetch_stages(grouped, dtype, op) * cols * staged <= SHARED_MEMORY_BYTES
        assert row_tile(cols - 8, dtype, op, ROW_GROUPS * 128 - 1) == single
        assert row_tile(cols - 8, dtype, op, ROW_GROUPS * 128) == grouped


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_that_fill_their_tile_take_its_exact_width(dtype: str, op: str) -> None:
    """A resident row as wide as its tile, and a row held over a cluster to its last part's last
    column, take the tile compiled for that width; a row a vector short, and every streamed
    row, the tile that checks its columns against the row's end. Every tile a row can fill
    comes in both (all_tiles)."""
    vec = vector_elements(dtype)
    h200 = H200_RESIDENT_CLUSTERS
    for cols in (*(2 ** k for k in range(7, 19)), 49_152, 196_608):
        for rows in (1, 4096):
            filled = row_tile(cols, dtype, op, rows, h200)
            short = row_tile(cols - vec, dtype, op, rows, h200)
            assert filled.exact == (filled.resident and cols == filled.cols * filled.cluster)
            assert not short.exact
            if filled.resident and short.resident and short.cluster == filled.cluster:
                assert short == filled._replace(exact=False)
    tiles = all_tiles(dtype, op)
    whole = {tile for tile in tiles if tile.resident and not tile.exact}
    assert {tile for tile in tiles if tile.exact} == {t._replace(exact=True) for t in whole}
    assert with_exact_width(long_row_tile(dtype, True), 4096).exact is False


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_that_fit_are_resident(dtype: str, op: str) -> None:
    """Aligned rows up to the kernel's resident limit are held by a tile as wide as the next
    power of two, of at most 1024 threads; longer rows are streamed a block a row, shorter
    unaligned ones a warp a row; every tile picked is one of all_tiles."""
    vec = vector_elements(dtype)
    tiles = all_tiles(dtype, op)
    limit = resident_limit(op, dtype)
    for n in range(vec, 2 * limit, vec):
        tile = row_tile(n, dtype, op)
        assert tile in tiles
        if n <= limit:
            assert tile.resident and tile.cols >= n and tile.threads <= 1024
            assert tile.cols // 2 < n or tile.cols == MIN_RESIDENT_COLS
        else:
            assert tile == _streamed(n, dtype, op)
    for n in (1, 3, vec + 1, 1025, limit - 1):
        assert row_tile(n, dtype, op) == short_unaligned_tile(dtype)
    assert row_tile(limit + 1, dtype, op) == _streamed(limit + 1, dtype, op)
    assert not _streamed(limit + 1, dtype, op).aligned


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_long_aligned_rows_are_held_over_a_cluster_where_it_gains(dtype: str, op: str) -> None:
    """On a GPU with clusters, softmax's and log_softmax's long aligned rows of up to 262144
    columns (softmax's with where= too, log_softmax's in the 16-bit types; softmax's backward's
    in float32) are held over the fewest blocks, a power of two, of 32768 columns each, where
    the row fills 3/4 of the blocks' columns or more, each block taking the rows that make one
    wave of clusters, however few; elsewhere, and without clusters, long rows are streamed."""
    held = dtype in CLUSTER_KERNELS.get(op, ())
    assert held == (op in ("softmax", "log_softmax", "softmax_masked")
                    or (op == "log_softmax_masked" and dtype != "float32")
                    or (op, dtype) == ("softmax_backward", "float32"))
    clustered = {tile for tile in all_tiles(dtype, op) if tile.cluster > 1}
    assert clustered == ({cluster_tile(dtype, blocks, groups)._replace(exact=exact)
                          for blocks in (2, 4, 8) for groups in (1, ROW_GROUPS)
                          for exact in (False, True)} if held else set())
    vec = vector_elements(dtype)
    h200 = H200_RESIDENT_CLUSTERS
    for n, blocks in ((49_152, 2), (65_536, 2), (98_304, 4), (131_072, 4), (196_608, 8),
                      (262_144, 8)):
        if n <= resident_limit(op, dtype):
            continue
        streamed = _streamed(n, dtype, op)
        assert row_tile(n, dtype, op, 1 << 20) == streamed
        assert row_tile(n, dtype, op, 1 << 20, {blocks: 0}) == streamed  # none fit the GPU
        for rows in (1, h200[blocks], h200[blocks] + 1, 4096):
            groups = wave_row_groups(rows, h200[blocks])
            expected = cluster_tile(dtype, blocks, groups) if held else streamed
            assert row_tile(n, dtype, op, rows, h200) == with_exact_width(expected, n)
        assert row_tile(n - 1, dtype, op, 1 << 20, h200).cluster == 1  # unaligned
        if n == 3 * blocks * 32_768 // 4:  # the parts short of 3/4 full
            assert row_tile(n - vec, dtype, op, 1 << 20, h200).cluster == 1
    assert row_tile(262_144 + vec, dtype, op, 1 << 20, h200).cluster == 1


def test_a_cluster_tile_takes_the_rows_of_one_wave() -> None:
    """A cluster tile's blocks take the rows that make the grid one wave of the GPU's resident
    clusters, rounded up to 6 significant bits: never a second wave, at most 1/32 more rows a
    cluster than an even share, and one compile for row counts a few percent apart."""
    for resident in (15, 30, 66, 1):
        for rows in range(1, 200_000, 7):
            groups = wave_row_groups(rows, resident)
            even = math.ceil(rows / resident)
            assert math.ceil(rows / groups) <= resident
            assert even <= groups <= even * (1 + 1 / 32), (rows, resident, groups)
    for first in (1024, 4096, 65536):  # a doubling of the row count: about 32 compiles
        assert len({wave_row_groups(rows, 15) for rows in range(first, 2 * first)}) <= 33
    assert [wave_row_groups(rows, resident) for rows, resident in
            ((1024, 15), (2048, 30), (4096, 66), (256, 15), (8192, 66), (0, 15))] == [
                70, 70, 63, 18, 126, 1]


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_long_16_bit_rows_take_two_blocks_an_sm_unless_l2_keeps_them(dtype: str, op: str) -> None:
    """Long 16-bit rows are walked by two blocks an SM in softmax's, log_softmax's, softmax's
    backward's and reduce_sum's kernels (one vector a thread a tile rather than two) and in the
    masked forwards' (aligned rows, compiled for two blocks), but for rows of more than 96 KB and
    at most 192 KB, which keep two vectors and one block, as every other kernel and dtype does,
    but in reduce_sum, which reads a row once: docs/tilelang.md's table."""
    sixteen_bit = ITEMSIZE[dtype] == 2
    one_vector = op in ("softmax", "log_softmax", "softmax_backward", "reduce_sum") and sixteen_bit
    two_blocks = op in ("softmax_masked", "log_softmax_masked") and sixteen_bit
    kb = 512  # 16-bit elements in a KB; every n below is past every resident limit
    for n, kept_in_l2 in ((40_000, False), (96 * kb, False), (96 * kb + 8, True),
                          (192 * kb, True), (192 * kb + 8, False), (1 << 20, False)):
        vectors = 1 if one_vector and not (kept_in_l2 and op != "reduce_sum") else 2
        blocks = 2 if two_blocks and not kept_in_l2 else 1
        assert row_tile(n, dtype, op) == long_row_tile(dtype, True, vectors, blocks), n
        assert row_tile(n - 1, dtype, op) == long_row_tile(dtype, False, vectors)  # unaligned


def test_only_the_kernels_that_gain_hold_rows_past_16384() -> None:
    """softmax, log_softmax, softmax's masked forward and softmax's backward hold rows of up to
    32768 values, and so do log_softmax's backward in the 16-bit types and its masked forward
    in float32; the other kernels that hold a mask or a second operand beside a row, and
    reduce_sum, stream them."""
    wide = {(op, dtype) for op in ROW_OPS for dtype in DTYPES if resident_limit(op, dtype) > 16384}
    every_dtype = ("softmax", "log_softmax", "softmax_masked", "softmax_backward")
    assert wide == {*((op, dtype) for op in every_dtype for dtype in DTYPES),
                    ("log_softmax_backward", "bfloat16"), ("log_softmax_backward", "float16"),
                    ("log_softmax_masked", "float32")}
    assert all(resident_limit(op, dtype) == 32768 for op, dtype in wide)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_layout_gives_each_element_its_own_register(dtype: str) -> None:
    """row_layout's map puts every element of every tile in a distinct (thread, slot),
    fills each thread's slots evenly, and gives a thread's 16-byte run one vector's
    consecutive slots, so a run loads with one 128-bit access."""
    vec = vector_elements(dtype)
    for tile in {tile for op in ROW_OPS for tile in all_tiles(dtype, op)}:
        places = {}
        for i in range(tile.rows):
            for j in range(tile.cols):
                places[(i, j)] = thread_and_slot(tile, dtype, i, j)
        assert len(set(places.values())) == tile.rows * tile.cols, tile
        slots = tile.values_per_thread
        assert {thread for thread, _ in places.values()} == set(range(tile.threads)), tile
        assert {slot for _, slot in places.values()} == set(range(slots)), tile
        for (i, j), (thread, slot) in places.items():
            first_thread, first_slot = places[(i, j - j % vec)]
            assert (thread, slot) == (first_thread, first_slot + j % vec), tile


def test_every_configuration_has_its_own_target_name() -> None:
    """The bridge registers each (op, dtype, tile) under a name made of the three, so two tiles
    of one dtype with one name would run one's kernel for the other's shapes."""
    for dtype in DTYPES:
        for op in ROW_OPS:
            names = [tile.name for tile in all_tiles(dtype, op)]
            assert len(set(names)) == len(names), names
