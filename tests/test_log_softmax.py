"""jax_camp.log_softmax against jax.nn.log_softmax semantics and a float64 reference.

log_softmax runs softmax's row kernels under softmax's launch policies, so test_softmax.py's
shapes reach its kernels' paths too (test_shapes_reach_every_kernel_path checks it here)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_camp
from jax_camp.ops.log_softmax import (LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD, LOG_SOFTMAX_MASKED,
                                      LOG_SOFTMAX_TANGENT)
from helpers import (DTYPES, LOG_SOFTMAX_OP, RowOp, assert_close, f64, hlo_text,
                     kernel_paths_missed, log_softmax_reference, random_mask, random_normal,
                     tilelang_tiles_missed)
# softmax's value and derivative tests over its shapes, with and without where=, run here on
# log_softmax (the `op` fixture below).
from test_softmax import (CLUSTER_GROUP_SHAPES, LONG_ROWS, ROW_GROUP_SHAPES, SHAPES,  # noqa: F401
                          test_forward_brings_a_row_counter_only_where_its_kernel_may_claim_rows,
                          test_jvp_matches_reference, test_long_rows, test_matches_reference,
                          test_row_groups, test_rows_claimed_by_clusters,
                          test_rows_held_over_a_cluster,
                          test_special_values_match_jax, test_vjp_matches_reference,
                          test_where_matches_reference, test_where_on_long_rows,
                          test_where_runs_the_masked_kernel, test_where_special_values_match_jax)


@pytest.mark.parametrize("kernel", [LOG_SOFTMAX, LOG_SOFTMAX_MASKED, LOG_SOFTMAX_BACKWARD,
                                    LOG_SOFTMAX_TANGENT],
                         ids=lambda spec: spec.name)
@pytest.mark.parametrize("item_bytes", [4, 2])
def test_shapes_reach_every_kernel_path(kernel, item_bytes):
    missed = kernel_paths_missed(kernel.name, item_bytes, SHAPES + [LONG_ROWS])
    assert not missed, f"no test shape reaches {sorted(missed)}"


@pytest.mark.parametrize("kernel", [LOG_SOFTMAX, LOG_SOFTMAX_MASKED, LOG_SOFTMAX_BACKWARD,
                                    LOG_SOFTMAX_TANGENT],
                         ids=lambda spec: spec.name)
def test_shapes_reach_every_tilelang_tile(kernel):
    """softmax's SHAPES and the shapes of test_long_rows and test_row_groups reach every tile
    of log_softmax's TileLang kernels, in every dtype, so that a GPU run with --backend
    tilelang compiles and runs each one."""
    missed = tilelang_tiles_missed(kernel.name, SHAPES + [LONG_ROWS] + ROW_GROUP_SHAPES
                                   + CLUSTER_GROUP_SHAPES)
    assert not missed, f"no test shape reaches {sorted(missed)}"


@pytest.fixture
def op() -> RowOp:
    """log_softmax, for softmax's tests imported above."""
    return LOG_SOFTMAX_OP


@pytest.mark.parametrize("axis", [0, 1, -2, (0, 2), (1, 2), None])
def test_axis(axis, backend):
    x = random_normal((6, 7, 9), jnp.float32)
    y = jax_camp.log_softmax(x, axis=axis, backend=backend)
    assert_close(y, jax.nn.log_softmax(x, axis=axis), jnp.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 300), (3, 5000), (2, 300_000)])
def test_log_probabilities_below_exp_underflow_stay_finite(shape, dtype, backend):
    """Logits 1000 apart: exp(-1000) is 0 in float32, so log(softmax(x)) would be -inf; the
    kernels give x - max - log(sum) exactly. The shapes reach one value a thread, a block and
    a prefetching cluster on the GPU."""
    x = random_normal(shape, jnp.float32).at[:, ::7].add(-1000.0).astype(dtype)
    y = jax_camp.log_softmax(x, backend=backend)
    assert np.isfinite(f64(y)).all()
    assert f64(y).min() < -900
    assert_close(y, log_softmax_reference(x), dtype, scale=1000.0)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0,), (2, 0, 3)])
def test_zero_size(shape, backend):
    x = jnp.zeros(shape, jnp.float32)
    y = jax_camp.log_softmax(x, backend=backend)
    assert y.shape == shape and y.dtype == x.dtype


@pytest.mark.parametrize("in_axes", [0, 1, 2])
def test_vmap_under_jit(in_axes, backend):
    x = random_normal((4, 6, 50), jnp.bfloat16)
    f = jax.jit(jax.vmap(functools.partial(jax_camp.log_softmax, backend=backend), in_axes=in_axes))
    assert_close(f(x), log_softmax_reference(np.moveaxis(f64(x), in_axes, 0)), jnp.bfloat16)


def test_check_grads_both_modes_to_second_order(backend):
    # Finite differences of eps=1e-3, not check_grads' 1e-4 for float32: at 1e-4 the kernels'
    # float32 rounding, divided by eps, broke the tolerance on some inputs.
    x = random_normal((3, 20), jnp.float32)
    check_grads(
        functools.partial(jax_camp.log_softmax, axis=0, backend=backend), (x,),
        order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2, eps=1e-3,
    )


def test_transformations_match_jax(backend):
    x = random_normal((4, 33), jnp.float32)
    w = random_normal((4, 33), jnp.float32)
    ours = functools.partial(jax_camp.log_softmax, backend=backend)
    checks = {
        "grad": lambda f: jax.grad(lambda v: jnp.sum(f(v) * w))(x),
        "grad under vmap and jit": lambda f: jax.jit(jax.vmap(jax.grad(lambda v: jnp.sum(f(v) * w[0]))))(x),
        "jacfwd": lambda f: jax.jit(jax.jacfwd(f))(x),
        "linearize": lambda f: jax.linearize(f, x)[1](x),
        "vmap of jvp": lambda f: jax.vmap(lambda v: jax.jvp(f, (v,), (v,))[1])(x),
        "jacrev of jacrev": lambda f: jax.jit(jax.jacrev(jax.jacrev(f)))(x[:2, :9]),
        "forward over reverse": lambda f: jax.jvp(jax.grad(lambda v: jnp.sum(f(v) * w)), (x,), (x,))[1],
        "hessian": lambda f: jax.hessian(lambda v: jnp.sum(f(v) * w[:1, :9]))(x[:1, :9]),
    }
    for name, transform in checks.items():
        got, want = transform(ours), transform(jax.nn.log_softmax)
        np.testing.assert_allclose(f64(got), f64(want), rtol=1e-4, atol=1e-5, err_msg=name)


def test_lowered_hlo_holds_the_kernels(backend):
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    x = random_normal((4, 64), jnp.float32)
    f = functools.partial(jax_camp.log_softmax, backend=backend)
    forward = hlo_text(f, x)
    backward = hlo_text(jax.grad(lambda v: jnp.sum(f(v) * v)), x)
    tangent = hlo_text(lambda v: jax.jvp(f, (v,), (v,)), x)
    assert forward.count("custom_call @") == 1
    assert LOG_SOFTMAX.ffi_target in forward or "tilelang_log_softmax" in forward
    # Each derivative reuses the saved output: one forward kernel and one of its own.
    for text, kernel in ((backward, LOG_SOFTMAX_BACKWARD), (tangent, LOG_SOFTMAX_TANGENT)):
        assert text.count("custom_call @") == 2
        assert kernel.ffi_target in text or f"tilelang_{kernel.name}_" in text
    assert "stablehlo.exponential" not in tangent


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bool_])
def test_rejects_unsupported_dtype(dtype, backend):
    with pytest.raises(TypeError, match="jax_camp.log_softmax: x has dtype .*supported dtypes are"):
        jax_camp.log_softmax(jnp.ones((2, 3), dtype), backend=backend)


def test_rejects_bad_axis_and_a_list(backend):
    with pytest.raises(ValueError, match="jax_camp.log_softmax: axis 2 is out of bounds"):
        jax_camp.log_softmax(jnp.ones((2, 3)), axis=2, backend=backend)
    with pytest.raises(TypeError, match="jax_camp.log_softmax: x must be an array or a scalar, got list"):
        jax_camp.log_softmax([1.0, 2.0], backend=backend)


# where=: the masked forward kernel, checked on softmax's shapes by the tests imported above;
# masked-out elements are -inf.


def test_where_derivatives_match_jax(backend):
    """Derivatives of the kept outputs (a masked-out one is -inf, whose derivative is 0)."""
    x = random_normal((4, 33), jnp.float32)
    w = random_normal((4, 33), jnp.float32)
    mask = random_mask((4, 33))

    def kept(log_softmax):
        return lambda v, where=mask: jnp.where(where, log_softmax(v, where=where), 0.0)

    ours = kept(functools.partial(jax_camp.log_softmax, backend=backend))
    theirs = kept(jax.nn.log_softmax)
    checks = {
        "grad": lambda f: jax.grad(lambda v: jnp.sum(f(v) * w))(x),
        "jvp": lambda f: jax.jvp(f, (x,), (w,))[1],
        "vmap of grad under jit": lambda f: jax.jit(jax.vmap(
            jax.grad(lambda v, m: jnp.sum(f(v, m) * w[0])), in_axes=(0, 0)))(x, mask),
        # Under jit, as test_forward_mode_and_higher_order_match_jax: jaxlib 0.10's CPU
        # compiles the eager pieces' reductions wrong (docs/kernels/softmax.md, Known limits).
        "jacrev of jacrev": lambda f: jax.jit(jax.jacrev(jax.jacrev(
            lambda v: f(v, mask[:2, :9]))))(x[:2, :9]),
        "forward over reverse": lambda f: jax.jvp(jax.grad(lambda v: jnp.sum(f(v) * w)), (x,), (x,))[1],
    }
    for name, transform in checks.items():
        np.testing.assert_allclose(f64(transform(ours)), f64(transform(theirs)), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
    check_grads(ours, (x,), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2, eps=1e-3)
    # The tangent of the raw output too: 0 where masked out, as jax's.
    raw = [jax.jvp(functools.partial(f, where=mask), (x,), (w,))[1]
           for f in (functools.partial(jax_camp.log_softmax, backend=backend), jax.nn.log_softmax)]
    np.testing.assert_allclose(f64(raw[0]), f64(raw[1]), rtol=1e-4, atol=1e-5)


def test_rejects_a_where_that_does_not_broadcast_to_x(backend):
    with pytest.raises(ValueError, match="jax_camp.log_softmax: where has shape"):
        jax_camp.log_softmax(jnp.ones((2, 4)), where=jnp.ones((2, 3), bool), backend=backend)
    with pytest.raises(ValueError, match=r"where has shape \(1, 2, 4\), which does not broadcast"):
        jax_camp.log_softmax(jnp.ones((2, 4)), where=jnp.ones((1, 2, 4), bool), backend=backend)
