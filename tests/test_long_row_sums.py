"""Sums over rows of millions of values: reduce_sum, softmax and log_softmax, and the two
softmaxes' derivatives, on every backend, within a few times XLA's own error on the same row.

A kernel that streams a long row keeps running float32 sums, a thread's or a fragment
element's, of thousands of terms each. A plain running sum of that many drifts: once it is
large, each small term is rounded to its coarse steps. The rows here make every such sum take
thousands of equal terms, so that the rounding never cancels: the kernels compensate their
running sums (CompensatedSum in the CUDA kernels, csrc/common/compensated_sum.cuh; the
TileLang kernels' _compensated.py; PairwiseSum in the host ones, csrc/common/host_common.h).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_camp
from helpers import LOG_SOFTMAX_OP, SOFTMAX_OP, RowOp, f64

# Aligned rows (summed in packs) and unaligned ones (in scalars).
ROW_LENGTHS = [2**22, 2**22 + 3]
# Columns long enough that every thread's, and every fragment element's, first chunk of a
# long row lies within them, whichever backend and tile.
LEADING_COLUMNS = 65536
ROW_OPS = [SOFTMAX_OP, LOG_SOFTMAX_OP]


def long_row(n: int) -> jax.Array:
    """Logits whose exps past LEADING_COLUMNS are all 0.1 of the largest: each running sum of a
    softmax starts at its share's max, then adds 0.1 thousands of times."""
    return jnp.full((1, n), np.log(0.1), jnp.float32).at[0, :LEADING_COLUMNS].set(0.0)


def relative_error(y, exact) -> float:
    """y's largest relative error against the float64 ``exact``."""
    return float(np.max(np.abs(f64(y) - exact) / np.abs(exact)))


def assert_as_accurate_as_xla(ours_error: float, xla_error: float) -> None:
    """Within 4 times the error of XLA's own op on the same input, and never held below 2e-7, a
    float32 result's rounding."""
    assert ours_error <= max(4 * xla_error, 2e-7), (ours_error, xla_error)


@pytest.fixture
def kernels_backend(backend):
    """The backend, where it runs our kernels: the xla backend is plain JAX by design."""
    if backend == "xla":
        pytest.skip("the xla backend is plain JAX by design")
    return backend


@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_reduce_sum(n, kernels_backend):
    x = jnp.full((2, n), 0.1, jnp.float32)
    exact = f64(x).sum(axis=-1)
    assert_as_accurate_as_xla(relative_error(jax_camp.reduce_sum(x, backend=kernels_backend), exact),
                              relative_error(jnp.sum(x, axis=-1), exact))


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("op", ROW_OPS, ids=lambda op: op.fn.__name__)
def test_forward(op: RowOp, n, kernels_backend):
    x = long_row(n)
    exact = op.reference(x)
    assert_as_accurate_as_xla(relative_error(op.fn(x, backend=kernels_backend), exact),
                              relative_error(op.jax_fn(x), exact))


@pytest.mark.parametrize("mode", ["vjp", "jvp"])
@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("op", ROW_OPS, ids=lambda op: op.fn.__name__)
def test_derivative(op: RowOp, n, mode, kernels_backend):
    """The backward's (and the tangent's) row sum, of terms in two sizes, alternating so that
    the outputs cancel nowhere. Ours is measured against the derivative in float64 from its own
    output y, which it computes from (a log-probability's rounding alone would make exp(y)
    differ by more than the sum's error); jax.nn's, which derives from x, from the exact y."""
    x = long_row(n)
    v = jnp.full_like(x, 0.1).at[0, 1::2].set(1.0)
    fn = functools.partial(op.fn, backend=kernels_backend)

    def derivative(fn):
        if mode == "vjp":
            return jax.vjp(fn, x)[1](v)[0]
        return jax.jvp(fn, (x,), (v,))[1]

    exact = getattr(op, mode)
    assert_as_accurate_as_xla(relative_error(derivative(fn), exact(f64(fn(x)), f64(v))),
                              relative_error(derivative(op.jax_fn), exact(op.reference(x), f64(v))))
