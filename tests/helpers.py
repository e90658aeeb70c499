"""Inputs and comparisons shared by the op tests, and where nvcc is."""

from __future__ import annotations

import itertools
import math
import os
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jax_camp.ops._spec import SUPPORTED_DTYPES

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


def softmax_reference(x, axis=-1) -> np.ndarray:
    """float64 softmax of x's (rounded) values."""
    v = f64(x)
    shifted = v - np.max(v, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax_reference(x, axis=-1) -> np.ndarray:
    """float64 log_softmax of x's (rounded) values: x - max - log(sum(exp(x - max)))."""
    shifted = f64(x) - np.max(f64(x), axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


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
