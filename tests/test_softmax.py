"""jax_camp.softmax against jax.nn.softmax semantics and a float64 reference."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_camp
from jax_camp.ops.softmax import SOFTMAX
from helpers import (DTYPES, assert_close, f64, hlo_text, kernel_paths_missed, on_this_machine,
                     random_normal, softmax_reference)

# The camp's shapes, unaligned and odd sizes, one column, grids of few rows
# and of many; on the GPU they reach every path of the CUDA kernels that the
# launch planner can plan (test_shapes_reach_every_kernel_path says which).
# Without a GPU the value tests take the smaller ones (on_this_machine).
SHAPES = [
    (1, 128), (16, 128), (16, 256), (32, 128), (1024,), (1536,), (5, 8),
    (3, 127), (5, 255), (7, 513), (33, 1), (4, 1025), (2, 4099),
    (3, 5, 64), (70000, 3), (4, 3000), (3, 5000), (3, 12_000), (3, 20_000),
    (3, 40_000), (3, 40_001), (2, 65_544), (2, 200_000), (2, 300_000), (2, 600_000),
    (2, 70_001), (3, 3001), (3, 9001), (3, 17_001), (40, 150_000), (24, 300_000),
    (4096, 64), (4096, 127), (4096, 128), (4096, 255), (1024, 1024), (4096, 1536),
    (600_000, 5),
]
# Unaligned rows longer than a cluster holds, streamed in scalars (test_long_rows).
LONG_ROWS = (2, 1_000_003)


@pytest.mark.parametrize("kernel", ["softmax", "softmax_backward"])
@pytest.mark.parametrize("item_bytes", [4, 2])
def test_shapes_reach_every_kernel_path(kernel, item_bytes):
    """SHAPES and test_long_rows' shape reach every path the CUDA launcher can plan for the
    forward and the backward (kernel_paths_missed), so that the GPU runs run each one."""
    missed = kernel_paths_missed(kernel, item_bytes, SHAPES + [LONG_ROWS])
    assert not missed, f"no test shape reaches {sorted(missed)}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", on_this_machine(SHAPES))
def test_matches_reference(shape, dtype, backend):
    x = random_normal(shape, dtype, scale=3.0)
    y = jax_camp.softmax(x, backend=backend)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert_close(y, softmax_reference(x), dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_long_rows(dtype, backend):
    x = random_normal(LONG_ROWS, dtype)
    assert_close(jax_camp.softmax(x, backend=backend), softmax_reference(x), dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_rows_claimed_by_clusters(dtype, backend):
    """Rows that the forward's clusters claim from a counter as they free up.

    They claim where each resident cluster would take more than 16 rows
    (row_plan.h, kMinRowsPerClaimingCluster); on the H200, 16 clusters
    of 131_080 float32 values a row are resident, 30 of 16-bit ones. A row
    that no cluster claimed, or that one took past the end, fails here.
    """
    if backend not in (None, "cuda") or jax.default_backend() != "gpu":
        pytest.skip("a path of the CUDA forward")
    x = random_normal((640, 131_080), dtype)
    assert_close(jax_camp.softmax(x, backend=backend), softmax_reference(x), dtype)


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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("copies", [1, 4])
def test_special_values_match_jax(copies, dtype, backend):
    """-inf entries, a row of -inf, a NaN, +inf and huge logits, as jax.nn.softmax.

    Rows of 4 take one value at a time; 4 copies side by side make rows of 16,
    which take 16-byte packs (and 16-bit types their packed max) on the GPU.
    """
    x = jnp.array(
        [
            [0.0, -jnp.inf, 1.0, 2.0],
            [-jnp.inf, -jnp.inf, -jnp.inf, -jnp.inf],
            [1.0, jnp.nan, 2.0, 3.0],
            [jnp.inf, 1.0, 2.0, 3.0],
            [1e3, 2e3, 3e3, 3e3 - 1.0],
            [-1e4, 0.0, 1e4, 5e3],
        ],
        dtype,
    )
    x = jnp.tile(x, (1, copies))
    expected = jax.nn.softmax(x.astype(jnp.float32))
    actual = jax_camp.softmax(x, backend=backend)
    np.testing.assert_array_equal(np.isnan(f64(actual)), np.isnan(f64(expected)))
    assert_close(actual, f64(expected), dtype)


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
@pytest.mark.parametrize("shape", on_this_machine(SHAPES))
def test_vjp_matches_reference(shape, dtype, backend):
    """The backward kernel on every launch path: dx = y * (g - sum(g * y))."""
    x = random_normal(shape, dtype, scale=3.0)
    g = random_normal(shape, dtype)
    y, vjp = jax.vjp(lambda v: jax_camp.softmax(v, backend=backend), x)
    (dx,) = vjp(g)
    assert dx.shape == x.shape and dx.dtype == x.dtype
    y64 = f64(y)
    expected = y64 * (f64(g) - np.sum(f64(g) * y64, axis=-1, keepdims=True))
    assert_close(dx, expected, dtype)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_grad_low_precision(dtype, backend):
    x = random_normal((4, 700), dtype)
    w = random_normal((4, 700), dtype)
    ours = jax.grad(lambda v: jnp.sum(jax_camp.softmax(v, backend=backend) * w))(x)
    theirs = jax.grad(lambda v: jnp.sum(jax.nn.softmax(v) * w.astype(jnp.float32)))(
        x.astype(jnp.float32)
    )
    assert ours.dtype == dtype
    assert_close(ours, f64(theirs), dtype)


def test_check_grads(backend):
    x = random_normal((3, 20), jnp.float32)
    check_grads(
        functools.partial(jax_camp.softmax, axis=0, backend=backend), (x,),
        order=1, modes=["rev"], atol=1e-2, rtol=1e-2,
    )


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
def test_jvp_matches_reference(shape, dtype, backend):
    """Forward mode: the tangent t -> y * (t - sum(y * t)), by the backward kernel."""
    x = random_normal(shape, dtype, scale=3.0)
    t = random_normal(shape, dtype)
    y, dy = jax.jvp(lambda v: jax_camp.softmax(v, backend=backend), (x,), (t,))
    assert dy.shape == x.shape and dy.dtype == x.dtype
    assert_close(y, softmax_reference(x), dtype)
    y64 = f64(y)
    assert_close(dy, y64 * (f64(t) - np.sum(f64(t) * y64, axis=-1, keepdims=True)), dtype)


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
        "forward over reverse": lambda f: jax.jvp(
            jax.grad(lambda v: jnp.sum(f(v) * x)), (x,), (x,)
        )[1],
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
