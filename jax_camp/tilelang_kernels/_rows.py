"""The tile shape shared by the row kernels (reduce_sum, softmax).

A block owns ROWS rows and walks along them COLUMNS(dtype) columns at a time.
With 128 threads and 4 rows TileLang gives each row one warp, and a tile row
is 32 lanes x 2 vectors of 16 bytes.

``aligned`` is a compile-time promise that every row starts on a 16-byte
boundary (N * itemsize % 16 == 0), made through ``T.assume``: with it TileLang
masks whole vectors at the row end and loads 128 bits at a time; without it
a dynamic N could put a row start anywhere, so it loads element by element
(still coalesced). The bridge knows N when it traces the call and picks the
matching compile, so the promise is never broken.
"""

from __future__ import annotations

THREADS = 128
ROWS = 4
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
ACCUM = "float32"


def vector_elements(dtype: str) -> int:
    """Elements in one 16-byte vector."""
    return 16 // ITEMSIZE[dtype]


def columns(dtype: str) -> int:
    """Columns of one tile: a warp's 32 lanes x 2 vectors each."""
    return 32 * 2 * vector_elements(dtype)


def is_aligned(n: int, dtype: str) -> bool:
    """Whether rows of n elements all start on a 16-byte boundary."""
    return n % vector_elements(dtype) == 0


def row_tiles(cols: int, *dtypes: str) -> tuple:
    """A (ROWS, cols) fragment of each of ``dtypes``, in order: a row kernel's tiles, one value
    of each an element, allocated inside its tile program."""
    import tilelang.language as T

    return tuple(T.alloc_fragment((ROWS, cols), dtype) for dtype in dtypes)


def warp_per_row_layout(dtype: str):
    """Tile fragment layout: warp i holds tile row i, each lane 16-byte runs.

    Lane l of warp i holds columns [v*l, v*l + v) of every 32*v-column
    stripe (v = vector_elements), so a warp reads a stripe of its row with
    one coalesced 128-bit load per lane, and folding a row is a warp shuffle,
    with no block-wide barrier. The softmax kernels annotate their tiles with
    it: left to itself, layout inference gives their element-wise row state a
    layout with one thread per row.
    """
    import tilelang.language as T

    vec = vector_elements(dtype)

    def forward(i, j):
        return i * 32 + (j // vec) % 32, (j // (32 * vec)) * vec + j % vec

    return T.Fragment((ROWS, columns(dtype)), forward_fn=forward)
