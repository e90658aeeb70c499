"""jax_camp.reduce_sum against jnp.sum semantics and a float64 reference."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_camp
from helpers import (DTYPES, assert_close, f64, hlo_text, kernel_paths_missed, on_this_machine,
                     random_normal, sum_scale, tilelang_tiles_missed)

# Without a GPU the value tests take the smaller ones (on_this_machine).
SHAPES = [
    (1, 128), (16, 128), (16, 256), (32, 128), (1024,), (1536,),
    (3, 127), (5, 255), (7, 513), (33, 1), (4, 1025), (2, 4099),
    (3, 5, 64), (70000, 3), (5, 8), (3, 384), (4, 3000),  # 1 and 8 packs a thread
    (3, 16_384), (3, 20_000),  # a block a row: 16-bit rows of 256 and 512 lanes
    (3, 40_000), (3, 40_001), (2, 65_544),  # past one chunk a thread: streamed
    # Many short rows: the policy's warp lanes and chunks, which few rows grow out of.
    (4096, 64), (4096, 127), (4096, 128), (4096, 255), (1024, 1024), (1024, 1536), (1024, 3000),
    # Teams of two warps sharing a block, four rows a block: a last block part-filled.
    (1001, 1280), (1002, 2304), (17001, 1100),
    # 16-bit teams of 128 lanes, two rows a 256-thread block (few rows of 3840 values: 4 packs a
    # thread, not 8), a last block part-filled.
    (301, 3840), (5, 8192),
    # More rows than a grid's teams (8 waves of resident blocks): each takes its rows in turn.
    (600_000, 5),
    # Rows as wide as their TileLang tile, whose kernels are compiled for that width
    # (_rows.with_exact_width), and rows a little short of a tile that is filled above.
    (3, 512), (3, 2048), (3, 4096), (3, 8192), (16, 120), (3, 200), (5, 1000), (3, 7000),
    (3, 16_000),
]
# Unaligned rows of a million: streamed in scalars (test_long_rows).
LONG_ROWS = (2, 1_000_003)


def reference(x, axis=-1, keepdims=False) -> np.ndarray:
    return np.sum(f64(x), axis=axis, keepdims=keepdims)


def check(x, result, axis=-1, keepdims=False):
    reduced = x.size // max(result.size, 1)
    assert_close(result, reference(x, axis, keepdims), x.dtype, scale=sum_scale(reduced))


@pytest.mark.parametrize("item_bytes", [4, 2])
def test_shapes_reach_every_kernel_path(item_bytes):
    """SHAPES and test_long_rows' shape reach every path the CUDA launcher can plan for
    reduce_sum (kernel_paths_missed), so that the GPU runs run each one."""
    missed = kernel_paths_missed("reduce_sum", item_bytes, SHAPES + [LONG_ROWS])
    assert not missed, f"no test shape reaches {sorted(missed)}"


def test_shapes_reach_every_tilelang_tile():
    """SHAPES and test_long_rows' shape reach every tile of the TileLang kernel, in every
    dtype, so that a GPU run with --backend tilelang compiles and runs each one."""
    missed = tilelang_tiles_missed("reduce_sum", SHAPES + [LONG_ROWS])
    assert not missed, f"no test shape reaches {sorted(missed)}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", on_this_machine(SHAPES))
def test_matches_reference(shape, dtype, backend):
    x = random_normal(shape, dtype)
    out = jax_camp.reduce_sum(x, backend=backend)
    assert out.shape == shape[:-1] and out.dtype == x.dtype
    check(x, out)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_long_rows(dtype, backend):
    x = random_normal(LONG_ROWS, dtype)
    check(x, jax_camp.reduce_sum(x, backend=backend))


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2), (2, 0)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_axis_and_keepdims(axis, keepdims, backend):
    x = random_normal((6, 7, 9), jnp.float32)
    out = jax_camp.reduce_sum(x, axis=axis, keepdims=keepdims, backend=backend)
    expected = jnp.sum(x, axis=axis, keepdims=keepdims)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    check(x, out, axis, keepdims)


def test_bitwise_reproducible(backend):
    x = random_normal((64, 100_000), jnp.float32)
    f = jax.jit(functools.partial(jax_camp.reduce_sum, backend=backend))
    first = np.asarray(f(x))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), first)


def test_accumulates_in_float32(backend):
    """bfloat16 alone cannot count past 256 in steps of 1: the sum must not stall."""
    x = jnp.ones((3, 4096), jnp.bfloat16)
    np.testing.assert_array_equal(f64(jax_camp.reduce_sum(x, backend=backend)), [4096.0] * 3)


def test_special_values(backend):
    x = jnp.array([[1.0, jnp.nan, 2.0], [jnp.inf, 1.0, 2.0], [jnp.inf, -jnp.inf, 0.0]])
    out = f64(jax_camp.reduce_sum(x, backend=backend))
    assert np.isnan(out[0]) and out[1] == np.inf and np.isnan(out[2])


@pytest.mark.parametrize(
    "shape,axis", [((0, 5), -1), ((5, 0), -1), ((0,), None), ((2, 0, 3), 1), ((2, 0, 3), 0)]
)
def test_zero_size_matches_jnp(shape, axis, backend):
    x = jnp.zeros(shape, jnp.bfloat16)
    out = jax_camp.reduce_sum(x, axis=axis, backend=backend)
    expected = jnp.sum(x, axis=axis)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    np.testing.assert_array_equal(f64(out), f64(expected))


def test_jit_vmap(backend):
    x = random_normal((4, 6, 50), jnp.float32)
    f = jax.jit(jax.vmap(functools.partial(jax_camp.reduce_sum, axis=0, backend=backend), in_axes=2))
    out = f(x)
    assert out.shape == (50, 6)
    assert_close(out, reference(x, axis=0).T, jnp.float32, scale=2.0)


def test_nested_vmap(backend):
    x = random_normal((3, 4, 5, 40), jnp.float32)
    f = functools.partial(jax_camp.reduce_sum, axis=None, backend=backend)
    out = jax.vmap(jax.vmap(f, in_axes=0), in_axes=3)(x)
    assert_close(out, reference(x, axis=(1, 2)).T, jnp.float32, scale=sum_scale(200))


def test_grad(backend):
    x = random_normal((5, 7, 3), jnp.float32)
    w = random_normal((5, 3), jnp.float32)
    g = jax.grad(lambda v: jnp.sum(jax_camp.reduce_sum(v, axis=1, backend=backend) * w))(x)
    np.testing.assert_array_equal(f64(g), np.broadcast_to(f64(w)[:, None, :], x.shape))
    check_grads(functools.partial(jax_camp.reduce_sum, axis=(0, 2), backend=backend), (x,), order=1, modes=["rev"])


def test_forward_mode_and_second_order(backend):
    x = random_normal((5, 7, 3), jnp.float32)
    f = functools.partial(jax_camp.reduce_sum, axis=1, backend=backend)
    _, tangent = jax.jvp(f, (x,), (x,))
    assert_close(tangent, reference(x, axis=1), jnp.float32, scale=sum_scale(7))
    check_grads(f, (x,), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2)
    jacobian = jax.jacfwd(f)(x)
    np.testing.assert_array_equal(f64(jacobian), f64(jax.jacfwd(lambda v: jnp.sum(v, axis=1))(x)))
    if backend != "xla":  # the tangent is summed by the kernel too
        assert hlo_text(lambda v: jax.jvp(f, (v,), (v,)), x).count("custom_call @") == 2


def test_lowered_hlo_holds_the_kernel(backend):
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    text = hlo_text(functools.partial(jax_camp.reduce_sum, backend=backend), jnp.ones((4, 64)))
    assert "custom_call" in text and "reduce_sum" in text
    assert "stablehlo.reduce" not in text


def test_rejects_unsupported_dtype(backend):
    with pytest.raises(TypeError, match="jax_camp.reduce_sum: x has dtype int32; supported dtypes are float32, bfloat16 or float16"):
        jax_camp.reduce_sum(jnp.ones((2, 3), jnp.int32), backend=backend)


@pytest.mark.parametrize("axis", [2, -3, (1, -1)])
def test_rejects_bad_axis(axis, backend):
    with pytest.raises(ValueError, match="jax_camp.reduce_sum: axis"):
        jax_camp.reduce_sum(jnp.ones((2, 3)), axis=axis, backend=backend)


@pytest.mark.parametrize("axis", [1.0, "x", True, (0, 1.0), np.ones(1, np.int32), np.array(1.0)])
def test_rejects_axis_of_wrong_type(axis, backend):
    with pytest.raises(TypeError, match="jax_camp.reduce_sum: axis must be an int or a tuple of ints"):
        jax_camp.reduce_sum(jnp.ones((2, 3)), axis=axis, backend=backend)


@pytest.mark.parametrize("axis,same_axis", [(np.int64(0), 0), (np.array(0), 0), (jnp.array(0), 0),
                                            ([jnp.array(0), 1], (0, 1))])
def test_takes_the_axes_jnp_takes(axis, same_axis, backend):
    """NumPy integers and concrete 0-d integer arrays, as jnp.sum takes them (every op's axis
    is read by the same check)."""
    x = random_normal((4, 6), jnp.float32)
    check(x, jax_camp.reduce_sum(x, axis=axis, backend=backend), same_axis)


@pytest.mark.parametrize("op,kwargs", [("reduce_sum", {"axis": 0}), ("reduce_sum", {"keepdims": True}),
                                       ("softmax", {"axis": 0}), ("log_softmax", {"axis": (0, 1)})])
def test_traced_axis_or_keepdims_is_jax_concretization_error(op, kwargs, backend):
    """As jnp.sum and jax.nn.softmax raise it for an axis that jax.jit traces (every op's axis
    is read by the same check): the error names the op and the argument."""
    name = next(iter(kwargs))
    with pytest.raises(jax.errors.ConcretizationTypeError,
                       match=f"jax_camp.{op}: {name} must be known at trace time"):
        jax.jit(functools.partial(getattr(jax_camp, op), backend=backend))(jnp.ones((2, 3)), **kwargs)
