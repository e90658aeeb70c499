"""Inputs and comparisons shared by the op tests, and where nvcc is."""

from __future__ import annotations

import itertools
import math
import os
import shutil
from pathlib import Path
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import jax_camp
from jax_camp.ops._spec import SUPPORTED_DTYPES, OpSpec
from jax_camp.ops.log_softmax import LOG_SOFTMAX_MASKED
from jax_camp.ops.softmax import SOFTMAX_MASKED
from jax_camp.tilelang_kernels._rows import ROW_GROUPS, RowTile, all_tiles, row_tile

# How many clusters of 2, 4 and 8 blocks, a block alone on each SM, the H200 keeps resident at
# once (bridge.resident_clusters there), for the tile rules the tests check without a GPU.
H200_RESIDENT_CLUSTERS = {2: 66, 4: 30, 8: 15}

# The scalar types, whose names ("float32", ...) become the test ids.
DTYPES = tuple(dtype.type for dtype in SUPPORTED_DTYPES)
# Tolerances of the kernel documentation template.
TOLERANCE = {jnp.dtype(jnp.float32): 1e-5, jnp.dtype(jnp.bfloat16): 1e-2, jnp.dtype(jnp.float16): 1e-2}
_seed = itertools.count(20261129)


def random_normal(shape: tuple[int, ...], dtype, scale: float = 1.0) -> jax.Array:
    """Fresh random data for every call: a kernel must be right on any input.

    Drawn and rounded to ``dtype`` by NumPy (ml_dtypes rounds to nearest even, as
    ``astype`` does), then put on the device: drawing with ``jax.random`` compiled
    an XLA program for every new shape and dtype, most of an op test's time.
    """
    rng = np.random.default_rng(next(_seed))
    values = np.asarray(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))
    return jnp.asarray(values.astype(jnp.dtype(dtype)))


def on_this_machine(shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """``shapes`` where JAX sees a GPU; elsewhere those of at most 2**20 elements. The larger ones
    are there to reach the GPU kernels' paths (clusters, streamed rows, capped grids), and the
    host kernels, all a machine without a GPU runs, take every row the same way."""
    from conftest import has_gpu

    return list(shapes) if has_gpu() else [s for s in shapes if math.prod(s) <= 2**20]


def f64(x) -> np.ndarray:
    """x's values in float64, exactly (converted on the host, with no XLA program to compile)."""
    return np.asarray(x).astype(np.float64)


def _masked(x, where) -> np.ndarray:
    """x's values in float64, -inf where ``where`` (if given) drops them, as jax.nn reads it."""
    v = f64(x)
    return v if where is None else np.where(np.asarray(where), v, -np.inf)


def softmax_reference(x, axis=-1, where=None) -> np.ndarray:
    """float64 softmax of x's (rounded) values; 0 where ``where`` drops them."""
    with np.errstate(invalid="ignore"):
        v = _masked(x, where)
        e = np.exp(v - np.max(v, axis=axis, keepdims=True))
        y = e / np.sum(e, axis=axis, keepdims=True)
    return y if where is None else np.where(np.asarray(where), y, 0.0)


def log_softmax_reference(x, axis=-1, where=None) -> np.ndarray:
    """float64 log_softmax of x's (rounded) values, x - max - log(sum(exp(x - max))); -inf
    where ``where`` drops them."""
    with np.errstate(invalid="ignore", divide="ignore"):
        v = _masked(x, where)
        shifted = v - np.max(v, axis=axis, keepdims=True)
        y = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return y if where is None else np.where(np.asarray(where), y, -np.inf)


class RowOp(NamedTuple):
    """An op that normalizes rows (softmax, log_softmax) and what its tests hold it to."""

    fn: Callable  # jax_camp's
    reference: Callable  # float64, of x's values (and where=)
    jax_fn: Callable  # jax.nn's
    vjp: Callable  # float64 dx of the forward's output y and the cotangent g
    jvp: Callable  # float64 dy of y and the tangent t
    masked_kernel: OpSpec  # the kernel where= runs


def softmax_derivative(y, v):
    """softmax's derivative, along a tangent or a cotangent alike: y * (v - sum(y * v))."""
    return y * (v - np.sum(y * v, axis=-1, keepdims=True))


SOFTMAX_OP = RowOp(jax_camp.softmax, softmax_reference, jax.nn.softmax, softmax_derivative,
                   softmax_derivative, SOFTMAX_MASKED)
# Reverse mode's dx = g - exp(y) * sum(g), forward mode's dy = t - sum(exp(y) * t).
LOG_SOFTMAX_OP = RowOp(
    jax_camp.log_softmax, log_softmax_reference, jax.nn.log_softmax,
    vjp=lambda y, g: g - np.exp(y) * np.sum(g, axis=-1, keepdims=True),
    jvp=lambda y, t: t - np.sum(np.exp(y) * t, axis=-1, keepdims=True),
    masked_kernel=LOG_SOFTMAX_MASKED,
)


def check_derivative(op: Callable, derivative: Callable, shape: tuple[int, ...], dtype, backend,
                     *, forward: bool) -> None:
    """``op``'s VJP (or, ``forward``, its JVP) at random x along a random vector v against
    ``derivative(y, v)`` in float64 from op's own output y, within the dtype's tolerance of the
    derivative's largest entry (or of 1)."""
    x = random_normal(shape, dtype, scale=3.0)
    v = random_normal(shape, dtype)
    f = lambda u: op(u, backend=backend)  # noqa: E731
    if forward:
        y, d = jax.jvp(f, (x,), (v,))
    else:
        y, vjp = jax.vjp(f, x)
        (d,) = vjp(v)
    assert d.shape == x.shape and d.dtype == x.dtype
    expected = derivative(f64(y), f64(v))
    assert_close(d, expected, dtype, scale=max(1.0, float(np.abs(expected).max())))


def check_values(op, reference, shape: tuple[int, ...], dtype, backend, *, where: bool = False,
                 scale: float = 3.0) -> None:
    """``op`` (jax_camp.softmax or log_softmax) on random x of ``shape`` and ``dtype``, with a
    random where= mask if asked, against its float64 ``reference``: x's shape and dtype, and
    values within the dtype's tolerance."""
    x = random_normal(shape, dtype, scale=scale)
    mask = random_mask(shape) if where else None
    y = op(x, where=mask, backend=backend)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert_close(y, reference(x, where=mask), dtype)


def random_mask(shape: tuple[int, ...]) -> jax.Array:
    """A where= mask keeping about two elements in three, with its first row (of several)
    masked out whole."""
    rng = np.random.default_rng(next(_seed))
    keep = rng.random(shape) < 2 / 3
    if math.prod(shape[:-1]) > 1:
        keep.reshape(-1, shape[-1])[0] = False
    return jnp.asarray(keep)


def assert_close(actual, expected, dtype, *, scale: float = 1.0) -> None:
    """|actual - expected| <= tol * (scale + |expected|), NaN where expected is NaN."""
    tol = TOLERANCE[jnp.dtype(dtype)]
    actual, expected = f64(actual), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale, equal_nan=True)


def sum_scale(n: int) -> float:
    """The size of a sum of n standard normals: the absolute scale of its rounding."""
    return math.sqrt(max(n, 1))


def hlo_text(f, *args) -> str:
    return jax.jit(f).lower(*args).as_text()


ROOT = Path(__file__).resolve().parent.parent


def _nvcc() -> str | None:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = os.path.join(cuda_home, "bin", "nvcc")
    return shutil.which("nvcc") or (candidate if os.path.exists(candidate) else None)


# For the tests that build CUDA code without running it (no GPU needed).
NVCC = _nvcc()


def progress(config, message: str) -> None:
    """Writes a line to the terminal at once, even from inside a test or fixture whose
    output pytest captures: for work that would otherwise run silent for a long time."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write_line(message, flush=True)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(message, flush=True)


def _kernel_path(plan: dict) -> tuple[str, bool, bool]:
    """A launch plan's kernel path: its team (warp lanes, warps sharing a block, a block, a
    cluster of n blocks, or a block streaming the row), whether it moves 16-byte packs, and
    whether it prefetches its next row."""
    if plan["layout"] == "streamed":
        team = "streamed"
    elif plan["layout"] == "held_in_cluster":
        team = f"cluster of {plan['cluster']}"
    else:
        team = ("warp lanes" if plan["lanes"] <= 32
                else "shared block" if plan["lanes"] < plan["threads"] else "block")
    return team, plan["pack"] > 1, plan["prefetches"]


def tilelang_tiles_missed(op: str, shapes) -> set[tuple[str, str]]:
    """The (dtype, tile) configurations of the TileLang row kernel ``op`` (``_rows.all_tiles``)
    that none of ``shapes`` reaches on the H200, so that a GPU run with --backend tilelang runs
    each one. A cluster tile of more than one row group reaches the one of ROW_GROUPS that
    all_tiles lists for them all."""
    def configuration(tile: RowTile) -> RowTile:
        return tile._replace(row_groups=ROW_GROUPS) if tile.cluster > 1 < tile.row_groups else tile

    every = {(d.name, t.name) for d in SUPPORTED_DTYPES for t in all_tiles(d.name, op)}
    return every - {(d.name, configuration(row_tile(s[-1], d.name, op, math.prod(s[:-1]),
                                                    H200_RESIDENT_CLUSTERS)).name)
                    for d in SUPPORTED_DTYPES for s in shapes}


def kernel_paths_missed(kernel: str, item_bytes: int, shapes) -> set[tuple[str, bool, bool]]:
    """The paths of a row kernel ("softmax", "softmax_backward", "reduce_sum") that the CUDA
    launcher plans for some row length and count on the H200, but for none of ``shapes``.

    The planner is host code in the compiled module (jax_camp._kernels.row_plan), so this
    runs without a GPU; the row lengths swept are powers of two, one past them (unaligned)
    and three times them, up to 3 * 2**20, in grids of 1, 3, 24 and 4096 rows.
    """
    from jax_camp import _kernels

    def paths(cases) -> set[tuple[str, bool, bool]]:
        return {_kernel_path(_kernels.row_plan(kernel, math.prod(s[:-1]), s[-1], item_bytes))
                for s in cases}

    sweep = [(rows, cols) for rows in (1, 3, 24, 4096)
             for k in range(21) for cols in (2 ** k, 2 ** k + 1, 3 * 2 ** k)]
    return paths(sweep) - paths(shapes)
