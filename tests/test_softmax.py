"""jax_camp.softmax against jax.nn.softmax semantics and a float64 reference."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_camp
from jax_camp import _kernels
from jax_camp.ops.softmax import SOFTMAX
from helpers import (DTYPES, SOFTMAX_OP, RowOp, assert_close, check_derivative, check_values,
                     f64, hlo_text, kernel_paths_missed, on_this_machine, random_mask,
                     random_normal, softmax_reference, tilelang_tiles_missed)

# The camp's shapes, unaligned and odd sizes, one column, grids of few rows
# and of many; on the GPU they reach every path of the CUDA kernels that the
# launch planner can plan (test_shapes_reach_every_kernel_path says which).
# Without a GPU the value tests take the smaller ones (on_this_machine).
SHAPES = [
    (1, 128), (16, 128), (16, 256), (32, 128), (1024,), (1536,), (5, 8),
    (3, 127), (5, 255), (7, 513), (33, 1), (4, 1025), (2, 4099),
    (3, 5, 64), (70000, 3), (3, 384), (4, 3000), (3, 5000), (3, 12_000), (3, 20_000),
    (3, 40_000), (3, 40_001), (2, 65_544), (2, 200_000), (2, 300_000), (2, 600_000),
    (2, 70_001), (3, 3001), (3, 9001), (3, 17_001), (40, 150_000), (24, 300_000),
    (4096, 64), (4096, 127), (4096, 128), (4096, 255), (1024, 1024), (4096, 1536),
    (600_000, 5),
    # Rows as wide as their tile, or their cluster's parts, whose kernels are compiled for that
    # width (_rows.with_exact_width), and rows a little short of a tile that is filled above.
    (3, 512), (3, 2048), (3, 4096), (3, 8192), (3, 16_384), (3, 32_768), (2, 65_536), (2, 131_072),
    (2, 262_144), (16, 120), (3, 200), (5, 1000),
]
# Unaligned rows longer than a cluster holds, streamed in scalars (test_long_rows).
LONG_ROWS = (2, 1_000_003)
# Rows many and long enough that the TileLang forwards' blocks of 1024 threads take 16 row
# groups in turn (_rows.row_tile), the last block's groups past the last row (test_row_groups).
ROW_GROUP_SHAPES = [(2053, 9000), (2050, 17_000), (2050, 16_384), (2050, 32_768)]
# Rows held over clusters of 2, 4 and 8 blocks taking 16 rows in turn on the H200 (the compile
# test's tiles), the last cluster's past the end, the last part short; or one, as (2, 200_000).
CLUSTER_GROUP_SHAPES = [(1030, 49_160), (470, 98_312), (230, 196_616), (6, 49_160), (6, 98_312),
                        (1030, 65_536), (470, 131_072), (230, 262_144)]


@pytest.mark.parametrize("kernel", ["softmax", "softmax_masked", "softmax_backward"])
@pytest.mark.parametrize("item_bytes", [4, 2])
def test_shapes_reach_every_kernel_path(kernel, item_bytes):
    """SHAPES and test_long_rows' shape reach every path the CUDA launcher can plan for the
    forward and the backward (kernel_paths_missed), so that the GPU runs run each one."""
    missed = kernel_paths_missed(kernel, item_bytes, SHAPES + [LONG_ROWS])
    assert not missed, f"no test shape reaches {sorted(missed)}"


@pytest.mark.parametrize("kernel", ["softmax", "softmax_masked", "softmax_backward"])
def test_shapes_reach_every_tilelang_tile(kernel):
    """SHAPES and the shapes of test_long_rows and test_row_groups reach every tile of softmax's
    TileLang kernels, in every dtype, so that a GPU run with --backend tilelang compiles and
    runs each one."""
    missed = tilelang_tiles_missed(kernel, SHAPES + [LONG_ROWS] + ROW_GROUP_SHAPES
                                   + CLUSTER_GROUP_SHAPES)
    assert not missed, f"no test shape reaches {sorted(missed)}"


@pytest.fixture
def op() -> RowOp:
    """The op that the value and derivative tests check: softmax here; test_log_softmax.py
    runs the same tests on log_softmax with its own fixture."""
    return SOFTMAX_OP


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", on_this_machine(SHAPES))
def test_matches_reference(op, shape, dtype, backend):
    check_values(op.fn, op.reference, shape, dtype, backend)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_long_rows(op, dtype, backend):
    check_values(op.fn, op.reference, LONG_ROWS, dtype, backend, scale=1.0)


@pytest.mark.parametrize("where", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", on_this_machine(ROW_GROUP_SHAPES))
def test_row_groups(op, shape, dtype, where, backend):
    """Blocks that take rows in turn, a fully masked row among them (random_mask), and blocks
    whose last groups lie past the last row."""
    check_values(op.fn, op.reference, shape, dtype, backend, where=where)


@pytest.mark.parametrize("where", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", on_this_machine(CLUSTER_GROUP_SHAPES))
def test_rows_held_over_a_cluster(op, shape, dtype, where, backend):
    """Rows held over a cluster, its blocks taking rows in turn, as jax.nn's, among them rows
    whose first parts are only -inf, a row of only -inf and a row with a NaN; with where=, a
    fully masked row too (random_mask)."""
    x = random_normal(shape, dtype, scale=3.0).at[0, :-4].set(-jnp.inf)
    x = x.at[2, : shape[-1] // 2].set(-jnp.inf).at[3, 7].set(jnp.nan).at[5].set(-jnp.inf)
    mask = random_mask(shape) if where else None
    fn = functools.partial(op.fn, where=mask, backend=backend)
    if backend == "tilelang":  # held where the GPU has clusters and the kernel a cluster tile
        from jax_camp.tilelang_kernels.bridge import resident_clusters
        held = bool(resident_clusters()) and not (where and dtype == jnp.float32
                                                   and op.fn is jax_camp.log_softmax)
        assert ("_cluster" in hlo_text(fn, x)) == held
    assert_special_values_match(fn(x), op.jax_fn(x, where=mask), dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_rows_claimed_by_clusters(op, dtype, backend):
    """Rows that the forward's clusters claim from a counter as they free up, where each
    resident cluster would take more than 16 rows (row_plan.h, kMinRowsPerClaimingCluster;
    on the H200, 16 clusters of 131_080 float32 values a row are resident, 30 of 16-bit ones).
    A row that no cluster claimed, or that one took past the end, fails here."""
    if backend not in (None, "cuda") or jax.default_backend() != "gpu":
        pytest.skip("a path of the CUDA forward")
    check_values(op.fn, op.reference, (640, 131_080), dtype, backend, scale=1.0)


@pytest.mark.parametrize("dtype,cols", [(jnp.float32, 512), (jnp.bfloat16, 1024)])
def test_warp_teams_loop_over_rows_on_capped_grids(dtype, cols, backend):
    """Rows of 128 16-byte packs take a warp a row, two rows a 64-thread block;
    70_000 of them are more than the grid's 8 waves of blocks hold (67_584
    teams on the H200), so the forward takes the kernel that loops over rows
    rather than the one that takes a row a team (SelectForwardKernel)."""
    if backend not in (None, "cuda") or jax.default_backend() != "gpu":
        pytest.skip("a path of the CUDA forward")
    x = random_normal((70_000, cols), dtype)
    assert_close(jax_camp.softmax(x, backend=backend), softmax_reference(x), dtype)


@pytest.mark.parametrize("axis", [0, 1, -2, (0, 2), (1, 2), (0, 1, 2)])
def test_axis(axis, backend):
    x = random_normal((6, 7, 9), jnp.float32)
    y = jax_camp.softmax(x, axis=axis, backend=backend)
    assert_close(y, softmax_reference(x, axis=axis), jnp.float32)


def assert_special_values_match(actual, expected, dtype) -> None:
    """NaN and -inf where ``expected`` has them; the finite values within the dtype's tolerance
    of the largest (log-probabilities of -1e4 round in 16 bits)."""
    actual, expected = f64(actual), f64(expected)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    finite = np.isfinite(expected)
    assert_close(actual[finite], expected[finite], dtype,
                 scale=max(1.0, float(np.abs(expected[finite]).max())))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("copies", [1, 4, 10_000])
def test_special_values_match_jax(op, copies, dtype, backend):
    """-inf entries, a row of -inf, a NaN, +inf, huge logits and logits 1000 apart, as jax.nn's.

    Rows of 4 take one value at a time; 4 copies side by side make rows of 16,
    which take 16-byte packs (and 16-bit types their packed max) on the GPU;
    10000 make long rows, streamed. The first row keeps only its last 4 entries
    finite, so that a long row's first tiles are only -inf."""
    x = jnp.array([[0.0, -jnp.inf, 1.0, 2.0], [-jnp.inf] * 4, [1.0, jnp.nan, 2.0, 3.0],
                   [jnp.inf, 1.0, 2.0, 3.0], [1e3, 2e3, 3e3, 3e3 - 1.0], [-1e4, 0.0, 1e4, 5e3],
                   [-1000.0, 1.0, 2.0, 3.0]], dtype)
    x = jnp.tile(x, (1, copies))
    x = x.at[0, :-4].set(-jnp.inf)
    assert_special_values_match(op.fn(x, backend=backend), op.jax_fn(x.astype(jnp.float32)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 300), (8, 512), (3, 5000), (2, 300_000)])
def test_huge_logits_are_finite(shape, dtype, backend):
    """Logits of -2e4 and below: a row max off by more than the row's spread
    overflows an exp (too low) or leaves every exp 0 (too high, as a stray 0
    would), and the row comes out inf or NaN. The shapes reach one value a
    thread, warp lanes, a block and a prefetching cluster on the GPU."""
    x = (-jnp.abs(random_normal(shape, jnp.float32, scale=5e3)) - 2e4).astype(dtype)
    y = jax_camp.softmax(x, backend=backend)
    assert np.isfinite(f64(y)).all()
    assert_close(y, softmax_reference(x), dtype)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0,), (2, 0, 3)])
def test_zero_size(shape, backend):
    x = jnp.zeros(shape, jnp.float32)
    y = jax_camp.softmax(x, backend=backend)
    assert y.shape == shape and y.dtype == x.dtype


def test_jit(backend):
    x = random_normal((17, 300), jnp.bfloat16)
    y = jax.jit(functools.partial(jax_camp.softmax, backend=backend))(x)
    assert_close(y, softmax_reference(x), jnp.bfloat16)


@pytest.mark.parametrize("in_axes", [0, 1, 2])
def test_vmap(in_axes, backend):
    x = random_normal((4, 6, 50), jnp.float32)
    f = jax.vmap(functools.partial(jax_camp.softmax, axis=-1, backend=backend), in_axes=in_axes)
    expected = softmax_reference(np.moveaxis(f64(x), in_axes, 0), axis=-1)
    assert_close(f(x), expected, jnp.float32)


def test_nested_vmap(backend):
    x = random_normal((3, 4, 5, 40), jnp.float32)
    f = functools.partial(jax_camp.softmax, axis=0, backend=backend)
    y = jax.vmap(jax.vmap(f, in_axes=2), in_axes=1)(x)
    expected = np.transpose(softmax_reference(x, axis=0), (1, 3, 0, 2))
    assert_close(y, expected, jnp.float32)


def test_grad_matches_jax(backend):
    x = random_normal((9, 130), jnp.float32)
    w = random_normal((9, 130), jnp.float32)
    ours = jax.grad(lambda v: jnp.sum(jax_camp.softmax(v, backend=backend) * w))(x)
    theirs = jax.grad(lambda v: jnp.sum(jax.nn.softmax(v) * w))(x)
    assert_close(ours, f64(theirs), jnp.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", on_this_machine(SHAPES + CLUSTER_GROUP_SHAPES))
def test_vjp_matches_reference(op, shape, dtype, backend):
    """Reverse mode on every launch path of the backward kernel, rows held over clusters too."""
    check_derivative(op.fn, op.vjp, shape, dtype, backend, forward=False)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_grad_low_precision(dtype, backend):
    x = random_normal((4, 700), dtype)
    w = random_normal((4, 700), dtype)
    ours = jax.grad(lambda v: jnp.sum(jax_camp.softmax(v, backend=backend) * w))(x)
    theirs = jax.grad(lambda v: jnp.sum(jax.nn.softmax(v) * w.astype(jnp.float32)))(x.astype(jnp.float32))
    assert ours.dtype == dtype
    assert_close(ours, f64(theirs), dtype)


def test_check_grads(backend):
    x = random_normal((3, 20), jnp.float32)
    check_grads(functools.partial(jax_camp.softmax, axis=0, backend=backend), (x,),
                order=1, modes=["rev"], atol=1e-2, rtol=1e-2)


def test_grad_under_vmap_and_jit(backend):
    x = random_normal((5, 3, 64), jnp.float32)
    w = random_normal((3, 64), jnp.float32)

    def loss(v, f):
        return jnp.sum(f(v) * w)

    ours = jax.jit(jax.vmap(jax.grad(lambda v: loss(v, functools.partial(jax_camp.softmax, backend=backend)))))(x)
    theirs = jax.vmap(jax.grad(lambda v: loss(v, jax.nn.softmax)))(x)
    assert_close(ours, f64(theirs), jnp.float32)


# Shapes over the backward kernel's launch paths, which forward mode runs on tangents.
JVP_SHAPES = [(5, 8), (3, 127), (4, 1025), (3, 40_001), (2, 300_000), (4096, 128)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", JVP_SHAPES)
def test_jvp_matches_reference(op, shape, dtype, backend):
    """Forward mode, by the backward kernel (log_softmax: its tangent kernel) on the tangent."""
    check_derivative(op.fn, op.jvp, shape, dtype, backend, forward=True)


def test_check_grads_both_modes_to_second_order(backend):
    x = random_normal((3, 20), jnp.float32)
    check_grads(
        functools.partial(jax_camp.softmax, axis=0, backend=backend), (x,),
        order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2,
    )


def test_forward_mode_and_higher_order_match_jax(backend):
    x = random_normal((4, 33), jnp.float32)
    ours = functools.partial(jax_camp.softmax, backend=backend)

    def both(transform):
        return transform(ours), transform(jax.nn.softmax)

    checks = {
        "jacfwd": lambda f: jax.jit(jax.jacfwd(f))(x),
        "linearize": lambda f: jax.linearize(f, x)[1](x),
        "vmap of jvp": lambda f: jax.vmap(lambda v: jax.jvp(f, (v,), (v,))[1])(x),
        "jacrev of jacrev": lambda f: jax.jit(jax.jacrev(jax.jacrev(f)))(x[:2, :9]),
        "grad of grad under vmap": lambda f: jax.vmap(
            jax.grad(lambda v: jnp.sum(jax.grad(lambda u: jnp.sum(f(u) * u))(v) ** 2))
        )(x),
        "forward over reverse": lambda f: jax.jvp(jax.grad(lambda v: jnp.sum(f(v) * x)), (x,), (x,))[1],
    }
    for name, transform in checks.items():
        got, want = both(transform)
        np.testing.assert_allclose(f64(got), f64(want), rtol=1e-4, atol=1e-5, err_msg=name)


def test_forward_mode_runs_the_kernels(backend):
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    x = random_normal((4, 64), jnp.float32)
    text = hlo_text(lambda v: jax.jvp(functools.partial(jax_camp.softmax, backend=backend), (v,), (v,)), x)
    # The forward kernel for y, the backward kernel for the tangent, and nothing else.
    assert text.count("custom_call @") == 2 and "softmax_backward" in text
    assert "stablehlo.exponential" not in text


def test_lowered_hlo_holds_the_kernels(backend):
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    x = random_normal((4, 64), jnp.float32)
    forward = hlo_text(functools.partial(jax_camp.softmax, backend=backend), x)
    backward = hlo_text(jax.grad(lambda v: jnp.sum(jax_camp.softmax(v, backend=backend) ** 2)), x)
    assert SOFTMAX.ffi_target in forward or "tilelang" in forward
    assert "softmax_backward" in backward
    # The backward reuses the saved output: exactly one forward kernel.
    assert backward.count("custom_call @") == 2


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.float64 if jax.config.jax_enable_x64 else jnp.uint8, jnp.bool_])
def test_rejects_unsupported_dtype(dtype, backend):
    with pytest.raises(TypeError, match="jax_camp.softmax: x has dtype .*supported dtypes are float32, bfloat16 or float16"):
        jax_camp.softmax(jnp.ones((2, 3), dtype), backend=backend)


@pytest.mark.parametrize("axis", [2, -3, (0, 0)])
def test_rejects_bad_axis(axis, backend):
    with pytest.raises(ValueError, match="jax_camp.softmax: axis"):
        jax_camp.softmax(jnp.ones((2, 3)), axis=axis, backend=backend)


@pytest.mark.parametrize("axis", [1.0, "x"])
def test_rejects_axis_of_wrong_type(axis, backend):
    with pytest.raises(TypeError, match="axis must be an int or a tuple of ints"):
        jax_camp.softmax(jnp.ones((2, 3)), axis=axis, backend=backend)


@pytest.mark.parametrize("shape", [(3, 4, 5), (7,), ()])
def test_axis_none_normalizes_over_every_axis(shape, backend):
    x = random_normal(shape, jnp.float32)
    f = functools.partial(jax_camp.softmax, axis=None, backend=backend)
    assert_close(f(x), jax.nn.softmax(x, axis=None), jnp.float32)
    w = random_normal(shape, jnp.float32)
    ours = jax.grad(lambda v: jnp.sum(f(v) * w))(x)
    theirs = jax.grad(lambda v: jnp.sum(jax.nn.softmax(v, axis=None) * w))(x)
    assert_close(ours, theirs, jnp.float32)
    if backend != "xla" and x.size > 1:
        assert "custom_call" in hlo_text(f, x)


def test_rejects_a_list(backend):
    with pytest.raises(TypeError, match="jax_camp.softmax: x must be an array or a scalar, got list"):
        jax_camp.softmax([1.0, 2.0], backend=backend)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", on_this_machine(SHAPES))
def test_where_matches_reference(op, shape, dtype, backend):
    check_values(op.fn, op.reference, shape, dtype, backend, where=True)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_where_on_long_rows(op, dtype, backend):
    check_values(op.fn, op.reference, LONG_ROWS, dtype, backend, where=True, scale=1.0)


@pytest.mark.parametrize("where_shape", [(), (1,), (37,), (6, 1), (5, 6, 37)])
def test_where_broadcasts_against_x(where_shape, backend):
    x = random_normal((5, 6, 37), jnp.float32)
    mask = random_normal(where_shape, jnp.float32) > -0.5
    want = jax.nn.softmax(x, where=mask)
    assert_close(jax_camp.softmax(x, where=mask, backend=backend), want, jnp.float32)
    assert_close(jax_camp.softmax(x, axis=(0, 2), where=mask, backend=backend),
                 jax.nn.softmax(x, axis=(0, 2), where=mask), jnp.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("copies", [1, 4])
def test_where_special_values_match_jax(op, copies, dtype, backend):
    """A row masked out whole (0 or -inf, not NaN), NaN and +inf where masked out (no effect),
    kept values all -inf (NaN where kept, as jax.nn's), masked -inf among finite values, and a
    kept logit 1000 below the others."""
    x = jnp.array([[0.0, 1.0, 2.0, 3.0], [jnp.nan, jnp.inf, 2.0, 3.0],
                   [-jnp.inf, -jnp.inf, 2.0, 3.0], [-jnp.inf, 1.0, 2.0, 3.0],
                   [-1000.0, 1.0, 2.0, 3.0]], dtype)
    keep = jnp.array([[False] * 4, [False, False, True, True], [True, True, False, False],
                      [False, True, True, True], [True, True, False, True]])
    x, keep = jnp.tile(x, (1, copies)), jnp.tile(keep, (1, copies))
    assert_special_values_match(op.fn(x, where=keep, backend=backend),
                                op.jax_fn(x.astype(jnp.float32), where=keep), dtype)


def test_where_derivatives_match_jax(backend):
    x = random_normal((4, 33), jnp.float32)
    w = random_normal((4, 33), jnp.float32)
    mask = random_mask((4, 33))
    ours = functools.partial(jax_camp.softmax, where=mask, backend=backend)
    theirs = functools.partial(jax.nn.softmax, where=mask)
    checks = {
        "grad": lambda f: jax.grad(lambda v: jnp.sum(f(v) * w))(x),
        "jvp": lambda f: jax.jvp(f, (x,), (w,))[1],
        "vmap of grad under jit": lambda f: jax.jit(jax.vmap(
            jax.grad(lambda v, m: jnp.sum(f(v, where=m) * w[0])), in_axes=(0, 0)))(x, mask),
        # Under jit, as test_forward_mode_and_higher_order_match_jax: jaxlib 0.10's CPU
        # compiles the eager pieces' reductions wrong (docs/kernels/softmax.md, Known limits).
        "jacrev of jacrev": lambda f: jax.jit(jax.jacrev(jax.jacrev(
            lambda v: f(v, where=mask[:2, :9]))))(x[:2, :9]),
        "forward over reverse": lambda f: jax.jvp(jax.grad(lambda v: jnp.sum(f(v) * w)), (x,), (x,))[1],
    }
    for name, transform in checks.items():
        np.testing.assert_allclose(f64(transform(ours)), f64(transform(theirs)), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
    check_grads(ours, (x,), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2)


def test_where_runs_the_masked_kernel(op, backend):
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    x = random_normal((4, 64), jnp.float32)
    f = functools.partial(op.fn, where=x > 0, backend=backend)
    forward = hlo_text(f, x)
    assert forward.count("custom_call @") == 1
    kernel = op.masked_kernel
    assert kernel.ffi_target in forward or f"tilelang_{kernel.name}_" in forward
    # The user's bool mask reaches the kernel as it is, with no conversion pass over it.
    as_argument = hlo_text(lambda v, m: op.fn(v, where=m, backend=backend), x, x > 0)
    assert "stablehlo.convert" not in as_argument
    # The gradient adds one kernel: softmax's backward needs no mask (y is 0 where masked out);
    # log_softmax's is given the cotangent with 0 there. The loss leaves -inf outputs out.
    grad = hlo_text(jax.grad(lambda v: jnp.sum(jnp.where(v > 0, f(v) * v, 0.0))), x)
    assert grad.count("custom_call @") == 2


# (shape, whether the forward's call brings a row counter): csrc/common/row_plan.h's
# MayClaimRows, more than kMinRowsPerClaimingCluster (16) rows longer than one block holds.
ROW_COUNTER_CASES = [((8, 128), False), ((1008, 2304), False), ((4096, 32768), False),
                     ((16, 262144), False), ((17, 32769), True), ((1024, 262144), True),
                     ((2, 9, 40000), True)]


@pytest.mark.parametrize("shape,counter", ROW_COUNTER_CASES)
def test_forward_brings_a_row_counter_only_where_its_kernel_may_claim_rows(op, backend, shape,
                                                                          counter):
    """Each result of a custom call is an allocation a call costs the host, so the row counter
    that long rows' cluster kernels claim rows on comes only with shapes that may have them
    (every shape that does is checked against the planner below); where=
    runs kernels that never claim rows, so its call has no counter at all."""
    if backend in ("xla", "tilelang"):
        pytest.skip("the row counter is the CUDA and host kernels' scratch")
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    mask = jax.ShapeDtypeStruct(shape, jnp.bool_)
    forward = hlo_text(functools.partial(op.fn, backend=backend), x)
    masked = hlo_text(lambda v, m: op.fn(v, where=m, backend=backend), x, mask)
    for text, expected in ((forward, counter), (masked, False)):
        call, = [line for line in text.splitlines() if "custom_call @" in line]
        assert ("tensor<1xui32>" in call) == expected, call


def test_forward_calls_bring_a_row_counter_wherever_their_kernel_may_claim_rows():
    """The launcher claims rows only with prefetching clusters of more than
    kMinRowsPerClaimingCluster (16) rows each, and only where the call brought a row counter
    (needs_row_counter, from the shape alone): every such plan, on any number of SMs, must
    find one. Rows that one block holds never bring it, as each result costs the host an
    allocation a call. Host code: one test over the grid, not one a case, as every --backend
    run and sanitizer run takes this file."""
    for rows, cols, item_bytes, sm_count in itertools.product(
            [1, 16, 17, 640, 65536], [128, 32768, 32769, 40_000, 131_072, 150_000, 262144, 600_000],
            [2, 4], [16, 132, 264]):
        p = _kernels.row_plan("softmax", rows, cols, item_bytes, sm_count=sm_count)
        needs = _kernels.needs_row_counter(rows, cols)
        case = (rows, cols, item_bytes, sm_count, p)
        if p["prefetches"] and rows > 16:
            assert needs, case
        if cols <= 32768 or rows <= 16:
            assert not needs, case


def test_rejects_a_where_that_does_not_broadcast_to_x_or_is_not_boolean(backend):
    with pytest.raises(ValueError, match=r"where has shape \(3,\), which does not broadcast to x's"):
        jax_camp.softmax(jnp.ones((2, 4)), where=jnp.ones(3, bool), backend=backend)
    with pytest.raises(ValueError, match=r"where has shape \(2, 3\), which does not broadcast"):
        jax_camp.softmax(jnp.ones((2, 1)), axis=0, where=jnp.ones((2, 3), bool), backend=backend)
    with pytest.raises(TypeError, match="jax_camp.softmax: where must be an array or a scalar"):
        jax_camp.softmax(jnp.ones((2, 4)), where=[True, False, True, True], backend=backend)
    # Boolean, as jax.nn.softmax's (which raises a ValueError from jnp.max).
    with pytest.raises(ValueError, match="jax_camp.softmax: where must be a boolean array, got int32"):
        jax_camp.softmax(jnp.ones((2, 4)), where=jnp.ones(4, jnp.int32), backend=backend)
